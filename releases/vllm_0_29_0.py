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

Proofs: 0.30.0's expectations, inherited, but loads-stored-only, which fails (each
verdict checked by Z3, below). Both Z3 encodings read C1 as 0.30.0 reads C2 (no
``max_num_new_tokens`` symbol or value: ``releases/vllm_0_30_0.py``), and C4 and C5:
the group's turn widens the EAGLE query through ``releases.steps.eagle_query_end``
(the model's step, run on Z3 terms) with ``eagle_query_all`` off, and without
``load_windows`` the window scan's first run needs the plain window, any HIT_PENDING it
scans defers, and the being-loaded check slices the plain window
(``proofs.encoding_chunked.group_step``, ``window_lookup``, ``result_of``;
``proofs.turn_chunked``'s, through its configuration's switches, which
``symbolic_config`` takes from the release). ``tests/test_conformance_chunked_releases.py``
pins each of the four reads from either side (a copy of either encoding without the
read, or the model with 0.30.0's step, answers a file of ``tests/scenarios/vllm-0.29.0/``
otherwise). Each verdict of ``python -m proofs --semantics vllm-0.29.0`` matches:
leaves-last-token and termination proved over every layout 0.29.0 accepts, partial
tails on or off; no-partial-state, whole-blocks and maximality proved under their
preconditions and failing over the accepted layouts (maximality's precondition
caps-reach-prompt holds trivially: no cap); loads-stored-only fails, with no
precondition: a sliding-window group's hit that ends inside its chunk (cut there by
another group's chunk) is confirmed by the plain window, while the load reads the
window's tokens from the chunk before it, which the lookup never asked about (0.30.0's
load window, ``load_window_size_in_chunks``, asks for it). The file
``window-first-run-plain.json`` is such a request: the real 0.29.0 and 0.28.0 schedulers
answer its hit of 18 (``python -m sim.crosscheck --vllm 0.29.0 --light --scenarios
tests/scenarios/vllm-0.29.0``), so the break is 0.29.0's, not the model's; the
counterexamples over the accepted layouts agree with the real 0.29.0 scheduler too
(``--scenarios DIR`` of ``python -m publish --report DIR``). Maximality's valid hits
stay 0.33.0's (``model/maximality_chunked.py``: the load window's chunks ready): the
hits whose load reads only ready chunks, the same definition on every release, so the
plain windows widen none.
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
