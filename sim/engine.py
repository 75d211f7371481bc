"""The discrete simulation of one engine with KV offloading, under one semantics.

Time advances in engine steps. Each step, as vLLM's ``Scheduler.schedule``
(v1/core/sched/scheduler.py) does:
  1. running requests first: every decoding request takes one token of the step's
     ``max_num_batched_tokens``; prefilling requests get block-aligned chunks of what is
     left (``chunking.aligned_chunk``), in admission order;
  2. then waiting requests, in arrival order, while budget and seats
     (``max_num_seqs``) last: a new request gets its local hit from the GPU prefix cache
     and the connector's answer from ``model.evaluate`` on a scenario built from the CPU
     store (every lookup, deferred ones included, is evaluated and checked; the answer
     for a scenario seen in the last few lookups is reused). Deferred: it
     stays waiting and is looked up again next step. A CPU hit: its load pins the blocks
     for the load latency, then it waits for budget like any request. No hit: its first
     chunk is scheduled now, or it stays waiting (vLLM ``break``s) if the budget left is
     below a block-aligned chunk.
  3. each scheduled chunk caches its full blocks and, where it ends on a block boundary,
     the Mamba state; the connector offers the new blocks to the store (``_store``),
     which completes ``store_latency`` steps later.
Blocks cached in step s are seen by lookups from step s+1 on (a Mamba hit cannot use a
block cached by another request in the same step, single_type_kv_cache_manager.py:1125
(1068)). When the prefill ends, the output from the state the request actually had is
compared with the cold output through the recurrence (``ssm``).
"""

from __future__ import annotations

import heapq
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from model.evaluate import Outcome, evaluate
from model.layout import cdiv
from model.scenario import Group, Scenario
from model.semantics import get_semantics
from sim.chunking import aligned_chunk
from sim.config import EngineConfig
from sim.cpu_store import CpuStore
from sim.gpu_cache import GpuHit, GpuPrefixCache, longest_hit, per_group_hit
from sim.metrics import Counters, RequestResult, Summary
from sim.oracle import oracle_hit
from sim.ssm import ColdStates, Recurrence, Vector
from sim.states import ZERO, StateRecord
from sim.workload import Request

Progress = Callable[[int], None]
OUTCOME_CACHE = 64  # scenarios whose model answer an engine keeps (a few steps of lookups)
_ARRIVE, _FINISH = 0, 1


@dataclass
class _Live:
    """A request from its admission (or load) to its finish."""

    req: Request
    hashes: list[int]
    gpu_hit: int
    start_pos: int  # GPU hit plus loaded tokens
    start_rec: StateRecord  # the Mamba state the computation starts from
    clean: bool
    poison: int | None
    cause: str | None
    inherited: bool
    next_stored: int  # next offloaded block index to store (all groups alike here)
    pos: int = 0  # tokens computed so far
    result: tuple[int, tuple[str, ...], int, bool] = (0, (), 0, False)
    # positions of this request's non-null Mamba blocks and the states they hold
    mamba_states: dict[int, StateRecord] = field(default_factory=dict)
    vector: Vector | None = None  # the running state, tracked on unclean paths
    vectors: dict[int, Vector] = field(default_factory=dict)


@dataclass
class _Waiting:
    req: Request
    live: _Live | None = None  # set once a CPU hit's load is issued
    ready_at: int = 0  # the load completes at this step


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
        # 0.24.0 passes max(per-group hits) for hybrid models with a connector
        # (scheduler.py:675-701); 0.23.0 the converged hit (get_computed_blocks)
        self.per_group = self.sem.base_version != "0.23.0" and cfg.attention_groups > 0
        self.mamba_block_size = cfg.cache_mamba_block_size or cfg.block_size
        self.counters = Counters()
        self.results: list[RequestResult] | None = [] if keep_results else None
        self.step = 0
        self.steps = 0
        self._events: list[tuple[int, int, int, object]] = []
        self._seq = 0
        self._waiting: deque[_Waiting] = deque()
        self._prefilling: list[_Live] = []
        self._decoding = 0
        # the model's answer per scenario: ``evaluate`` is a pure function of it, and a
        # request deferred or waiting for budget is often looked up again on the same
        # store (bounded LRU; a miss only recomputes, it never changes a result)
        self._outcomes: OrderedDict[Scenario, Outcome] = OrderedDict()

    # -- driving ---------------------------------------------------------------------

    def _push(self, step: int, kind: int, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self._events, (step, kind, self._seq, payload))

    def _latency(self, bounds: tuple[int, int], rid: int, salt: int) -> int:
        lo, hi = bounds
        return lo + hash((self.cfg.seed, rid, salt)) % (hi - lo + 1)

    def submit(self, req: Request, step: int | None = None) -> None:
        self._push(req.arrival if step is None else step, _ARRIVE, req)

    def run(self, trace: Sequence[Request], progress: Progress | None = None) -> Summary:
        t0 = time.perf_counter()
        for r in trace:
            self.submit(r)
        self.drain(progress)
        return self.summary(time.perf_counter() - t0)

    def drain(self, progress: Progress | None = None) -> None:
        """Run steps until every submitted request has finished."""
        events = self._events
        while events or self._waiting or self._prefilling:
            if not (self._waiting or self._prefilling) and events[0][0] > self.step:
                self.step = events[0][0]  # idle: jump to the next event
            while events and events[0][0] <= self.step:
                _, kind, _, payload = heapq.heappop(events)
                if kind == _ARRIVE:
                    assert isinstance(payload, Request)
                    self._waiting.append(_Waiting(payload))
                else:
                    assert isinstance(payload, _Live)
                    self._finish(payload, self.step)
            before = self.counters.requests
            self._schedule(self.step)
            if progress is not None and self.counters.requests // 256 != before // 256:
                progress(self.counters.requests)
            self.step += 1
            self.steps += 1
        if progress is not None:
            progress(self.counters.requests)

    def clear_gpu(self) -> None:
        self.gpu.clear()

    # -- one step --------------------------------------------------------------------

    def _chunk_len(self, live: _Live, budget: int) -> int:
        cfg = self.cfg
        P = live.req.prompt_len
        n = P - live.pos
        if 0 < cfg.long_prefill_token_threshold < n:  # scheduler.py:797 (685)
            n = cfg.long_prefill_token_threshold
        return aligned_chunk(P, live.pos, min(n, budget), cfg.block_size)

    def _schedule(self, now: int) -> None:
        cfg = self.cfg
        budget = max(0, cfg.max_num_batched_tokens - self._decoding)
        for live in list(self._prefilling):
            if budget <= 0:
                break
            n = self._chunk_len(live, budget)
            if n:
                budget -= n
                self._run_chunk(live, live.pos + n, now)
        waiting = self._waiting
        kept: deque[_Waiting] = deque()
        while waiting and budget > 0:
            if len(self._prefilling) + self._decoding >= cfg.max_num_seqs:
                break
            w = waiting.popleft()
            if w.live is None:
                outcome, hit, hashes = self._look_up(w.req, now)
                if outcome is None:  # deferred: looked up again next step
                    kept.append(w)
                    continue
                live = self._admit(w.req, hashes, hit, outcome, now)
                if live.start_pos > hit.tokens:  # a CPU hit: wait for the load
                    w.live = live
                    w.ready_at = now + self._latency(cfg.load_latency, w.req.rid, -1)
                    self.cpu.start_load(self._load_keys(live, outcome), w.ready_at)
                    kept.append(w)
                    continue
            else:
                live = w.live
                if now < w.ready_at:
                    kept.append(w)
                    continue
            n = self._chunk_len(live, budget)
            if n == 0:  # not enough budget for a block-aligned chunk: vLLM breaks
                if w.live is None and live.start_pos == live.gpu_hit:
                    self._unadmit(live)
                kept.append(w)
                break
            self._start(live)
            budget -= n
            self._run_chunk(live, live.pos + n, now)
        self.counters.waiting_steps += len(kept) + len(waiting)
        kept.extend(waiting)
        self._waiting = kept

    # -- the lookup --------------------------------------------------------------------

    def _scenario(self, req: Request, hashes: list[int], gpu_hit: int, now: int) -> Scenario:
        cfg = self.cfg
        bs = cfg.block_size
        get = self.cpu.entries.get
        lo = gpu_hit // bs
        blocks = hashes[lo:req.prompt_len // bs]
        groups = []
        for g in range(cfg.num_groups):
            stored: list[int] = []
            deferred: list[int] = []
            loading: list[int] = []
            for b, h in enumerate(blocks, lo):
                e = get((g, h))
                if e is None:
                    continue
                (stored if e.ready_step <= now else deferred).append(b)
                if e.loading_until > now:
                    loading.append(b)
            mamba = g == cfg.mamba_group
            groups.append(Group(
                kind="mamba" if mamba else "full_attention", gpu_block_size=bs,
                stored=frozenset(stored), mamba_cache_mode="align" if mamba else None,
                deferred=frozenset(deferred), being_loaded=frozenset(loading)))
        return Scenario(self.sem.name, 1, req.prompt_len, gpu_hit, tuple(groups),
                        mamba_block_size=self.mamba_block_size)

    def _look_up(self, req: Request, now: int) -> tuple[Outcome | None, GpuHit, list[int]]:
        """The local hit and the connector's answer (None: deferred)."""
        cfg, c = self.cfg, self.counters
        bs = cfg.block_size
        P = req.prompt_len
        hashes = req.seq.hashes_upto((P + req.reply_len) // bs if req.chat else P // bs)
        if self.per_group:
            hit, min_attn = per_group_hit(self.gpu, hashes, P, bs, cfg.attention_groups)
        else:
            hit = longest_hit(self.gpu, hashes, P, bs, cfg.attention_groups)
            min_attn = hit.tokens
        scenario = self._scenario(req, hashes, hit.tokens, now)
        outcomes = self._outcomes
        out = outcomes.get(scenario)
        if out is None:
            out = outcomes[scenario] = evaluate(scenario)
            if len(outcomes) > OUTCOME_CACHE:
                outcomes.popitem(last=False)
        else:
            outcomes.move_to_end(scenario)
        c.lookups += 1
        for name in {v.invariant for v in out.violations}:
            c.violations[name] += 1
        if out.refused is None and out.hit_tokens is None:
            c.deferred += 1
            if out.lookup is not None and "being loaded" in out.lookup.reason:
                c.deferred_loading += 1
            self._touch(hashes, P, hit.tokens // bs)  # touched even when deferred
            return None, hit, hashes
        c.refused += out.refused is not None
        c.assertions += out.assertion is not None
        best, got = oracle_hit(scenario), out.hit_tokens or 0
        c.oracle_hit_tokens += best
        c.given_away_tokens += max(0, best - got)
        c.above_oracle += got > best
        if min_attn < hit.tokens:
            c.dirty_attention += 1  # attention blocks past their own hit (vLLM #46453)
        return out, hit, hashes

    def _touch(self, hashes: list[int], prompt_len: int, hit_blocks: int) -> None:
        """The connector's ``_touch`` after every lookup (scheduler.py:679 (569), :433):
        every key of attention groups, a Mamba group's keys from its last hit block."""
        cfg = self.cfg
        mg, nb = cfg.mamba_group, prompt_len // cfg.block_size
        self.cpu.touch([(g, hashes[b]) for g in range(cfg.num_groups)
                        for b in range(max(0, hit_blocks - 1) if g == mg else 0, nb)])

    def _load_keys(self, live: _Live, out: Outcome) -> list[tuple[int, int]]:
        return [(ld.group, live.hashes[b]) for ld in out.loads for b in ld.blocks]

    def _admit(self, req: Request, hashes: list[int], hit: GpuHit, out: Outcome,
               now: int) -> _Live:
        """Decide where the computation starts and from which state."""
        cfg, c = self.cfg, self.counters
        bs, mg = cfg.block_size, cfg.mamba_group
        P, G = req.prompt_len, hit.tokens
        names = tuple(sorted({v.invariant for v in out.violations}))
        ext = lookup_hit = out.hit_tokens or 0
        entries = self.cpu.entries
        self._touch(hashes, P, (G + ext) // bs)
        start_rec = hit.state or ZERO
        next_stored = 0
        missing = False
        if ext:
            keys = [(ld.group, hashes[b]) for ld in out.loads for b in ld.blocks]
            if any(k not in entries or entries[k].ready_step > now for k in keys):
                # prepare_load asserts (cpu/manager.py:141 (131)); the simulation goes on
                # as if the request had no CPU hit
                c.missing_loads += 1
                missing = True
                ext = 0
            else:
                # update_state_after_alloc: stores resume after the hit (scheduler.py:755
                # (645))
                next_stored = cdiv(G + ext, bs)
                load = next(ld for ld in out.loads if ld.group == mg)
                if load.state_position is not None:
                    rec = entries[(mg, hashes[load.state_position // bs - 1])].record
                    assert rec is not None
                    start_rec = rec
        start_pos = G + ext
        cause = None
        inherited = False
        poison = None
        if start_rec.position != start_pos:
            # a load: the state saved at another position (the model flags it); no load:
            # 0.24.0 hybrid passed the attention hit beyond the Mamba hit, the Mamba hit
            # block is dropped as skipped (single_type_kv_cache_manager.py:210-215) and the
            # worker starts from block (num_computed_tokens - 1) // block_size, a null or
            # fresh block (mamba_utils.py:708): the zero state stands in for its content
            cause = "no-partial-state" if ext else "local-hit-divergence"
            if not ext:
                start_rec = StateRecord(start_pos, False, self.rec.zero(), req.rid, cause)
            poison = req.rid
            if (cause == "no-partial-state") != ("no-partial-state" in names):
                c.model_disagreements += 1
        elif not start_rec.clean:
            cause, poison, inherited = start_rec.cause, start_rec.poison, True
        elif "no-partial-state" in names:
            c.model_disagreements += 1
        live = _Live(req, hashes, G, start_pos, start_rec, cause is None, poison, cause,
                     inherited, next_stored, pos=start_pos)
        live.result = (lookup_hit, names, ext, missing)
        if G and not ext and hit.state is not None and hit.state.position == G:
            live.mamba_states[G] = hit.state  # the GPU-hit state block is not null
        c.requests += 1
        c.prompt_tokens += P
        c.gpu_hit_tokens += G
        c.cpu_hit_tokens += ext
        c.cpu_hit_requests += ext > 0
        c.recomputed_tokens += P - G - ext
        return live

    def _unadmit(self, live: _Live) -> None:
        # the request was not scheduled: it will be looked up (and counted) again
        c, req = self.counters, live.req
        c.requests -= 1
        c.prompt_tokens -= req.prompt_len
        c.gpu_hit_tokens -= live.gpu_hit
        c.recomputed_tokens -= req.prompt_len - live.gpu_hit

    def _start(self, live: _Live) -> None:
        self._prefilling.append(live)
        if not live.clean or self.cfg.verify_clean:
            s = live.start_rec
            v = s.vector if s.vector is not None else self.cold.at(
                live.req.tokens, live.hashes, s.position)
            live.vector = v
            if live.start_pos % self.cfg.block_size == 0 and live.start_pos:
                live.vectors[live.start_pos] = v

    # -- a scheduled chunk -------------------------------------------------------------

    def _record(self, live: _Live, pos: int) -> StateRecord:
        if live.clean:
            return StateRecord(pos)
        return StateRecord(pos, False, live.vectors[pos], live.poison, live.cause)

    def _run_chunk(self, live: _Live, end: int, now: int) -> None:
        cfg = self.cfg
        bs, mg = cfg.block_size, cfg.mamba_group
        hashes = live.hashes
        first = live.pos == live.start_pos
        prev = live.gpu_hit if first else live.pos
        if live.vector is not None:
            live.vector = self.rec.advance(live.vector, live.req.tokens, live.pos, end, bs)
            if end % bs == 0:
                live.vectors[end] = live.vector
        live.pos = end
        self.gpu.insert_all([((g, h), None) for g in range(cfg.attention_groups)
                             for h in hashes[prev // bs:end // bs]])
        if first and live.start_pos != live.gpu_hit and live.start_pos % bs == 0:
            # the loaded state block is hashed once the load has completed
            rec = live.start_rec
            if rec.position != live.start_pos:
                rec = self._record(live, live.start_pos)
            self.gpu.insert((mg, hashes[live.start_pos // bs - 1]), rec)
        if end % bs == 0:
            rec = self._record(live, end)
            live.mamba_states[end] = rec
            self.gpu.insert((mg, hashes[end // bs - 1]), rec)
        self._store(live, end, now)
        if end == live.req.prompt_len:
            self._prefilling.remove(live)
            self._decoding += 1
            self._push(now + live.req.reply_len, _FINISH, live)
            self._judge(live)

    def _judge(self, live: _Live) -> None:
        """Compare the output with the cold one (only unclean paths can differ)."""
        c, req = self.counters, live.req
        wrong = corrupted = False
        if live.vector is not None:
            v = live.vector
            cold = self.cold.at(req.tokens, live.hashes, req.prompt_len)
            wrong = not np.array_equal(v, cold)
            # the same state gives the same greedy tokens: only a wrong state is generated
            # from (most of a run's cost otherwise)
            if wrong:
                tokens, margin = self.rec.greedy_margin(cold, self.cfg.check_tokens)
                # a state within float noise of the cold one, with every step's argmax
                # clear of it, gives the cold tokens (shown by a bound, not generated)
                corrupted = (not self.rec.surely_same_greedy(v, cold, margin)
                             and self.rec.greedy_differs(v, tokens))
            if live.clean and (wrong or corrupted):
                raise AssertionError(f"request {req.rid}: a clean path diverged from cold")
        c.wrong_state += wrong
        if corrupted:
            c.corrupted += 1
            if live.inherited:
                c.corrupted_inherited += 1
            elif live.cause == "no-partial-state":
                c.corrupted_direct += 1
            else:
                c.corrupted_divergence += 1
        if self.results is not None:
            lookup_hit, names, ext, missing = live.result
            self.results.append(RequestResult(
                req.rid, req.prompt_len, live.gpu_hit, ext, names, wrong, corrupted,
                live.poison, lookup_hit, missing, live.cause, live.inherited))

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
        nb = min(upto, live.req.prompt_len) // bs
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
        self._decoding -= 1
        self._store(live, req.prompt_len, now)  # the store is offered again each step
        last = req.prompt_len + req.reply_len - 1  # the last sampled token is not computed
        resent = req.chat and live.clean
        hashes = live.hashes

        def key(g: int, b: int) -> tuple[int, int]:
            # blocks of tokens that no later request sends (a reply that is not resent, or
            # one an unclean request decoded differently) still take GPU space
            return (g, hashes[b]) if resent else (g, hash(("decoded", req.rid, b)))

        self.gpu.insert_all([(key(g, b), None) for g in range(cfg.attention_groups)
                             for b in range(req.prompt_len // bs, last // bs)])
        # decode runs one token per step, so every block boundary is a step end and its
        # state is saved and cached (mamba_utils.py:716 (678))
        for pos in range((req.prompt_len // bs + 1) * bs, last + 1, bs):
            self.gpu.insert(key(mg, pos // bs - 1), StateRecord(pos))

    # -- the result ----------------------------------------------------------------------

    def summary(self, wall_s: float) -> Summary:
        c = self.counters
        return Summary(
            semantics=self.sem.name, workload=self.workload, requests=c.requests,
            lookups=c.lookups, deferred=c.deferred, deferred_loading=c.deferred_loading,
            refused=c.refused,
            assertions=c.assertions, missing_loads=c.missing_loads,
            cpu_hit_requests=c.cpu_hit_requests, prompt_tokens=c.prompt_tokens,
            gpu_hit_tokens=c.gpu_hit_tokens, cpu_hit_tokens=c.cpu_hit_tokens,
            recomputed_tokens=c.recomputed_tokens, violations=dict(c.violations),
            wrong_state=c.wrong_state, corrupted=c.corrupted,
            corrupted_direct=c.corrupted_direct, corrupted_inherited=c.corrupted_inherited,
            corrupted_divergence=c.corrupted_divergence, dirty_attention=c.dirty_attention,
            model_disagreements=c.model_disagreements, waiting_steps=c.waiting_steps,
            oracle_hit_tokens=c.oracle_hit_tokens, given_away_tokens=c.given_away_tokens,
            above_oracle=c.above_oracle,
            steps=self.steps,
            cpu_stored_blocks=self.cpu.stored_blocks, cpu_evictions=self.cpu.evictions,
            cpu_failed_stores=self.cpu.failed_stores, gpu_evictions=self.gpu.evictions,
            wall_s=wall_s)
