"""vLLM 0.30.0: 0.31.0's chunked lookup without the ``max_load_tokens`` cap.

Built on vllm-0.31.0 as a delta (the chunked family's shape: ``releases/vllm_0_32_0.py``).
Its ``offloading/scheduler.py`` differs from 0.31.0's, for the lookup, in the load cap
only; the rest of the diff does not reach a scenario's answer: ``extra_retained_tokens``
in the sliding windows (0.31.0's scheduler.py:117-122, :132-138; scenarios have none),
``_touch`` (0.30.0 :720, called at :1072: the manager's LRU, not a lookup) and the
key positions handed to the manager (``set_offload_key_position``, 0.31.0). The
start-up around it (``offloading/config.py``, ``resolve_kv_cache_block_sizes``,
``MambaModelConfig``) is 0.31.0's for every layout a scenario can state.

Override of 0.31.0 (docs/releases-overrides.md C2; lines of 0.30.0, cited in
``model/citations.py`` under "0.30.0"):
- C2 no ``max_load_tokens``: ``RequestOffloadState`` reads no ``kv_transfer_params``
  cap (0.31.0 :391), the bound is capped by ``max_num_new_tokens`` alone
  (scheduler.py:766-769), no per-group chunk alignment after the cut (0.31.0 :815-818)
  and the partial tail is capped by ``max_num_new_tokens`` alone (:966-967).
  ``ChunkSteps.cap_load_tokens=False``: the scenario field ``max_load_tokens`` is
  refused (``model.evaluate``, one line naming it), so the lookup never sees the cap.

Scenario fields: 0.31.0's less ``max_load_tokens``.

Proofs: 0.31.0's expectations, inherited (each verdict checked by Z3, below). Both Z3
encodings read C2: the bounded start-up (``proofs.encoding_chunked.startup``) sets no
load cap without ``ChunkSteps.cap_load_tokens``, and the layered configuration
(``proofs.turn_chunked.symbolic_config``, which the tail layer and the maximality layer
build on) has no load-cap symbol without it, so no query of either encoding lets a load
cap exist; ``tests/test_conformance_chunked_releases.py`` pins both from either side (a
copy of either encoding without the read admits the cap; the model taking the field
makes the bounded start-up refuse what it answers). Mode "all" is 0.31.0's
(``releases/vllm_0_31_0.py``). Each verdict of ``python -m proofs --semantics
vllm-0.30.0`` matches: loads-stored-only, leaves-last-token and termination proved over
every layout 0.30.0 accepts, partial tails on or off; no-partial-state, whole-blocks and
maximality proved under their preconditions and failing over the accepted layouts.
Maximality's verdict stays: 0.33.0's counterexample over the accepted layouts is a load
cap (finding 003), which 0.30.0 has not, but ``max_num_new_tokens`` binds the same way
(the precondition caps-reach-prompt names both caps), and Z3's counterexample for 0.30.0
(over every layout 0.30.0 accepts: one Mamba group, max_num_new_tokens 1 below the
prompt) replays through model/ (the proofs' own replay); the three counterexamples over
the accepted layouts are answered the same by the real 0.30.0 scheduler (``python -m
sim.crosscheck --vllm 0.30.0 --light --scenarios DIR``: 3 agree).
"""

from dataclasses import replace

from releases import vllm_0_31_0
from releases.base import child

SEMANTICS = child(
    vllm_0_31_0.SEMANTICS, name="vllm-0.30.0", base_version="0.30.0", kind="release",
    steps=replace(vllm_0_31_0.SEMANTICS.steps, cap_load_tokens=False),
    summary="vLLM 0.30.0: 0.31.0's lookup without the max_load_tokens cap (the "
    "scenario field is refused).",
)
