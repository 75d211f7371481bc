"""vLLM 0.29.0: 0.30.0's chunked lookup without ``max_num_new_tokens``, without load
windows, and with the EAGLE extra chunk queried by sliding-window groups only.

Built on vllm-0.30.0 as a delta (the chunked family's shape: ``releases/vllm_0_32_0.py``).
Overrides of 0.30.0 (docs/releases-overrides.md C1 C4 C5; lines of 0.29.0's
``offloading/scheduler.py``, cited in ``model/citations.py`` under "0.29.0"):
- C1 no ``max_num_new_tokens``: ``get_num_new_matched_tokens`` (:936), ``_lookup``
  (:876) and ``_lookup_complete_chunks`` (:697) take no cap; the bound is the request's
  tokens (:707) and the tail's search end is not capped (:886-888).
  ``ChunkSteps.cap_new_tokens=False``: the scenario field is refused (``model.evaluate``).
- C4 an unverified EAGLE group queries one more chunk only when it is a sliding-window
  group (:762); a full-attention EAGLE group still pops its last hit chunk (:798-799).
  ``ChunkSteps.eagle_query_all=False``.
- C5 no load windows: ``_sliding_window_lookup`` (:633) has no initial window and any
  HIT_PENDING it scans defers the request (:648-652), not only one in the deciding
  run; the being-loaded check slices the plain window (:841-849).
  ``ChunkSteps.load_windows=False``.
Not overridden: C9, the load's first pending block (0.29.0 scans from block 0 for the
first non-null block without a hash, :1027-1032, and asserts ``computed <= start *
block``, :1034-1037): for GPU hits at scheduler-block multiples (the scenarios') it gives
0.30.0's start and neither assert fires. The rest of the 0.29.0 / 0.30.0 diff is store
side (``is_store_reachable_swa_chunk``, :129), group ids for hisparse configs, and the
EAGLE fallback when speculative decoding tags no group (:230-231: every group is EAGLE;
0.30.0: none), which scenarios cannot state (their EAGLE groups are tagged).

Scenario fields: 0.30.0's less ``max_num_new_tokens`` (so neither cap).

Proofs: as 0.30.0 and 0.31.0, ``expect`` is empty: no theorem claims (mode "all",
0.31.0's module doc; nor do the encodings read C4's ``eagle_query_all`` or C5's
``load_windows``: their complete-chunk turns are 0.33.0's). Its evidence is the
cross-check against the real 0.29.0 scheduler (``python -m sim.crosscheck --vllm
0.29.0``).
"""

from dataclasses import replace

from releases import vllm_0_30_0
from releases.base import Expect, child

SEMANTICS = child(
    vllm_0_30_0.SEMANTICS, name="vllm-0.29.0", base_version="0.29.0", kind="release",
    steps=replace(vllm_0_30_0.SEMANTICS.steps, cap_new_tokens=False,
                  eagle_query_all=False, load_windows=False),
    summary="vLLM 0.29.0: 0.30.0's lookup without the max_num_new_tokens cap, without "
    "load windows (any scanned HIT_PENDING in a window defers) and with the EAGLE extra "
    "chunk queried by sliding-window groups only.",
    # its load reads a window chunk its first run never looked up (module doc)
    expect={"loads-stored-only": Expect(holds=False, accepted=False, pre=())},
)
