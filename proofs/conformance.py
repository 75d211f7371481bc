"""Pinning the Z3 encoding to ``model/``: every symbol fixed to a concrete scenario.

``encode_scenario`` builds the exact encoding with every size, flag and store predicate
fixed to the scenario's values and asks Z3 for the (unique) hit and load plan, which a
test compares with ``model.evaluate``. A difference is a bug in the encoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import z3

from model.scenario import Scenario
from model.semantics import get_semantics
from proofs.encoding import (
    MODES,
    Config,
    Enc,
    Store,
    derive,
    finished,
    initial_state,
    load_plan,
    next_pass,
    result_of,
    run_pass,
    select,
)


def _member(blocks: frozenset[int] | None, i: z3.ArithRef) -> z3.BoolRef:
    if blocks is None:
        return z3.BoolVal(True)
    return z3.Or([i == b for b in sorted(blocks)]) if blocks else z3.BoolVal(False)


def concrete_config(s: Scenario) -> Config:
    return Config(
        kinds=tuple(g.kind for g in s.groups),
        gpu=tuple(z3.IntVal(g.gpu_block_size) for g in s.groups),
        factor=z3.IntVal(s.block_size_factor),
        prompt=z3.IntVal(s.prompt_tokens),
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
    )


@dataclass(frozen=True)
class Encoded:
    hit: int | None  # None: deferred
    loads: dict[int, tuple[tuple[int, ...], int | None]]  # group -> (blocks, state)
    unique: bool


def encode_scenario(s: Scenario, passes: int) -> Encoded:
    """The encoding's answer for ``s`` with the loop unrolled ``passes`` times."""
    sem = get_semantics(s.semantics)
    bound = max(s.prompt_tokens // (g.gpu_block_size * s.block_size_factor)
                for g in s.groups) + 2
    enc = Enc(bound=bound)
    cfg = concrete_config(s)
    d = derive(enc, cfg, sem)
    st = run_pass(enc, cfg, d, initial_state(enc, cfg, d, sem), d.order)
    for _ in range(passes - 1):
        st = select(finished(st), st, next_pass(enc, cfg, d, st))
    res = result_of(enc, cfg, d, sem, st)
    loads = load_plan(enc, cfg, d, res.hit)
    solver = z3.Solver()
    solver.add(*enc.cons, finished(st))
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
    solver.add(z3.Or(res.hit != hit, res.deferred != z3.BoolVal(deferred)))
    unique = solver.check() == z3.unsat
    return Encoded(None if deferred else hit, out, unique)
