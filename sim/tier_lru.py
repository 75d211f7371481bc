"""vLLM 0.33.0's LRU eviction policy (``cpu/policies/lru.py``), written anew.

Every held key has a rank ``(n, -position)``; eviction takes the idle (ref_cnt 0),
unprotected keys of least ``(rank, key)`` (lru.py:70-78, heap entries ``(rank, key)``;
lru.py:174-219). Ranks come from one counter (``_next_rank``, lru.py:48):

- a key stored or touched without a recorded position gets a fresh rank ``(n, 0)``
  (lru.py:63-68, :113-115);
- a request gets one rank number the first time the policy sees it, and its keys with a
  position rank ``(that number, -position)``, so within a request the tail precedes the
  head in eviction (lru.py:51-61, :116-117, :133-152);
- ``touch`` and a request's finalisation rank keys tail to head with fresh numbers, so
  the head ends most recent (lru.py:128-130, :154-163).

A pinned key keeps its rank: recency is logical, independent of transfers (lru.py:27-40).
The evictable keys sit in a lazily invalidated min-heap, as in vLLM, so eviction costs
O(n log N): an entry is live while its key is evictable and still has that rank.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from sim.tier_context import Key, ReqContext, order_request_keys
from sim.tier_policy import Chunk, Policy, PolicyView

Rank = tuple[int, int]
_Entry = tuple[Rank, Key]


class LruPolicy(Policy):
    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.chunks: dict[Key, Chunk] = {}
        self.ranks: dict[Key, Rank] = {}
        self.evictable: set[Key] = set()
        self.next_rank = 0
        self.generation = 0  # lru.py:49, bumped by clear (lru.py:172)
        self._heap: list[_Entry] = []

    # -- ranks ---------------------------------------------------------------------------

    def _fresh(self) -> int:
        self.next_rank += 1
        return self.next_rank

    def _request_rank(self, ctx: ReqContext) -> int:
        # lru.py:51-61: one number per request and policy generation, made on first use
        if ctx.lru_rank is None or ctx.lru_rank[0] != self.generation:
            ctx.lru_rank = (self.generation, self._fresh())
        return ctx.lru_rank[1]

    def _set_rank(self, key: Key, rank: Rank) -> None:
        self.ranks[key] = rank
        if key in self.evictable:  # lru.py:68/150: an evictable key re-enters the heap
            self._push(key)

    def _push(self, key: Key) -> None:
        heapq.heappush(self._heap, (self.ranks[key], key))
        if len(self._heap) >= max(64, 2 * len(self.evictable)):  # lru.py:80-84
            self._heap = [(self.ranks[k], k) for k in self.evictable]
            heapq.heapify(self._heap)

    def _renew(self, keys: Iterable[Key]) -> None:
        # lru.py:63-68 and :86-88: each held key, in the order given, a fresh rank
        for key in keys:
            if key in self.chunks:
                self._set_rank(key, (self._fresh(), 0))

    # -- the CachePolicy interface ---------------------------------------------------------

    def get(self, key: Key) -> Chunk | None:
        return self.chunks.get(key)  # lru.py:104-105

    def insert(self, key: Key, chunk: Chunk, ctx: ReqContext) -> None:
        self.chunks[key] = chunk  # lru.py:111
        pos = ctx.position(key)
        if pos is None:  # lru.py:113-115
            self.ranks[key] = (self._fresh(), 0)
        else:  # lru.py:116-117
            self.ranks[key] = (self._request_rank(ctx), -pos)
        if chunk.ref_cnt == 0:  # lru.py:118-120 (the manager inserts chunks not ready)
            self.evictable.add(key)
            self._push(key)

    def remove(self, key: Key) -> None:
        del self.chunks[key]  # lru.py:124-126
        self.ranks.pop(key, None)
        self.evictable.discard(key)

    def touch(self, keys: Sequence[Key], ctx: ReqContext) -> None:
        self._renew(reversed(list(keys)))  # lru.py:129-130: tail first, head most recent

    def on_request_access(self, keys: Sequence[Key], ctx: ReqContext) -> None:
        # lru.py:133-152: the request's number is taken even if no key is held
        req_rank = self._request_rank(ctx)
        for key in keys:
            pos = ctx.position(key)
            if pos is None or key not in self.chunks:
                continue
            rank = (req_rank, -pos)
            if self.ranks[key] >= rank:  # never lowers a rank
                continue
            self._set_rank(key, rank)

    def on_request_finished(self, key_groups: Sequence[Sequence[Key]],
                            insertion_only: set[Key], reused: set[Key],
                            ctx: ReqContext) -> None:
        # lru.py:154-163: insertion and reuse alike, tail to head
        self._renew(reversed(order_request_keys(key_groups, ctx)))

    def clear(self) -> None:
        self.chunks.clear()  # lru.py:166-172
        self.ranks.clear()
        self.evictable.clear()
        self._heap.clear()
        self.next_rank = 0
        self.generation += 1

    def evict(self, n: int, protected: set[Key]) -> list[tuple[Key, Chunk]] | None:
        if n == 0:
            return []  # lru.py:178-179
        # lru.py:181-206: the n live entries of least (rank, key) outside protected
        heap = self._heap
        chosen: list[_Entry] = []
        chosen_keys: set[Key] = set()
        skipped: list[_Entry] = []
        while heap and len(chosen) < n:
            entry = heapq.heappop(heap)
            rank, key = entry
            if key not in self.evictable or self.ranks.get(key) != rank or key in chosen_keys:
                continue  # stale, or a second live copy of a chosen key
            if key in protected:
                skipped.append(entry)
                continue
            assert self.chunks[key].ref_cnt == 0  # lru.py:197
            chosen.append(entry)
            chosen_keys.add(key)
        for entry in skipped:
            heapq.heappush(heap, entry)
        if len(chosen) < n:  # atomic: nothing changes (lru.py:201-206)
            for entry in chosen:
                heapq.heappush(heap, entry)
            return None
        out = []
        for _, key in chosen:  # lru.py:211-217
            self.evictable.remove(key)
            out.append((key, self.chunks.pop(key)))
            del self.ranks[key]
        if len(heap) >= max(64, 2 * len(self.evictable)):  # lru.py:218
            self._heap = [(self.ranks[k], k) for k in self.evictable]
            heapq.heapify(self._heap)
        return out

    def mark_evictable(self, key: Key) -> None:
        self.evictable.add(key)  # lru.py:222-228: ref_cnt reached 0
        self._push(key)

    def mark_non_evictable(self, key: Key) -> None:
        self.evictable.remove(key)  # lru.py:230-233: a load pins it

    # -- views -----------------------------------------------------------------------------

    def keys(self) -> Iterable[Key]:
        return self.chunks.keys()

    def eviction_order(self) -> list[Key]:
        """The evictable keys in the order eviction takes them."""
        return sorted(self.evictable, key=lambda k: (self.ranks[k], k))

    def view(self) -> PolicyView:
        return {
            "ranks": sorted([k[0], k[1], r[0], r[1]] for k, r in self.ranks.items()),
            "evictable": sorted([k[0], k[1]] for k in self.evictable),
            "next_rank": self.next_rank,
        }
