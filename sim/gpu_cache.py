"""The GPU prefix cache: cached blocks per (group, block hash), LRU, capacity in blocks.

Full-attention groups cache every full computed block; the Mamba group in align mode
caches only blocks that hold a saved state (the others are null placeholders,
MambaManager.allocate_new_blocks, single_type_kv_cache_manager.py:1222 (1165)).
A second block with a hash already cached does not replace the first: vLLM keeps both
and hands out the first (block_pool.py:62, :204 (189)). Blocks of running requests are
not pinned here (a simplification: the LRU order alone decides).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sim.states import StateRecord

Key = tuple[int, int]  # (group, block hash)


@dataclass
class GpuPrefixCache:
    capacity: int
    blocks: OrderedDict[Key, StateRecord | None] = field(default_factory=OrderedDict)
    evictions: int = 0

    def insert(self, key: Key, record: StateRecord | None) -> None:
        self.insert_all(((key, record),))

    def insert_all(self, items: Iterable[tuple[Key, StateRecord | None]]) -> None:
        """Each (key, record) in order: a key already cached only becomes the newest."""
        blocks, capacity = self.blocks, self.capacity
        for key, record in items:
            if key in blocks:
                blocks.move_to_end(key)
                continue
            blocks[key] = record
            if len(blocks) > capacity:
                blocks.popitem(last=False)
                self.evictions += 1

    def clear(self) -> None:
        self.blocks.clear()


@dataclass(frozen=True)
class GpuHit:
    tokens: int  # num_computed_tokens: the local hit
    state: StateRecord | None  # the Mamba state at ``tokens`` (None when 0)
    # tokens cached for attention beyond the hit (num_uncached_common_prefix_tokens)
    uncached_common_prefix: int


def longest_hit(cache: GpuPrefixCache, hashes: Sequence[int], prompt_len: int,
                block_size: int, attention_groups: int) -> GpuHit:
    """``KVCacheCoordinator.find_longest_cache_hit`` for full attention + one Mamba group.

    The hit is capped at prompt_len - 1 (kv_cache_manager.py:227 (221)). Full attention
    takes the longest run of cached blocks; Mamba then searches right to left for the
    last cached state block not beyond it (single_type_kv_cache_manager.py:997 (994)).
    Full attention is downward-closed, so one pass converges (kv_cache_coordinator.py
    "simple hybrid"). The attention hit beyond the Mamba hit is 0.24.0's Marconi hint
    (kv_cache_coordinator.py:729).
    """
    blocks = cache.blocks
    limit = (prompt_len - 1) // block_size
    for g in range(attention_groups):
        n = 0
        while n < limit and (g, hashes[n]) in blocks:
            n += 1
        limit = n
    attn_hit = limit * block_size if attention_groups else 0
    mamba = attention_groups
    for i in range(limit - 1, -1, -1):
        rec = blocks.get((mamba, hashes[i]))
        if rec is not None:
            blocks.move_to_end((mamba, hashes[i]))
            for g in range(attention_groups):
                for b in range(i + 1):
                    blocks.move_to_end((g, hashes[b]))
            hit = (i + 1) * block_size
            return GpuHit(hit, rec, max(0, attn_hit - hit))
    return GpuHit(0, None, attn_hit)


def per_group_hit(cache: GpuPrefixCache, hashes: Sequence[int], prompt_len: int,
                  block_size: int, attention_groups: int) -> tuple[GpuHit, int]:
    """0.24.0's local hit for a hybrid model with a KV connector.

    ``find_longest_cache_hit_per_group`` (kv_cache_coordinator.py:734) looks each group
    up on its own, and the scheduler passes ``max(per_group_hits)`` to the connector
    (scheduler.py:683-701, from vLLM PR #44243; vLLM issue #46453). Returns the hit with
    the Mamba group's own state (at its own, possibly shorter, hit) and the shortest
    attention hit.
    """
    blocks = cache.blocks
    limit = (prompt_len - 1) // block_size
    hits = []
    for g in range(attention_groups):
        n = 0
        while n < limit and (g, hashes[n]) in blocks:
            blocks.move_to_end((g, hashes[n]))
            n += 1
        hits.append(n * block_size)
    mamba_hit, rec = 0, None
    for i in range(limit - 1, -1, -1):
        r = blocks.get((attention_groups, hashes[i]))
        if r is not None:
            blocks.move_to_end((attention_groups, hashes[i]))
            mamba_hit, rec = (i + 1) * block_size, r
            break
    return GpuHit(max([*hits, mamba_hit]), rec, 0), min(hits, default=0)
