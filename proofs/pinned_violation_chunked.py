"""The layered 0.33.0 proof's property steps, pinned to the committed counterexamples
(issue 23): each theorem's violation term, exactly as the layered proof builds it
(``layers_chunked.final_terms``: ``turn_chunked.VIOLATIONS[thm]`` at the loop's end ``y``;
``layers_chunked.whole_terms`` for whole-blocks), must be satisfiable on the
counterexamples of ``docs/counterexamples/`` that ``model/`` replays as violating the
theorem.

A counterexample is used when it is of the chunked family, in the turn encoding's scope
(``conformance_turn_chunked.in_scope``) and ``model/`` (the scenario's own semantics, its
preconditions not enforced) answers a hit that violates the theorem. Each step's groups
are bound to distinct groups of the counterexample of their kinds (sizes, EAGLE, the
store's answers for every chunk the prompt reaches), the per-group environment to the
layout, the request's fields to the scenario's, and ``y`` to the model's hit end; the
preconditions and the summary's facts at ``y`` are left out (a counterexample breaks one
of them: that is why it violates the theorem). Some step and binding must make the
violation satisfiable: a property step made vacuous (its violation dropped, or weakened
so that no counterexample meets it) turns ``python -m proofs`` red, its FAILED line
naming the counterexample. Theorems without a committed counterexample in scope
(leaves-last-token) are not pinned; a pinned theorem whose counterexamples all left
scope fails.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Callable
from functools import cache, partial
from pathlib import Path
from typing import TYPE_CHECKING

import z3

from model.evaluate import evaluate
from model.scenario import Scenario, parse_scenario
from model.semantics import get_semantics
from proofs import conformance_turn_chunked, turn_chunked
from proofs.conformance_chunked import release_layout
from releases.base import ChunkSteps

if TYPE_CHECKING:
    from proofs.layers_chunked import Final

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


def terms(thm: str, steps: ChunkSteps) -> list[Callable[[], Final]]:
    """The property steps the layered proof asks of ``thm`` (every kind, every case),
    preconditions left out: each builds its terms afresh."""
    from proofs import layers_chunked  # it imports this module

    if thm == "whole-blocks":
        return [partial(layers_chunked.whole_terms, (), kind, case, steps)
                for kind in turn_chunked.KINDS
                for case in (layers_chunked.WHOLE_CASES if kind == turn_chunked.FA
                             else (None,))]
    return [partial(layers_chunked.final_terms, thm, (), kind, steps)
            for kind in layers_chunked.final_kinds(thm)]


def _violated(build: Callable[[], Final], s: Scenario, hit: int) -> bool:
    """The step's violation is satisfiable with its groups bound to some distinct groups
    of ``s`` of their kinds and ``y`` to the model's hit end."""
    from proofs import layers_chunked  # it imports this module

    kinds = tuple(h.kind for h in s.groups)
    want = build().x.cfg.kinds
    for groups in itertools.permutations(range(len(kinds)), len(want)):
        if tuple(kinds[g] for g in groups) != want:
            continue
        f = build()
        solver = z3.Solver()
        solver.set("timeout", 10_000)
        solver.add(*layers_chunked._finish(f.x.enc, f.x.premises + [f.violation]
                                           + _binds(f, s, hit, groups)))
        if solver.check() == z3.sat:
            return True
    return False


def _binds(f: Final, s: Scenario, hit: int, groups: tuple[int, ...]) -> list[z3.BoolRef]:
    """``f``'s configuration, environment and ``y`` bound to ``s`` (the query's group
    ``c`` to ``s``'s group ``groups[c]``) and its hit."""
    cfg, env, iv = f.x.cfg, f.x.env, z3.IntVal
    conc, bound = conformance_turn_chunked.concrete_config(s)
    kinds = [h.kind for h in s.groups]
    mamba = [h.gpu_block_size for h in s.groups if h.kind == turn_chunked.MAMBA]
    out = [cfg.bpc == release_layout(s).blocks_per_chunk,
           cfg.prompt == s.num_tokens, cfg.computed == s.num_computed_tokens,
           cfg.prefix_caching == s.enable_prefix_caching,
           cfg.skip_reading == s.skip_reading_prefix_cache,
           cfg.in_flight == s.in_flight_transfers,
           cfg.has_new_cap == (s.max_num_new_tokens is not None),
           cfg.new_cap == (s.max_num_new_tokens or 0),
           cfg.has_load_cap == (s.max_load_tokens is not None),
           cfg.load_cap == (s.max_load_tokens or 0),
           env.has_windowed == any(k != turn_chunked.FA for k in kinds),
           env.has_mamba == bool(mamba), f.y == s.num_computed_tokens + hit]
    if mamba:
        out.append(env.mamba_gpu == mamba[-1])
    for c, g in enumerate(groups):
        grp = s.groups[g]
        out += [cfg.gpu[c] == grp.gpu_block_size, cfg.eagle[c] == grp.eagle]
        w = cfg.window[c]
        if w is not None:
            out.append(w == grp.sliding_window)
        sym, con = cfg.stores[c], conc.stores[g]
        for i in range(bound):
            out += [sym.stored(iv(i)) == con.stored(iv(i)),
                    sym.deferred(iv(i)) == con.deferred(iv(i)),
                    sym.loading(iv(i)) == con.loading(iv(i))]
    return out


# the theorems whose property step (``layers_chunked.final_query``, ``whole_query``) is
# pinned: those with a committed counterexample in scope (leaves-last-token has none)
PINNED = ("no-partial-state", "loads-stored-only", "whole-blocks")


_DONE: dict[str, str | None] = {}


def check(thm: str) -> str | None:
    """None when each counterexample of ``thm`` makes the property step's violation
    satisfiable at some group of a proved kind; else the first failure (one line)."""
    if thm in _DONE:
        return _DONE[thm]
    why = None if cases(thm) else f"no committed counterexample of {thm} in scope"
    for name, s, hit in cases(thm):
        steps = get_semantics(s.semantics).steps
        if why is None and not any(_violated(b, s, hit) for b in terms(thm, steps)):
            why = (f"{name}: model/ replays it as violating {thm} (hit {hit}), yet the "
                   "property step's violation (layers_chunked.final_terms/whole_terms) "
                   "is false there")
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
