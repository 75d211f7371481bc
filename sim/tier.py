"""vLLM 0.33.0's CPU tier: ``CPUOffloadingManager`` (``vllm/v1/kv_offload/cpu/manager.py``),
written anew, with its LRU (``sim.tier_lru``) or ARC (``sim.tier_arc``) policy.

Capacity is counted in chunks (one key = one chunk of ``blocks_per_chunk`` blocks of one
group, cpu/spec.py:119-123). A stored chunk is not ready (ref_cnt -1) until its store
completes; loads pin it (ref_cnt > 0); only chunks at ref_cnt 0 are evictable, and
``prepare_store`` never evicts a key of its own offer. Slots come from a pool: fresh ids
first, then the free list, last freed first (manager.py:100-120). The manager also keeps
what each request saw, inserted and reused (manager.py:35-46, :150-189) and tells the
policy at the request's end (manager.py:421-448); with ``store_threshold`` >= 2 a key is
stored only once it has been offered that often (manager.py:93-96, :129-148, :282-291).
Every step below names the 0.33.0 line it follows; ``vllm_ref`` marks assertion errors
where vLLM asserts.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from sim.tier_arc import ArcPolicy
from sim.tier_context import Key, ReqContext, RequestAccess, key_group
from sim.tier_lru import LruPolicy
from sim.tier_policy import Chunk, Policy, PolicyView

POLICIES: dict[str, type[Policy]] = {"lru": LruPolicy, "arc": ArcPolicy}  # factory.py:86-91


class Answer(Enum):
    """``LookupResult`` (base.py:121-127); the CPU tier never answers RETRY."""

    MISS = "MISS"
    HIT = "HIT"
    HIT_PENDING = "HIT_PENDING"


class OffloadPolicy(Enum):
    """``OffloadPolicy`` (base.py:130-136): what the connector stores for a request.
    CHUNK_LEVEL skips the chunks a load brought (scheduler.py:1468-1472); REQUEST_LEVEL
    stores every chunk, hits included. The CPU tier always asks CHUNK_LEVEL
    (manager.py:193-196 returns a default ``RequestOffloadingContext``, base.py:139-141)."""

    CHUNK_LEVEL = "chunk_level"
    REQUEST_LEVEL = "request_level"


@dataclass(frozen=True)
class TierConfig:
    num_chunks: int
    policy: str = "lru"  # cpu/spec.py:142 extra_config "eviction_policy"
    # cpu/spec.py:85/160: extra_config "store_threshold"; < 2 stores every offer
    store_threshold: int = 0
    max_tracker_size: int = 64_000  # cpu/spec.py:163

    def __post_init__(self) -> None:
        if self.num_chunks < 0:
            raise ValueError(f"num_chunks: must be >= 0, got {self.num_chunks}")
        if self.policy not in POLICIES:
            raise ValueError(f"policy: unknown {self.policy!r} (known: {', '.join(POLICIES)})")
        if self.max_tracker_size < 1:
            raise ValueError(f"max_tracker_size: must be >= 1, got {self.max_tracker_size}")


@dataclass(frozen=True)
class StoreOutput:
    """``PrepareStoreOutput`` (base.py:159-163): the keys to write, the slots they take
    (``CPULoadStoreSpec``), and the keys evicted to make room."""

    keys_to_store: tuple[Key, ...]
    chunk_ids: tuple[int, ...]
    evicted: tuple[Key, ...]


class TierAssertion(AssertionError):
    """Where vLLM's manager asserts (a caller broke its contract)."""


@dataclass(frozen=True)
class TierView:
    """The tier's whole state, for the cross-check: each held key with its ref_cnt and
    slot, the slot pool, the counters, and the policy's order state."""

    held: tuple[tuple[int, int, int, int], ...]  # (hash, group, ref_cnt, chunk_id)
    free_list: tuple[int, ...]
    allocated: int
    evictable: int
    write_pending: int
    policy: PolicyView


class Tier:
    def __init__(self, cfg: TierConfig) -> None:
        self.cfg = cfg
        self.policy: Policy = POLICIES[cfg.policy](cfg.num_chunks)  # manager.py:78-81
        self.num_allocated = 0  # manager.py:75
        self.free_list: list[int] = []  # manager.py:76
        self.num_evictable = 0  # manager.py:83 (ref_cnt 0 chunks)
        self.num_write_pending = 0  # manager.py:85 (ref_cnt -1 chunks)
        self.generation = 0  # manager.py:91
        # manager.py:93-96: offer counts, least recent first, only with a threshold
        self.counts: OrderedDict[Key, int] | None = (
            OrderedDict() if cfg.store_threshold >= 2 else None)
        # observability (not vLLM state)
        self.evictions = 0
        self.failed_stores = 0
        self.stored_chunks = 0

    # -- the slot pool ---------------------------------------------------------------------

    def num_free(self) -> int:
        return len(self.free_list) + self.cfg.num_chunks - self.num_allocated  # :100-101

    def _allocate(self, n: int) -> list[Chunk]:
        fresh = min(n, self.cfg.num_chunks - self.num_allocated)  # manager.py:103-117
        out = [Chunk(self.num_allocated + i) for i in range(fresh)]
        self.num_allocated += fresh
        out += [Chunk(self.free_list.pop()) for _ in range(n - fresh)]
        return out

    # -- per-request records ---------------------------------------------------------------

    def _access(self, ctx: ReqContext) -> RequestAccess:
        # manager.py:150-161: a record per request and cache generation, made on first use
        if ctx.access is None or ctx.access.generation != self.generation:
            ctx.access = RequestAccess(self.generation)
        return ctx.access

    def _record(self, keys: Sequence[Key], ctx: ReqContext,
                reused: Sequence[Key] = ()) -> None:
        # manager.py:163-189
        acc = self._access(ctx)
        new: list[Key] = []
        for key in keys:
            if key in acc.seen:
                continue
            if acc.finished:
                raise TierAssertion("New cache keys observed after request finalization"
                                    " (vllm_ref cpu/manager.py:175)")
            acc.key_groups.setdefault(key_group(key), []).append(key)
            acc.seen.add(key)
            new.append(key)
        if new:
            self.policy.on_request_access(new, ctx)
        acc.reused.update(k for k in reused if k not in acc.inserted)

    def _count_offers(self, keys: Sequence[Key]) -> None:
        # manager.py:129-148: count each offer; a new key may push out the least recent
        # key that this offer did not repeat
        counts = self.counts
        assert counts is not None
        repeated: set[Key] = set()
        for key in keys:
            if key in counts:
                counts.move_to_end(key)
                counts[key] += 1
                repeated.add(key)
        unprotected = len(counts) - len(repeated)
        for key in keys:
            if key in counts:
                continue
            if len(counts) >= self.cfg.max_tracker_size:
                if unprotected == 0:
                    continue
                counts.popitem(last=False)
                unprotected -= 1
            counts[key] = 1

    # -- the OffloadingManager interface ---------------------------------------------------

    def on_new_request(self, ctx: ReqContext) -> OffloadPolicy:
        self._access(ctx)  # manager.py:193-196
        return OffloadPolicy.CHUNK_LEVEL

    def lookup(self, key: Key) -> Answer:
        chunk = self.policy.get(key)  # manager.py:198-205
        if chunk is None:
            return Answer.MISS
        return Answer.HIT if chunk.is_ready else Answer.HIT_PENDING

    def prepare_load(self, keys: Sequence[Key], ctx: ReqContext) -> tuple[int, ...]:
        """Pins the keys (each occurrence once more) and returns their slots
        (manager.py:213-241)."""
        chunks: list[Chunk] = []
        for key in keys:
            chunk = self.policy.get(key)
            if chunk is None:
                raise TierAssertion(f"Chunk {key!r} not found in cache"
                                    " (vllm_ref cpu/manager.py:231)")
            if not chunk.is_ready:
                raise TierAssertion(f"Chunk {key!r} is not ready for reading"
                                    " (vllm_ref cpu/manager.py:232)")
            if chunk.ref_cnt == 0:  # manager.py:233-236
                self.policy.mark_non_evictable(key)
                self.num_evictable -= 1
            chunk.ref_cnt += 1
            chunks.append(chunk)
        self._record(keys, ctx, reused=keys)  # manager.py:239-240
        return tuple(c.chunk_id for c in chunks)

    def touch(self, keys: Sequence[Key], ctx: ReqContext) -> None:
        self.policy.touch(keys, ctx)  # manager.py:243-245

    def complete_load(self, keys: Sequence[Key], ctx: ReqContext) -> None:
        for key in keys:  # manager.py:247-258
            chunk = self.policy.get(key)
            if chunk is None:
                raise TierAssertion(f"Chunk {key!r} not found (vllm_ref cpu/manager.py:253)")
            if chunk.ref_cnt <= 0:
                raise TierAssertion(f"Chunk {key!r} ref_cnt is already 0"
                                    " (vllm_ref cpu/manager.py:254)")
            chunk.ref_cnt -= 1
            if chunk.ref_cnt == 0:
                self.num_evictable += 1
                self.policy.mark_evictable(key)

    def prepare_store(self, keys: Sequence[Key], ctx: ReqContext) -> StoreOutput | None:
        """None: not enough idle chunks to evict (the connector offers again later)."""
        keys = list(keys)
        if self.counts is not None:
            self._count_offers(keys)  # manager.py:267-268
        # manager.py:272-280: new keys are candidates; ready held keys are reuses; keys
        # being stored are neither
        to_store: list[Key] = []
        ready: list[Key] = []
        for key in keys:
            chunk = self.policy.get(key)
            if chunk is None:
                to_store.append(key)
            elif chunk.is_ready:
                ready.append(key)
        if self.counts is not None:  # manager.py:282-291
            counts = self.counts
            to_store = [k for k in to_store if counts.get(k, 0) >= self.cfg.store_threshold]
        acc = self._access(ctx)
        misses = [k for k in to_store if k not in acc.store_misses]  # manager.py:293-301
        if misses:
            self.policy.on_store_miss(misses, ctx)
            acc.store_misses.update(misses)
        recorded = set(to_store) | set(ready)  # manager.py:303-311, before any failure
        self._record([k for k in keys if k in recorded], ctx, reused=ready)
        if not to_store:  # manager.py:313-318
            return StoreOutput((), (), ())
        need = len(to_store) - self.num_free()  # manager.py:321
        evicted: list[Key] = []
        if need > 0:
            if need > self.num_evictable:  # manager.py:325-327
                self.failed_stores += 1
                return None
            victims = self.policy.evict(need, set(keys))  # manager.py:333-336
            if victims is None:
                self.failed_stores += 1
                return None
            self.num_evictable -= len(victims)  # manager.py:339-344
            for key, chunk in victims:
                self.free_list.append(chunk.chunk_id)
                evicted.append(key)
            self.evictions += len(victims)
        chunks = self._allocate(len(to_store))  # manager.py:355-358
        for key, chunk in zip(to_store, chunks, strict=True):  # manager.py:360-363
            self.policy.insert(key, chunk, ctx)
        self.num_write_pending += len(to_store)
        acc.inserted.update(to_store)
        self.stored_chunks += len(to_store)
        return StoreOutput(tuple(to_store), tuple(c.chunk_id for c in chunks), tuple(evicted))

    def complete_store(self, keys: Sequence[Key], ctx: ReqContext, success: bool = True) -> None:
        for key in keys:  # manager.py:384-400: only chunks still being written change
            chunk = self.policy.get(key)
            if chunk is None or chunk.is_ready:
                continue
            self.num_write_pending -= 1
            if success:
                chunk.ref_cnt = 0
                self.num_evictable += 1
                self.policy.mark_evictable(key)
            else:
                self.policy.remove(key)
                self.free_list.append(chunk.chunk_id)

    def on_request_finished(self, ctx: ReqContext) -> None:
        acc = ctx.access  # manager.py:421-448: once, and only for this generation
        if acc is None or acc.generation != self.generation or acc.finished:
            return
        acc.finished = True
        groups: list[tuple[Key, ...]] = []
        for g in sorted(acc.key_groups):
            keys = acc.key_groups[g]
            pos = {k: p for k in keys if (p := ctx.position(k)) is not None}
            if len(pos) == len(keys):
                keys = sorted(keys, key=pos.__getitem__)
            groups.append(tuple(keys))
        self.policy.on_request_finished(groups, acc.inserted - acc.reused, acc.reused, ctx)

    def reset(self) -> None:
        self.policy.clear()  # manager.py:450-463: every chunk, whatever its ref_cnt
        self.generation += 1
        self.num_evictable = 0
        self.num_write_pending = 0
        self.free_list.clear()
        self.num_allocated = 0

    # -- views -----------------------------------------------------------------------------

    def held(self) -> dict[Key, Chunk]:
        return {k: c for k in self.policy.keys() if (c := self.policy.get(k)) is not None}

    def view(self) -> TierView:
        return TierView(
            held=tuple(sorted((k[0], k[1], c.ref_cnt, c.chunk_id)
                              for k, c in self.held().items())),
            free_list=tuple(self.free_list), allocated=self.num_allocated,
            evictable=self.num_evictable, write_pending=self.num_write_pending,
            policy=self.policy.view())
