"""Proving a theorem for a semantics, or finding its minimal counterexample.

A proof is four unsatisfiable queries (see ``prove``): the invariant between passes holds
after pass 1 and is kept by every pass that schedules another (so the loop may run any
number of passes), and the property holds when the loop ends in pass 1 or in any later
pass. A counterexample comes from exact unrolling (``bmc``), is shrunk (smallest prompt,
then smallest block sizes), turned into a scenario and replayed through ``model/``; one
the model does not reproduce is an encoding bug and is reported as UNKNOWN, never as a
result.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, cast

import z3

from model.evaluate import evaluate
from model.layout import Layout
from model.layout_chunked import ChunkLayout
from model.maximality import larger_valid_hit
from model.scenario import parse_scenario
from model.semantics import Semantics, get_semantics
from proofs import abstract, assume, encoding, lemmas, memo
from proofs.abstract import obligations
from proofs.encoding import (
    FA,
    MAMBA,
    MODES,
    SW,
    Config,
    Derived,
    Enc,
    State,
    derive,
    finished,
    initial_state,
    next_pass,
    result_of,
    run_pass,
    select,
    startup,
    symbolic_config,
)
from proofs.layers import (
    CASES,
    KINDS,
    TURN_FACTS,
    alignment_queries,
    final_query,
    lemma_queries,
    lemma_turns,
)
from proofs.theorems import (
    PRECONDITIONS,
    RUNTIME,
    TEMPLATE,
    THEOREMS,
    Context,
    Theorem,
    precondition_formula,
    valid_hit,
)

BMC_PASSES = 3
BMC_BLOCKS = 8


@dataclass(frozen=True)
class Verdict:
    status: str  # PROVED | COUNTEREXAMPLE | UNKNOWN
    seconds: float
    counterexample: dict[str, Any] | None = None
    note: str = ""
    # the bound the verdict holds within, where it differs from the semantics' (the
    # layered 0.33.0 proof's "every layout", proofs/layers_chunked.py)
    scope: str | None = None
    # the bounded encoding's scope for the part of the layouts the verdict covers only
    # within it (the layered 0.33.0 rows whose partial-tail layouts stay bounded)
    tails_bounded: str | None = None


# simplify, propagate the values, eliminate the variables the equations define (the
# helper quotients, the fixed sizes), then the SMT core: measured 3.6 times faster than
# z3.Solver()'s default on the layered proof's queries (25.8 s -> 7.1 s CPU over the 24
# old pairs, every answer the same) and 1.8 times on the counterexample search's
SOLVER = ("simplify", "propagate-values", "solve-eqs", "smt")


def new_solver() -> z3.Solver:
    return z3.Then(*SOLVER).solver()


# the counterexample search's unrolled queries (bmc, then pinning on the same solver):
# also lift the If-terms out of the arithmetic, then z3's older simplex arithmetic solver,
# as proofs/check_chunked.new_solver does. On the older family's bmc queries (24 pairs and
# the necessity checks, 316 queries) 6.06 -> 4.56 s CPU, every answer the same
# (bench/compare_solvers_older.py); on the layered proof's queries it is far slower (9 of
# the unsat answers of a 1-in-12 sample became unknown at 1.5 s), so prove keeps SOLVER
BMC_SOLVER: tuple[str | z3.Tactic, ...] = (
    "simplify",
    "propagate-values",
    "solve-eqs",
    "elim-term-ite",
)


def new_bmc_solver() -> z3.Solver:
    return z3.Then(*BMC_SOLVER, z3.With("smt", **{"arith.solver": 2})).solver()


def _solve(
    cons: Sequence[z3.BoolRef], timeout_ms: int, make: Callable[[], z3.Solver] = new_solver,
    only: z3.CheckSatResult | None = None,
) -> tuple[z3.CheckSatResult, z3.Solver]:
    """The answer (once per run, ``proofs.memo``; ``only``: that answer alone) and the
    solver."""
    s = make()
    s.set("timeout", max(1, timeout_ms))
    s.add(*cons)
    how = _HOW.get(make)
    return (s.check() if how is None else memo.check(s, how, only=only)), s


# each solver's tactics and settings, as proofs.memo names the solver of a query
_HOW: dict[Callable[[], z3.Solver], str] = {
    new_solver: f"Then{SOLVER}", new_bmc_solver: f"Then{BMC_SOLVER} smt arith.solver=2"}


@dataclass
class Problem:
    """Everything one query needs: the symbols, the helpers' constraints, the premises."""

    enc: Enc
    cfg: Config
    d: Derived
    init: State
    sem: Semantics
    premises: list[z3.BoolRef]
    ctx_of: Callable[[State], Context]
    candidate: z3.ArithRef | None


def _problem(
    thm: Theorem,
    sem: Semantics,
    assumed: Sequence[str],
    bound: int | None,
    enc: Enc,
    cfg: Config,
    d: Derived,
    init: State,
) -> Problem:
    """The premises of ``thm`` under ``assumed`` on the symbols ``cfg`` (their helpers'
    constraints go to ``enc``)."""
    m0 = init.m
    premises = [startup(cfg, sem)] + [precondition_formula(p, enc, cfg, d) for p in assumed]
    if bound is not None:
        premises += [k <= bound for k in d.keys]

    def ctx_of(st: State) -> Context:
        return Context(enc, cfg, d, sem, result_of(enc, cfg, d, sem, st), m0)

    candidate = None
    if thm.name == "maximality":
        candidate = z3.Int("larger_hit")
        base = Context(enc, cfg, d, sem, result_of(enc, cfg, d, sem, init), m0)
        premises.append(valid_hit(base, candidate))
    return Problem(enc, cfg, d, init, sem, premises, ctx_of, candidate)


def _violation(thm: Theorem, p: Problem, st: State) -> z3.BoolRef:
    return _violation_fn(thm)(p.ctx_of(st), p.candidate)


def _violation_fn(thm: Theorem) -> Callable[[Context, z3.ArithRef | None], z3.BoolRef]:
    if thm.name == "maximality":

        def bigger(ctx: Context, cand: z3.ArithRef | None) -> z3.BoolRef:
            assert cand is not None
            return z3.And(z3.Not(ctx.result.deferred), ctx.result.hit < cand)

        return bigger
    assert thm.violation is not None
    v = thm.violation
    return lambda ctx, cand: v(ctx)


def _containment(
    sem: Semantics, assumed: Sequence[str], thm: Theorem, kind: str, case: str, sub: int, rich: bool
) -> list[z3.BoolRef]:
    return final_query(
        sem,
        assumed,
        _violation_fn(thm),
        False,
        kind,
        True,
        False,
        case,
        sub,
        rich,
        containment=True,
    )


def _final_given_containment(
    sem: Semantics, assumed: Sequence[str], thm: Theorem, kind: str, rich: bool
) -> list[z3.BoolRef]:
    return final_query(sem, assumed, _violation_fn(thm), False, kind, rich=rich, containment=False)


def _ready(query: list[z3.BoolRef], rich: bool) -> list[z3.BoolRef]:
    return query  # the abstract loop's queries use no store facts


def _prompt_is(k: int, p: Problem) -> list[z3.BoolRef]:
    return [p.cfg.prompt == k]


def _prompt_at_most(bound: int, p: Problem) -> list[z3.BoolRef]:
    return [p.cfg.prompt <= bound]


def proof_queries(
    thm: Theorem, sem: Semantics, assumed: Sequence[str]
) -> list[tuple[str, Callable[[bool], list[z3.BoolRef]]]]:
    """The layered proof's queries (proofs.abstract): each must be unsatisfiable. None
    fixes the layout: the loop is proved for any number of groups, the lemmas and the
    final step for a group of each kind."""
    maximal = thm.name == "maximality"
    quiet = "nothing-deferred-or-loading" in assumed
    # the cut "the hit ends on a Mamba alignment boundary" holds where the max hit is
    # rounded (align_at max_hit); alt-round-num-hit rounds the hit itself after the loop
    aligned = thm.aligned and sem.align_at == "max_hit"
    lemma_qs = lemma_queries(sem, assumed, maximal)
    loop = obligations(maximal, quiet)
    # every fact the loop assumes is one of the lemmas below, for every kind (asked first:
    # it is cheap)
    proved = {lemmas.WHERE: {n.split()[1] for n, _ in lemma_qs if n.startswith("lemma ")}}
    only = {(lemmas.WHERE, "down"): abstract.full_attention}  # full attention's only
    queries: list[tuple[str, Callable[[bool], list[z3.BoolRef]]]] = [
        (assume.AUDIT, lambda rich: assume.audit_query(loop, proved, only))]
    queries += lemma_qs
    for name, q in loop:
        queries.append((name, partial(_ready, q)))
    if aligned:
        queries += alignment_queries(sem, assumed)
    for kind in KINDS:
        if thm.containment:
            queries.append(
                (
                    f"property from the summary ({kind}), given containment",
                    partial(_final_given_containment, sem, assumed, thm, kind),
                )
            )
            for case in CASES:
                for sub in range(4):
                    queries.append(
                        (
                            f"a {kind} group loads within what its lookup confirmed (hit ends "
                            f"at {case}, case {sub})",
                            partial(_containment, sem, assumed, thm, kind, case, sub),
                        )
                    )
        elif thm.split:
            for case in CASES:
                for sub in range(4):
                    queries.append(
                        (
                            f"property from the summary ({kind}, hit ends at {case}, case {sub})",
                            partial(
                                final_query,
                                sem,
                                assumed,
                                _violation_fn(thm),
                                maximal,
                                kind,
                                thm.uses_store,
                                aligned,
                                case,
                                sub,
                            ),
                        )
                    )
        elif thm.name != "termination":
            queries.append(
                (
                    f"property from the summary ({kind})",
                    partial(
                        final_query,
                        sem,
                        assumed,
                        _violation_fn(thm),
                        maximal,
                        kind,
                        thm.uses_store,
                        aligned,
                    ),
                )
            )
    return queries


# queries proved unsatisfiable in this process, shared across theorems: a lemma by
# (semantics, assumed, name) (one proved with fewer preconditions holds with more), a
# loop obligation by (maximal, quiet, name) (it does not depend on the semantics)
_PROVED: set[tuple[object, ...]] = set()


def _key(thm: Theorem, sem: Semantics, assumed: Sequence[str], name: str) -> tuple[object, ...]:
    """The cache key a proof of query ``name`` is stored under."""
    if name.startswith("lemma"):
        return ("lemma", sem.name, tuple(sorted(assumed)), name)
    if name.startswith("loop:"):
        return ("loop", thm.name == "maximality", "nothing-deferred-or-loading" in assumed, name)
    return ("final", thm.name, sem.name, tuple(sorted(assumed)), name)


# the preconditions each lemma was proved under in this process, by (semantics, name)
_LEMMAS: dict[tuple[str, str], list[frozenset[str]]] = {}


def _code() -> tuple[object, ...]:
    """The functions the proof queries are written with, as their modules have them now:
    a test that replaces one (a sabotage) must not find proofs made with the other."""
    from proofs import layers, lemmas, theorems

    return (
        _encoding_functions(),
        valid_hit,
        precondition_formula,
        theorems.valid_hit,
        theorems.precondition_formula,
        vars(layers)["valid_hit"],
        tuple(lem.fact for lem in lemmas.LEMMAS.values()),
        tuple(t.violation for t in THEOREMS.values()),
    )


_PROVED_WITH: list[tuple[object, ...]] = []  # the _code() _PROVED and _LEMMAS hold for


def _forget_if_code_changed() -> None:
    now = _code()
    if _PROVED_WITH != [now]:
        _PROVED.clear()
        _LEMMAS.clear()
        _PROVED_WITH[:] = [now]


def _proved(key: tuple[object, ...]) -> bool:
    """Whether a query proved in this process proves ``key``'s: the same one, or the same
    lemma on the same semantics proved under a subset of its preconditions (a lemma's
    preconditions are premises of its query: with more of them it stays unsatisfiable)."""
    if key in _PROVED:
        return True
    if key[0] != "lemma":
        return False
    _, sem, assumed, name = key
    have = set(cast(tuple[str, ...], assumed))
    return any(p <= have for p in _LEMMAS.get((str(sem), str(name)), ()))


def _record(key: tuple[object, ...]) -> None:
    _PROVED.add(key)
    if key[0] == "lemma":
        _, sem, assumed, name = key
        _LEMMAS.setdefault((str(sem), str(name)), []).append(
            frozenset(cast(tuple[str, ...], assumed))
        )


# answers to proof queries in this process, by the query's terms (hash-consed: the same
# assertions in the same order have the same ids while they live, and the entry keeps
# them alive): another semantics or theorem often asks the very same query. Only sat and
# unsat are kept; an unknown depends on the time left.
_ANSWERS: dict[tuple[int, ...], tuple[list[z3.BoolRef], z3.CheckSatResult]] = {}


def _answer(query: list[z3.BoolRef], timeout_ms: int) -> z3.CheckSatResult:
    key = tuple(a.get_id() for a in query)
    if key in _ANSWERS:
        return _ANSWERS[key][1]
    res, _ = _solve(query, timeout_ms)
    if res != z3.unknown:
        _ANSWERS[key] = (query, res)
    return res


def _turn_batch(
    thm: Theorem, sem: Semantics, assumed: Sequence[str], name: str, timeout_ms: int
) -> None:
    """Before the first of a kind's ``TURN_FACTS`` lemmas: ask those not yet proved in one
    query (``layers.lemma_turns``, plain grounding), first under the request rules alone
    (``RUNTIME``, part of every precondition set: a lemma proved with fewer premises holds
    with more, so one proof serves every theorem of the semantics), then under
    ``assumed``; unsat proves each of them. Any other answer proves nothing, and each is
    then asked alone as before (so a failing one is named as before)."""
    kind = name[name.index("(") + 1 : -1]
    deadline = time.monotonic() + timeout_ms / 1000
    tiers = [assumed]
    if set(RUNTIME) < set(assumed):
        tiers.insert(0, RUNTIME)
    for premises in tiers:
        names = [
            f for f in TURN_FACTS if not _proved(_key(thm, sem, assumed, f"lemma {f} ({kind})"))
        ]
        left = int((deadline - time.monotonic()) * 1000)
        if len(names) < 2 or left <= 0:
            return
        if _answer(lemma_turns(sem, premises, names, kind), left) == z3.unsat:
            for f in names:
                _record(_key(thm, sem, premises, f"lemma {f} ({kind})"))


def prove(thm: Theorem, sem: Semantics, assumed: Sequence[str], timeout_ms: int) -> tuple[str, str]:
    """('PROVED' | 'FAILED' | 'UNKNOWN', which obligation) for ``thm`` under ``assumed``."""
    deadline = time.monotonic() + timeout_ms / 1000
    _forget_if_code_changed()
    batch_at = {f"lemma {TURN_FACTS[0]} ({k})" for k in KINDS}
    for name, build in proof_queries(thm, sem, assumed):
        key = _key(thm, sem, assumed, name)
        if name in batch_at and not _proved(key):
            left = int((deadline - time.monotonic()) * 1000)
            if left > 0:
                _turn_batch(thm, sem, assumed, name, min(left, 10_000))
        if _proved(key):
            continue
        left = int((deadline - time.monotonic()) * 1000)
        if left <= 0:
            return "UNKNOWN", f"{name}: out of time"
        # plain grounding first; a sat answer may be spurious and some queries go
        # faster with more ground instances: then rich grounding, then plain again
        res = z3.unknown
        for rich, budget in ((False, 10_000), (True, 60_000), (False, None)):
            left = int((deadline - time.monotonic()) * 1000)
            if left <= 0:
                break
            res = _answer(build(rich), left if budget is None else min(left, budget))
            if res == z3.unsat or (rich and res == z3.sat):
                break  # rich grounding has every instance plain has: its sat stands
        if res == z3.sat:
            return "FAILED", name
        if res == z3.unknown:
            return "UNKNOWN", f"{name}: solver returned unknown"
        _record(key)
    return "PROVED", ""


# GPU block sizes per group, GPU blocks per offloaded block (block_size_factor, or from
# vLLM 0.26.0 blocks_per_chunk: proofs.encoding.chunk_factor)
Sizes = tuple[tuple[int, ...], int]
# the layouts the counterexample search unrolls, in order: the template, then one without
# a sliding-window group (there a hit the last group shrinks is not re-checked by a
# window group's re-run, scheduler.py:574)
SEARCH_KINDS: tuple[tuple[str, ...], ...] = (TEMPLATE, (FA, MAMBA))


def size_space(
    max_block: int = 3, max_factor: int = 3, kinds: Sequence[str] = TEMPLATE,
    blocks_per_chunk: bool = False,
) -> list[Sizes]:
    """Small concrete layouts the start-up checks accept, simplest first; with
    ``blocks_per_chunk`` (vLLM 0.26.0 on) also chunks of several GPU blocks of groups
    whose block sizes differ (offloading/config.py:70 asks no one block size)."""
    out: list[Sizes] = []
    rng = range(1, max_block + 1)
    for gpu in itertools.product(rng, repeat=len(kinds)):
        same = len(set(gpu)) == 1
        mamba_ok = all(gpu[g] == min(gpu) for g, k in enumerate(kinds) if k == MAMBA)
        if not (same or mamba_ok):
            continue  # kv_cache_utils.py:655 then base.py:493 refuse it
        for f in range(1, max_factor + 1):
            if f == 1 or same or blocks_per_chunk:  # base.py:507 (block_size_factor)
                out.append((gpu, f))
    return sorted(out, key=lambda s: (sum(s[0]) * s[1], s[1], s[0]))


@dataclass(frozen=True)
class _Unrolled:
    """A bmc query without its layout: the problem, its premises, the violation asked
    for at the unrolled loop's end, and the helpers' constraints."""

    p: Problem
    premises: tuple[z3.BoolRef, ...]
    query: tuple[z3.BoolRef, ...]
    cons: tuple[z3.BoolRef, ...]


@dataclass(frozen=True)
class _Loop:
    """The loop unrolled for a semantics and a layout, before any premise: its symbols,
    the state after the last pass, and the helpers' constraints so far (``enc``, which
    ``fork`` copies for each theorem's premises and violation)."""

    enc: Enc
    cfg: Config
    d: Derived
    init: State
    last: State
    next_name: int  # the first fresh-symbol number a fork uses

    def fork(self) -> Enc:
        e = self.enc
        return replace(
            e,
            cons=list(e.cons),
            counter=itertools.count(self.next_name),
            facts=list(e.facts),
            hints={k: list(v) for k, v in e.hints.items()},
            memo=dict(e.memo),
            inst=dict(e.inst),
            ground=dict(e.ground),
            ground_facts=dict(e.ground_facts),
        )


def _encoding_functions() -> tuple[object, ...]:
    """The encoding's functions as the module has them now (a test or mutant may replace
    one: a loop built with another must not be reused)."""
    return tuple(v for v in vars(encoding).values() if callable(v))


# loops unrolled in this process, by (semantics, passes, bound, kinds, the encoding's
# functions): shared by every theorem, precondition set and layout the search asks
_LOOPS: dict[tuple[object, ...], _Loop] = {}


def _loop(sem: Semantics, passes: int, bound: int, kinds: Sequence[str]) -> _Loop:
    key = (sem.name, passes, bound, tuple(kinds), _encoding_functions())
    if key not in _LOOPS:
        enc = Enc(bound=bound)
        cfg = symbolic_config(kinds)
        d = derive(enc, cfg, sem)
        init = initial_state(enc, cfg, d, sem)
        st = run_pass(enc, cfg, d, init, d.order)
        for _ in range(passes - 1):
            st = select(finished(st), st, next_pass(enc, cfg, d, st))
        _LOOPS[key] = _Loop(enc, cfg, d, init, st, next(enc.counter))
    return _LOOPS[key]


# unrolled queries built in this process, by (theorem, semantics, assumed, passes, bound,
# kinds): the counterexample search asks the same unrolling for many layouts and prompt
# bounds, and building it through the z3 API costs more than most of its solver calls
_UNROLLED: dict[tuple[object, ...], _Unrolled] = {}


def _unrolled(
    thm: Theorem,
    sem: Semantics,
    assumed: Sequence[str],
    passes: int,
    bound: int,
    kinds: Sequence[str],
) -> _Unrolled:
    # with the functions that write the premises (a test or mutant may replace them)
    key = (
        thm.name,
        sem.name,
        tuple(assumed),
        passes,
        bound,
        tuple(kinds),
        valid_hit,
        precondition_formula,
        thm.violation,
        _encoding_functions(),
    )
    if key not in _UNROLLED:
        loop = _loop(sem, passes, bound, kinds)
        enc = loop.fork()
        p = _problem(thm, sem, assumed, bound, enc, loop.cfg, loop.d, loop.init)
        query = (finished(loop.last), _violation(thm, p, loop.last))
        _UNROLLED[key] = _Unrolled(p, tuple(p.premises), query, tuple(enc.cons))
    return _UNROLLED[key]


def bmc(
    thm: Theorem,
    sem: Semantics,
    assumed: Sequence[str],
    timeout_ms: int,
    passes: int = BMC_PASSES,
    bound: int = BMC_BLOCKS,
    sizes: Sizes | None = None,
    extra: Callable[[Problem], list[z3.BoolRef]] | None = None,
    kinds: Sequence[str] = TEMPLATE,
) -> tuple[z3.CheckSatResult, Problem, z3.Solver | None]:
    """Exact unrolling of up to ``passes`` passes (at most ``bound`` offloaded blocks per
    group; with ``sizes`` the block sizes are fixed, which keeps the arithmetic linear),
    asking for a violation."""
    u = _unrolled(thm, sem, assumed, passes, bound, kinds)
    p = u.p
    premises = list(u.premises)
    if sizes is not None:
        premises += [b == v for b, v in zip(p.cfg.gpu, sizes[0], strict=True)]
        premises.append(p.d.factor == sizes[1])
    if extra is not None:
        premises += extra(p)
    # an unsat answer is taken from the run's other processes where one asked it (a sat
    # one is solved here: its model is read)
    res, solver = _solve([*premises, *u.query, *u.cons], timeout_ms, new_bmc_solver,
                         only=z3.unsat)
    return res, p, (solver if res == z3.sat else None)


def _int(m: z3.ModelRef, e: z3.ArithRef) -> int:
    return int(m.eval(e, model_completion=True).as_long())


def _bool(m: z3.ModelRef, e: z3.BoolRef) -> bool:
    return bool(z3.is_true(m.eval(e, model_completion=True)))


def scenario_from_model(m: z3.ModelRef, cfg: Config, sem: Semantics) -> dict[str, Any]:
    """The scenario file for a Z3 model (blocks beyond the prompt do not matter)."""
    factor = _int(m, cfg.factor)
    bpc = _int(m, cfg.bpc) if sem.offloading_config and _bool(m, cfg.bpc_set) else None
    prompt = _int(m, cfg.prompt)
    groups = []
    for g, kind in enumerate(cfg.kinds):
        bs = _int(m, cfg.gpu[g])
        nblocks = prompt // (bs * (bpc or factor))
        st = cfg.stores[g]
        stored = [i for i in range(nblocks) if _bool(m, st.stored(z3.IntVal(i)))]
        grp: dict[str, Any] = {
            "kind": kind,
            "gpu_block_size": bs,
            "stored": "all" if len(stored) == nblocks else stored,
        }
        if kind == SW:
            w = cfg.window[g]
            assert w is not None
            grp["sliding_window"] = _int(m, w)
        if kind == MAMBA:
            mode = cfg.mode[g]
            assert mode is not None
            grp["mamba_cache_mode"] = {v: k for k, v in MODES.items()}[_int(m, mode)]
        if _bool(m, cfg.eagle[g]):
            grp["eagle"] = True
        deferred = [i for i in range(nblocks) if _bool(m, st.deferred(z3.IntVal(i)))]
        loading = [i for i in range(nblocks) if _bool(m, st.loading(z3.IntVal(i)))]
        if deferred:
            grp["deferred"] = deferred
        if loading:
            grp["being_loaded"] = loading
        groups.append(grp)
    out: dict[str, Any] = {
        "semantics": sem.name,
        "block_size_factor": factor,
        **({} if bpc is None else {"blocks_per_chunk": bpc}),
        "prompt_tokens": prompt,
        "num_computed_tokens": _int(m, cfg.computed),
        "groups": groups,
    }
    if not _bool(m, cfg.prefix_caching):
        out["enable_prefix_caching"] = False
    if _bool(m, cfg.skip_reading):
        out["skip_reading_prefix_cache"] = True
    if _bool(m, cfg.in_flight):
        out["in_flight_transfers"] = True
    if sem.align_from == "cache_config":
        out["mamba_block_size"] = _int(m, cfg.mamba_block_size)
    return out


def replay(thm: Theorem, scenario: dict[str, Any], assumed: Sequence[str]) -> str | None:
    """None if ``model/`` shows the same failure, else why not (an encoding bug). The
    model enforces the engine's request rules: the search only produces such requests."""
    s = parse_scenario(scenario)
    o = evaluate(s)
    if o.refused:
        return f"model refuses it: {o.refused}"
    if thm.name in {v.invariant for v in o.violations}:
        return None
    return f"model gives hit {o.hit_tokens} with violations {[v.invariant for v in o.violations]}"


class _Undecided(Exception):
    """A pinning query came back unknown: the minimum is not established."""


PIN_MS = 20_000


def _check(solver: z3.Solver, extra: z3.BoolRef) -> z3.ModelRef | None:
    """A model of the solver's assertions and ``extra``, or None if there is none."""
    solver.push()
    solver.add(extra)
    solver.set("timeout", PIN_MS)
    res = solver.check()
    m = solver.model() if res == z3.sat else None
    solver.pop()
    if res == z3.unknown:
        raise _Undecided(str(extra))
    return m


PIN_UPWARD = 16
PROMPT_UPWARD = 16


class _Pinner:
    """Pins fields of a counterexample one by one, keeping a model of everything pinned
    so far: a preference the model already meets needs no solver call (the model shows
    it satisfiable), and a query that fails leaves the model a model of its negation.
    The values pinned depend only on which queries are satisfiable, not on the models
    Z3 happens to return."""

    def __init__(self, solver: z3.Solver, model: z3.ModelRef | None = None) -> None:
        self.solver = solver
        # a model of the solver's assertions: by default that of its last check (sat)
        self.model = solver.model() if model is None else model

    upward = 0  # how many values above ``lo`` ``smallest`` asks one by one first

    def smallest(self, x: z3.ArithRef, lo: int) -> None:
        """Pin ``x`` to its smallest value (>= lo) that keeps a counterexample: ``x ==
        lo``, ``x == lo + 1``, ... upward (at most ``upward`` values), then bisecting what
        is left (only which queries are satisfiable decides the value, so it is the same
        either way)."""
        hi = _int(self.model, x)
        for k in range(lo, min(hi, lo + self.upward)):
            m = _check(self.solver, x == k)
            if m is not None:
                self.model = m
                self.solver.add(x == k)
                return
        lo = max(lo, min(hi, lo + self.upward))
        while lo < hi:
            mid = (lo + hi) // 2
            m = _check(self.solver, x <= mid)
            if m is not None:
                self.model, hi = m, _int(m, x)  # a value at most mid that is reached
            else:
                lo = mid + 1
        self.solver.add(x == hi)

    def prefer(self, b: z3.BoolRef) -> None:
        if _bool(self.model, b):
            self.solver.add(b)
            return
        m = _check(self.solver, b)
        if m is not None:
            self.model = m
        self.solver.add(b if m is not None else z3.Not(b))


def _pin(
    solver: z3.Solver, model: z3.ModelRef, cfg: Config, sem: Semantics, nblocks: Sequence[int]
) -> None:
    """With the prompt and block sizes fixed, fix every other field the scenario file
    records, in a total order, each to its least value that keeps a counterexample:
    num_computed_tokens, then each sliding window, the Mamba block size (read by
    alt-cache-config-block-size), the Mamba modes (none < align < all), then the flags
    (no EAGLE, prefix caching on, no skip, nothing in flight) and the store, block by
    block (not loading, not deferred, stored). The result is the same on every run."""
    pin = _Pinner(solver, model)
    pin.upward = PIN_UPWARD  # read at call time: bench/bench_cex_older.py sets it
    pin.smallest(cfg.computed, 0)
    for w in cfg.window:
        if w is not None:
            pin.smallest(w, 1)
    if sem.align_from == "cache_config":
        pin.smallest(cfg.mamba_block_size, 1)
    for m in cfg.mode:
        if m is not None:
            pin.smallest(m, MODES["none"])
    for e in cfg.eagle:
        pin.prefer(z3.Not(e))
    if sem.offloading_config:  # the chunk from block_size rather than blocks_per_chunk
        pin.prefer(z3.Not(cfg.bpc_set))
    pin.prefer(cfg.prefix_caching)
    pin.prefer(z3.Not(cfg.skip_reading))
    pin.prefer(z3.Not(cfg.in_flight))
    for st, n in zip(cfg.stores, nblocks, strict=True):
        for i in map(z3.IntVal, range(n)):
            pin.prefer(z3.Not(st.loading(i)))
            pin.prefer(z3.Not(st.deferred(i)))
            pin.prefer(st.stored(i))
    solver.set("timeout", PIN_MS)
    if solver.check() != z3.sat:
        raise _Undecided("pinned counterexample")


class _Fallback(Exception):
    """A joint probe came back unknown (or out of time): search layout by layout."""


# a joint probe's time limit: it is only a shortcut (the search layout by layout answers
# the same); the older family's joint probes take at most 0.3 s CPU
JOINT_MS = 5_000


def _one_of(layouts: Sequence[Sizes], hi: int) -> Callable[[Problem], list[z3.BoolRef]]:
    """The block sizes are one of ``layouts``, the prompt at most ``hi``."""

    def extra(p: Problem) -> list[z3.BoolRef]:
        c = p.cfg
        return [
            z3.Or(
                [
                    z3.And(*[b == v for b, v in zip(c.gpu, gpu, strict=True)], p.d.factor == f)
                    for gpu, f in layouts
                ]
            ),
            c.prompt <= hi,
        ]

    return extra


def _least_joint(
    thm: Theorem,
    sem: Semantics,
    assumed: Sequence[str],
    passes: int,
    kinds: Sequence[str],
    layouts: Sequence[Sizes],
    hi: int,
    deadline: float,
) -> tuple[int, int] | None:
    """The least (prompt, index in ``layouts``) with a counterexample and a prompt of at
    most ``hi``, or None: the answer of the search layout by layout, from queries that
    leave the block sizes to the solver among several layouts at once (unsat for all of
    them, or a model naming one). Raises _Fallback when a query is undecided."""

    def probe(among: Sequence[Sizes], hi: int) -> tuple[int, int] | None:
        left = int((deadline - time.monotonic()) * 1000)
        if left <= 0:
            raise _Fallback
        res, p, solver = bmc(
            thm, sem, assumed, min(left, JOINT_MS), passes, kinds=kinds, extra=_one_of(among, hi)
        )
        if res == z3.unknown:
            raise _Fallback
        if solver is None:
            return None
        m = solver.model()
        layout = (tuple(_int(m, b) for b in p.cfg.gpu), _int(m, p.d.factor))
        return _int(m, p.cfg.prompt), list(layouts).index(layout)

    got = probe(layouts, hi)
    if got is None:
        return None
    found, j = got
    lo = 1
    while lo < found:  # the smallest prompt of any of them
        mid = (lo + found) // 2
        got = probe(layouts, mid)
        if got is None:
            lo = mid + 1
        else:
            found, j = got
    while j > 0:  # the first of them with a counterexample at that prompt
        got = probe(layouts[:j], found)
        if got is None:
            break
        j = got[1]
    return found, j


def _least(
    thm: Theorem,
    sem: Semantics,
    assumed: Sequence[str],
    passes: int,
    kinds: Sequence[str],
    layouts: Sequence[Sizes],
    deadline: float,
    solved: dict[tuple[int, int], tuple[Problem, z3.Solver]] | None = None,
) -> tuple[tuple[int, int] | None, bool]:
    """The least (prompt, index in ``layouts``) with a counterexample, or None; and
    whether a query came back unknown. Layout by layout, each one's smallest prompt that
    beats the best so far; once a layout has one, the layouts after it are asked
    together (``_least_joint``: one query instead of one per layout, most of them
    unsat), and one by one only if that is undecided. Each layout's smallest prompt is
    asked upward first (``prompt == 1``, ``== 2``, ...: cheaper than bounding it, same
    least value); ``solved`` gets the sat solver of such a query, by (prompt, index): the
    query ``counterexample`` would ask again for it."""
    best: tuple[int, int] | None = None
    unknown = False
    joint = True
    i = 0
    while i < len(layouts):
        layout = layouts[i]
        left = int((deadline - time.monotonic()) * 1000)
        if left <= 0:
            return best, True
        if best is not None and joint:
            if best[0] <= 1:
                break
            try:
                better = _least_joint(
                    thm, sem, assumed, passes, kinds, layouts[i:], best[0] - 1, deadline
                )
                return (best if better is None else (better[0], i + better[1])), unknown
            except _Fallback:
                joint = False
        hi = best[0] - 1 if best else None
        res, p, solver = bmc(
            thm,
            sem,
            assumed,
            min(left, 4 * PIN_MS),
            passes,
            sizes=layout,
            kinds=kinds,
            extra=None if hi is None else partial(_prompt_at_most, hi),
        )
        unknown |= res == z3.unknown
        i += 1
        if solver is None:
            continue
        found = _int(solver.model(), p.cfg.prompt)
        lo = 1
        for k in range(lo, min(found, lo + PROMPT_UPWARD)):
            res, p, solver = bmc(
                thm,
                sem,
                assumed,
                2 * PIN_MS,
                passes,
                sizes=layout,
                kinds=kinds,
                extra=partial(_prompt_is, k),
            )
            if solver is not None:
                found = k
                if solved is not None:
                    solved[(k, i - 1)] = (p, solver)
                break
            unknown |= res == z3.unknown
        lo = max(lo, min(found, lo + PROMPT_UPWARD))
        while lo < found:  # binary search for this layout's smallest prompt
            mid = (lo + found) // 2
            res, p, solver = bmc(
                thm,
                sem,
                assumed,
                2 * PIN_MS,
                passes,
                sizes=layout,
                kinds=kinds,
                extra=partial(_prompt_at_most, mid),
            )
            if solver is not None:
                found = _int(solver.model(), p.cfg.prompt)
            else:
                unknown |= res == z3.unknown
                lo = mid + 1
        best = (found, i - 1)
    return best, unknown


def counterexample(
    thm: Theorem,
    sem: Semantics,
    assumed: Sequence[str],
    timeout_ms: int,
    sizes: Sequence[Sizes] | None = None,
) -> Verdict:
    """The least counterexample to ``thm`` among requests the release's engine can
    produce (its start-up checks and request rules, ``RUNTIME``, are constraints of the
    search), under a total order: the layouts of ``SEARCH_KINDS`` in order (the next only
    when the one before has none), smallest prompt, then block sizes (``size_space``'s
    order), then the rest (``_pin``). Replayed through model/: COUNTEREXAMPLE only when
    the model reproduces it. A maximality counterexample carries the largest valid hit
    the model finds (``valid_hit``)."""
    t0 = time.monotonic()
    deadline = t0 + timeout_ms / 1000
    assumed = tuple(dict.fromkeys((*RUNTIME, *assumed)))
    best: tuple[int, Sizes, int] | None = None
    unknown = False
    kinds: Sequence[str] = TEMPLATE
    solved: dict[tuple[int, int], tuple[Problem, z3.Solver]] = {}
    again: tuple[Problem, z3.Solver] | None = None  # the solver of the least's query
    for kinds in (TEMPLATE,) if sizes else SEARCH_KINDS:
        layouts = list(sizes or size_space(kinds=kinds,
                                           blocks_per_chunk=sem.offloading_config))
        for passes in range(1, BMC_PASSES + 1):  # most counterexamples need one pass
            solved.clear()
            least, undecided = _least(thm, sem, assumed, passes, kinds, layouts, deadline, solved)
            unknown |= undecided
            if least is not None:
                best = (least[0], layouts[least[1]], passes)
                again = solved.get(least)
                break
        if best is not None:
            break
    if best is None:
        why = "solver returned unknown" if unknown else "none found"
        return Verdict(
            "UNKNOWN",
            time.monotonic() - t0,
            note=f"no proof, and no counterexample ({why}) within {BMC_PASSES} "
            f"passes, {BMC_BLOCKS} blocks per group and small block sizes, "
            "in the layouts "
            + " and ".join(f"({', '.join(k)})" for k in SEARCH_KINDS)
            + ", among requests the engine can produce",
        )
    prompt, layout, passes = best
    # the query with the prompt fixed: the one _least asked last for it, else asked now
    p, solver = (
        again
        if again is not None
        else bmc(
            thm,
            sem,
            assumed,
            2 * PIN_MS,
            passes,
            sizes=layout,
            kinds=kinds,
            extra=partial(_prompt_is, prompt),
        )[1:]
    )
    if solver is None:
        return Verdict("UNKNOWN", time.monotonic() - t0, note="counterexample lost on re-solve")
    nblocks = [prompt // (b * layout[1]) for b in layout[0]]
    try:
        _pin(solver, solver.model(), p.cfg, sem, nblocks)
    except _Undecided as e:
        return Verdict(
            "UNKNOWN",
            time.monotonic() - t0,
            note=f"counterexample found, but its minimum is undecided ({e})",
        )
    scen = scenario_from_model(solver.model(), p.cfg, sem)
    if thm.name == "maximality":
        s = parse_scenario(scen)
        o = evaluate(s)
        better = None
        if o.refused is None and isinstance(o.layout, Layout):  # Z3 covers SEMANTICS only
            better = larger_valid_hit(s, o.layout, get_semantics(s.semantics), o.hit_tokens)
        if better is None:
            return Verdict(
                "UNKNOWN",
                time.monotonic() - t0,
                scen,
                note=f"model finds no valid hit above {o.hit_tokens}: encoding bug",
            )
        scen["valid_hit"] = better
    mismatch = replay(thm, scen, assumed)
    if mismatch is not None:
        return Verdict(
            "UNKNOWN",
            time.monotonic() - t0,
            scen,
            note=f"counterexample not reproduced by model/ ({mismatch}): encoding bug",
        )
    return Verdict("COUNTEREXAMPLE", time.monotonic() - t0, scen)


# at most this long for the layered proof of a statement with a counterexample: it must
# not prove it (out of time or unknown is a failure to prove, as it should be)
REFUTED_LAYERED_MS = 20_000


def has_partial_tails(scenario: dict[str, Any]) -> bool | None:
    """Whether ``model/`` gives the counterexample's layout partial tails (None: it has no
    layout, so the question is left open)."""
    o = evaluate(parse_scenario(scenario), enforce=False)
    layout = o.layout
    if not isinstance(layout, ChunkLayout):
        return None
    return layout.supports_partial_tail


def layered_proves_false(
    thm_name: str, sem: Semantics, assumed: Sequence[str], timeout_ms: int,
    counterexample: dict[str, Any] | None = None,
) -> str | None:
    """For a statement the bounded search refuted (a necessity row, or a row over the
    layouts the release accepts expected to fail): why the layered proof is vacuous when
    it proves it anyway, else None. The complete-chunk proof covers the layouts with
    partial tails off: proving a statement whose counterexample has partial tails off is
    vacuous by itself; a counterexample with partial tails on (or one whose tails are not
    known) needs the partial-tail proof closing too. Issue 23: a vacuous layered proof
    cannot pass unnoticed."""
    from proofs import layers_chunked, tail_layers_chunked

    if not layers_chunked.covers(thm_name, assumed):
        return None
    budget = min(timeout_ms // 2, REFUTED_LAYERED_MS)
    status, _, _ = layers_chunked.prove(thm_name, sem, assumed, budget)
    if status != "PROVED":
        return None
    tails = has_partial_tails(counterexample) if counterexample is not None else None
    if tails is not False:
        if not tail_layers_chunked.covers(thm_name):
            return None  # the counterexample may have partial tails on
        if tail_layers_chunked.prove(thm_name, sem, assumed, budget)[0] != "PROVED":
            return None  # likewise
    where = "with partial tails off" if tails is False else "over every layout"
    return (f"the layered proof (proofs/layers_chunked.py) proves {thm_name} under "
            f"{', '.join(assumed) or 'no precondition'} {where}, where it has a "
            "counterexample: vacuous")


def check(
    thm_name: str,
    sem_name: str,
    assumed: Sequence[str] | None = None,
    timeout_ms: int = 30_000,
    search_first: bool = False,
) -> Verdict:
    """PROVED / COUNTEREXAMPLE / UNKNOWN for one theorem and semantics.

    ``search_first``: look for the least counterexample before trying the proof (for a
    check expected to fail, where the proof's failing obligation is not reported: the
    necessity checks). The verdict and the counterexample are the same either way; only
    the note differs (it names no failed obligation when the search comes first)."""
    thm = THEOREMS[thm_name]
    sem = get_semantics(sem_name)
    assumed = thm.pre(sem_name) if assumed is None else tuple(assumed)
    for a in assumed:
        if a not in PRECONDITIONS:
            raise ValueError(f"precondition: unknown name {a!r}")
    if sem.chunked:  # vLLM 0.33.0: the layered proof (every layout) where it closes,
        # else the bounded exact encoding (proofs/check_chunked.py), which also gives every
        # counterexample
        from proofs import check_chunked, layers_chunked

        if not search_first and layers_chunked.covers(thm_name, assumed):
            v = layers_chunked.check(thm_name, sem, assumed, timeout_ms)
            if v is not None:
                return v
        chunk_verdict = check_chunked.check(thm_name, sem_name, assumed, timeout_ms)
        if search_first and chunk_verdict.status == "COUNTEREXAMPLE":
            vacuous = layered_proves_false(thm_name, sem, assumed, timeout_ms,
                                           chunk_verdict.counterexample)
            if vacuous is not None:
                return Verdict("UNKNOWN", chunk_verdict.seconds, chunk_verdict.counterexample,
                               vacuous)
        return Verdict(
            chunk_verdict.status,
            chunk_verdict.seconds,
            chunk_verdict.counterexample,
            chunk_verdict.note,
        )
    # every result is about requests the engine can produce
    assumed = tuple(dict.fromkeys((*RUNTIME, *assumed)))
    t0 = time.monotonic()
    if search_first:
        v = counterexample(thm, sem, assumed, timeout_ms - timeout_ms // 2)
        if v.status == "COUNTEREXAMPLE":
            return replace(v, seconds=time.monotonic() - t0)
        left = timeout_ms - int((time.monotonic() - t0) * 1000)
        status, where = prove(thm, sem, assumed, max(left, 1))
        if status == "PROVED":
            return Verdict("PROVED", time.monotonic() - t0)
        return Verdict(
            "UNKNOWN",
            time.monotonic() - t0,
            v.counterexample,
            v.note if status == "FAILED" else f"{where}; {v.note}".strip("; "),
        )
    # at most half the time for the proof: an obligation Z3 cannot settle must leave the
    # counterexample search its share
    status, where = prove(thm, sem, assumed, timeout_ms // 2)
    if status == "PROVED":
        return Verdict("PROVED", time.monotonic() - t0)
    left = timeout_ms - int((time.monotonic() - t0) * 1000)
    v = counterexample(thm, sem, assumed, max(left, 1000))
    note = v.note if status == "FAILED" else f"{where}; {v.note}".strip("; ")
    if status == "UNKNOWN" and v.status != "COUNTEREXAMPLE":
        return Verdict("UNKNOWN", time.monotonic() - t0, v.counterexample, note)
    return Verdict(
        v.status,
        time.monotonic() - t0,
        v.counterexample,
        note if v.status != "COUNTEREXAMPLE" else f"proof obligation failed: {where}",
    )
