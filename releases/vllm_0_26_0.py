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

Proofs: the Z3 encoding's start-up (proofs/encoding.py) takes one offloaded block per
group and a block-size factor; a blocks_per_chunk layout is a block-size factor layout
with per-group block sizes, which 0.24.0 refuses and the encoding's accepted-layout
verdicts do not cover. So ``inherit_expect=False``: the proofs claim nothing for 0.26.0;
its evidence is the cross-check against the real 0.26.0 scheduler.
"""

from releases import vllm_0_25_0
from releases.base import child

SEMANTICS = child(
    vllm_0_25_0.SEMANTICS, name="vllm-0.26.0", base_version="0.26.0", kind="release",
    offloading_config=True,
    summary="vLLM 0.26.0: 0.25.0's block lookup in chunks; start-up in offloading/config.py "
    "with blocks_per_chunk and the engine's Mamba mode; not in the proofs (no theorem "
    "claims).",
    # expectations: 0.25.0's (module doc)
)
