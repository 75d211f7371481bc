"""Pinning the unbounded 0.33.0 tail encoding (``proofs.tail_chunked``) to
``model/lookup_chunked.py`` and ``model/load_chunked.py``: the complete-chunk turns and the
tail's steps composed (``tail_chunked.run_lookup``), every input fixed to a concrete
scenario with partial tails on, and Z3 asked for the (unique) answer, the boundary, the
load and the violations (``tests/test_proof_tails_chunked.py`` compares them with the
model). ``mod`` names the tail module, so that a test can hand in a sabotaged copy."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from types import ModuleType
from typing import Any

import z3

from model.lookup_chunked import HIT, HIT_PENDING, MISS, RETRY, answer
from model.scenario import Scenario
from model.semantics import get_semantics
from proofs import tail_chunked as tail_module
from proofs import turn_chunked
from proofs.conformance import _member
from proofs.conformance_chunked import mode_all, release_layout
from proofs.encoding import Enc, Store

CODES = {HIT: 0, HIT_PENDING: 1, RETRY: 2, MISS: 3}


def in_scope(s: Scenario) -> bool:
    """A new request on a layout where its release turns partial tails on."""
    if (s.block_size_factor != 1 or s.output_tokens or s.context_parallel_size != 1
            or s.valid_hit is not None):
        return False
    try:
        return release_layout(s).supports_partial_tail
    except Exception:  # refused layouts are not in scope
        return False


def _table(values: dict[int, int], q: z3.ArithRef) -> z3.ArithRef:
    out: z3.ArithRef = z3.IntVal(CODES[MISS])
    for k, v in sorted(values.items()):
        out = z3.If(q == k, v, out)
    return out


def concrete_config(s: Scenario, mod: ModuleType = tail_module) -> tuple[Any, int, int]:
    """The tail encoding's configuration for ``s``; bounds on chunk indices and on the
    boundaries tried."""
    layout = release_layout(s)
    steps = get_semantics(s.semantics).steps  # its lookup switches
    # one block size: the partial-tail block (scheduler.py:597), where tails are on
    block, tph = s.groups[0].gpu_block_size, layout.tokens_per_hash
    bound = s.prompt_tokens // block + 2
    iv, bv = z3.IntVal, z3.BoolVal

    def chunks(g: int, codes: tuple[str, ...]) -> frozenset[int]:
        grp = s.groups[g]
        return frozenset(i for i in range(bound) if answer(grp, (i + 1) * block, block) in codes)

    stores = tuple(Store(partial(_member, chunks(g, (HIT, HIT_PENDING))),
                         partial(_member, chunks(g, (HIT_PENDING, RETRY))),
                         partial(_member, frozenset(grp.being_loaded)))
                   for g, grp in enumerate(s.groups))
    tails = tuple(partial(_table, {q: CODES[answer(grp, q * tph, block)]
                                   for q in range(1, s.prompt_tokens // tph + 2)
                                   if (q * tph) % block})
                  for grp in s.groups)
    base = turn_chunked.Cfg(
        kinds=tuple(g.kind for g in s.groups), gpu=tuple(iv(block) for _ in s.groups),
        bpc=iv(1), prompt=iv(s.num_tokens), computed=iv(s.num_computed_tokens),
        window=tuple(None for _ in s.groups), eagle=tuple(bv(g.eagle) for g in s.groups),
        prefix_caching=bv(s.enable_prefix_caching),
        skip_reading=bv(s.skip_reading_prefix_cache), in_flight=bv(s.in_flight_transfers),
        has_new_cap=bv(s.max_num_new_tokens is not None), new_cap=iv(s.max_num_new_tokens or 0),
        has_load_cap=bv(s.max_load_tokens is not None), load_cap=iv(s.max_load_tokens or 0),
        stores=stores, mamba_all=bv(mode_all(s)),
        eagle_query_all=steps.eagle_query_all, load_windows=steps.load_windows)
    margin_on = bv(layout.max_eagle_proof_margin > 0)
    tc = mod.TailCfg(base, iv(tph), iv(block // tph), margin_on, tails,
                     tuple(z3.Int(f"hit_end{g}") for g in range(len(s.groups))),
                     get_semantics(s.semantics).steps)
    return tc, bound, 2 * (block // tph) + 1


@dataclass(frozen=True)
class Encoded:
    hit: int | None  # None: deferred
    boundary: int | None  # the partial-tail boundary (None: none)
    loads: dict[int, tuple[tuple[int, ...], int | None]]  # keys (end tokens), Mamba state
    violations: frozenset[str]
    unique: bool
    startup: bool
    past_hashes: bool  # a partial-tail key was looked up past the request's hashes


def startup_on(s: Scenario, mod: ModuleType = tail_module) -> bool:
    """Whether the tail encoding's start-up for a whole layout (``startup``, with the
    release's steps) admits ``s``'s values: for ``s`` of the partial-tail shape
    (``conformance_chunked.tails_shape``), its twin of the release's start-up turning
    partial tails on (``model/layout_chunked.py``, ``ChunkSteps.tail_eagle``)."""
    tc, bound, _ = concrete_config(s, mod)
    # the proof margin as start-up would set it (model/ sets none where tails are off)
    tc = replace(tc, margin_on=z3.Bool("eagle_proof_margin_on"))
    enc = Enc(bound=bound)
    solver = z3.Solver()
    solver.add(mod.startup(enc, tc, True), *enc.cons)
    return bool(solver.check() == z3.sat)


def encode_scenario(s: Scenario, passes: int, mod: ModuleType = tail_module) -> Encoded:
    sem = get_semantics(s.semantics)
    tc, bound, boundaries = concrete_config(s, mod)
    enc = Enc(bound=bound)
    ok = mod.startup(enc, tc, True)
    a, ended = mod.run_lookup(enc, tc, sem, max(1, passes), boundaries)
    loads = mod.load_plan(enc, tc, a)
    violations = {name: f(enc, tc, a) for name, f in mod.VIOLATIONS.items()}
    violations["loads-stored-only"] = z3.Or([mod.violates_loads_stored_only(
        enc, tc, a, z3.IntVal(i)) for i in range(bound)])
    solver = z3.Solver()
    solver.add(*enc.cons)
    # one check (with the lookup ended, where it runs); where it fails, a second check
    # without that tells "no run at all" from "not ended yet"
    solver.push()
    if passes:  # no lookup runs for a request in flight or skipping the prefix cache
        solver.add(ended)
    if solver.check() != z3.sat:
        solver.pop()
        if not passes or solver.check() != z3.sat:
            raise AssertionError(f"the tail encoding has no run for {s}")
        raise AssertionError(f"the encoded lookup has not ended within {passes} passes "
                             f"and {boundaries} boundaries")
    m = solver.model()

    def val(e: z3.ExprRef) -> Any:
        v = m.eval(e, model_completion=True)
        return bool(z3.is_true(v)) if z3.is_bool(v) else int(v.as_long())

    deferred, hit, tail = val(a.deferred), val(a.hit), val(a.tail)
    out: dict[int, tuple[tuple[int, ...], int | None]] = {}
    block = val(tc.block)
    if not deferred and hit:
        for g, ld in loads.items():
            keys = [(c + 1) * block for c in range(val(ld.lo), val(ld.hi))]
            if val(ld.tail_key):
                keys.append(val(ld.key_end))
            state = val(ld.state) if tc.kinds[g] == mod.MAMBA and val(ld.pending) else None
            out[g] = (tuple(keys), state)
    violated = frozenset(n for n, f in violations.items() if val(f))
    solver.push()
    solver.add(z3.Or(a.hit != hit, a.deferred != z3.BoolVal(deferred),
                     a.tail != z3.BoolVal(tail)))
    unique = solver.check() == z3.unsat
    solver.pop()
    return Encoded(None if deferred else hit,
                   val(a.boundary) if tail and not deferred else None, out, violated, unique,
                   val(ok), val(a.past_hashes))

