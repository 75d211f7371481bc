"""What vLLM 0.33.0's offloading connector offers the CPU tier after each step, per
request: pure functions over one request's per-group store state.

Line numbers are 0.33.0's ``distributed/kv_transfer/kv_connector/v1/offloading/
scheduler.py`` unless another file is named. Two paths feed ``prepare_store``:

1. Complete chunks (``_build_store_jobs``, :1815-2100), one call per request and step
   with every group's new keys, groups in order, chunks in order (:1898-1986):
   per group, chunks from ``next_stored_chunk_idx`` up to ``storable_chunks`` (:442-473:
   computed, allocated and keyed; an EAGLE group holds back its last chunk while
   decoding); a chunk with a null GPU block (a sliding-window block that left the
   window, a stale re-allocated one) is skipped (:1955-1985). Mamba ``align`` groups
   (``requires_cow_source``, :266-269) are skipped here (:1904-1905).
2. Retained Mamba boundaries (``_build_aligned_boundary_store_jobs``, :1554-1624): the
   KV-cache manager hands over every boundary whose state block it keeps
   (single_type_kv_cache_manager.py:2007-2023), and each chunk-aligned one within the
   offloadable tokens is offered alone, ``prepare_store([key])`` (:1569-1584). They are
   built before path 1 in the step (:2167-2168).

After an offer of path 1: the tier refused it (None): ``next_stored_chunk_idx`` stays and
the same chunks are offered again next step (:1991-1996); nothing was new: advance to
the storable chunks (:1998-2000, :475-485); else every group advances to the end of its
range (:2049-2051). A load moves ``next_stored_chunk_idx`` past the loaded chunks under
``OffloadPolicy.CHUNK_LEVEL`` (the CPU tier's, ``sim.tier.OffloadPolicy``) and leaves it
under REQUEST_LEVEL, so the hit chunks are offered again (:1468-1472).

Not modelled (the simulator's layouts do not reach them): partial-tail stores
(:1626-1760, CoW hand-offs at a non-aligned boundary), ``max_offload_tokens``,
``retention_interval`` masks and the final sliding-window tail reconsideration
(:1849-1880).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from model.layout import cdiv
from sim.tier import OffloadPolicy

# (group index in the connector's config order, chunk index): the caller maps it to the
# tier key (block hash at the chunk's last hash position, group), scheduler.py:412-429
ChunkRef = tuple[int, int]


@dataclass(frozen=True)
class StoreGroup:
    tokens_per_chunk: int
    cow_source: bool = False  # Mamba align: stored only through retained boundaries
    eagle: bool = False


def offloadable_tokens(num_computed: int, num_tokens: int, prompt_tokens: int,
                       prompt_only: bool = True) -> int:
    """``_calc_num_offloadable_tokens`` (:762-771), without ``max_offload_tokens``;
    ``offload_prompt_only`` defaults to True (kv_offload/base.py:729-731)."""
    num = min(num_computed, num_tokens)
    return min(num, prompt_tokens) if prompt_only else num


def storable_chunks(group: StoreGroup, offloadable: int, prompt_tokens: int,
                    allocated_chunks: int, keyed_chunks: int, finished: bool) -> int:
    """``storable_chunks`` (:442-473)."""
    n = offloadable // group.tokens_per_chunk
    if group.eagle and offloadable > prompt_tokens and not finished:
        n = max(0, n - 1)
    return min(n, allocated_chunks, keyed_chunks)


def chunk_offer(groups: Sequence[StoreGroup], next_stored: Sequence[int],
                storable: Sequence[int],
                present: Callable[[int, int], bool]) -> list[ChunkRef]:
    """Path 1's keys, in the order vLLM passes them (:1898-1986); ``present(g, c)``: the
    chunk's GPU blocks are all non-null (:1970-1985)."""
    out: list[ChunkRef] = []
    for g, group in enumerate(groups):
        if group.cow_source:
            continue
        out.extend((g, c) for c in range(next_stored[g], storable[g]) if present(g, c))
    return out


def after_offer(next_stored: Sequence[int], storable: Sequence[int],
                stored_any: bool | None) -> tuple[int, ...]:
    """``next_stored_chunk_idx`` after path 1's ``prepare_store``: ``stored_any`` None if
    the tier refused (:1991-1996), False if it had every key already (:1998-2000),
    True if it took some (:2049-2051). With no keys to offer vLLM advances as for False
    (:1984-1986)."""
    if stored_any is None:
        return tuple(next_stored)
    return tuple(max(n, s) for n, s in zip(next_stored, storable, strict=True))


def boundary_offer(group: StoreGroup, boundary: int, offloadable: int) -> bool:
    """Whether a retained Mamba boundary is offered (:1569-1578): chunk-aligned and
    within the offloadable tokens (the block is non-null by construction here)."""
    return boundary <= offloadable and boundary % group.tokens_per_chunk == 0


def retained_boundary(prompt: int, hit: int, start: int, end: int, mamba_block: int,
                      align: int) -> int | None:
    """The Mamba boundary the KV-cache manager hands the connector in the prefill chunk
    ``[start, end)`` of a ``prompt``-token request that loaded ``hit`` tokens, or None;
    ``mamba_block``: the Mamba group's block, ``align``: the scheduler block
    (``cache_hit_alignment_tokens``, single_type_kv_cache_manager.py:105). Line numbers
    are 0.33.0's ``v1/core/single_type_kv_cache_manager.py`` unless another file is
    named.

    ``MambaManager.cache_blocks`` hands over each non-null block it hashes among the
    cacheable full blocks, with the token its hash ends at (:1978-2023); the hybrid
    coordinator makes the cacheable tokens the computed ones rounded down to ``align``
    (kv_cache_coordinator.py:777-804). Under the default
    ``prefix_cache_retention_interval`` 0 (config/cache.py:275) one state is kept
    (:1573-1606, :2032-2081): the one at the replay boundary ``prompt - 1``
    (kv_cache_coordinator.py:65-82, no EAGLE) rounded down to ``align``,
    ``A = (prompt - 1) // align * align``. It is handed over when its block is among the
    cacheable ones:

    - a chunk ends at A (the state is written at chunk ends, v1/core/sched/
      scheduler.py:608-620), or the request loaded exactly A tokens (the loaded state
      block, kv_cache_manager.py:621-625): its own block, ``A // mamba_block - 1``;
    - the final chunk starts below A: Mamba2 exports the checkpoint inside the chunk
      (model_executor/layers/mamba/mamba_mixer2.py:1108-1118, so the scheduler does not
      split the prefill), at ``A`` into slot ``cdiv(prompt, mamba_block) - 2``
      (:1756-1782), re-keyed at A (:2032-2081). That slot is A's own block when
      ``(prompt - 1) // mamba_block * mamba_block == A``; otherwise it is cacheable,
      hence handed over, only when ``prompt`` is a multiple of ``align``.

    Checked against the real 0.33.0 ``KVCacheManager`` on the CPU for one-chunk
    prompts of 1-999 tokens on Mamba/window blocks 48/32, 64/48 and 80/32 (every hand-off
    as this function says) and against the H200 engine's store logs
    (``tests/test_tier_storelog.py``). Otherwise no Mamba state is offered at all (e.g.
    262 tokens on 48/96: A = 192 sits in the slot ending at 240, above the 192 cacheable
    tokens). Scope: intermediate chunk ends are the caller's steps, not the scheduler's
    own splitting rules (prompts here are one chunk)."""
    a = (prompt - 1) // align * align
    if a <= 0 or not start <= a <= end:
        return None
    if start == a:
        return a if hit == a else None  # else offered by the chunk that ended at A
    if end < prompt:
        return a if end == a else None
    if (prompt - 1) // mamba_block * mamba_block == a or prompt % align == 0:
        return a
    return None


def after_load(policy: OffloadPolicy, next_stored: Sequence[int],
               groups: Sequence[StoreGroup], cached_tokens: int) -> tuple[int, ...]:
    """``next_stored_chunk_idx`` once a load of ``cached_tokens`` (GPU hit plus loaded) is
    issued (:1423, :1468-1472)."""
    if policy is OffloadPolicy.CHUNK_LEVEL:
        return tuple(cdiv(cached_tokens, g.tokens_per_chunk) for g in groups)
    return tuple(next_stored)
