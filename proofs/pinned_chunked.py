"""The layered 0.33.0 proof's hand-written premises, pinned to layouts ``model/`` accepts
(issue 23): the per-group environment (``turn_chunked.derive`` with an ``Env``: what a
query about a few groups may assume about the rest of the layout) and the start-up and
request rules (``turn_chunked.startup``).

Each layout of ``LAYOUTS`` (different block sizes per group, non-zero GPU hits, Mamba in
mode align and outside it) is first run through ``model/`` (it must be accepted), then
bound to the encodings: to the whole layout (``derive`` without an ``Env``) and to each
of its groups alone and beside each other group, with the ``Env`` taking the rest of the
layout's values. Every binding must be satisfiable: a tightening of the environment or
of a start-up rule that shrinks what the lemmas cover makes one unsatisfiable, and
``python -m proofs`` fails (``query``).
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import replace
from typing import Any

import z3

from model import layout_chunked
from model.evaluate import evaluate
from model.scenario import Scenario, parse_scenario
from proofs import turn_chunked
from proofs.conformance_chunked import release_layout
from proofs.encoding import Enc

FA, SW, MAMBA = turn_chunked.FA, turn_chunked.SW, turn_chunked.MAMBA


def _g(kind: str, gpu: int, **more: Any) -> dict[str, Any]:
    return {"kind": kind, "gpu_block_size": gpu, "stored": "all", **more}


# (blocks_per_chunk, prompt tokens, num_computed_tokens, prefix caching, groups)
Layout = tuple[int, int, int, bool, tuple[dict[str, Any], ...]]
LAYOUTS: tuple[Layout, ...] = (
    (1, 200, 64, True, (_g(FA, 16), _g(MAMBA, 32))),
    (2, 400, 128, True, (_g(FA, 16), _g(SW, 32, sliding_window=64), _g(MAMBA, 64))),
    (1, 150, 64, True, (_g(FA, 32), _g(SW, 16, sliding_window=40))),
    (1, 120, 0, False, (_g(FA, 16), _g(MAMBA, 16))),
    (2, 100, 32, True, (_g(MAMBA, 32),)),
    (1, 300, 96, True, (_g(FA, 32), _g(FA, 16), _g(SW, 48, sliding_window=100),
                        _g(MAMBA, 96))),
)
NAMES = "different block sizes, non-zero GPU hits, Mamba in mode align and outside it"


def scenario(sem: str, i: int) -> dict[str, Any]:
    """Layout ``i`` of ``LAYOUTS`` as a scenario of semantics ``sem``."""
    bpc, prompt, computed, caching, groups = LAYOUTS[i]
    gs = [dict(g) for g in groups]
    for g in gs:
        if g["kind"] == MAMBA:
            g["mamba_cache_mode"] = "align" if caching else "none"
    out: dict[str, Any] = {"semantics": sem, "block_size_factor": 1}
    if bpc != 1:
        out["blocks_per_chunk"] = bpc
    out |= {"prompt_tokens": prompt, "num_computed_tokens": computed, "groups": gs}
    if not caching:
        out["enable_prefix_caching"] = False
    return out


def _bind(cfg: turn_chunked.Cfg, lay: Layout, groups: tuple[int, ...]) -> list[z3.BoolRef]:
    """``cfg`` (one config group per layout group of ``groups``) at layout ``lay``."""
    bpc, prompt, computed, caching, gs = lay
    out = [cfg.bpc == bpc, cfg.prompt == prompt, cfg.computed == computed,
           cfg.prefix_caching == caching, z3.Not(cfg.skip_reading)]
    for c, g in enumerate(groups):
        out.append(cfg.gpu[c] == gs[g]["gpu_block_size"])
        w = cfg.window[c]
        if w is not None:
            out.append(w == gs[g]["sliding_window"])
    return out


def _sat(cons: list[z3.BoolRef]) -> bool:
    s = z3.Solver()
    s.set("timeout", 10_000)
    s.add(*cons)
    return bool(s.check() == z3.sat)


def _whole(lay: Layout) -> bool:
    """The whole layout: start-up and ``derive`` without an ``Env`` (concrete sizes)."""
    bpc, _, _, _, gs = lay
    kinds = tuple(g["kind"] for g in gs)
    cfg = turn_chunked.symbolic_config(kinds, "_pin")
    cfg = replace(cfg, gpu=tuple(z3.IntVal(g["gpu_block_size"]) for g in gs),
                  bpc=z3.IntVal(bpc),
                  window=tuple(z3.IntVal(g["sliding_window"]) if g["kind"] == SW else None
                               for g in gs))
    enc = Enc()
    turn_chunked.derive(enc, cfg)
    return _sat([turn_chunked.startup(enc, cfg)] + _bind(cfg, lay, tuple(range(len(gs))))
                + enc.cons)


def _few(lay: Layout, groups: tuple[int, ...]) -> bool:
    """Layout ``lay``'s ``groups`` as a query about a few groups of an unknown layout sees
    them: start-up, ``derive`` with an ``Env`` bound to the rest of the layout."""
    _, _, _, _, gs = lay
    cfg = turn_chunked.symbolic_config(tuple(gs[g]["kind"] for g in groups), "_pin")
    env = turn_chunked.symbolic_env("_pin")
    mamba = [g["gpu_block_size"] for g in gs if g["kind"] == MAMBA]
    enc = Enc()
    turn_chunked.derive(enc, cfg, env)
    binds = [env.has_windowed == any(g["kind"] != FA for g in gs),
             env.has_mamba == bool(mamba)]
    if mamba:
        binds.append(env.mamba_gpu == mamba[-1])
    return _sat([turn_chunked.startup(enc, cfg)] + _bind(cfg, lay, groups) + binds + enc.cons)


def admits(lay: Layout) -> str | None:
    """None when start-up admits the whole layout ``lay`` (one ``model/`` accepts) and the
    per-group environment each group alone and each ordered pair of groups; else which
    binding failed."""
    if not _whole(lay):
        return "start-up (turn_chunked.startup) excludes it"
    n = len(lay[4])
    for groups in [(g,) for g in range(n)] + list(itertools.permutations(range(n), 2)):
        if not _few(lay, groups):
            return (f"groups {groups}: the per-group environment (turn_chunked.derive) or "
                    "start-up excludes them")
    return None


def layout_of(s: Scenario) -> Layout:
    """A scenario ``model/`` accepts, as the encodings see it: the connector's GPU hit
    (rounded down to the scheduler block, ``model.layout_chunked.connector_tokens``)."""
    lay = release_layout(s)
    groups = tuple(
        {"kind": g.kind, "gpu_block_size": g.gpu_block_size}
        | ({"sliding_window": g.sliding_window} if g.sliding_window is not None else {})
        for g in s.groups)
    return (lay.blocks_per_chunk, s.num_tokens,
            layout_chunked.connector_tokens(lay, s.num_computed_tokens),
            s.enable_prefix_caching, groups)


def admits_tails(s: Scenario) -> str | None:
    """None when a scenario with partial tails on (one ``model/`` accepts) is admitted by
    the tail proof's premises about each of its groups in an unknown layout
    (``tail_chunked.startup`` of a few groups, the per-group environment the tail proof
    takes, ``tail_layers_chunked._env``) and by the complete-chunk ones (``admits``);
    else which binding failed."""
    from proofs import tail_chunked

    why = admits(layout_of(s))
    if why is not None:
        return why
    lay = release_layout(s)
    block, tph = lay.partial_tail_block_size, lay.tokens_per_hash
    margin = any(g.eagle and g.kind == FA for g in s.groups)
    computed = layout_chunked.connector_tokens(lay, s.num_computed_tokens)
    for g, grp in enumerate(s.groups):
        enc = Enc()
        tc = tail_chunked.symbolic_tail_config((grp.kind,), "_pin")
        env = turn_chunked.symbolic_env("_pin")
        turn_chunked.derive(enc, tc.base, env)
        binds = [tc.block == block, tc.tph == tph, tc.base.prompt == s.num_tokens,
                 tc.base.computed == computed, tc.base.eagle[0] == grp.eagle,
                 tc.margin_on == margin, z3.Not(tc.base.skip_reading),
                 env.has_mamba, env.has_windowed, env.mamba_gpu == block]
        if not _sat([tail_chunked.startup(enc, tc, whole=False)] + binds + enc.cons):
            return (f"group {g}: the tail proof's start-up (tail_chunked.startup) or "
                    "environment excludes it")
    return None


# the checks done in this process: by semantics, and (under "layout I") each layout's
# bindings, which read no semantics (``admits``: the encodings' start-up and environment
# alone), so each is solved once per process, not once per semantics. A test that
# replaces an encoding's function empties this one dict
_DONE: dict[str, str | None] = {}


def check(sem: str) -> str | None:
    """None when every layout is accepted by ``model/`` and every binding is
    satisfiable; else the first failure (one line)."""
    if sem in _DONE:
        return _DONE[sem]
    why = None
    for i, lay in enumerate(LAYOUTS):
        o = evaluate(parse_scenario(scenario(sem, i)))
        if o.refused:
            why = f"layout {i}: model/ refuses it ({o.refused})"
        else:
            key = f"layout {i}"
            if key not in _DONE:
                _DONE[key] = admits(lay)
            bad = _DONE[key]
            why = None if bad is None else f"layout {i}: {bad}"
        if why is not None:
            break
    _DONE[sem] = why
    return why


NAME = f"pinned: the per-group environment and start-up admit accepted layouts ({NAMES})"


def query(sem: str) -> list[z3.BoolRef]:
    """``check`` as a query (named ``NAME``): unsatisfiable exactly when it passed; a
    failure is also printed (stderr)."""
    why = check(sem)
    if why is not None:
        print(f"{NAME}: FAILED: {why}", file=sys.stderr, flush=True)
    return [z3.BoolVal(why is not None)]
