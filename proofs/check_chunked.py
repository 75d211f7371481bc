"""Proving a theorem for a vLLM 0.33.0 semantics, or finding its minimal counterexample,
with the exact bounded encoding of ``proofs.encoding_chunked``.

A proof is, for each layout template of the scope, one unsatisfiable query: the start-up
checks, the engine's request rules and the theorem's preconditions, the loop unrolled
``Scope.passes`` passes and ended, and the violation. A PROVED verdict comes with the
pass bound over the same templates (``pass_bound``: ``termination``, one query per
template, proves that the loop has always ended within those passes), so the unrolling
cuts no run short. Every token size is symbolic and unbounded; the scope
bounds the number of chunks per group, ``blocks_per_chunk`` and the group kinds
(``Scope.words``), and the report states it beside every verdict.

A counterexample is the least under a total order, layout first (the first template of
``TEMPLATES``, fewest groups first, that has one; then the smallest prompt,
``blocks_per_chunk``, the block sizes, ``num_computed_tokens``, the window, the caps,
the flags and the store, chunk by chunk), written as a scenario file and replayed
through ``model/``; one the model does not reproduce is an encoding bug and is reported
as UNKNOWN. The search stops at the first template with a counterexample: it needs only
the earlier templates' unsatisfiable answers.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import z3

import releases
from model import load_chunked
from model.evaluate import evaluate
from model.layout_chunked import ChunkLayout
from model.maximality_chunked import is_valid_hit, larger_valid_hit
from model.scenario import parse_scenario
from model.semantics import Semantics, get_semantics
from proofs import encoding_chunked, memo
from proofs.check import _Pinner as Pinner
from proofs.check import _Undecided as Undecided
from proofs.witness import Witness

# the layouts of the scope: at most one group of each kind; the sliding-window and Mamba
# groups in either index order, and, with the Mamba group listed first, each lookup
# order the window can give (encoding_chunked.lookup_order); then the layouts with partial
# tails on (the third field): full attention and Mamba align in either index order (the
# partial-tail lookup asks the groups in index order), the only kinds start-up allows
# them for within the scope (scheduler.py:274-292: no sliding window; a single group has
# tokens_per_hash = its block size, kv_cache_utils.py:847)
Template = tuple[tuple[str, ...], tuple[int, ...], bool]
_KINDS: tuple[tuple[str, ...], ...] = (
    (encoding_chunked.MAMBA,),
    (encoding_chunked.FA,),
    (encoding_chunked.SW,),
    (encoding_chunked.FA, encoding_chunked.MAMBA),
    (encoding_chunked.SW, encoding_chunked.MAMBA),
    (encoding_chunked.MAMBA, encoding_chunked.SW),
    (encoding_chunked.FA, encoding_chunked.SW),
    (encoding_chunked.FA, encoding_chunked.SW, encoding_chunked.MAMBA),
    (encoding_chunked.FA, encoding_chunked.MAMBA, encoding_chunked.SW),
)
_TAIL_KINDS: tuple[tuple[str, ...], ...] = (
    (encoding_chunked.FA, encoding_chunked.MAMBA),
    (encoding_chunked.MAMBA, encoding_chunked.FA),
)
TEMPLATES: tuple[Template, ...] = tuple(
    dict.fromkeys(
        (k, encoding_chunked.lookup_order(k, first), False)
        for k in _KINDS
        for first in (False, True)
    )
) + tuple((k, encoding_chunked.lookup_order(k), True) for k in _TAIL_KINDS)


@dataclass(frozen=True)
class ChunkVerdict:
    status: str  # PROVED | COUNTEREXAMPLE | UNKNOWN
    seconds: float
    counterexample: dict[str, Any] | None = None
    note: str = ""


def precondition(
    name: str,
    enc: encoding_chunked.ChunkEnc,
    cfg: encoding_chunked.ChunkConfig,
    d: encoding_chunked.ChunkDerived,
) -> z3.BoolRef:
    """The preconditions 0.33.0's theorems may assume, over the encoded configuration
    (the words are ``proofs.theorems.PRECONDITIONS``)."""
    if name == "align-divides-blocks":  # every group's chunk a multiple of the Mamba chunk
        return z3.Or(
            z3.Not(d.align_on),
            z3.And([_multiple(t, d.align, enc.scope.chunks + 1, cfg.prompt) for t in d.tpc]),
        )
    if name == "same-block-size":
        return z3.And([x == cfg.gpu[0] for x in cfg.gpu])
    if name == "full-chunk-within-windowed":  # finding 002
        windowed = [t for t, k in zip(d.tpc, cfg.kinds, strict=True) if k != encoding_chunked.FA]
        full = [t for t, k in zip(d.tpc, cfg.kinds, strict=True) if k == encoding_chunked.FA]
        if not windowed:  # full attention alone: one chunk size
            return z3.And([t == full[0] for t in full[1:]])
        return z3.And([z3.Or([t <= w for w in windowed]) for t in full])
    if name == "no-eagle":
        return z3.And([z3.Not(e) for e in cfg.eagle])
    if name == "nothing-deferred-or-loading":
        return z3.And(
            [
                z3.And(z3.Or(a == encoding_chunked.HIT, a == encoding_chunked.MISS), z3.Not(b))
                for row, lrow in zip(cfg.ans, cfg.loading, strict=True)
                for a, b in zip(row, lrow, strict=True)
            ]
        )
    if name == "caps-reach-prompt":  # with windowed groups no cap ends before the prompt
        if not d.windowed_any:
            return z3.BoolVal(True)
        return z3.And(
            z3.Implies(cfg.has_new_cap, cfg.computed + cfg.new_cap >= cfg.prompt),
            z3.Implies(cfg.has_load_cap, cfg.computed + cfg.load_cap >= cfg.prompt),
        )
    if name == "mamba-mode-not-all":
        # 0.32.0 on has no mode "all" (model/layout_chunked.py; the start-up sets it False)
        return z3.Not(cfg.mamba_all)
    raise ValueError(f"precondition {name!r} has no {releases.reference('chunked').name} formula")


def _multiple(x: z3.ArithRef, d: z3.ArithRef, most: int, prompt: z3.ArithRef) -> z3.BoolRef:
    """``x`` is a multiple of ``d``, as far as a request of the scope can tell: ``x`` is
    ``k * d`` for some ``k <= most``, or longer than the prompt (the group has no
    complete chunk: its lookup gives 0). Linear, and implied by ``x % d == 0``, so a
    proof under it holds under the precondition."""
    return z3.Or(z3.Or([x == k * d for k in range(1, most + 1)]), x > prompt)


@dataclass
class Built:
    enc: encoding_chunked.ChunkEnc
    cfg: encoding_chunked.ChunkConfig
    d: encoding_chunked.ChunkDerived
    st: encoding_chunked.ChunkState
    result: encoding_chunked.ChunkResult
    premises: list[z3.BoolRef]
    candidate: z3.ArithRef | None = None  # maximality: a valid hit (encoding_chunked.valid_hit)


@dataclass(frozen=True)
class _Loop:
    """A template's configuration, start-up checks and unrolled loop: the part of a
    query every theorem and precondition set shares, with the definitions of its named
    terms and the next name's number."""

    cons: tuple[z3.BoolRef, ...]
    next_name: int
    cfg: encoding_chunked.ChunkConfig
    d: encoding_chunked.ChunkDerived
    startup: z3.BoolRef
    st: encoding_chunked.ChunkState
    result: encoding_chunked.ChunkResult


# unrolled loops built in this process, by (semantics, template, scope, passes) and the
# functions that write them (a test may replace one): each theorem, precondition set and
# witness of a semantics asks the same unrolling of each template, and building it through
# the z3 API costs more than many of its solver calls
_LOOPS: dict[tuple[object, ...], _Loop] = {}


def _loop(sem: Semantics, template: Template, scope: encoding_chunked.Scope, passes: int) -> _Loop:
    kinds, order, tails = template
    key = (
        sem.name,
        template,
        scope,
        passes,
        encoding_chunked.symbolic_config,
        encoding_chunked.derive,
        encoding_chunked.startup,
        encoding_chunked.run_loop,
        encoding_chunked.result_of,
    )
    if key not in _LOOPS:
        enc = encoding_chunked.ChunkEnc(scope)
        cfg = encoding_chunked.symbolic_config(kinds, scope, tails=tails)
        d = encoding_chunked.derive(enc, cfg, order)
        start = encoding_chunked.startup(enc, cfg, sem.steps)
        st = encoding_chunked.run_loop(enc, cfg, d, sem, passes)
        r = encoding_chunked.result_of(enc, cfg, d, st, sem.steps)
        _LOOPS[key] = _Loop(tuple(enc.cons), next(enc.counter), cfg, d, start, st, r)
    return _LOOPS[key]


def build(
    sem: Semantics,
    template: Template,
    assumed: Sequence[str],
    scope: encoding_chunked.Scope = encoding_chunked.SCOPE,
    passes: int | None = None,
    maximal: bool = False,
) -> Built:
    """The query's parts: the template's unrolled loop (``_loop``, built once per
    process) with its own copy of the named terms' definitions, which the premises and
    the violation extend, numbering on where the loop stopped: the same terms, in the
    same order, as built from scratch."""
    lp = _loop(sem, template, scope, scope.passes if passes is None else passes)
    enc = encoding_chunked.ChunkEnc(scope, list(lp.cons), itertools.count(lp.next_name))
    cfg, d = lp.cfg, lp.d
    premises = [lp.startup, d.order_holds]
    premises += [precondition(p, enc, cfg, d) for p in assumed]
    candidate = None
    if maximal:  # the premise maximality rests on: a valid hit exists
        candidate = z3.Int("valid_hit")
        premises.append(encoding_chunked.valid_hit(enc, cfg, d, candidate))
    return Built(enc, cfg, d, lp.st, lp.result, premises, candidate)


def violation(thm: str, b: Built) -> z3.BoolRef:
    if thm == "termination":  # the loop, and the partial-tail boundaries (scope.boundaries)
        return z3.Or(
            z3.Not(encoding_chunked.finished(b.st)),
            z3.And(encoding_chunked.finished(b.st), b.result.tail_left),
        )
    if thm == "maximality":  # the lookup answers, below a valid hit
        assert b.candidate is not None
        return z3.And(
            encoding_chunked.finished(b.st), z3.Not(b.result.deferred), b.result.hit < b.candidate
        )
    return z3.And(
        encoding_chunked.finished(b.st),
        encoding_chunked.VIOLATIONS[thm](b.enc, b.cfg, b.d, b.result),
    )


# simplify, propagate the values, eliminate the variables the equations define (the
# named terms), lift the If-terms out of the arithmetic (elim-term-ite), then the SMT core
# with z3's older simplex arithmetic solver (arith.solver 2): on the 0.33.0 queries (3-group
# templates, 4 passes unrolled) 3 to 5 times faster than the same pipeline with the default
# arithmetic solver (loads-stored-only on alt-v033-reround-mamba-rerun, 13 templates:
# 74.5 -> 18.8 s CPU), every answer the same (bench/compare_solvers_chunked.py)
SOLVER: tuple[str | z3.Tactic, ...] = ("simplify", "propagate-values", "solve-eqs", "elim-term-ite")


def new_solver() -> z3.Solver:
    return z3.Then(*SOLVER, z3.With("smt", **{"arith.solver": 2})).solver()


HOW = f"Then{SOLVER} smt arith.solver=2"  # new_solver, as proofs.memo names it


def solver(b: Built, goal: z3.BoolRef, timeout_ms: int) -> z3.Solver:
    """A solver for the query (``new_solver``)."""
    s = new_solver()
    s.set("timeout", max(1, timeout_ms))
    s.add(*b.premises, goal, *b.enc.cons)
    return s


# --- scenario files --------------------------------------------------------------------


def _int(m: z3.ModelRef, e: z3.ArithRef) -> int:
    return int(m.eval(e, model_completion=True).as_long())


def _bool(m: z3.ModelRef, e: z3.BoolRef) -> bool:
    return bool(z3.is_true(m.eval(e, model_completion=True)))


def scenario_from_model(m: z3.ModelRef, b: Built, sem: Semantics) -> dict[str, Any]:
    cfg, d = b.cfg, b.d
    caching = _bool(m, cfg.prefix_caching)
    groups = []
    for g, kind in enumerate(cfg.kinds):
        nkeys = _int(m, d.keys[g])
        answers = [_int(m, a) for a in cfg.ans[g][:nkeys]]
        stored = [i for i, a in enumerate(answers) if a != encoding_chunked.MISS]
        grp: dict[str, Any] = {
            "kind": kind,
            "gpu_block_size": _int(m, cfg.gpu[g]),
            "stored": "all" if len(stored) == nkeys else stored,
        }
        w = cfg.window[g]
        if w is not None:
            grp["sliding_window"] = _int(m, w)
        if kind == encoding_chunked.MAMBA:
            grp["mamba_cache_mode"] = (
                ("all" if _bool(m, cfg.mamba_all) else "align") if caching else "none")
        if _bool(m, cfg.eagle[g]):
            grp["eagle"] = True
        for name, code in (
            ("pending", encoding_chunked.HIT_PENDING),
            ("deferred", encoding_chunked.RETRY),
        ):
            chunks = [i for i, a in enumerate(answers) if a == code]
            if chunks:
                grp[name] = chunks
        loading = [i for i in range(nkeys) if _bool(m, cfg.loading[g][i])]
        if loading:
            grp["being_loaded"] = loading
        if cfg.tails:  # partial-tail keys (block edges are chunk keys, written above)
            block, tph, prompt = _int(m, cfg.gpu[0]), _int(m, cfg.tph), _int(m, cfg.prompt)
            tails: dict[int, list[int]] = {
                c: []
                for c in (
                    encoding_chunked.HIT,
                    encoding_chunked.HIT_PENDING,
                    encoding_chunked.RETRY,
                )
            }
            for c, row in enumerate(cfg.tail_ans[g]):
                for k, a in enumerate(row, start=1):
                    pos = c * block + k * tph
                    if k < block // tph and pos <= prompt and _int(m, a) in tails:
                        tails[_int(m, a)].append(pos)
            for name, code in (
                ("stored_tails", encoding_chunked.HIT),
                ("pending_tails", encoding_chunked.HIT_PENDING),
                ("deferred_tails", encoding_chunked.RETRY),
            ):
                if tails[code]:
                    grp[name] = tails[code]
        groups.append(grp)
    out: dict[str, Any] = {"semantics": sem.name, "block_size_factor": 1}
    bpc = _int(m, cfg.bpc)
    if bpc != 1:
        out["blocks_per_chunk"] = bpc
    if cfg.tails:
        out["hash_block_size"] = _int(m, cfg.tph)
    out |= {
        "prompt_tokens": _int(m, cfg.prompt),
        "num_computed_tokens": _int(m, cfg.computed),
        "groups": groups,
    }
    if not caching:
        out["enable_prefix_caching"] = False
    if _bool(m, cfg.skip_reading):
        out["skip_reading_prefix_cache"] = True
    if _bool(m, cfg.in_flight):
        out["in_flight_transfers"] = True
    if _bool(m, cfg.has_new_cap):
        out["max_num_new_tokens"] = _int(m, cfg.new_cap)
    if _bool(m, cfg.has_load_cap):
        out["max_load_tokens"] = _int(m, cfg.load_cap)
    return out


def replay(thm: str, scenario: dict[str, Any]) -> str | None:
    """None if ``model/`` shows the same failure, else why not (an encoding bug)."""
    o = evaluate(parse_scenario(scenario))
    if o.refused:
        return f"model refuses it: {o.refused}"
    if thm in {v.invariant for v in o.violations}:
        return None
    return f"model gives hit {o.hit_tokens} with violations {[v.invariant for v in o.violations]}"


# --- the least counterexample ---------------------------------------------------------


PIN_MS = 20_000  # each pinning query (proofs.check's Pinner)
# how many values above its lower bound ``Least.smallest`` asks one by one
UPWARD = 16


class Least(Pinner):
    """``Pinner`` asking ``UPWARD`` values ``x == lo``, ``x == lo + 1``, ... one by one
    before it bisects what is left (``Pinner.smallest``): the least value is the same as
    bisecting's (only which queries are satisfiable decides it), but a query with the
    field a constant, which the tactics substitute, is cheaper than one that bounds it;
    the fields' least values are small (the prompt of the 13 0.33.0 searches is 2 to 9
    tokens; their CPU, mean over z3 seeds 3-5: bisecting 11.9 s, upward 8.4 s;
    bench/results/cex_chunked.txt)."""

    upward = UPWARD


def _pin(pin: Pinner, b: Built) -> z3.ModelRef:
    """With the prompt fixed, fix every other field the scenario file records, in a total
    order, each to its least value that keeps a counterexample (``Pinner``: the values
    depend only on which queries are satisfiable, not on the models Z3 returns); the
    pinner's model, a model of every pin, is the result."""
    cfg = b.cfg
    pin.smallest(cfg.bpc, 1)
    for x in cfg.gpu:
        pin.smallest(x, 1)
    if cfg.tails:
        pin.smallest(cfg.tph, 1)
    pin.smallest(cfg.computed, 0)
    for w in cfg.window:
        if w is not None:
            pin.smallest(w, 1)
    pin.prefer(cfg.prefix_caching)
    for e in cfg.eagle:
        pin.prefer(z3.Not(e))
    pin.prefer(z3.Not(cfg.skip_reading))
    pin.prefer(z3.Not(cfg.in_flight))
    for has, cap in ((cfg.has_new_cap, cfg.new_cap), (cfg.has_load_cap, cfg.load_cap)):
        pin.prefer(z3.Not(has))
        pin.smallest(cap, 0)  # unused when absent: pinned anyway, for one model
    for row, lrow in zip(cfg.ans, cfg.loading, strict=True):
        for a, busy in zip(row, lrow, strict=True):
            pin.prefer(z3.Not(busy))
            pin.smallest(a, encoding_chunked.HIT)  # HIT < HIT_PENDING < RETRY < MISS
    for grp in cfg.tail_ans:
        for row in grp:
            for a in row:
                pin.smallest(a, encoding_chunked.HIT)
    return pin.model


def counterexample(
    thm: str,
    sem: Semantics,
    assumed: Sequence[str],
    timeout_ms: int,
    scope: encoding_chunked.Scope = encoding_chunked.SCOPE,
    tails_only: bool = False,
) -> ChunkVerdict:
    """The least counterexample over the scope's templates (``tails_only``: those with
    partial tails on), layout first (the module's order), replayed through model/."""
    t0 = time.monotonic()
    deadline = t0 + timeout_ms / 1000
    for template in _templates(tails_only):  # the first layout with a counterexample
        left = int((deadline - time.monotonic()) * 1000)
        if left <= 0:
            return ChunkVerdict("UNKNOWN", time.monotonic() - t0, note="out of time")
        b = build(sem, template, assumed, scope, maximal=thm == "maximality")
        s = solver(b, violation(thm, b), left)
        # an unsat layout is taken from the run's other processes where one asked it (a
        # sat one is solved here: its model is read)
        res = memo.check(s, HOW, only=z3.unsat)
        if res == z3.unknown:
            return ChunkVerdict(
                "UNKNOWN",
                time.monotonic() - t0,
                note=f"solver returned unknown on layout {template[0]}",
            )
        if res == z3.sat:
            break
    else:
        return ChunkVerdict("PROVED", time.monotonic() - t0)
    s.set("timeout", PIN_MS)
    try:  # its smallest prompt, then the other fields: one pinner, one model throughout
        pin = Least(s)
        pin.smallest(b.cfg.prompt, 1)
        m = _pin(pin, b)
    except Undecided as e:
        return ChunkVerdict(
            "UNKNOWN",
            time.monotonic() - t0,
            note=f"counterexample found, but its minimum is undecided ({e})",
        )
    scen = scenario_from_model(m, b, sem)
    if thm == "maximality":  # the file carries the largest valid hit the model finds
        o = evaluate(parse_scenario(scen))
        better = None
        if o.refused is None and isinstance(o.layout, ChunkLayout):
            better = larger_valid_hit(parse_scenario(scen), o.layout, o.hit_tokens)
        if better is None:
            return ChunkVerdict(
                "UNKNOWN",
                time.monotonic() - t0,
                scen,
                note=f"model finds no valid hit above {o.hit_tokens}: encoding bug",
            )
        scen["valid_hit"] = better
    if thm != "termination":
        why = replay(thm, scen)
        if why is not None:
            return ChunkVerdict(
                "UNKNOWN",
                time.monotonic() - t0,
                scen,
                note=f"counterexample not reproduced by model/ ({why}): encoding bug",
            )
    return ChunkVerdict("COUNTEREXAMPLE", time.monotonic() - t0, scen)


def _templates(tails_only: bool) -> tuple[Template, ...]:
    return tuple(t for t in TEMPLATES if t[2] or not tails_only)


# the pass bound proved in this process, by (semantics, scope, templates): every bounded
# PROVED verdict of a semantics over the same templates rests on the same bound
_PASS_BOUND: dict[tuple[object, ...], ChunkVerdict] = {}


def pass_bound(
    sem: Semantics,
    timeout_ms: int,
    scope: encoding_chunked.Scope = encoding_chunked.SCOPE,
    tails_only: bool = False,
) -> ChunkVerdict:
    """``termination`` over exactly the templates a bounded verdict covers: every run of
    them (no premise but start-up and the request rules, so under any precondition too)
    has ended within ``scope.passes`` passes, so the unrolling cuts none short. A bounded
    PROVED verdict of another theorem needs it (its violation asks for a run that has
    ended); a counterexample does not (it is replayed through model/)."""
    key = (
        sem.name,
        scope,
        _templates(tails_only),
        encoding_chunked.symbolic_config,
        encoding_chunked.derive,
        encoding_chunked.startup,
        encoding_chunked.run_loop,
        encoding_chunked.result_of,
    )
    if key not in _PASS_BOUND:
        v = counterexample("termination", sem, (), timeout_ms, scope, tails_only)
        if v.status == "UNKNOWN":  # out of time, or Z3's unknown: never kept
            return v
        _PASS_BOUND[key] = v
    return _PASS_BOUND[key]


def check(
    thm: str,
    sem_name: str,
    assumed: Sequence[str],
    timeout_ms: int = 300_000,
    scope: encoding_chunked.Scope = encoding_chunked.SCOPE,
    tails_only: bool = False,
) -> ChunkVerdict:
    """PROVED / COUNTEREXAMPLE / UNKNOWN over the scope (``tails_only``: its layouts with
    partial tails on, beside a layered proof of the rest). The other theorems are about
    runs that end within the unrolled passes: a PROVED verdict of one of them comes only
    with ``pass_bound`` proved over the same templates (else UNKNOWN)."""
    sem = get_semantics(sem_name)
    t0 = time.monotonic()
    v = counterexample(thm, sem, assumed, timeout_ms, scope, tails_only)
    ends = (
        f"every run ends within {scope.passes} passes"
        if thm == "termination"
        else f"runs that end within {scope.passes} passes"
    )
    if thm != "termination" and v.status == "PROVED":
        left = max(1000, timeout_ms - int((time.monotonic() - t0) * 1000))
        bound = pass_bound(sem, left, scope, tails_only)
        if bound.status != "PROVED":
            v = ChunkVerdict(
                "UNKNOWN",
                v.seconds,
                None,
                "no counterexample, but the pass bound over the same layouts is "
                f"not proved (termination: {bound.status} {bound.note})",
            )
        else:
            ends += " (termination over the same layouts: every run ends within them)"
    cost = (
        "valid hits: complete chunks by 0.33.0's rules (model/maximality_chunked.py); a "
        "maximality failure costs hit tokens (recomputed on the GPU), not correctness"
        if thm == "maximality"
        else ""
    )
    note = "; ".join(x for x in (f"bounded scope: {scope.words()}; {ends}", cost, v.note) if x)
    return ChunkVerdict(v.status, time.monotonic() - t0, v.counterexample, note)


def witness(
    thm: str,
    sem_name: str,
    assumed: Sequence[str],
    timeout_ms: int = 120_000,
    scope: encoding_chunked.Scope = encoding_chunked.SCOPE,
    tail: bool = False,
) -> Witness:
    """A run the premises of a PROVED result admit, with a non-zero hit that restores a
    Mamba state (``proofs.witness`` for 0.33.0): the least such, replayed through
    model/ (same hit, a Mamba load). For maximality the premise is a valid hit
    (``encoding_chunked.valid_hit``) whose load restores a Mamba state; the model must agree it is
    valid. ``tail``: a partial-tail hit, in the templates with partial tails on (their
    proofs are not vacuous either)."""
    sem = get_semantics(sem_name)
    t0 = time.monotonic()
    maximal = thm == "maximality"
    for template in TEMPLATES:
        kinds = template[0]
        if encoding_chunked.MAMBA not in kinds or (tail and not template[2]):
            continue
        b = build(sem, template, assumed, scope, maximal=maximal)
        if b.candidate is None:
            loads = encoding_chunked.load_plan(
                b.enc, b.cfg, b.d, b.result.hit, b.result.tail, b.result.tail_q
            )
        else:  # a valid hit is a complete-chunk hit
            loads = encoding_chunked.load_plan(b.enc, b.cfg, b.d, b.candidate)
        mamba = kinds.index(encoding_chunked.MAMBA)
        goal = z3.And(
            encoding_chunked.finished(b.st),
            encoding_chunked.active(b.result),
            b.cfg.prefix_caching,
            loads[mamba].pending > 0,
            b.result.tail if tail else z3.BoolVal(True),
        )
        s = solver(b, goal, timeout_ms)
        if s.check() != z3.sat:
            continue
        try:  # one pinner, one model throughout
            pin = Least(s)
            pin.smallest(b.cfg.prompt, 1)
            m = _pin(pin, b)
            if b.candidate is not None:  # the least valid hit: one witness, run to run
                pin.smallest(b.candidate, 1)
                m = pin.model
        except Undecided as e:
            return Witness(False, time.monotonic() - t0, note=f"witness undecided ({e})")
        scen = scenario_from_model(m, b, sem)
        hit = _int(m, b.result.hit)
        valid = None if b.candidate is None else _int(m, b.candidate)
        o = evaluate(parse_scenario(scen))
        mamba_load = any(ld.blocks and ld.state_position is not None for ld in o.loads)
        if valid is not None:  # the valid hit's load restores the state (Z3: pending > 0)
            lay = o.layout if isinstance(o.layout, ChunkLayout) else None
            ok = lay is not None and is_valid_hit(parse_scenario(scen), lay, valid)
            plan = (
                load_chunked.load_plan(lay, parse_scenario(scen), valid, None)
                if lay is not None and ok
                else None
            )
            mamba_load = plan is not None and any(
                ld.blocks and ld.state_position is not None for ld in plan.loads
            )
        if o.refused or o.hit_tokens != hit or not mamba_load or (tail and o.tail_boundary is None):
            return Witness(
                False,
                time.monotonic() - t0,
                scen,
                hit,
                valid,
                note=f"witness not reproduced by model/ (hit {o.hit_tokens}, "
                f"Z3 {hit}; valid hit {valid}; refused: {o.refused}): "
                "encoding bug",
            )
        return Witness(True, time.monotonic() - t0, scen, hit, valid)
    return Witness(
        False,
        time.monotonic() - t0,
        note=f"no run with a non-zero hit and a Mamba load satisfies the premises "
        f"(scope: {scope.words()}): the proof may be vacuous",
    )
