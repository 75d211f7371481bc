"""vLLM 0.27.0 (and 0.27.1, whose offloading/scheduler.py is byte for byte the same:
``sim.crosscheck.envs.alias_evidence``): 0.26.0 with a relaxed load assertion.

Override of 0.26.0 (docs/releases-overrides.md § Block family; 0.27.0's
``offloading/scheduler.py``, cited in ``model/citations.py`` under "0.27.0"):
- ``update_state_after_alloc``'s sliding-window assertion accepts one more pending GPU
  block than window * blocks_per_chunk (:918-922): ``load_window_slack=1``.
The lookup is 0.26.0's (:545 adds lookup events only); start-up in config.py scales
Mamba groups by DCP no more (:47-51), outside the modelled scope (no CP, as 0.26.0).

Scenario fields: as 0.26.0.

Proofs: every theorem's verdict is 0.26.0's (so 0.25.0's), over the same layouts
(every layout 0.27.0 accepts, blocks_per_chunk layouts included; the witnesses and
counterexamples as 0.26.0's, the counterexamples replayed through the real 0.27.0
scheduler), so the expectations are inherited. The encoding reads the slack as model/
does (``releases.steps.load_window_limit`` in ``proofs.theorems.valid_hit``: a hit whose
load has window * blocks_per_chunk + 1 pending GPU blocks in a sliding-window group is
valid here, not on 0.26.0); maximality still holds under its preconditions. No theorem
states that a load keeps the assertion itself (0.24.0-0.26.0 can return a hit whose load
trips it: ``tests/scenarios/vllm-0.27.0/window-load-slack.json``).
"""

from releases import vllm_0_26_0
from releases.base import child

SEMANTICS = child(
    vllm_0_26_0.SEMANTICS, name="vllm-0.27.0", base_version="0.27.0", kind="release",
    load_window_slack=1,
    summary="vLLM 0.27.0 (= 0.27.1): 0.26.0 whose load accepts one more pending GPU block "
    "in a sliding-window group.",
    # expectations: 0.26.0's, every verdict the same (module doc)
)
