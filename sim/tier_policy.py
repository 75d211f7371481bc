"""The contract between vLLM 0.33.0's CPU tier and its eviction policy.

``Chunk`` is ``ChunkStatus`` (cpu/policies/base.py:25-45): a reference count, -1 while
the store writing it is in flight (not ready), 0 when evictable, > 0 while loads read
it, and the CPU slot it occupies. ``Policy`` is ``CachePolicy`` (base.py:48-160): the
policy owns the chunks (``get``) and decides eviction; the manager (``sim.tier``) owns
reference counts and the slot pool. Line numbers are vLLM 0.33.0's
(``vllm/v1/kv_offload/cpu/policies/``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sim.tier_context import Key, ReqContext

# what a policy reports of its state for the cross-check: JSON-able, deterministic
PolicyView = dict[str, object]


@dataclass
class Chunk:
    chunk_id: int
    ref_cnt: int = -1  # base.py:38-39: a new chunk is not ready

    @property
    def is_ready(self) -> bool:
        return self.ref_cnt >= 0  # base.py:42-45


class Policy(ABC):
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity  # base.py:55-56 (cache_capacity = num_chunks)

    @abstractmethod
    def get(self, key: Key) -> Chunk | None: ...

    @abstractmethod
    def insert(self, key: Key, chunk: Chunk, ctx: ReqContext) -> None: ...

    @abstractmethod
    def remove(self, key: Key) -> None: ...

    @abstractmethod
    def touch(self, keys: Sequence[Key], ctx: ReqContext) -> None: ...

    def on_store_miss(self, keys: Sequence[Key], ctx: ReqContext) -> None:
        self.touch(keys, ctx)  # base.py:85-94: the default is a touch

    def on_request_access(self, keys: Sequence[Key], ctx: ReqContext) -> None:
        return  # base.py:96-107: the default ignores first accesses

    def on_request_finished(self, key_groups: Sequence[Sequence[Key]],
                            insertion_only: set[Key], reused: set[Key],
                            ctx: ReqContext) -> None:
        for keys in key_groups:  # base.py:129-131: one touch per group
            self.touch(keys, ctx)

    @abstractmethod
    def evict(self, n: int, protected: set[Key]) -> list[tuple[Key, Chunk]] | None:
        """Exactly ``n`` idle chunks outside ``protected``, or None and no change
        (base.py:133-145)."""

    @abstractmethod
    def clear(self) -> None: ...

    def mark_evictable(self, key: Key) -> None:
        return  # base.py:154-156

    def mark_non_evictable(self, key: Key) -> None:
        return  # base.py:158-160

    @abstractmethod
    def view(self) -> PolicyView:
        """The policy's order state (for the cross-check and for debugging)."""

    @abstractmethod
    def keys(self) -> Iterable[Key]:
        """Every key the policy holds a chunk for."""
