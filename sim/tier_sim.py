"""A workload through vLLM 0.33.0's CPU tier, request by request, under a chunked
semantics (``vllm-0.33.0`` and its fixes): which requests restore a Mamba state saved
past their hit (finding 001), and the hit tokens each semantics gets.

Per request, in arrival order (one request at a time; the GPU prefix cache is cold, so
every hit comes from the tier, as in finding 001's reproductions):

1. ``on_new_request``; the request's chunk keys get their end positions
   (scheduler.py:412-429); the tier answers ``lookup`` for every chunk of every group,
   and ``model.evaluate`` runs the semantics' lookup and load on those answers
   (``model.lookup_chunked``, ``model.load_chunked``);
2. a hit's keys are pinned and read (``prepare_load`` / ``complete_load``,
   scheduler.py:1474, :2293); a key the tier lacks is where vLLM asserts
   (cpu/manager.py:231): counted, and the request goes on without a hit;
3. the prefill runs in steps of ``step_tokens`` (a multiple of the scheduler block); in
   the step whose chunk retains it the connector offers the one Mamba state the KV-cache
   manager hands over (``sim.tier_store.retained_boundary``: the prompt's last token
   rounded down to the scheduler block, only where that state sits in a cacheable block;
   one ``prepare_store`` per Mamba group, built first, scheduler.py:2167-2168,
   :1569-1584), then the window group's new complete chunks
   (``sim.tier_store``); stores complete one step later (worker.py submits them at the
   next step's start);
4. at the end the store is offered once more, ``on_request_finished`` re-ranks the
   request's keys (scheduler.py:2176-2182), and the last stores complete.

The output can differ from the cold run when the restored Mamba state was saved at
another position than the hit's end (``no-partial-state``, the recurrent state then
already holds or lacks tokens: today's recurrent-state semantics), and when a chunk it
loads was stored by such a request past that request's hit (``inherited``: the content
was computed from the wrong state, so a positionally clean hit still restores it; the
taint passes on through every request that loads it); the hit tokens each semantics gets
are counted, so a fix's cost is the difference.

Checked request by request against the real engine on an H200 (three workloads of 240
requests, ``sim/gpu/results/tier-workload/``): hit, state, whether the output differs,
and every ``prepare_store`` call agree.

Preemption and resume (``run(..., preemptions=)``, ``sim.tier_preempt``): a preempted
request's in-flight stores complete (flushed), it keeps its ``ReqContext`` and is not
finished; resumed, it looks the tier up again over its prompt and the tokens it decoded,
loads, recomputes in steps (stores within the prompt, restarted at chunk 0) and finishes
as above. Its output can differ when either pass's load restored a wrong state or tainted
chunks (``TierRequestResult.differs``). A recompute past the prompt (resumed mid-decode)
offers the retained Mamba state only where a step ends at it or the load was exactly it.

Not modelled: concurrent requests (their interleaved stores and loads), the GPU prefix
cache, decode-phase states (``offload_prompt_only``), sliding-window blocks freed and
re-allocated before a refused store is retried, sparse store masks (every layout here
takes the dense path: ``check_dense``), and the scheduler's own splitting of a prefill
longer than ``step_tokens`` (the steps are taken as its chunks).
"""

from __future__ import annotations

import heapq
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from model.evaluate import Outcome, evaluate
from model.scenario import Group, Scenario
from model.semantics import get_semantics
from sim.tier import Answer, OffloadPolicy, StoreOutput, Tier, TierConfig
from sim.tier_context import Key, ReqContext
from sim.tier_layouts import TierLayout
from sim.tier_preempt import DECODE, PREFILL, Preemption, resume_index, with_output
from sim.tier_store import (
    StoreGroup,
    after_load,
    after_offer,
    boundary_offer,
    chunk_offer,
    offloadable_tokens,
    retained_boundary,
    storable_chunks,
)
from sim.workload import Request, TokenSeq

Progress = Callable[[int], None]
# a request's kv_transfer_params["max_load_tokens"] (None: uncapped); the workloads set
# none, so a caller that wants caps passes a seeded function of the request
LoadCap = Callable[[Request], int | None]
OUTCOME_CACHE = 256


def check_dense(layout: TierLayout) -> None:
    """The window group's store mask is dense (every chunk offered) when the connector's
    ``alignment_tokens`` (no full-attention group: the largest tokens per chunk,
    scheduler.py:196-204) is not a multiple of the window block
    (single_type_kv_cache_manager.py:1084-1091), or the window needs at least a segment
    of contiguous blocks (:1093-1116). Sparse masks are not modelled."""
    align = max(layout.tokens_per_chunk())
    bs = layout.window_block
    if align % bs != 0:
        return
    need = -(-(layout.window - 1) // bs)  # _contiguous_blocks_for_hit, :956-966
    if need >= align // bs:
        return
    raise ValueError(f"layout: {layout.name}'s window store mask is sparse (not modelled)")


@dataclass(frozen=True)
class TierSimConfig:
    layout: TierLayout
    tier: TierConfig
    step_tokens: int = 2048  # max_num_batched_tokens, rounded down to the scheduler block

    def __post_init__(self) -> None:
        if self.step_tokens < self.layout.scheduler_block:
            raise ValueError(f"step_tokens: must be >= the scheduler block "
                             f"{self.layout.scheduler_block}, got {self.step_tokens}")


@dataclass(frozen=True)
class TierRequestResult:
    rid: int
    prompt_tokens: int
    hit_tokens: int
    wrong_state: bool  # the restored Mamba state is not at the hit's end
    state_from: int | None  # where the restored state was saved (None: no state)
    missing_load: bool  # the load named a key the tier lacks (vLLM asserts)
    deferred: bool
    inherited: bool = False  # a loaded chunk was stored by a corrupted request
    # preemption (sim.tier_preempt): where ("prefill", "decode" or None), and the resumed
    # lookup's hit, wrong state, tainted load and load of a key the tier lacks
    preempted: str | None = None
    resume_hit: int = 0
    resume_wrong: bool = False
    resume_inherited: bool = False
    resume_missing: bool = False

    @property
    def resume_differs(self) -> bool:
        """The resumed pass restored a wrong state or tainted content."""
        return self.resume_wrong or self.resume_inherited

    @property
    def differs(self) -> bool:
        """The output can differ from the cold run: a wrong state, or tainted content,
        in the first pass or the resumed one."""
        return self.wrong_state or self.inherited or self.resume_differs


@dataclass(frozen=True)
class TierSummary:
    layout: str
    workload: str
    tier_chunks: int
    policy: str
    semantics: str
    requests: int
    prompt_tokens: int
    hit_requests: int
    hit_tokens: int
    corrupted: int  # wrong state or inherited (``TierRequestResult.differs``)
    missing_loads: int
    deferred: int
    refused: int
    evictions: int
    failed_stores: int
    stored_chunks: int
    wall_s: float
    inherited: int = 0  # of ``corrupted``: a clean load of chunks a corrupted request stored
    preempted: int = 0  # requests preempted and resumed (sim.tier_preempt)
    resume_hit_requests: int = 0  # of them, those whose resumed lookup hit
    resume_hit_tokens: int = 0  # their resumed hits' tokens (also in ``hit_tokens``)
    resume_corrupted: int = 0  # resumed lookups that restored a wrong state or tainted chunks
    preempted_in_prefill: int = 0  # of ``preempted``: mid-prefill (the rest mid-decode)

    @property
    def corrupted_rate(self) -> float:
        return self.corrupted / self.requests if self.requests else 0.0


@dataclass
class _Segment:
    """One lookup of a request (at arrival, or on resume) and its load."""

    hit: int = 0
    wrong: bool = False
    state_from: int | None = None
    missing: bool = False
    deferred: bool = False
    inherited: bool = False


@dataclass
class _Live:
    """A request while it runs (or waits preempted): its connector-side state."""

    req: Request
    ctx: ReqContext
    policy: OffloadPolicy
    cap: int | None
    seq: TokenSeq  # its tokens (prompt, then the output decoded before a preemption)
    total: int  # tokens it holds now: the prompt, plus those decoded when resumed
    keys: list[list[Key]] = field(default_factory=list)
    nxt: tuple[int, ...] = ()  # next_stored_chunk_idx per group
    storable: tuple[int, ...] = ()
    jobs: list[list[Key]] = field(default_factory=list)  # stores completing next step
    seg: _Segment = field(default_factory=_Segment)  # the current pass's lookup
    first: _Segment = field(default_factory=_Segment)
    resumed: _Segment | None = None
    preempted: str | None = None
    decoded: int = 0


class TierSim:
    def __init__(self, cfg: TierSimConfig, semantics: str,
                 load_cap: LoadCap | None = None, seed: int = 0) -> None:
        sem = get_semantics(semantics)
        if not sem.chunked:
            raise ValueError(f"semantics: {semantics} is not a chunked (0.33.0) semantics")
        check_dense(cfg.layout)
        self.cfg = cfg
        self.semantics = semantics
        self.load_cap = load_cap
        self.seed = seed  # the output tokens of a request resumed mid-decode
        self.tier = Tier(cfg.tier)
        lay = cfg.layout
        self.tpc = lay.tokens_per_chunk()
        self.groups = tuple(StoreGroup(t, cow_source=g < lay.mamba_groups)
                            for g, t in enumerate(self.tpc))
        self.empty = lay.groups()
        self.step = cfg.step_tokens // lay.scheduler_block * lay.scheduler_block
        self._outcomes: OrderedDict[Scenario, Outcome] = OrderedDict()
        self.results: list[TierRequestResult] = []
        self.refused = 0
        # keys whose stored content a corrupted request computed (from a wrong Mamba state
        # or from tainted chunks): a later load of one differs even at a clean position
        self.tainted: set[Key] = set()

    # -- one request -----------------------------------------------------------------------

    def _evaluate(self, s: Scenario) -> Outcome:
        out = self._outcomes.get(s)
        if out is None:
            out = self._outcomes[s] = evaluate(s)
            if len(self._outcomes) > OUTCOME_CACHE:
                self._outcomes.popitem(last=False)
        return out

    def _scenario(self, keys: Sequence[Sequence[Key]], prompt: int,
                  max_load_tokens: int | None = None) -> Scenario:
        groups: list[Group] = []
        for g, base in enumerate(self.empty):
            stored, pending = [], []
            for i, k in enumerate(keys[g]):
                a = self.tier.lookup(k)
                if a is Answer.HIT:
                    stored.append(i)
                elif a is Answer.HIT_PENDING:
                    pending.append(i)
            groups.append(Group(base.kind, base.gpu_block_size, frozenset(stored),
                                base.sliding_window, base.mamba_cache_mode,
                                pending=frozenset(pending)))
        return Scenario(self.semantics, 1, prompt, 0, tuple(groups),
                        max_load_tokens=max_load_tokens)

    def run_request(self, req: Request) -> TierRequestResult:
        """One request from arrival to finish, not preempted."""
        live = self._start(req)
        self._compute(live, live.seg.hit, req.prompt_len)
        return self._finish(live)

    def _keys(self, seq: TokenSeq, tokens: int) -> list[list[Key]]:
        """Each group's chunk keys over ``tokens`` tokens (scheduler.py:412-429)."""
        hb = self.cfg.layout.hash_block
        hashes = seq.hashes_upto(tokens // hb)
        return [[(hashes[(i + 1) * t // hb - 1], g) for i in range(tokens // t)]
                for g, t in enumerate(self.tpc)]

    def _start(self, req: Request) -> _Live:
        """Arrival: ``on_new_request`` and the first lookup and load."""
        ctx = ReqContext(f"req-{req.rid}")
        policy = self.tier.on_new_request(ctx)
        cap = None if self.load_cap is None else self.load_cap(req)
        live = _Live(req, ctx, policy, cap, req.seq, req.prompt_len)
        live.seg = self._lookup_and_load(live)
        live.first = live.seg
        return live

    def _lookup_and_load(self, live: _Live) -> _Segment:
        """The tier looked up over the request's ``total`` tokens (its keys' positions
        recorded first, scheduler.py:412-429), ``model.evaluate`` on its answers, and a
        hit's keys pinned and read (scheduler.py:1474, :2293)."""
        lay, tier, ctx = self.cfg.layout, self.tier, live.ctx
        keys = live.keys = self._keys(live.seq, live.total)
        for g, t in enumerate(self.tpc):  # update_offload_keys, scheduler.py:412-429
            for i, k in enumerate(keys[g]):
                ctx.set_position(k, (i + 1) * t)
        out = self._evaluate(self._scenario(keys, live.total, live.cap))
        self.refused += out.refused is not None
        seg = _Segment(deferred=out.refused is None and out.hit_tokens is None)
        hit = out.hit_tokens or 0
        if hit:
            # the chunked model names a key by the token it ends at (model/lookup_chunked.py)
            load = [keys[ld.group][end // self.tpc[ld.group] - 1]
                    for ld in out.loads for end in ld.blocks]
            if any(tier.lookup(k) is not Answer.HIT for k in load):
                seg.missing, hit = True, 0  # cpu/manager.py:231-232 asserts
            else:
                tier.prepare_load(load, ctx)  # scheduler.py:1474
                tier.complete_load(load, ctx)  # before the request computes
                states = [ld.state_position for ld in out.loads
                          if ld.group < lay.mamba_groups and ld.state_position is not None]
                seg.state_from = states[0] if states else None
                seg.wrong = any(v.invariant == "no-partial-state" for v in out.violations)
                seg.inherited = any(k in self.tainted for k in load)
        seg.hit = hit
        live.nxt = after_load(live.policy, (0,) * len(self.groups), self.groups, hit) \
            if hit else (0,) * len(self.groups)
        return seg

    def _boundary(self, live: _Live, start: int, end: int) -> int | None:
        """The retained Mamba boundary handed over in the step ``[start, end)``. A
        recompute past the prompt (resumed mid-decode) hands over only the certain ones:
        a step ending at it, or a load of exactly it (``retained_boundary``'s first two
        cases); the internal checkpoint of a chunk that crosses it while the request
        holds more tokens than its prompt is not modelled (no state offered: the tier
        usually holds it already from the request's first pass)."""
        lay, P = self.cfg.layout, live.req.prompt_len
        if live.total == P:
            return retained_boundary(P, live.seg.hit, start, end, lay.mamba_block,
                                     lay.scheduler_block)
        a = (P - 1) // lay.scheduler_block * lay.scheduler_block
        if a <= 0 or not start <= a <= end:
            return None
        if start == a:
            return a if live.seg.hit == a else None
        return a if end == a else None

    def _compute(self, live: _Live, pos: int, stop: int, max_steps: int | None = None) -> int:
        """Prefill steps from ``pos`` towards ``stop`` (at most ``max_steps``): each step
        completes the previous step's stores (worker.py submits them at the next step's
        start), offers the retained Mamba state, if any, then the window group's new
        complete chunks within the prompt (``offload_prompt_only``, scheduler.py:762-771).
        Returns where it stopped."""
        lay, ctx = self.cfg.layout, live.ctx
        P = live.req.prompt_len
        hb = lay.hash_block
        hashes = live.seq.hashes_upto(live.total // hb)
        taint_above = self._taint(live)
        steps = 0
        while pos < stop and (max_steps is None or steps < max_steps):
            end = min(stop, pos + self.step)
            self._complete(live)
            offloadable = offloadable_tokens(end, live.total, P)
            boundary = self._boundary(live, pos, end)
            if boundary is not None:
                for g in range(lay.mamba_groups):
                    if boundary_offer(self.groups[g], boundary, offloadable):
                        k = (hashes[boundary // hb - 1], g)
                        ctx.set_position(k, boundary)  # _make_boundary_key, :1056-1066
                        o = self._store([k], ctx, taint_above)
                        if o is not None and o.keys_to_store:
                            live.jobs.append(list(o.keys_to_store))
            live.storable = tuple(
                storable_chunks(gr, offloadable, P, len(live.keys[g]), len(live.keys[g]),
                                False) for g, gr in enumerate(self.groups))
            self._offer(live, taint_above)
            pos = end
            steps += 1
        return pos

    def _complete(self, live: _Live) -> None:
        for job in live.jobs:
            self.tier.complete_store(job, live.ctx)
        live.jobs = []

    def _offer(self, live: _Live, taint_above: int | None) -> None:
        """Path 1's ``prepare_store`` of the step, and ``next_stored_chunk_idx`` after it."""
        nxt, storable = live.nxt, live.storable
        refs = chunk_offer(self.groups, nxt, storable, lambda g, c: True)
        if not refs:
            live.nxt = after_offer(nxt, storable, False)
            return
        o = self._store([live.keys[g][c] for g, c in refs], live.ctx, taint_above)
        if o is not None and o.keys_to_store:
            live.jobs.append(list(o.keys_to_store))
        live.nxt = after_offer(nxt, storable, None if o is None else bool(o.keys_to_store))

    def _taint(self, live: _Live) -> int | None:
        """What this pass computes past its hit is tainted when its load was wrong."""
        seg = live.seg
        return seg.hit if seg.wrong or seg.inherited else None

    def _finish(self, live: _Live) -> TierRequestResult:
        """The finishing step: the store offered again (a refused store retried), then
        ``on_request_finished`` (scheduler.py:2176-2182) and the last stores complete."""
        self._complete(live)
        self._offer(live, self._taint(live))
        self.tier.on_request_finished(live.ctx)
        self._complete(live)
        first, again = live.first, live.resumed
        res = TierRequestResult(
            live.req.rid, live.req.prompt_len, first.hit, first.wrong, first.state_from,
            first.missing, first.deferred, first.inherited,
            preempted=live.preempted,
            resume_hit=again.hit if again else 0,
            resume_wrong=again.wrong if again else False,
            resume_inherited=again.inherited if again else False,
            resume_missing=again.missing if again else False)
        self.results.append(res)
        return res

    # -- preemption and resume (sim.tier_preempt) ------------------------------------------

    def preempt(self, req: Request, plan: Preemption) -> _Live:
        """The request's first pass up to its preemption: mid-prefill after
        ``plan.prefill_steps`` steps when its prefill takes more, else mid-decode after
        ``plan.decoded`` output tokens (the prefill and the first decode step's offer
        done). Its in-flight stores are flushed and complete (scheduler.py:2136-2151,
        worker.py:219-244); it is not finished."""
        live = self._start(req)
        P = req.prompt_len
        pos = live.seg.hit
        if plan.phase == PREFILL and -(-(P - pos) // self.step) > plan.prefill_steps:
            self._compute(live, pos, P, plan.prefill_steps)
            live.preempted = PREFILL
        else:
            self._compute(live, pos, P)
            self._complete(live)
            self._offer(live, self._taint(live))  # the first decode step
            live.preempted = DECODE
            live.decoded = plan.decoded
        self._complete(live)  # flushed
        return live

    def resume(self, live: _Live) -> TierRequestResult:
        """Resumed: the tier looked up again over the request's tokens (prompt plus those
        decoded), with the same ``ReqContext``, storing restarted at chunk 0
        (scheduler.py:1241-1254); the hit loaded, the rest recomputed, then to the end."""
        if live.decoded:
            live.seq = with_output(live.req, live.decoded, self.seed)
            live.total = live.req.prompt_len + live.decoded
        live.seg = self._lookup_and_load(live)
        live.resumed = live.seg
        self._compute(live, live.seg.hit, live.total)
        return self._finish(live)

    def _store(self, keys: list[Key], ctx: ReqContext,
               taint_above: int | None) -> StoreOutput | None:
        """``prepare_store``, and the taint of what it writes: a key this request stores
        holds content it computed, tainted when its load was wrong or tainted and the
        key ends past its hit (the attention layers' KV there derive from the corrupted
        Mamba outputs, the GPU run's rid 138 in sim/gpu/results/tier-workload/); an
        evicted key's content is gone."""
        o = self.tier.prepare_store(keys, ctx)
        if o is not None:
            self.tainted.difference_update(o.evicted)
            for k in o.keys_to_store:
                pos = ctx.position(k)
                if taint_above is not None and pos is not None and pos > taint_above:
                    self.tainted.add(k)
                else:
                    self.tainted.discard(k)
        return o

    # -- a trace ---------------------------------------------------------------------------

    def run(self, trace: Sequence[Request], workload: str,
            progress: Progress | None = None,
            preemptions: Mapping[int, Preemption] | None = None) -> TierSummary:
        """The trace in arrival order; a request in ``preemptions`` (by rid,
        ``sim.tier_preempt.plan``) runs to its preemption, and resumes before the trace
        index ``resume_index`` names (requests due at one index resume in the order they
        were preempted); any still waiting resume at the end."""
        t0 = time.perf_counter()
        plans = preemptions or {}
        waiting: list[tuple[int, int, _Live]] = []  # (resume before index, order, request)
        for i, req in enumerate(trace):
            while waiting and waiting[0][0] <= i:
                self.resume(heapq.heappop(waiting)[2])
            p = plans.get(req.rid)
            if p is None:
                self.run_request(req)
            else:
                due = resume_index(trace, i, p, self.cfg.layout.hash_block)
                heapq.heappush(waiting, (due, i, self.preempt(req, p)))
            if progress is not None and i % 256 == 0:
                progress(i)
        while waiting:
            self.resume(heapq.heappop(waiting)[2])
        if progress is not None:
            progress(len(trace))
        return self.summary(workload, time.perf_counter() - t0)

    def summary(self, workload: str, wall_s: float) -> TierSummary:
        rs = self.results
        t = self.tier
        return TierSummary(
            self.cfg.layout.name, workload, self.cfg.tier.num_chunks, self.cfg.tier.policy,
            self.semantics, len(rs), sum(r.prompt_tokens for r in rs),
            sum(r.hit_tokens > 0 or r.resume_hit > 0 for r in rs),
            sum(r.hit_tokens + r.resume_hit for r in rs),
            sum(r.differs for r in rs), sum(r.missing_load or r.resume_missing for r in rs),
            sum(r.deferred for r in rs), self.refused, t.evictions, t.failed_stores,
            t.stored_chunks, wall_s,
            sum((r.inherited or r.resume_inherited) and not (r.wrong_state or r.resume_wrong)
                for r in rs),
            sum(r.preempted is not None for r in rs), sum(r.resume_hit > 0 for r in rs),
            sum(r.resume_hit for r in rs), sum(r.resume_differs for r in rs),
            sum(r.preempted == PREFILL for r in rs))
