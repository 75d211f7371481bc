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

Not modelled: concurrent requests (their interleaved stores and loads), the GPU prefix
cache, decode-phase states (``offload_prompt_only``), sliding-window blocks freed and
re-allocated before a refused store is retried, sparse store masks (every layout here
takes the dense path: ``check_dense``), and the scheduler's own splitting of a prefill
longer than ``step_tokens`` (the steps are taken as its chunks).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from model.evaluate import Outcome, evaluate
from model.scenario import Group, Scenario
from model.semantics import get_semantics
from sim.tier import Answer, StoreOutput, Tier, TierConfig
from sim.tier_context import Key, ReqContext
from sim.tier_layouts import TierLayout
from sim.tier_store import (
    StoreGroup,
    after_load,
    after_offer,
    boundary_offer,
    chunk_offer,
    retained_boundary,
    storable_chunks,
)
from sim.workload import Request

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

    @property
    def differs(self) -> bool:
        """The output can differ from the cold run: a wrong state, or tainted content."""
        return self.wrong_state or self.inherited


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

    @property
    def corrupted_rate(self) -> float:
        return self.corrupted / self.requests if self.requests else 0.0


class TierSim:
    def __init__(self, cfg: TierSimConfig, semantics: str,
                 load_cap: LoadCap | None = None) -> None:
        sem = get_semantics(semantics)
        if not sem.chunked:
            raise ValueError(f"semantics: {semantics} is not a chunked (0.33.0) semantics")
        check_dense(cfg.layout)
        self.cfg = cfg
        self.semantics = semantics
        self.load_cap = load_cap
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
        lay, tier = self.cfg.layout, self.tier
        P = req.prompt_len
        hb = lay.hash_block
        hashes = req.seq.hashes_upto(P // hb)
        keys = [[(hashes[(i + 1) * t // hb - 1], g) for i in range(P // t)]
                for g, t in enumerate(self.tpc)]
        ctx = ReqContext(f"req-{req.rid}")
        policy = tier.on_new_request(ctx)
        for g, t in enumerate(self.tpc):  # update_offload_keys, scheduler.py:412-429
            for i, k in enumerate(keys[g]):
                ctx.set_position(k, (i + 1) * t)
        cap = None if self.load_cap is None else self.load_cap(req)
        out = self._evaluate(self._scenario(keys, P, cap))
        self.refused += out.refused is not None
        deferred = out.refused is None and out.hit_tokens is None
        hit = out.hit_tokens or 0
        wrong = missing = inherited = False
        state_from = None
        if hit:
            # the chunked model names a key by the token it ends at (model/lookup_chunked.py)
            load = [keys[ld.group][end // self.tpc[ld.group] - 1]
                    for ld in out.loads for end in ld.blocks]
            if any(tier.lookup(k) is not Answer.HIT for k in load):
                missing, hit = True, 0  # cpu/manager.py:231-232 asserts
            else:
                tier.prepare_load(load, ctx)  # scheduler.py:1474
                tier.complete_load(load, ctx)  # before the request computes
                states = [ld.state_position for ld in out.loads
                          if ld.group < lay.mamba_groups and ld.state_position is not None]
                state_from = states[0] if states else None
                wrong = any(v.invariant == "no-partial-state" for v in out.violations)
                inherited = any(k in self.tainted for k in load)
        nxt = after_load(policy, (0,) * len(self.groups), self.groups, hit) if hit else \
            (0,) * len(self.groups)
        jobs: list[list[Key]] = []
        # what this request computes past its hit is tainted when its load was wrong
        taint_above = hit if wrong or inherited else None
        pos = hit
        while True:
            end = min(P, pos + self.step)
            for job in jobs:  # the previous step's stores complete
                tier.complete_store(job, ctx)
            jobs = []
            # the retained Mamba state this chunk hands over, if any
            boundary = retained_boundary(P, hit, pos, end, lay.mamba_block,
                                         lay.scheduler_block)
            if boundary is not None:
                for g in range(lay.mamba_groups):
                    if boundary_offer(self.groups[g], boundary, end):
                        k = (hashes[boundary // hb - 1], g)
                        ctx.set_position(k, boundary)  # _make_boundary_key, :1056-1066
                        o = self._store([k], ctx, taint_above)
                        if o is not None and o.keys_to_store:
                            jobs.append(list(o.keys_to_store))
            storable = tuple(storable_chunks(gr, end, P, len(keys[g]), len(keys[g]), False)
                             for g, gr in enumerate(self.groups))
            nxt = self._offer(keys, nxt, storable, ctx, jobs, taint_above)
            pos = end
            if pos >= P:
                break
        # the finishing step: offered again (a refused store retried), then finalised
        for job in jobs:
            tier.complete_store(job, ctx)
        jobs = []
        self._offer(keys, nxt, storable, ctx, jobs, taint_above)
        tier.on_request_finished(ctx)
        for job in jobs:
            tier.complete_store(job, ctx)
        res = TierRequestResult(req.rid, P, hit, wrong, state_from, missing, deferred,
                                inherited)
        self.results.append(res)
        return res

    def _offer(self, keys: Sequence[Sequence[Key]], nxt: tuple[int, ...],
               storable: tuple[int, ...], ctx: ReqContext,
               jobs: list[list[Key]], taint_above: int | None) -> tuple[int, ...]:
        refs = chunk_offer(self.groups, nxt, storable, lambda g, c: True)
        if not refs:
            return after_offer(nxt, storable, False)
        o = self._store([keys[g][c] for g, c in refs], ctx, taint_above)
        if o is not None and o.keys_to_store:
            jobs.append(list(o.keys_to_store))
        return after_offer(nxt, storable, None if o is None else bool(o.keys_to_store))

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
            progress: Progress | None = None) -> TierSummary:
        t0 = time.perf_counter()
        for i, req in enumerate(trace):
            self.run_request(req)
            if progress is not None and i % 256 == 0:
                progress(i)
        if progress is not None:
            progress(len(trace))
        return self.summary(workload, time.perf_counter() - t0)

    def summary(self, workload: str, wall_s: float) -> TierSummary:
        rs = self.results
        t = self.tier
        return TierSummary(
            self.cfg.layout.name, workload, self.cfg.tier.num_chunks, self.cfg.tier.policy,
            self.semantics, len(rs), sum(r.prompt_tokens for r in rs),
            sum(r.hit_tokens > 0 for r in rs), sum(r.hit_tokens for r in rs),
            sum(r.differs for r in rs), sum(r.missing_load for r in rs),
            sum(r.deferred for r in rs), self.refused, t.evictions, t.failed_stores,
            t.stored_chunks, wall_s, sum(r.inherited and not r.wrong_state for r in rs))
