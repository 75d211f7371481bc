"""Witnesses against vacuity: a proof under premises no run satisfies proves nothing.

For a theorem, a semantics and a precondition set, a witness is a run of the exact
encoding (unrolled, a few blocks per group, small block sizes) that the start-up checks
and the preconditions accept, with a non-zero hit that restores a Mamba state (cache
mode align) — for maximality also a valid hit (``proofs.theorems.valid_hit``) of that
kind. It is replayed through ``model/``: the model must give the same hit, the same
Mamba load and, for maximality, agree that the hit is valid. A theorem is only counted
PROVED with its witness (``proofs.results``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import z3

import proofs.theorems as theorems
from model.evaluate import evaluate
from model.layout import Layout
from model.maximality import is_valid_hit
from model.scenario import parse_scenario
from model.semantics import Semantics
from proofs.check import scenario_from_model
from proofs.encoding import (
    MAMBA,
    MODE_ALIGN,
    Enc,
    derive,
    finished,
    initial_state,
    load_plan,
    next_pass,
    result_of,
    run_pass,
    select,
    startup,
    symbolic_config,
)

PASSES = 2
BLOCKS = 4


@dataclass(frozen=True)
class Witness:
    found: bool
    seconds: float
    scenario: dict[str, Any] | None = None
    hit: int = 0
    valid_hit: int | None = None  # maximality: the valid hit the witness shows
    note: str = ""


# a witness query's budget in Z3's resource count, not wall-clock time: the searches'
# verdicts must not depend on the machine's load (at load 7 a 60 s deadline ran out on
# 0.33.0's tail witness, a FAIL). Calibrated 2026-12-02 on every witness query of the main
# job (the pairs' searches, each query solved alone as here: 77 sat, 7 unsat, none
# unknown): the largest took 9.8 million (2.2 s CPU, a witness query of no-partial-state
# on alt-v033-cap-min); this is 20 times that. A query over it answers unknown (no witness
# from it) on every machine alike.
RLIMIT = 200_000_000
# the searches' wall-clock backstop: far above what the rlimit lets a search take on a
# loaded machine, so the rlimit, not the load, ends a query
BACKSTOP_MS = 600_000


# the unrolled witness query without its block sizes, by (semantics, assumed, maximal,
# passes), built once per process: the block sizes go in at the same place in the
# assertions, so each query is the one built from scratch (same terms, same order)
_BUILT: dict[tuple[object, ...], tuple[list[z3.BoolRef], Any, z3.ArithRef,
                                       z3.ArithRef | None]] = {}


def _query(sem: Semantics, assumed: Sequence[str], maximal: bool, gpu: int, factor: int,
           passes: int, mixed: bool = False
           ) -> tuple[z3.Solver, Any, z3.ArithRef, z3.ArithRef | None]:
    # with the functions that write the premises (a test or mutant may replace them)
    key = (sem.name, tuple(assumed), maximal, passes, theorems.valid_hit,
           theorems.precondition_formula)
    if key not in _BUILT:
        _BUILT[key] = _build(sem, assumed, maximal, passes)
    rest, cfg, res_hit, candidate = _BUILT[key]
    if sem.offloading_config:
        # a blocks_per_chunk layout: chunks of ``factor`` GPU blocks of each group, the
        # groups of other kinds than Mamba in blocks twice the Mamba group's (``mixed``)
        sizes = [cfg.bpc_set, cfg.bpc == factor, cfg.factor == 1] + [
            b == (2 * gpu if mixed and k != MAMBA else gpu)
            for b, k in zip(cfg.gpu, cfg.kinds, strict=True)]
    else:
        sizes = [cfg.factor == factor] + [b == gpu for b in cfg.gpu]
    s = z3.Solver()
    s.add(*(rest[:1] + sizes + rest[1:]))
    return s, cfg, res_hit, candidate


def _build(sem: Semantics, assumed: Sequence[str], maximal: bool, passes: int
           ) -> tuple[list[z3.BoolRef], Any, z3.ArithRef, z3.ArithRef | None]:
    """The witness query's assertions with the block sizes left out (they go after the
    first, the start-up checks)."""
    enc = Enc(bound=BLOCKS)
    cfg = symbolic_config(theorems.TEMPLATE)
    d = derive(enc, cfg, sem)
    init = initial_state(enc, cfg, d, sem)
    cons = [startup(cfg, sem)]
    cons += [k <= BLOCKS for k in d.keys]
    cons += [theorems.precondition_formula(p, enc, cfg, d) for p in assumed]
    st = run_pass(enc, cfg, d, init, d.order)
    for _ in range(passes - 1):
        st = select(finished(st), st, next_pass(enc, cfg, d, st))
    res = result_of(enc, cfg, d, sem, st)
    mamba = [g for g, k in enumerate(cfg.kinds) if k == MAMBA]
    hit = res.hit
    candidate = None
    if maximal:  # the premise maximality rests on: a valid hit exists
        candidate = z3.Int("valid_hit")
        ctx = theorems.Context(enc, cfg, d, sem, res, init.m)
        cons.append(theorems.valid_hit(ctx, candidate))
        hit = candidate
    loads = load_plan(enc, cfg, d, hit, mamba)
    cons += [finished(st), z3.Not(res.deferred), res.hit > 0, hit > 0]
    cons.append(z3.Or([z3.And(cfg.mode[g] == MODE_ALIGN, loads[g].lo < loads[g].hi)
                       for g in mamba]))
    return cons + enc.cons, cfg, res.hit, candidate


# the witnesses found in this process, by the query's key in _BUILT and the functions
# that solve and replay it (a test may replace one): the query reads nothing else (not
# the theorem: theorems with the same premises, maximality apart, ask the same one) and
# each is solved alone (_solve_alone), so a found witness is the one a new search would
# find; a search that found none is not kept
_FOUND: dict[tuple[object, ...], Witness] = {}


def witness(thm_name: str, sem: Semantics, assumed: Sequence[str],
            timeout_ms: int = BACKSTOP_MS) -> Witness:
    maximal = thm_name == "maximality"
    # a witness is a request the engine can produce, as every counterexample is
    assumed = tuple(dict.fromkeys((*theorems.RUNTIME, *assumed)))
    key = (sem, assumed, maximal, theorems.valid_hit, theorems.precondition_formula,
           _build, _query, _solve_alone, replay, scenario_from_model)
    if key in _FOUND:
        return replace(_FOUND[key], seconds=0.0)
    w = _search(sem, assumed, maximal, timeout_ms)
    if w.found:
        _FOUND[key] = w
    return w


def _search(sem: Semantics, assumed: Sequence[str], maximal: bool, timeout_ms: int
            ) -> Witness:
    t0 = time.monotonic()
    deadline = t0 + timeout_ms / 1000
    for passes, gpu, factor, mixed in _layouts(sem):
        left = int((deadline - time.monotonic()) * 1000)
        if left <= 0:
            break
        s, cfg, hit, cand = _query(sem, assumed, maximal, gpu, factor, passes, mixed)
        m = _solve_alone(s, left)
        if m is None:
            continue
        scen = scenario_from_model(m, cfg, sem)
        z_hit = m.eval(hit, model_completion=True).as_long()
        z_cand = None if cand is None else m.eval(cand, model_completion=True).as_long()
        why = replay(scen, z_hit, z_cand)
        if why:
            return Witness(False, time.monotonic() - t0, scen, z_hit, z_cand,
                           f"witness not reproduced by model/ ({why}): encoding bug")
        return Witness(True, time.monotonic() - t0, scen, z_hit, z_cand)
    where = (", blocks_per_chunk 2 (block sizes 1-4)" if sem.offloading_config
             else " (block sizes 1-2)")
    return Witness(False, time.monotonic() - t0,
                   note=f"no run with a non-zero hit and a Mamba state load satisfies the "
                        f"premises (within {PASSES} passes, {BLOCKS} blocks per group"
                        f"{where}): the proof may be vacuous")


def _layouts(sem: Semantics) -> list[tuple[int, int, int, bool]]:
    """(passes, GPU block size, GPU blocks per offloaded block, mixed sizes) in the order
    the witness is searched. From vLLM 0.26.0 (``offloading_config``) only
    blocks_per_chunk layouts of 2 blocks, with mixed block sizes first: the witness then
    shows the premises hold on a layout only blocks_per_chunk gives, and its replay
    through ``model/`` that the encoding reads blocks_per_chunk as the model does."""
    passes = range(1, PASSES + 1)
    if not sem.offloading_config:
        return [(p, g, f, False) for p, g, f in itertools.product(passes, (1, 2), (1, 2))]
    return [(p, g, 2, mixed) for p, mixed, g in itertools.product(passes, (True, False),
                                                                  (1, 2))]


def _solve_alone(s: z3.Solver, timeout_ms: int) -> z3.ModelRef | None:
    """A model of ``s``'s assertions, solved in a fresh Z3 context: the model Z3 picks
    depends on its terms' ids, which in the shared context depend on every query this
    process built before; in a fresh one only on the query (same input, same witness).
    Within ``RLIMIT`` (the fresh context counts from 0) and ``timeout_ms``."""
    ctx = z3.Context()
    alone = z3.Solver(ctx=ctx)
    alone.set("timeout", timeout_ms)
    alone.set("rlimit", RLIMIT)
    alone.add(*(a.translate(ctx) for a in s.assertions()))
    if alone.check() != z3.sat:
        return None
    return alone.model().translate(z3.main_ctx())


def replay(scenario: dict[str, Any], hit: int, valid: int | None) -> str:
    """'' if ``model/`` shows the same run, else what differs."""
    s = parse_scenario(scenario)
    o = evaluate(s)
    if o.refused or not isinstance(o.layout, Layout):  # the encoding covers SEMANTICS
        return f"model refuses it: {o.refused}"
    if o.hit_tokens != hit:
        return f"model gives hit {o.hit_tokens}, Z3 {hit}"
    if valid is not None:
        from model.semantics import get_semantics
        if not is_valid_hit(s, o.layout, get_semantics(s.semantics), valid):
            return f"model says hit {valid} is not valid"
        return ""
    if not any(ld.blocks and s.groups[ld.group].kind == "mamba" for ld in o.loads):
        return "model loads no Mamba block"
    return ""
