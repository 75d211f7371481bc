"""Pinning the Z3 encoding to ``model/``: every symbol fixed to a concrete scenario.

``encode_scenario`` builds the exact encoding with every size, flag and store predicate
fixed to the scenario's values and asks Z3 for the (unique) hit and load plan, the
violation formulas that hold, the valid hits (``valid_hit``), the start-up verdict and
the precondition formulas that hold; ``tests/test_conformance.py`` compares each with
``model/``. A difference is a bug in the encoding. ``mod`` names the encoding module, so
that a test can hand in a sabotaged copy and see the comparison fail.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from types import ModuleType

import z3

from model.scenario import Scenario
from model.semantics import get_semantics
from proofs import encoding as encoding_module
from proofs.encoding import (
    MODES,
    Config,
    Enc,
    Store,
    derive,
)


def _member(blocks: frozenset[int] | None, i: z3.ArithRef) -> z3.BoolRef:
    if blocks is None:
        return z3.BoolVal(True)
    if isinstance(i, z3.IntNumRef):  # a concrete block index (the bounded encoding's)
        return z3.BoolVal(i.as_long() in blocks)
    return z3.Or([i == b for b in sorted(blocks)]) if blocks else z3.BoolVal(False)


def concrete_config(s: Scenario) -> Config:
    """The encoding's configuration for ``s``: its ``prompt`` is request.num_tokens and
    its block sizes the offloading spec's (times the context-parallel factor)."""
    cp = s.context_parallel_size
    return Config(
        kinds=tuple(g.kind for g in s.groups),
        gpu=tuple(z3.IntVal(g.gpu_block_size * cp) for g in s.groups),
        factor=z3.IntVal(s.block_size_factor),
        prompt=z3.IntVal(s.num_tokens),
        computed=z3.IntVal(s.num_computed_tokens),
        window=tuple(None if g.sliding_window is None else z3.IntVal(g.sliding_window)
                     for g in s.groups),
        mode=tuple(None if g.mamba_cache_mode is None else z3.IntVal(MODES[g.mamba_cache_mode])
                   for g in s.groups),
        eagle=tuple(z3.BoolVal(g.eagle) for g in s.groups),
        prefix_caching=z3.BoolVal(s.enable_prefix_caching),
        skip_reading=z3.BoolVal(s.skip_reading_prefix_cache),
        in_flight=z3.BoolVal(s.in_flight_transfers),
        mamba_block_size=z3.IntVal(s.mamba_block_size or 1),
        stores=tuple(
            Store(partial(_member, g.stored), partial(_member, g.deferred),
                  partial(_member, g.being_loaded))
            for g in s.groups
        ),
        bpc=z3.IntVal(s.blocks_per_chunk or 1),
        bpc_set=z3.BoolVal(s.blocks_per_chunk is not None),
    )


@dataclass(frozen=True)
class Encoded:
    hit: int | None  # None: deferred
    loads: dict[int, tuple[tuple[int, ...], int | None]]  # group -> (blocks, state)
    unique: bool
    violations: frozenset[str] = frozenset()  # theorems whose violation formula holds
    valid_hits: frozenset[int] = frozenset()  # hits for which valid_hit holds


def _sat(cons: list[z3.BoolRef], solver: z3.Solver | None = None) -> bool:
    """Whether ``cons`` are satisfiable (on ``solver``, beside what it holds, which keeps
    them off it afterwards)."""
    s = z3.Solver() if solver is None else solver
    s.push()
    s.add(*cons)
    res = s.check()
    s.pop()
    if res == z3.unknown:
        raise AssertionError("conformance query: solver returned unknown")
    return bool(res == z3.sat)


def _bound(s: Scenario) -> int:
    chunk = s.blocks_per_chunk or s.block_size_factor  # GPU blocks per offloaded block
    return max(s.num_tokens // (g.gpu_block_size * s.context_parallel_size * chunk)
               for g in s.groups) + 2


def startup_holds(s: Scenario, mod: ModuleType = encoding_module) -> bool:
    """The encoding's start-up constraints on ``s`` (model: ``resolve_layout``)."""
    cfg = concrete_config(s)
    return _sat([mod.startup(cfg, get_semantics(s.semantics))])


def precondition_holds(name: str, s: Scenario) -> bool:
    """A precondition's formula (``proofs.theorems``) on ``s``."""
    return preconditions_holding(s, [name])[name]


def preconditions_holding(s: Scenario, names: list[str]) -> dict[str, bool]:
    """Each named precondition's formula (``proofs.theorems``) on ``s``, on one solver."""
    from proofs.theorems import precondition_formula

    enc = Enc(bound=_bound(s))
    cfg = concrete_config(s)
    d = derive(enc, cfg, get_semantics(s.semantics))
    formulas = {name: precondition_formula(name, enc, cfg, d) for name in names}
    solver = z3.Solver()
    solver.add(*enc.cons)  # built with every formula: their helpers' definitions
    return {name: _sat([f], solver) for name, f in formulas.items()}


def encode_scenario(s: Scenario, passes: int, mod: ModuleType = encoding_module,
                    formulas: bool = False) -> Encoded:
    """The encoding's answer for ``s`` with the loop unrolled ``passes`` times; with
    ``formulas`` also the violation formulas that hold and the valid hits."""
    from proofs.theorems import THEOREMS, Context, valid_hit

    sem = get_semantics(s.semantics)
    enc = Enc(bound=_bound(s))
    cfg = concrete_config(s)
    d = mod.derive(enc, cfg, sem)
    init = mod.initial_state(enc, cfg, d, sem)
    st = mod.run_pass(enc, cfg, d, init, d.order)
    for _ in range(passes - 1):
        st = mod.select(mod.finished(st), st, mod.next_pass(enc, cfg, d, st))
    res = mod.result_of(enc, cfg, d, sem, st)
    loads = mod.load_plan(enc, cfg, d, res.hit)
    solver = z3.Solver()
    base = list(enc.cons)
    solver.add(*base, mod.finished(st))
    if solver.check() != z3.sat:
        raise AssertionError(f"encoding has no run for {s}")
    m = solver.model()
    deferred = z3.is_true(m.eval(res.deferred, model_completion=True))
    hit = m.eval(res.hit, model_completion=True).as_long()
    out: dict[int, tuple[tuple[int, ...], int | None]] = {}
    for g, ld in loads.items():
        lo = m.eval(ld.lo, model_completion=True).as_long()
        hi = m.eval(ld.hi, model_completion=True).as_long()
        blocks = tuple(range(lo, hi)) if hit and not deferred else ()
        state = m.eval(ld.state_position, model_completion=True).as_long()
        out[g] = (blocks, state if blocks and s.groups[g].kind == "mamba" else None)
    solver.push()
    solver.add(z3.Or(res.hit != hit, res.deferred != z3.BoolVal(deferred)))
    unique = solver.check() == z3.unsat
    solver.pop()
    if not formulas:
        return Encoded(None if deferred else hit, out, unique)
    ctx = Context(enc, cfg, d, sem, res, init.m)
    # build each formula before reading enc.cons: building adds the helpers' definitions
    formulas_of = {name: thm.violation(ctx) for name, thm in THEOREMS.items()
                   if thm.violation is not None}
    h = z3.Int("candidate_hit")
    valid_formula = valid_hit(ctx, h)
    solver.add(*enc.cons[len(base):])  # the formulas' helpers' definitions
    violated = frozenset(name for name, f in formulas_of.items() if _sat([f], solver))
    valid: set[int] = set()
    solver.add(valid_formula)
    # enumerate every candidate the formula accepts (at most num_tokens of them), each
    # found one excluded from then on
    while len(valid) <= s.num_tokens:
        answer = solver.check()
        if answer == z3.unknown:
            raise AssertionError("conformance query: solver returned unknown")
        if answer == z3.unsat:
            break
        v = solver.model().eval(h, model_completion=True).as_long()
        valid.add(v)
        solver.add(h != v)
    return Encoded(None if deferred else hit, out, unique, violated, frozenset(valid))
