"""vLLM 0.27.0 (and 0.27.1, whose offloading/scheduler.py is byte for byte the same:
``sim.crosscheck.envs.alias_evidence``): 0.26.0 with a relaxed load assertion.

Override of 0.26.0 (docs/releases-overrides.md § Block family; 0.27.0's
``offloading/scheduler.py``, cited in ``model/citations.py`` under "0.27.0"):
- ``update_state_after_alloc``'s sliding-window assertion accepts one more pending GPU
  block than window * blocks_per_chunk (:918-922): ``load_window_slack=1``.
The lookup is 0.26.0's (:545 adds lookup events only); start-up in config.py scales
Mamba groups by DCP no more (:47-51), outside the modelled scope (no CP, as 0.26.0).

Scenario fields: as 0.26.0.

Proofs: as 0.26.0 (``inherit_expect=False``), and the encoding's load assertion is
0.24.0's.
"""

from releases import vllm_0_26_0
from releases.base import child

SEMANTICS = child(
    vllm_0_26_0.SEMANTICS, name="vllm-0.27.0", base_version="0.27.0", kind="release",
    load_window_slack=1,
    summary="vLLM 0.27.0 (= 0.27.1): 0.26.0 whose load accepts one more pending GPU block "
    "in a sliding-window group; not in the proofs (no theorem claims).",
    # expectations: 0.26.0's (module doc)
)
