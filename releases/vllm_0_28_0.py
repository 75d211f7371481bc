"""vLLM 0.28.0: 0.29.0's chunked lookup, start-up and load, unchanged for every scenario.

Built on vllm-0.29.0 as a delta (the chunked family's shape:
``releases/vllm_0_32_0.py``). 0.28.0 is the first release with
``_lookup_complete_chunks`` and partial tails. Its ``offloading/scheduler.py`` equals
0.29.0's up to line 1132 (the lookup, ``_lookup``, ``get_num_new_matched_tokens`` and
``update_state_after_alloc``, at the same line numbers); the rest of the diff is store
side: C13 of docs/releases-overrides.md, no ``_build_aligned_boundary_store_jobs``
(0.29.0 :1157) and no CoW skip in ``_build_store_jobs`` (0.29.0 :1359), which the lookup
model does not read. ``resolve_kv_cache_block_sizes`` differs only for groups that are
not prefix-cacheable and for per-state compression (0.29.0's kv_cache_utils.py:748-788),
which scenarios cannot state: 0.28.0 checks the hash size against every group (:662), as
the model does. So no step is overridden: the module states the release, its citations
(``model/citations.py`` under "0.28.0", 0.28.0's own lines) and its real scheduler (the
cross-check).

Scenario fields: 0.29.0's (neither cap; mode ``all``).

Proofs: 0.29.0's expectations, inherited (its steps are 0.29.0's): leaves-last-token
and termination proved over every layout 0.28.0 accepts; no-partial-state, whole-blocks
and maximality proved under their preconditions and failing over the accepted layouts;
loads-stored-only fails (0.29.0's module doc: the plain window; the real 0.28.0
scheduler answers ``tests/scenarios/vllm-0.29.0/window-first-run-plain.json`` as the
model, hit 18). ``python -m proofs --semantics vllm-0.28.0`` matches each, and its
counterexamples over the accepted layouts agree with the real 0.28.0 scheduler
(``python -m sim.crosscheck --vllm 0.28.0 --light --scenarios DIR``).
"""

from releases import vllm_0_29_0
from releases.base import child

SEMANTICS = child(
    vllm_0_29_0.SEMANTICS, name="vllm-0.28.0", base_version="0.28.0", kind="release",
    summary="vLLM 0.28.0: the first chunked lookup (_lookup_complete_chunks, partial "
    "tails); its lookup, start-up and load equal 0.29.0's for every scenario (the "
    "releases differ on the store side).",
)
