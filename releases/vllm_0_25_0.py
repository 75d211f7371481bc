"""vLLM 0.25.0 (and 0.25.1, whose offloading/scheduler.py is byte for byte the same:
``sim.crosscheck.envs.alias_evidence``): 0.24.0's block lookup with the manager's
``LookupResult`` answers (v1/kv_offload/base.py:56).

Overrides of 0.24.0 (docs/releases-overrides.md § Block family; lines of 0.25.0's
``offloading/scheduler.py``, cited in ``model/citations.py`` under "0.25.0"):
- the sliding-window scan (:412) counts a HIT_PENDING answer into the run and defers
  (:427), a RETRY breaks the run and defers (:433): ``window_pending_hits``. 0.24.0
  answered both as None, which broke the run.
- the prefix scan (:390): HIT counts, HIT_PENDING counts and defers (:401), RETRY defers
  without counting and the scan goes on (:404), MISS stops it. Nothing to override:
  0.24.0 counted a deferred answer and went on, and any deferral makes the result None,
  so the blocks looked up and the answer are the same.

Scenario fields: 0.24.0's; ``pending`` is answered HIT_PENDING (``deferred``: RETRY).

Proofs: the encoding (proofs/encoding.py) answers a lookup stored / deferred / missing
and has no HIT_PENDING answer, so it does not tell the scans apart; whether a window scan
defers is the same in both (deferral is sticky, and the scan is identical up to the
first waiting block), so the result the encoding reasons about is 0.24.0's. The
expectations are inherited and ``python -m proofs --semantics vllm-0.25.0`` checks them.
"""

from releases import vllm_0_24_0
from releases.base import child

SEMANTICS = child(
    vllm_0_24_0.SEMANTICS, name="vllm-0.25.0", base_version="0.25.0", kind="release",
    window_pending_hits=True,
    summary="vLLM 0.25.0 (= 0.25.1): 0.24.0's block lookup with LookupResult answers; a "
    "HIT_PENDING block extends a sliding-window run (and defers), a RETRY breaks it.",
)
