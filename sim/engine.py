"""The discrete simulation of one engine with KV offloading, one semantics.

Each request, at its arrival step (and again each step while deferred):
  1. the GPU prefix cache gives ``num_computed_tokens`` (``gpu_cache.longest_hit``);
  2. the CPU store's answers for the request's blocks become a ``model`` scenario, and
     ``model.evaluate`` with the chosen semantics gives the hit, the load plan and the
     invariant violations (every lookup, deferred ones included);
  3. a load pins its blocks for the load latency (``CpuStore.start_load``); the Mamba
     group's ``state_position`` names the saved state it brings;
  4. the prefill is split as the release splits it (``chunking.chunk_ends``); at each
     chunk end on a block boundary the state is cached on the GPU, and the connector
     stores what it stores (``_store`` below) -- completed ``store_latency`` steps later;
  5. the output is compared with the cold one through the recurrence (``ssm``).

Steps are ordered: lookups of step s see GPU blocks cached before step s (a Mamba hit
cannot use a block cached by another request in the same step,
single_type_kv_cache_manager.py:1125 (1068)) and CPU blocks whose store completed.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from model.evaluate import evaluate
from model.layout import cdiv
from model.scenario import Group, Scenario
from model.semantics import get_semantics
from sim.chunking import chunk_ends
from sim.config import EngineConfig
from sim.cpu_store import CpuStore
from sim.gpu_cache import GpuPrefixCache, longest_hit
from sim.metrics import Counters, RequestResult, Summary
from sim.ssm import ColdStates, Recurrence, Vector
from sim.states import ZERO, StateRecord
from sim.workload import Request

_LOOKUP, _CHUNK, _FINISH = 0, 1, 2
Progress = Callable[[int], None]


@dataclass
class _Live:
    """A request between its lookup and its finish (the engine's only per-request state)."""

    req: Request
    hashes: list[int]
    gpu_hit: int
    start_pos: int  # GPU hit + loaded tokens
    start_rec: StateRecord  # the Mamba state the computation starts from
    ends: list[int]
    clean: bool
    poison: int | None
    next_stored: int  # next offloaded block index to store (all groups alike here)
    # positions of this request's non-null Mamba blocks and the states they hold
    mamba_states: dict[int, StateRecord] = field(default_factory=dict)
    vectors: dict[int, Vector] = field(default_factory=dict)  # unclean chunk-end states


class Engine:
    def __init__(self, cfg: EngineConfig, semantics: str, *, keep_results: bool = False,
                 workload: str = "") -> None:
        self.cfg = cfg
        self.sem = get_semantics(semantics)
        self.workload = workload
        self.gpu = GpuPrefixCache(cfg.gpu_blocks)
        self.cpu = CpuStore(cfg.cpu_blocks)
        self.rec = Recurrence.make()
        self.cold = ColdStates(self.rec, cfg.block_size)
        # 0.24.0's Marconi admission split (scheduler.py:377); not in 0.23.0
        self.marconi = self.sem.base_version != "0.23.0"
        self.mamba_block_size = cfg.cache_mamba_block_size or cfg.block_size
        self.counters = Counters()
        self.results: list[RequestResult] | None = [] if keep_results else None
        self.violators: set[int] = set()  # requests whose lookup broke no-partial-state
        self._events: list[tuple[int, int, int, int, Any]] = []
        self._seq = 0
        self._cold_out: dict[tuple[int, int], tuple[int, ...]] = {}

    # -- scheduling ----------------------------------------------------------------

    def _push(self, step: int, kind: int, payload: Any) -> None:
        self._seq += 1
        # lookups of a step run before that step's chunk completions
        heapq.heappush(self._events, (step, 0 if kind == _LOOKUP else 1, self._seq, kind,
                                      payload))

    def _latency(self, bounds: tuple[int, int], rid: int, salt: int) -> int:
        lo, hi = bounds
        return lo + hash((self.cfg.seed, rid, salt)) % (hi - lo + 1)

    def submit(self, req: Request, step: int | None = None) -> None:
        self._push(req.arrival if step is None else step, _LOOKUP, req)

    def run(self, trace: Sequence[Request], progress: Progress | None = None) -> Summary:
        t0 = time.perf_counter()
        for r in trace:
            self.submit(r)
        self.drain(progress)
        return self.summary(time.perf_counter() - t0)

    def drain(self, progress: Progress | None = None) -> None:
        events = self._events
        while events:
            step, _, _, kind, payload = heapq.heappop(events)
            if kind == _LOOKUP:
                if self._lookup(payload, step) and progress is not None:
                    progress(self.counters.requests)
            elif kind == _CHUNK:
                self._chunk(payload[0], payload[1], step)
            else:
                self._finish(payload, step)

    def clear_gpu(self) -> None:
        self.gpu.clear()

    # -- one lookup ------------------------------------------------------------------

    def _scenario(self, req: Request, hashes: list[int], gpu_hit: int, now: int) -> Scenario:
        cfg = self.cfg
        bs = cfg.block_size
        entries = self.cpu.entries
        groups = []
        for g in range(cfg.num_groups):
            stored: set[int] = set()
            deferred: set[int] = set()
            loading: set[int] = set()
            for b in range(gpu_hit // bs, req.prompt_len // bs):
                e = entries.get((g, hashes[b]))
                if e is None:
                    continue
                (stored if e.ready_step <= now else deferred).add(b)
                if e.loading_until > now:
                    loading.add(b)
            mamba = g == cfg.mamba_group
            groups.append(Group(
                kind="mamba" if mamba else "full_attention", gpu_block_size=bs,
                stored=frozenset(stored), mamba_cache_mode="align" if mamba else None,
                deferred=frozenset(deferred), being_loaded=frozenset(loading)))
        return Scenario(self.sem.name, 1, req.prompt_len, gpu_hit, tuple(groups),
                        mamba_block_size=self.mamba_block_size)

    def _lookup(self, req: Request, now: int) -> bool:
        """Look the request up; False when deferred (it is looked up again next step)."""
        cfg, c = self.cfg, self.counters
        bs, mg = cfg.block_size, cfg.mamba_group
        P = req.prompt_len
        nblocks = (P + req.reply_len) // bs if req.chat else P // bs
        hashes = req.seq.hashes_upto(nblocks)
        hit = longest_hit(self.gpu, hashes, P, bs, cfg.attention_groups)
        G = hit.tokens
        out = evaluate(self._scenario(req, hashes, G, now))
        c.lookups += 1
        names = tuple(sorted({v.invariant for v in out.violations}))
        for name in names:
            c.violations[name] += 1
        if out.refused is None and out.hit_tokens is None:
            c.deferred += 1
            self._push(now + 1, _LOOKUP, req)
            return False
        c.refused += out.refused is not None
        c.assertions += out.assertion is not None
        ext = lookup_hit = out.hit_tokens or 0
        missing = False
        entries = self.cpu.entries
        # the connector touches the request's keys after the lookup (scheduler.py:679 (569))
        hit_blocks = (G + ext) // bs
        touch = [(g, hashes[b]) for g in range(cfg.num_groups)
                 for b in range(max(0, hit_blocks - 1) if g == mg else 0, P // bs)]
        self.cpu.touch(touch)

        start_pos, start_rec = G, hit.state or ZERO
        compute_at = now
        ucp = hit.uncached_common_prefix if self.marconi else 0
        next_stored = 0
        if ext:
            keys = [(ld.group, hashes[b]) for ld in out.loads for b in ld.blocks]
            if any(k not in entries or entries[k].ready_step > now for k in keys):
                # prepare_load asserts (cpu/manager.py:141 (131)); the simulation goes on
                # as if the request had no CPU hit
                c.missing_loads += 1
                missing = True
                ext = 0
            else:
                lat = self._latency(cfg.load_latency, req.rid, -1)
                self.cpu.start_load(keys, now + lat)
                compute_at = now + lat
                ucp = 0
                start_pos = G + ext
                # update_state_after_alloc: stores resume after the hit (scheduler.py:755 (645))
                next_stored = cdiv(G + ext, bs)
                load = next(ld for ld in out.loads if ld.group == mg)
                if load.state_position is not None:
                    rec = entries[(mg, hashes[load.state_position // bs - 1])].record
                    assert rec is not None
                    start_rec = rec
        c.requests += 1
        c.prompt_tokens += P
        c.gpu_hit_tokens += G
        c.cpu_hit_tokens += ext
        c.cpu_hit_requests += ext > 0
        c.recomputed_tokens += P - G - ext

        mismatch = start_rec.position != start_pos
        if mismatch:
            self.violators.add(req.rid)
        if mismatch != ("no-partial-state" in names) and ext:
            c.model_disagreements += 1
        clean = start_rec.clean and not mismatch
        poison = None if clean else (req.rid if mismatch else start_rec.poison)
        ends = chunk_ends(P, start_pos, bs, budget=cfg.max_num_batched_tokens,
                          long_prefill_threshold=cfg.long_prefill_token_threshold,
                          uncached_common_prefix=ucp)
        live = _Live(req, hashes, G, start_pos, start_rec, ends, clean, poison, next_stored)
        if G and not ext:
            live.mamba_states[G] = start_rec  # the GPU-hit state block is not null
        wrong_state = corrupted = False
        if not clean or cfg.verify_clean:
            wrong_state, corrupted = self._compute(live)
        if corrupted:
            c.corrupted += 1
            if poison == req.rid:
                c.corrupted_direct += 1
            else:
                c.corrupted_inherited += 1
        c.wrong_state += wrong_state
        for i in range(len(ends)):
            self._push(compute_at + i, _CHUNK, (live, i))
        self._push(compute_at + len(ends) - 1 + req.reply_len, _FINISH, live)
        if self.results is not None:
            self.results.append(RequestResult(req.rid, P, G, ext, names, wrong_state,
                                              corrupted, poison, lookup_hit, missing))
        return True

    def _compute(self, live: _Live) -> tuple[bool, bool]:
        """Run the recurrence from the start state; (wrong state, corrupted output)."""
        req, bs, rec = live.req, self.cfg.block_size, self.rec
        tokens, hashes = req.tokens, live.hashes
        s = live.start_rec
        v = s.vector if s.vector is not None else self.cold.at(tokens, hashes, s.position)
        assert s.clean or s.vector is not None
        pos = live.start_pos
        if pos % bs == 0 and pos:
            live.vectors[pos] = v
        for c in live.ends:
            v = rec.advance(v, tokens, pos, c, bs)
            pos = c
            if c % bs == 0:
                live.vectors[c] = v
        cold = self.cold.at(tokens, hashes, req.prompt_len)
        key = (id(req.seq), req.prompt_len)
        cold_out = self._cold_out.get(key)
        if cold_out is None:
            cold_out = rec.greedy(cold, self.cfg.check_tokens)
            if len(self._cold_out) > 100_000:
                self._cold_out.clear()
            self._cold_out[key] = cold_out
        wrong = not np.array_equal(v, cold)
        corrupted = rec.greedy(v, self.cfg.check_tokens) != cold_out
        if live.clean and (wrong or corrupted):
            raise AssertionError(f"request {req.rid}: a clean path diverged from cold")
        return wrong, corrupted

    def _record(self, live: _Live, pos: int) -> StateRecord:
        if live.clean:
            return StateRecord(pos)
        return StateRecord(pos, False, live.vectors[pos], live.poison)

    # -- effects of a scheduled chunk ----------------------------------------------------

    def _chunk(self, live: _Live, i: int, now: int) -> None:
        cfg = self.cfg
        bs, mg = cfg.block_size, cfg.mamba_group
        end = live.ends[i]
        prev = live.ends[i - 1] if i else live.gpu_hit
        hashes = live.hashes
        for g in range(cfg.attention_groups):
            for b in range(prev // bs, end // bs):
                self.gpu.insert((g, hashes[b]), None)
        if i == 0 and live.start_pos != live.gpu_hit and live.start_pos % bs == 0:
            # the loaded state block is hashed once the load completes
            rec = live.start_rec
            if rec.position != live.start_pos:
                rec = self._record(live, live.start_pos)
            self.gpu.insert((mg, hashes[live.start_pos // bs - 1]), rec)
        if end % bs == 0:
            rec = self._record(live, end)
            live.mamba_states[end] = rec
            self.gpu.insert((mg, hashes[end // bs - 1]), rec)
        self._store(live, min(end, live.req.prompt_len), now)

    def _store(self, live: _Live, upto: int, now: int) -> None:
        """``_build_store_jobs`` (scheduler.py:831 (721)) for one request and step.

        Only prompt blocks are stored (offload_prompt_only, default True,
        kv_offload/base.py:470 (397); clamp at scheduler.py:855 (745)). Per group, blocks
        from ``next_stored_block_idx`` up to the last full block; a block whose GPU block
        id is 0 (null) is skipped (scheduler.py:892 (779)): for Mamba in align mode only
        blocks holding a saved state are not null -- the chunk-end states and the
        GPU-hit state. If the store cannot evict enough the index does not advance and
        the blocks are offered again later (scheduler.py:911-916 (798-803)).
        """
        cfg = self.cfg
        bs, mg = cfg.block_size, cfg.mamba_group
        nb = upto // bs
        start = live.next_stored
        if nb <= start:
            return
        hashes = live.hashes
        items: list[tuple[tuple[int, int], StateRecord | None]] = [
            ((g, hashes[b]), None) for g in range(cfg.attention_groups) for b in range(start, nb)
        ]
        for pos, rec in live.mamba_states.items():
            b = pos // bs - 1
            if start <= b < nb:
                items.append(((mg, hashes[b]), rec))
        if items:
            ready = now + self._latency(cfg.store_latency, live.req.rid, nb)
            if not self.cpu.prepare_store(items, now, ready):
                return
        live.next_stored = nb

    def _finish(self, live: _Live, now: int) -> None:
        cfg = self.cfg
        bs, mg = cfg.block_size, cfg.mamba_group
        req = live.req
        self._store(live, req.prompt_len, now)  # the store is offered again each step
        if not (req.chat and live.clean):
            # an unclean request decodes other tokens than the trace resends: its
            # decode-phase blocks are never looked up again
            return
        last = req.prompt_len + req.reply_len - 1  # the last sampled token is not computed
        hashes = live.hashes
        for g in range(cfg.attention_groups):
            for b in range(req.prompt_len // bs, last // bs):
                self.gpu.insert((g, hashes[b]), None)
        # decode runs one token per step, so every block boundary is a step end and its
        # state is saved and cached (mamba_utils.py:716 (678))
        for pos in range((req.prompt_len // bs + 1) * bs, last + 1, bs):
            self.gpu.insert((mg, hashes[pos // bs - 1]), StateRecord(pos))

    # -- the result ----------------------------------------------------------------------

    def summary(self, wall_s: float) -> Summary:
        c = self.counters
        return Summary(
            semantics=self.sem.name, workload=self.workload, requests=c.requests,
            lookups=c.lookups, deferred=c.deferred, refused=c.refused,
            assertions=c.assertions, missing_loads=c.missing_loads,
            cpu_hit_requests=c.cpu_hit_requests, prompt_tokens=c.prompt_tokens,
            gpu_hit_tokens=c.gpu_hit_tokens, cpu_hit_tokens=c.cpu_hit_tokens,
            recomputed_tokens=c.recomputed_tokens, violations=dict(c.violations),
            wrong_state=c.wrong_state, corrupted=c.corrupted,
            corrupted_direct=c.corrupted_direct, corrupted_inherited=c.corrupted_inherited,
            model_disagreements=c.model_disagreements,
            cpu_stored_blocks=self.cpu.stored_blocks, cpu_evictions=self.cpu.evictions,
            cpu_failed_stores=self.cpu.failed_stores, gpu_evictions=self.gpu.evictions,
            wall_s=wall_s)
