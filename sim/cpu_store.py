"""The CPU offload store: ``CPUOffloadingManager`` with the LRU policy, in steps.

Keys are (group, block hash), as ``make_offload_key`` packs them
(kv_offload/base.py:36 (33)).
A stored block is written asynchronously: ``prepare_store`` inserts it not ready
(BlockStatus ref_cnt -1, cpu/policies/base.py:25) and ``lookup`` answers None for it
(cpu/manager.py:127 (117)) until ``complete_store`` (offloading/scheduler.py:1123
(972)). Loads pin blocks (ref_cnt > 0) until they complete, and the connector delays a
request whose hit blocks are being loaded (offloading/scheduler.py:590 (491)).
Eviction takes the least recently used ready, unpinned blocks and fails when there
are not enough (cpu/policies/lru.py:55, cpu/manager.py prepare_store).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sim.states import StateRecord

Key = tuple[int, int]


@dataclass
class Entry:
    ready_step: int  # lookups at this step or later see the block as stored
    record: StateRecord | None  # Mamba groups: the saved state; attention: None
    loading_until: int = -1  # a load reads the block until this step


@dataclass
class CpuStore:
    capacity: int
    entries: OrderedDict[Key, Entry] = field(default_factory=OrderedDict)
    evictions: int = 0
    stored_blocks: int = 0
    failed_stores: int = 0

    def answer(self, key: Key, now: int) -> bool | None:
        e = self.entries.get(key)
        if e is None:
            return False
        return True if e.ready_step <= now else None

    def touch(self, keys: Sequence[Key]) -> None:
        # LRUCachePolicy.touch walks the keys in reverse (cpu/policies/lru.py:42)
        entries = self.entries
        for key in reversed(keys):
            if key in entries:
                entries.move_to_end(key)

    def prepare_store(self, items: Sequence[tuple[Key, StateRecord | None]], now: int,
                      ready_step: int) -> bool:
        """Store the items not stored yet; False if eviction cannot make room."""
        new = [(k, r) for k, r in items if k not in self.entries]
        need = len(self.entries) + len(new) - self.capacity
        if need > 0:
            protected = {k for k, _ in items}
            victims = []
            for k, e in self.entries.items():
                if k in protected or e.ready_step > now or e.loading_until > now:
                    continue
                victims.append(k)
                if len(victims) == need:
                    break
            if len(victims) < need:
                self.failed_stores += 1
                return False
            for k in victims:
                del self.entries[k]
            self.evictions += len(victims)
        for k, r in new:
            self.entries[k] = Entry(ready_step, r)
        self.stored_blocks += len(new)
        return True

    def start_load(self, keys: Iterable[Key], until: int) -> None:
        # a completed load marks the block evictable again at the MRU end (lru.py)
        for k in keys:
            e = self.entries[k]
            e.loading_until = max(e.loading_until, until)
            self.entries.move_to_end(k)
