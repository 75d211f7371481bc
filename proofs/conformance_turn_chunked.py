"""Pinning the unbounded 0.33.0 turn (``proofs.turn_chunked``) to ``model/lookup_chunked.py``:
the turns composed into the whole loop, every input fixed to a concrete scenario, and Z3
asked for the (unique) answer, the load and the violation formulas that hold
(``tests/test_proof_layers_chunked.py`` compares them with the model). ``mod`` names the
encoding module, so that a test can hand in a sabotaged copy and see the comparison fail.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from types import ModuleType
from typing import Any

import z3

from model.lookup_chunked import HIT, HIT_PENDING, RETRY, answer
from model.scenario import Scenario
from model.semantics import get_semantics
from proofs import turn_chunked as turn_module
from proofs.conformance import _member
from proofs.conformance_chunked import mode_all, release_layout
from proofs.encoding import Enc, Store


def in_scope(s: Scenario) -> bool:
    """What the unbounded encoding covers: any layout, factor 1, no partial tails
    (``prefix_match_unit`` unset), a new request."""
    return (s.block_size_factor == 1 and s.hash_block_size is None and s.output_tokens == 0
            and s.context_parallel_size == 1 and s.valid_hit is None
            and not any(g.stored_tails or g.pending_tails or g.deferred_tails
                        for g in s.groups))


def concrete_config(s: Scenario, mod: ModuleType = turn_module) -> tuple[Any, int]:
    """The turn encoding's configuration for ``s``, and a bound on its chunk indices."""
    layout = release_layout(s)  # its release's start-up (its steps)
    steps = get_semantics(s.semantics).steps  # its lookup switches
    tpcs = [c.tokens_per_chunk for c in layout.groups]
    bound = max(s.prompt_tokens // t for t in tpcs) + 2
    iv, bv = z3.IntVal, z3.BoolVal

    def chunks(g: int, codes: tuple[str, ...]) -> frozenset[int]:
        grp, t = s.groups[g], tpcs[g]
        return frozenset(i for i in range(bound) if answer(grp, (i + 1) * t, t) in codes)

    stores = tuple(Store(partial(_member, chunks(g, (HIT, HIT_PENDING))),
                         partial(_member, chunks(g, (HIT_PENDING, RETRY))),
                         partial(_member, frozenset(grp.being_loaded)))
                   for g, grp in enumerate(s.groups))
    cfg = mod.Cfg(
        kinds=tuple(g.kind for g in s.groups),
        gpu=tuple(iv(g.gpu_block_size) for g in s.groups), bpc=iv(layout.blocks_per_chunk),
        prompt=iv(s.num_tokens), computed=iv(s.num_computed_tokens),
        window=tuple(None if g.sliding_window is None else iv(g.sliding_window)
                     for g in s.groups),
        eagle=tuple(bv(g.eagle) for g in s.groups),
        prefix_caching=bv(s.enable_prefix_caching),
        skip_reading=bv(s.skip_reading_prefix_cache), in_flight=bv(s.in_flight_transfers),
        has_new_cap=bv(s.max_num_new_tokens is not None), new_cap=iv(s.max_num_new_tokens or 0),
        has_load_cap=bv(s.max_load_tokens is not None), load_cap=iv(s.max_load_tokens or 0),
        stores=stores, mamba_all=bv(mode_all(s)),
        eagle_query_all=steps.eagle_query_all, load_windows=steps.load_windows)
    return cfg, bound


@dataclass(frozen=True)
class Encoded:
    hit: int | None  # None: deferred
    loads: dict[int, tuple[tuple[int, ...], int | None]]  # keys (end tokens), Mamba state
    violations: frozenset[str]
    unique: bool
    startup: bool


def encode_scenario(s: Scenario, passes: int, mod: ModuleType = turn_module) -> Encoded:
    """Z3's answer for ``s`` with the loop of ``mod.group_step`` turns run ``passes``
    passes (the model's count), or more where the model runs none (a request in flight
    or skipping the prefix cache), until it has ended."""
    while True:
        try:
            return _encode(s, max(1, passes), mod)
        except _NotEnded:
            if passes >= 2 * MAX_PASSES or (passes and not (s.in_flight_transfers or
                                                            s.skip_reading_prefix_cache)):
                raise
            passes = 2 * max(1, passes)


MAX_PASSES = 8


class _NotEnded(AssertionError):
    pass


def _encode(s: Scenario, passes: int, mod: ModuleType) -> Encoded:
    sem = get_semantics(s.semantics)
    cfg, bound = concrete_config(s, mod)
    enc = Enc(bound=bound)
    d = mod.derive(enc, cfg)
    ok = mod.startup(enc, cfg)
    st = mod.run_loop(enc, cfg, d, sem, passes)
    r = mod.result_of(enc, cfg, d, st)
    loads = mod.load_plan(enc, cfg, d, r.hit)
    violations = {name: f(enc, cfg, d, r) for name, f in mod.VIOLATIONS.items()}
    solver = z3.Solver()
    solver.add(*enc.cons)
    # one check where the loop has ended (the common case); where it has not, a second
    # check without that tells "no run at all" from "not ended yet"
    solver.push()
    solver.add(mod.finished(st))
    if solver.check() != z3.sat:
        solver.pop()
        if solver.check() != z3.sat:
            raise AssertionError(f"the encoding has no run for {s}")
        raise _NotEnded(f"the encoded loop has not ended within {passes} passes")
    m = solver.model()

    def val(e: z3.ExprRef) -> int | bool:
        v = m.eval(e, model_completion=True)
        return bool(z3.is_true(v)) if z3.is_bool(v) else int(v.as_long())

    deferred, hit = bool(val(r.deferred)), int(val(r.hit))
    out: dict[int, tuple[tuple[int, ...], int | None]] = {}
    if not deferred and hit:
        for g, ld in loads.items():
            lo, hi, tpc = int(val(ld.lo)), int(val(ld.hi)), int(val(d.tpc[g]))
            state = (int(val(ld.state)) if cfg.kinds[g] == mod.MAMBA and val(ld.pending)
                     else None)
            out[g] = (tuple((c + 1) * tpc for c in range(lo, hi)), state)
    violated = frozenset(n for n, f in violations.items() if val(f))
    solver.push()
    solver.add(z3.Or(r.hit != hit, r.deferred != z3.BoolVal(deferred)))
    unique = solver.check() == z3.unsat
    solver.pop()
    return Encoded(None if deferred else hit, out, violated, unique, bool(val(ok)))
