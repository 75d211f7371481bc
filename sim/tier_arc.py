"""vLLM 0.33.0's ARC eviction policy (``cpu/policies/arc.py``), written anew.

Held chunks sit in T1 (seen once) or T2 (reused), each least recent first; B1 and B2
remember the keys evicted from T1 and T2 (at most ``capacity`` each). ``target`` is the
adaptive size T1 aims at (arc.py:52-59):

- a new chunk enters T1's recent end and leaves the ghost lists (arc.py:65-71);
- a miss on a ghost key moves ``target`` up (B1) or down (B2) by max(1, |other| / |own|)
  and refreshes the ghost (arc.py:78-89); a store miss is such a miss (arc.py:91-96);
- ``touch`` promotes a ready T1 chunk to T2, refreshes a T2 chunk, keeps a chunk not
  ready in T1 (refreshed), and counts any other key as a ghost miss (arc.py:98-114);
- a finished request refreshes the chunks it only inserted (in their list) and promotes
  or refreshes those it reused, tail to head (arc.py:116-139);
- eviction takes from T1 while T1 (as shrunk so far) is at least ``int(target)``, else
  from T2, else T1 again, scanning each list once from its least recent end for idle
  unprotected chunks; it fails with no change if ``n`` cannot be found, and trims the
  ghost lists after a success (arc.py:149-214).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence

from sim.tier_context import Key, ReqContext, order_request_keys
from sim.tier_policy import Chunk, Policy, PolicyView


class ArcPolicy(Policy):
    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.target = 0.0
        self.t1: OrderedDict[Key, Chunk] = OrderedDict()
        self.t2: OrderedDict[Key, Chunk] = OrderedDict()
        self.b1: OrderedDict[Key, None] = OrderedDict()
        self.b2: OrderedDict[Key, None] = OrderedDict()

    def get(self, key: Key) -> Chunk | None:
        found = self.t1.get(key)  # arc.py:62-63
        return found if found is not None else self.t2.get(key)

    def insert(self, key: Key, chunk: Chunk, ctx: ReqContext) -> None:
        self.t1[key] = chunk  # arc.py:69-71
        self.b1.pop(key, None)
        self.b2.pop(key, None)

    def remove(self, key: Key) -> None:
        if self.t1.pop(key, None) is None:  # arc.py:75-76
            self.t2.pop(key, None)

    def _ghost_hit(self, key: Key) -> None:
        if key in self.b1:  # arc.py:79-83
            step = max(1, len(self.b2) / len(self.b1))
            self.target = min(self.target + step, self.capacity)
            self.b1.move_to_end(key)
        elif key in self.b2:  # arc.py:84-88
            step = max(1, len(self.b1) / len(self.b2))
            self.target = max(self.target - step, 0)
            self.b2.move_to_end(key)

    def on_store_miss(self, keys: Sequence[Key], ctx: ReqContext) -> None:
        for key in reversed(list(keys)):  # arc.py:95-96
            self._ghost_hit(key)

    def touch(self, keys: Sequence[Key], ctx: ReqContext) -> None:
        for key in reversed(list(keys)):  # arc.py:100-114
            if key in self.t1:
                chunk = self.t1.pop(key)
                if chunk.is_ready:
                    self.t2[key] = chunk
                else:  # being stored: not a second use (arc.py:103-106)
                    self.t1[key] = chunk
            elif key in self.t2:
                self.t2.move_to_end(key)
            else:
                self._ghost_hit(key)

    def on_request_finished(self, key_groups: Sequence[Sequence[Key]],
                            insertion_only: set[Key], reused: set[Key],
                            ctx: ReqContext) -> None:
        for key in reversed(order_request_keys(key_groups, ctx)):  # arc.py:124-139
            if key in insertion_only:
                if key in self.t1:
                    self.t1.move_to_end(key)
                elif key in self.t2:
                    self.t2.move_to_end(key)
            elif key in reused:
                if key in self.t1:  # promoted whatever its readiness (arc.py:135-137)
                    self.t2[key] = self.t1.pop(key)
                elif key in self.t2:
                    self.t2.move_to_end(key)

    def clear(self) -> None:
        self.t1.clear()  # arc.py:143-147
        self.t2.clear()
        self.b1.clear()
        self.b2.clear()
        self.target = 0.0

    def evict(self, n: int, protected: set[Key]) -> list[tuple[Key, Chunk]] | None:
        if n == 0:
            return []  # arc.py:153-154

        def idle(items: Iterable[tuple[Key, Chunk]]) -> Iterator[tuple[Key, Chunk]]:
            return ((k, c) for k, c in items if c.ref_cnt == 0 and k not in protected)

        # arc.py:161-196: one forward cursor per list; an exhausted cursor stays so
        from_t1, from_t2 = idle(self.t1.items()), idle(self.t2.items())
        t1_size = len(self.t1)
        picked: list[tuple[Key, Chunk, bool]] = []
        for _ in range(n):
            got: tuple[Key, Chunk] | None = None
            in_t1 = False
            if t1_size >= int(self.target):
                got = next(from_t1, None)
                in_t1 = got is not None
            if got is None:
                got = next(from_t2, None)
            if got is None:
                got = next(from_t1, None)
                if got is None:
                    return None
                in_t1 = True
            if in_t1:
                t1_size -= 1
            picked.append((got[0], got[1], in_t1))
        out = []
        for key, chunk, in_t1 in picked:  # arc.py:199-207: evicted keys become ghosts
            if in_t1:
                del self.t1[key]
                self.b1[key] = None
            else:
                del self.t2[key]
                self.b2[key] = None
            out.append((key, chunk))
        for ghost in (self.b1, self.b2):  # arc.py:210-212
            for _ in range(len(ghost) - self.capacity):
                ghost.popitem(last=False)
        return out

    def keys(self) -> Iterable[Key]:
        return [*self.t1, *self.t2]

    def view(self) -> PolicyView:
        return {
            "t1": [[k[0], k[1]] for k in self.t1],
            "t2": [[k[0], k[1]] for k in self.t2],
            "b1": [[k[0], k[1]] for k in self.b1],
            "b2": [[k[0], k[1]] for k in self.b2],
            "target": self.target,
        }
