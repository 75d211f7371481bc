"""vLLM 0.32.0: 0.33.0's chunked lookup with the simple partial tail (one search block, no
EAGLE proof margins, no bridge chunk lookup, no partial tails with an EAGLE group).

Shape: built on vllm-0.33.0 as a delta ("0.33.0 minus the bridge"), not as its parent.
The chunked family's model (``model/lookup_chunked.py`` and friends, the Z3 encodings,
the ``ChunkSteps`` defaults) follows 0.33.0 line by line, so 0.33.0 is the family's
reference (``releases.reference("chunked")``) and each older release names the release
after it as its parent and overrides only what that release changed on the way back:
adjacent diffs, one small module each, and the lookup's logic stays in one place. Were
0.32.0 the parent, the shared code would have to follow 0.32.0 and 0.33.0 would
override the bridge; and each older release added later would re-parent the one after
it and re-state its overrides. As it is, vllm-0.31.0 will be a child of this module
(C3, C11, C12 of docs/releases-overrides.md: mode ``all``, no fine GPU-hit alignment, a
single group's ``prefix_match_unit`` accepted). Chronology comes from ``base_version``
(``releases.releases()`` sorts by it), not from ``parent``.

Overrides of 0.33.0 (docs/releases-overrides.md C6 C7 C8 C10; lines of 0.32.0's
``offloading/scheduler.py``, cited in ``model/citations.py`` under "0.32.0"):
- C7 partial tail: ``_lookup`` (:966) searches one block past the complete boundary
  (:979-980, ``steps.tail_search_one_block``), keys every group at the boundary itself and
  looks up no bridge chunk (:993-1025, ``tail_bridge=False``).
- C8 partial-tail support: off when any group is EAGLE (:313, ``tail_eagle=False``), so
  no proof margins exist.
- C6 the hit-end bookkeeping (0.33.0 :887, :957) only serves the bridge: nothing to model.
- C10 the start-up windows sit in scheduler.py (:129-152) instead of offloading/config.py:
  a citation move, the same arithmetic for scenarios.
In the modelled scope (GPU hits at scheduler-block multiples) 0.33.0's bridge cannot
fire without a proof margin either, so the two answer differently exactly where a
partial-tail layout has an EAGLE group.

Scenario fields: 0.33.0's (``max_num_new_tokens``, ``max_load_tokens``,
``blocks_per_chunk``, pending / deferred answers, tails); mode ``all`` is refused as in
0.33.0 (config/cache.py:63).

Proofs: 0.33.0's expectations, inherited. Both Z3 encodings read the three overrides
from ``steps``: the bounded one (``proofs.encoding_chunked``: ``partial_tails_on``
refuses an EAGLE group, ``partial_tail_phase`` runs ``tail_search`` and looks the bridge
up only with ``tail_bridge``) and the layered tail (``proofs.tail_chunked``: ``startup``,
``prologue``; ``proofs.tail_layers_chunked`` asks its queries with these steps). The
complete-chunk steps are 0.33.0's, so the tails-off layered proof is 0.33.0's. Only
``tail_eagle`` changes an answer (without an EAGLE group there is no proof margin, and
0.33.0's search is then one block with its bridge past it), which the conformance tests
pin from either side (``tests/test_conformance_chunked_releases.py``). Each verdict of
``python -m proofs --semantics vllm-0.32.0`` matches: loads-stored-only,
leaves-last-token and termination proved over every layout 0.32.0 accepts, partial tails
on or off; no-partial-state, whole-blocks and maximality proved under their
preconditions, and over the accepted layouts each has the counterexample 0.33.0 has
(the same layout, tails off: finding 001's, a full-attention block above the Mamba
block, a load cap), replayed through model/ and answered the same by the real 0.32.0
scheduler (``python -m sim.crosscheck --vllm 0.32.0 --light --scenarios DIR``: 3 agree,
none refused).
"""

from dataclasses import replace

from releases import steps, vllm_0_33_0
from releases.base import child

SEMANTICS = child(
    vllm_0_33_0.SEMANTICS, name="vllm-0.32.0", base_version="0.32.0", kind="release",
    steps=replace(vllm_0_33_0.SEMANTICS.steps, tail_search=steps.tail_search_one_block,
                  tail_bridge=False, tail_eagle=False),
    summary="vLLM 0.32.0: 0.33.0's chunked lookup with the simple partial tail (one "
    "search block keyed at the boundary, no bridge chunk lookup) and no partial tails "
    "when a group is EAGLE.",
)
