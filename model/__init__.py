"""Executable reference model of vLLM's KV-offloading lookup.

Modules, one idea each:
  citations  -- which vLLM file and line each step models, per release
  semantics  -- the named semantics (real releases and review alternatives)
  scenario   -- the scenario format (JSON) and its validation
  layout     -- start-up: group configs and the checks a release runs on the layout
  lookup     -- OffloadingConnectorScheduler._lookup / get_num_new_matched_tokens
  load_plan  -- update_state_after_alloc: which offloaded blocks a hit loads
  invariants -- the four invariant checkers
  evaluate   -- one call that runs all of the above on a scenario
  explain    -- words and a token-line picture for a scenario's outcome
"""
