"""vLLM 0.31.0: 0.32.0's chunked lookup with Mamba cache mode "all", no fine-grained GPU
prefix hits, and no check of a single group's ``prefix_match_unit``.

Built on vllm-0.32.0 as a delta (the chunked family's shape: ``releases/vllm_0_32_0.py``).
Its ``offloading/scheduler.py`` differs from 0.32.0's in the Mamba align set only (the
rest of the diff is the cache-hit-source metrics, which the lookup does not read); the
start-up around it differs in three places. Overrides of 0.32.0
(docs/releases-overrides.md C3 C11 C12; lines of 0.31.0, cited in ``model/citations.py``
under "0.31.0"):
- C3 Mamba mode "all" exists (config/cache.py:62) and is kept with prefix caching on
  (model_executor/models/config.py:649-657 falls back to "align" only for a model
  without Mamba prefix caching; the cross-check's model has it); with caching off it
  becomes "none" (:669). ``resolve_mamba_align_size`` counts "all" groups beside
  "align" ones (scheduler.py:167-170), so their chunk rounds the bound too; partial-tail
  support and the CoW source stay "align" only (scheduler.py:289, :305); a group in
  mode "all" makes the hash size back off to the scheduler block size
  (kv_cache_utils.py:785) as in 0.32.0. ``ChunkSteps.mamba_all``.
- C11 GPU prefix hits land on the scheduler block size: 0.31.0 has no
  ``partial_hash_hits_enabled`` / ``resolve_cache_hit_alignment_tokens`` (0.32.0's
  kv_cache_utils.py:750, 909). ``ChunkSteps.fine_gpu_hits=False``. The model reads the
  alignment only for EAGLE proof margins, which 0.32.0's steps already turn off, so
  no answer changes; the layout record states it as 0.31.0 has it.
- C12 a single group ignores ``prefix_match_unit`` (kv_cache_utils.py:761-765: the
  scheduler block size is the hash size, no refusal; 0.32.0 refuses at :832-845).
  ``ChunkSteps.single_group_hash_check=False``.

Scenario fields: 0.32.0's (``max_num_new_tokens``, ``max_load_tokens``,
``blocks_per_chunk``, pending / deferred answers, tails), and mode ``all``.

Proofs: 0.32.0's expectations, inherited. Both Z3 encodings read C3: their
configurations carry the engine's Mamba mode "all" (``mamba_all``), which the start-up
admits only with ``ChunkSteps.mamba_all`` (the bounded ``proofs.encoding_chunked.
startup`` reads the step; the layered ``proofs.turn_chunked.symbolic_config`` gives no
mode symbol without it) and only with prefix caching on; an "all" group joins the Mamba
align size (``derive`` in both), backs the hash block off to the scheduler block (every
block size equal when there are several groups: ``startup``, and the layered turn's
unknown-layout premises) and turns partial tails off (``partial_tails_on``,
``proofs.tail_chunked.startup``). Each rule is checked against 0.31.0's source above
and pinned from either side by ``tests/test_conformance_chunked_releases.py`` (a copy of
either encoding, or of the model, without it fails), and the conformance generators
(``tests/gen_chunked.py``) draw mode "all" for this release. C11 (GPU hits on the
scheduler block) is the encodings' GPU-hit scope already; C12 (a single group's hash
size is its block) is their layout with ``prefix_match_unit`` unset. Each verdict of
``python -m proofs --semantics vllm-0.31.0`` matches: loads-stored-only,
leaves-last-token and termination proved over every layout 0.31.0 accepts (Mamba in
mode align or "all"), partial tails on or off; no-partial-state, whole-blocks and
maximality proved under their preconditions, and over the accepted layouts each has
the counterexample 0.32.0 has (mode align: mode "all" makes every block size one, so
finding 001's layout needs align), replayed through model/ (the proofs' own replay)
and answered the same by the real 0.31.0 scheduler (``python -m sim.crosscheck --vllm
0.31.0 --light --scenarios DIR``: 3 agree).
Cost: about 28 s CPU for the six pairs (``/usr/bin/time``, load 2).
"""

from dataclasses import replace

from releases import vllm_0_32_0
from releases.base import child

SEMANTICS = child(
    vllm_0_32_0.SEMANTICS, name="vllm-0.31.0", base_version="0.31.0", kind="release",
    steps=replace(vllm_0_32_0.SEMANTICS.steps, mamba_all=True, fine_gpu_hits=False,
                  single_group_hash_check=False),
    summary="vLLM 0.31.0: 0.32.0's lookup with Mamba cache mode 'all' (its groups join "
    "the Mamba align size), GPU hits on the scheduler block only, and a single group's "
    "prefix_match_unit ignored.",
)
