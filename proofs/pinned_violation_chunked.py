"""The layered 0.33.0 proof's property step, pinned to the committed counterexamples
(issue 23): each theorem's violation term, exactly as ``layers_chunked.final_query``
builds it (``layers_chunked.final_terms``: the loop's end ``y``, the summary's facts
there, ``turn_chunked.VIOLATIONS[thm]``), must be satisfiable on the counterexamples of
``docs/counterexamples/`` that ``model/`` replays as violating the theorem.

A counterexample is used when it is of the chunked family, in the turn encoding's scope
(``conformance_turn_chunked.in_scope``) and ``model/`` (the scenario's own semantics, its
preconditions not enforced) answers a hit that violates the theorem. The query's
one group is bound to a group of the counterexample of the proved kind (its sizes, its
store's answers for every chunk the prompt reaches), the per-group environment to the
rest of the layout, the request's fields to the scenario's, and ``y`` to the model's hit
end; the preconditions are left out (a counterexample may break one). Some group must
make the violation satisfiable: a property step made vacuous (its violation dropped or
weakened so that the counterexample no longer violates it) turns ``python -m proofs``
red, its FAILED line naming the counterexample.
"""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path

import z3

from model import layout_chunked
from model.evaluate import evaluate
from model.scenario import Scenario, parse_scenario
from model.semantics import get_semantics
from proofs import conformance_turn_chunked, turn_chunked

COUNTEREXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "counterexamples"


@cache
def cases(thm: str) -> tuple[tuple[str, Scenario, int], ...]:
    """(file name, scenario, model's hit) of each committed counterexample of ``thm``
    that the pin uses."""
    out = []
    for f in sorted(COUNTEREXAMPLES.glob(f"{thm}--*.json")):
        s = parse_scenario(json.loads(f.read_text()))
        if not get_semantics(s.semantics).chunked or not conformance_turn_chunked.in_scope(s):
            continue
        o = evaluate(s, enforce=False)
        if o.hit_tokens and any(v.invariant == thm for v in o.violations):
            out.append((f.name, s, o.hit_tokens))
    return tuple(out)


def _violated(thm: str, kind: str, s: Scenario, hit: int, g: int) -> bool:
    """``final_terms(thm, (), kind)`` bound to group ``g`` of ``s`` and its hit ``hit``
    is satisfiable."""
    from proofs import layers_chunked  # it imports this module

    f = layers_chunked.final_terms(thm, (), kind, get_semantics(s.semantics).steps)
    x, cfg, env = f.x, f.x.cfg, f.x.env
    conc, bound = conformance_turn_chunked.concrete_config(s)
    layout = layout_chunked.resolve_layout(s)
    grp, iv = s.groups[g], z3.IntVal
    kinds = [h.kind for h in s.groups]
    mamba = [h.gpu_block_size for h in s.groups if h.kind == turn_chunked.MAMBA]
    binds = [cfg.gpu[0] == grp.gpu_block_size, cfg.bpc == layout.blocks_per_chunk,
             cfg.prompt == s.num_tokens, cfg.computed == s.num_computed_tokens,
             cfg.eagle[0] == grp.eagle, cfg.prefix_caching == s.enable_prefix_caching,
             cfg.skip_reading == s.skip_reading_prefix_cache,
             cfg.in_flight == s.in_flight_transfers,
             cfg.has_new_cap == (s.max_num_new_tokens is not None),
             cfg.new_cap == (s.max_num_new_tokens or 0),
             cfg.has_load_cap == (s.max_load_tokens is not None),
             cfg.load_cap == (s.max_load_tokens or 0),
             env.has_windowed == any(k != turn_chunked.FA for k in kinds),
             env.has_mamba == bool(mamba), f.y == s.num_computed_tokens + hit]
    if mamba:
        binds.append(env.mamba_gpu == mamba[-1])
    w = cfg.window[0]
    if w is not None:
        binds.append(w == grp.sliding_window)
    sym, con = cfg.stores[0], conc.stores[g]
    for i in range(bound):
        binds += [sym.stored(iv(i)) == con.stored(iv(i)),
                  sym.deferred(iv(i)) == con.deferred(iv(i)),
                  sym.loading(iv(i)) == con.loading(iv(i))]
    solver = z3.Solver()
    solver.set("timeout", 10_000)
    solver.add(*layers_chunked._finish(x.enc, x.premises + [f.violation] + binds))
    return bool(solver.check() == z3.sat)


# the theorems whose property step (``layers_chunked.final_query``) is pinned: those
# with a committed counterexample in scope (leaves-last-token has none: not pinned)
PINNED = ("no-partial-state", "loads-stored-only")


_DONE: dict[str, str | None] = {}


def check(thm: str) -> str | None:
    """None when each counterexample of ``thm`` makes the property step's violation
    satisfiable at some group of a proved kind; else the first failure (one line)."""
    if thm in _DONE:
        return _DONE[thm]
    why = None if cases(thm) else f"no committed counterexample of {thm} in scope"
    for name, s, hit in cases(thm):
        from proofs import layers_chunked  # it imports this module

        groups = [(g, h.kind) for g, h in enumerate(s.groups)
                  if h.kind in layers_chunked.final_kinds(thm)]
        if why is None and not any(_violated(thm, k, s, hit, g) for g, k in groups):
            why = (f"{name}: model/ replays it as violating {thm} (hit {hit}), yet the "
                   "property step's violation (layers_chunked.final_terms) is false there")
            break
    _DONE[thm] = why
    return why


def name(thm: str) -> str:
    n = len(cases(thm))
    return (f"pinned: the property step's violation holds on {thm}'s committed "
            f"counterexamples ({n} in scope)")


def query(thm: str) -> list[z3.BoolRef]:
    """``check`` as a query: unsatisfiable exactly when it passed; a failure is also
    printed (stderr)."""
    why = check(thm)
    if why is not None:
        print(f"{name(thm)}: FAILED: {why}", file=sys.stderr, flush=True)
    return [z3.BoolVal(why is not None)]
