"""Premise satisfiability of the layered 0.33.0 proofs' lemma queries (issue 23, item 3),
asked in every layered proof of ``python -m proofs``: the complete-chunk lemmas
(``proofs.layers_chunked``), the maximality lemmas (``proofs.maximality_layers_chunked``)
and the partial-tail lemmas (``proofs.tail_layers_chunked``).

Each lemma query is asked without its negated claim (its premises: start-up, the request
rules, the preconditions, the per-group environment, the turn from any state; for
maximality a valid hit), pinned to one request: partial tails off, the group's block
other than the block of a Mamba align group (16) elsewhere in the layout (``block_for``:
32, or 8 for a full-attention group under full-chunk-within-windowed; a Mamba group's is
16), a GPU hit of 64 tokens, prompt 200, for maximality a valid hit of 64; partial tails
on (where 0.33.0 gives every group one block size B, scheduler.py:274-292): B = 32 on
hash blocks of 16, a GPU hit of 64, prompt 200. The premises must be satisfiable there,
and the satisfying assignment is replayed through ``model/`` (``replay``): its request,
the group beside the Mamba group the environment names (every chunk stored), must meet
the theorem's preconditions as a whole layout, be accepted and answer a non-zero hit
whose load restores a Mamba state; a maximality query's valid hit must be valid there
(``model.maximality_chunked.is_valid_hit``). So a contradictory premise in one lemma
query, or one that excludes different block sizes, a GPU hit or a Mamba load, turns the
proof red.

Where vLLM or the preconditions exclude the pin, the query is pinned to what they allow:
a Mamba group outside align mode (prefix caching off; a Mamba group's keeps is asked
with align off too) has no GPU hit and every block size equal (kv_cache_utils.py:878,
:892), and its replay restores no state; ``same-block-size`` gives one block size.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import z3

from model.evaluate import evaluate
from model.maximality_chunked import is_valid_hit
from model.scenario import parse_scenario
from model.semantics import Semantics
from proofs import turn_chunked

FA, SW, MAMBA = turn_chunked.FA, turn_chunked.SW, turn_chunked.MAMBA
COMPUTED, PROMPT, GPU, MAMBA_GPU, SMALL_GPU, WINDOW, VALID = 64, 200, 32, 16, 8, 64, 64
TAIL_BLOCK, TAIL_HASH = 32, 16
TIMEOUT_MS = 20_000

WORDS = ("every lemma query's premises hold on a request with a GPU hit, the group's block "
         "other than the Mamba block (tails on: one block, finer hash blocks), replayed "
         "through model/ with a Mamba load")


@dataclass(frozen=True)
class Pin:
    """The request a query is pinned to: its group of ``kind``, with a Mamba align group
    elsewhere in the layout (``mamba``), prefix caching on or off (``caching``)."""

    kind: str
    mamba: bool
    caching: bool = True
    valid: z3.ArithRef | None = None  # maximality: the query's valid hit
    tails: bool = False  # partial tails on (tail_layers_chunked's configuration)
    block: int = GPU  # the group's block where it may differ from the Mamba block

    @property
    def gpu(self) -> int:
        if self.tails:
            return TAIL_BLOCK
        return MAMBA_GPU if self.kind == MAMBA or not self.caching else self.block

    @property
    def mamba_gpu(self) -> int:
        return TAIL_BLOCK if self.tails else MAMBA_GPU


def block_for(kind: str, assumed: Sequence[str]) -> int:
    """The group's block beside the Mamba block (16) that the theorem's preconditions
    allow for the whole replayed layout: 32 (a multiple of the Mamba block:
    align-divides-blocks), 8 for a full-attention group under full-chunk-within-windowed
    (at most the Mamba block), 16 under same-block-size (one block size)."""
    if "same-block-size" in assumed:
        return MAMBA_GPU
    if "full-chunk-within-windowed" in assumed and kind == FA:
        return SMALL_GPU
    return GPU


def pins(p: Pin, cfg: turn_chunked.Cfg, env: turn_chunked.Env) -> list[z3.BoolRef]:
    """The pinned request over the symbols of ``cfg`` (group 0 of ``p.kind``) and ``env``:
    a plain request (no cap, no EAGLE, nothing in flight, the prefix cache read, Mamba in
    mode align)."""
    out = [cfg.prompt == PROMPT, cfg.bpc == 1, cfg.gpu[0] == p.gpu, z3.Not(cfg.mamba_all),
           cfg.computed == (COMPUTED if p.caching else 0),
           cfg.prefix_caching == z3.BoolVal(p.caching), z3.Not(cfg.skip_reading),
           z3.Not(cfg.in_flight), z3.Not(cfg.has_new_cap), z3.Not(cfg.has_load_cap),
           z3.Not(cfg.eagle[0]), env.has_mamba == z3.BoolVal(p.mamba),
           env.has_windowed == z3.BoolVal(p.mamba or p.kind != FA),
           env.mamba_gpu == p.mamba_gpu]
    out += [w == WINDOW for w in cfg.window if w is not None]
    if p.valid is not None:
        out.append(p.valid == VALID)
    return out


def _scenario(m: z3.ModelRef, cfg: turn_chunked.Cfg, env: turn_chunked.Env, p: Pin,
              sem: Semantics, hash_block: z3.ArithRef | None) -> dict[str, Any]:
    """The satisfying assignment's request as a scenario: group 0 and, where the
    environment has one, a Mamba group of its block size; every chunk stored."""
    def b(e: z3.BoolRef) -> bool:
        return bool(z3.is_true(m.eval(e, model_completion=True)))

    def i(e: z3.ArithRef) -> int:
        return int(m.eval(e, model_completion=True).as_long())

    caching = b(cfg.prefix_caching)
    mode = "align" if caching else "none"
    g0: dict[str, Any] = {"kind": p.kind, "gpu_block_size": i(cfg.gpu[0]), "stored": "all"}
    if cfg.window[0] is not None:
        g0["sliding_window"] = i(cfg.window[0])
    if p.kind == MAMBA:
        g0["mamba_cache_mode"] = mode
    if b(cfg.eagle[0]):
        g0["eagle"] = True
    groups = [g0]
    if b(env.has_mamba) and p.kind != MAMBA:
        groups.append({"kind": MAMBA, "gpu_block_size": i(env.mamba_gpu), "stored": "all",
                       "mamba_cache_mode": mode})
    if p.tails and p.kind == MAMBA:  # partial tails: two groups at least (a single
        # group's hash block is its block, kv_cache_utils.py:853)
        groups.append({"kind": FA, "gpu_block_size": i(cfg.gpu[0]), "stored": "all"})
    out: dict[str, Any] = {"semantics": sem.name, "block_size_factor": 1}
    if hash_block is not None:
        out["hash_block_size"] = i(hash_block)
    if i(cfg.bpc) != 1:
        out["blocks_per_chunk"] = i(cfg.bpc)
    out |= {"prompt_tokens": i(cfg.prompt), "num_computed_tokens": i(cfg.computed),
            "groups": groups}
    if not caching:
        out["enable_prefix_caching"] = False
    for flag, name in ((cfg.skip_reading, "skip_reading_prefix_cache"),
                       (cfg.in_flight, "in_flight_transfers")):
        if b(flag):
            out[name] = True
    if b(cfg.has_new_cap):
        out["max_num_new_tokens"] = i(cfg.new_cap)
    if b(cfg.has_load_cap):
        out["max_load_tokens"] = i(cfg.load_cap)
    return out


# the replays done in this process, by scenario text: (why not, or None)
_REPLAYED: dict[str, str | None] = {}


def meets(scen: dict[str, Any], assumed: Sequence[str]) -> bool:
    """Whether the whole layout of ``scen`` meets start-up and the preconditions
    ``assumed`` as the whole-layout encoding states them (``turn_chunked.derive`` without
    an ``Env``; caps-reach-prompt as ``proofs.maximality_layers_chunked`` states it)."""
    from proofs.encoding import Enc
    from proofs.maximality_layers_chunked import precondition

    gs = scen["groups"]
    iv = z3.IntVal
    cfg = turn_chunked.symbolic_config(tuple(g["kind"] for g in gs), "_replay")
    cfg = replace(cfg, gpu=tuple(iv(g["gpu_block_size"]) for g in gs),
                  bpc=iv(scen.get("blocks_per_chunk", 1)),
                  window=tuple(iv(g["sliding_window"]) if "sliding_window" in g else None
                               for g in gs))
    enc = Enc()
    d = turn_chunked.derive(enc, cfg)
    caps = [(cfg.has_new_cap, cfg.new_cap, "max_num_new_tokens"),
            (cfg.has_load_cap, cfg.load_cap, "max_load_tokens")]
    cons = [turn_chunked.startup(enc, cfg), cfg.prompt == scen["prompt_tokens"],
            cfg.computed == scen["num_computed_tokens"],
            cfg.prefix_caching == z3.BoolVal(scen.get("enable_prefix_caching", True))]
    cons += [e == z3.BoolVal(bool(g.get("eagle"))) for e, g in zip(cfg.eagle, gs, strict=True)]
    cons += [z3.And(h, c == scen[k]) if k in scen else z3.Not(h) for h, c, k in caps]
    cons += [precondition(name, enc, cfg, d) for name in assumed]
    s = z3.Solver()
    s.set("timeout", TIMEOUT_MS)
    s.add(*cons, *enc.cons)
    return bool(s.check() == z3.sat)


def replay(scen: dict[str, Any], valid: int | None, caching: bool,
           assumed: Sequence[str] = ()) -> str | None:
    """None when model/ accepts ``scen`` and answers a non-zero hit whose load restores
    a Mamba state (with prefix caching on: align mode), ``valid`` (maximality) is a
    valid hit there, and the whole layout meets the preconditions ``assumed`` (``meets``);
    else why not."""
    key = json.dumps([scen, valid, sorted(assumed)], sort_keys=True)
    if key not in _REPLAYED:
        s = parse_scenario(scen)
        o = evaluate(s)
        why = None
        if not meets(scen, assumed):
            why = f"the replayed layout does not meet {', '.join(assumed) or 'start-up'}"
        elif o.refused is not None:
            why = f"model/ refuses it ({o.refused})"
        elif not o.hit_tokens:
            why = f"model/ answers hit {o.hit_tokens}"
        elif caching and not any(ld.blocks and ld.state_position is not None
                                 for ld in o.loads):
            why = "its load restores no Mamba state in model/"
        elif valid is not None and not (o.layout is not None and is_valid_hit(
                s, o.layout, valid)):  # type: ignore[arg-type]
            why = f"the valid hit {valid} is not valid in model/"
        _REPLAYED[key] = why
    return _REPLAYED[key]


# the solved premises in this process, by what the lemma query is built from (``key``: the
# lemma, the kind, the semantics' steps the query reads, not its name) and the pin: the
# 0.33.0 semantics share most lemma queries, and building one costs more than its answer.
# Each holds (why not, or None; the scenario; the valid hit; the query, kept alive); the
# replay is per semantics (``replay``'s own cache)
Solved = tuple[str | None, dict[str, Any] | None, int | None, list[z3.BoolRef]]
_HELD: dict[tuple[object, ...], Solved] = {}


def holds(build: Callable[[], list[z3.BoolRef]], key: tuple[object, ...], p: Pin,
          sem: Semantics, cfg: turn_chunked.Cfg, env: turn_chunked.Env,
          hash_block: z3.ArithRef | None = None, assumed: Sequence[str] = ()) -> str | None:
    """None when the premises ``build()`` returns (already pinned, ``pins``) are
    satisfiable and their assignment replays through model/ in ``sem`` under the
    theorem's preconditions ``assumed`` (``replay``); else why not."""
    k = (key, p.kind, p.mamba, p.caching, p.tails, p.block, p.valid is not None,
         tuple(sorted(assumed)))
    if k not in _HELD:
        q = build()
        s = z3.Solver()
        s.set("timeout", TIMEOUT_MS)
        s.add(*q)
        res = s.check()
        if res != z3.sat:
            _HELD[k] = ("its premises are not satisfiable there" if res == z3.unsat
                        else "the solver returned unknown", None, None, q)
        else:
            m = s.model()
            valid = None if p.valid is None else int(
                m.eval(p.valid, model_completion=True).as_long())
            _HELD[k] = (None, _scenario(m, cfg, env, p, sem, hash_block), valid, q)
    unsat, found, hit, _ = _HELD[k]
    if unsat is not None or found is None:
        return unsat
    scen = {**found, "semantics": sem.name}
    why = replay(scen, hit, p.caching, assumed)
    return None if why is None else f"{why}: {json.dumps(scen, sort_keys=True)}"


Check = tuple[str, Callable[[], str | None]]


def query(name: str, checks: Sequence[Check], sem: Semantics) -> list[z3.BoolRef]:
    """``checks`` (a lemma query's words, the check) as a query of a layered proof, named
    ``name``: unsatisfiable exactly when every check passes; the first failure printed."""
    for what, check in checks:
        why = check()
        if why is not None:
            print(f"{name}: FAILED: {what} on {sem.name}: {why}", file=sys.stderr, flush=True)
            return [z3.BoolVal(True)]
    return [z3.BoolVal(False)]
