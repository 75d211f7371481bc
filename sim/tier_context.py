"""What a request carries into vLLM 0.33.0's CPU tier: its ``ReqContext``.

The tier's keys, its per-request context, and the one ordering helper both eviction
policies share. Line numbers are vLLM 0.33.0's (``vllm/v1/kv_offload/...``).

A key is ``(block hash, group)``. vLLM packs it into bytes, the hash followed by the
group as 4 big-endian bytes (base.py:30-32, ``make_offload_key``); for non-negative
hashes of one fixed width (every real hash has the same width), tuple order equals the
order of those bytes, which is what the LRU policy breaks rank ties by (lru.py:70-78,
heap entries ``(rank, key)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

Key = tuple[int, int]


def key_group(key: Key) -> int:
    """``get_offload_group_idx`` (base.py:40-42)."""
    return key[1]


@dataclass
class RequestAccess:
    """The manager's per-request record (cpu/manager.py:35-46, ``_RequestCacheAccess``):
    keys seen in first-seen order per group, which it inserted, which it reused, which
    store misses the policy was told about, and whether it was finalised."""

    generation: int
    key_groups: dict[int, list[Key]] = field(default_factory=dict)
    seen: set[Key] = field(default_factory=set)
    inserted: set[Key] = field(default_factory=set)
    reused: set[Key] = field(default_factory=set)
    store_misses: set[Key] = field(default_factory=set)
    finished: bool = False


@dataclass
class ReqContext:
    """``ReqContext`` (base.py:91-118): the request id, the end-token position the
    scheduler recorded for each key (``set_offload_key_position``, scheduler.py:426 and
    :1065), and the per-request state the manager and the LRU policy keep in it
    (``set_state`` / ``get_state`` by type, base.py:108-112)."""

    req_id: str
    positions: dict[Key, int] = field(default_factory=dict)
    access: RequestAccess | None = None  # cpu/manager.py:150-161
    lru_rank: tuple[int, int] | None = None  # (policy generation, rank), lru.py:19-23

    def set_position(self, key: Key, end_token: int) -> None:
        self.positions[key] = end_token

    def position(self, key: Key) -> int | None:
        return self.positions.get(key)


def order_request_keys(key_groups: Sequence[Sequence[Key]], ctx: ReqContext) -> list[Key]:
    """One head-to-tail order over all groups (cpu/policies/base.py:10-22): the groups
    concatenated, then a stable sort by position when every key has one."""
    keys = [k for group in key_groups for k in group]
    positions = {k: p for k in keys if (p := ctx.position(k)) is not None}
    if len(positions) == len(keys):
        keys.sort(key=positions.__getitem__)
    return keys
