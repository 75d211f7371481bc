"""vLLM 0.26.0: 0.25.0's block lookup, renamed to chunks, with its start-up moved to
offloading/config.py's ``build_offloading_config`` and ``blocks_per_chunk``.

Overrides of 0.25.0 (docs/releases-overrides.md § Block family; lines of 0.26.0,
cited in ``model/citations.py`` under "0.26.0"; ``offloading_config``):
- start-up: ``kv_connector_extra_config["blocks_per_chunk"]`` (config.py:70, > 0 :72)
  makes the offloaded block (the chunk) that many GPU blocks of each group; beside
  ``block_size`` it is refused (:64); ``block_size`` still needs one GPU block size (:80)
  and a multiple of it (:87). The hash size must divide every block (:52).
- the engine sets the Mamba cache mode from prefix caching (model_executor/models/
  config.py:559-561, 596): a scenario asking for another mode is refused.
- the cache field ``hash_block_size`` is ``prefix_match_unit`` (kv_cache_utils.py:678),
  with the same arithmetic (gcd default :680, Mamba back-off :671, refusal :683).
- context parallelism scales by DCP only (config.py:41-44) and hybrid layouts with CP are
  no longer refused: outside the modelled scope (below).
The lookup (scheduler.py:596-670) and the load (:780-870) are 0.25.0's in chunks.

Scope: new requests without context parallelism (``output_tokens`` and
``context_parallel_size`` are refused as not modelled): the adapter that drives this
release's real scheduler, ``sim/crosscheck/adapters/harness_chunked.py`` (0.26.0's API:
the spec built from an ``OffloadingConfig``), builds neither.

Scenario fields: 0.25.0's + ``blocks_per_chunk``.

Proofs: every theorem's verdict is 0.25.0's, so the expectations are inherited
(``python -m proofs --semantics vllm-0.26.0`` checks them; Z3 proves or refutes each, none
left unknown). The encoding (proofs/encoding.py) reads this release's overrides as
model/ does: the chunk is ``releases.steps.chunk_blocks`` GPU blocks of each group
(blocks_per_chunk where set, else the block_size factor), and its start-up adds the
refusals above (blocks_per_chunk positive and not beside block_size; the engine's one
Mamba mode, never "none" with prefix caching on nor another with it off,
``proofs.encoding.offloading_config_startup``). The layered proofs hold for every layout
0.26.0 accepts, blocks_per_chunk layouts included: any number of groups of each kind,
each with its own GPU block size, any blocks_per_chunk or block_size factor, window,
prompt and GPU hit. Each proof's witness against vacuity is a blocks_per_chunk layout
(chunks of 2 GPU blocks; groups in blocks twice the Mamba group's where the
preconditions allow, else one size) replayed through model/, and the counterexamples
over the accepted layouts are searched among blocks_per_chunk layouts too (block sizes
1-3, chunks of 1-3 blocks) and replayed through model/ and the real 0.26.0 scheduler
(``python -m sim.crosscheck --vllm 0.26.0``). Outside the proofs, as outside the model:
context parallelism and resumed requests.
"""

from releases import vllm_0_25_0
from releases.base import child

SEMANTICS = child(
    vllm_0_25_0.SEMANTICS, name="vllm-0.26.0", base_version="0.26.0", kind="release",
    offloading_config=True,
    summary="vLLM 0.26.0: 0.25.0's block lookup in chunks; start-up in offloading/config.py "
    "with blocks_per_chunk and the engine's Mamba mode.",
    # expectations: 0.25.0's, every verdict the same (module doc)
)
