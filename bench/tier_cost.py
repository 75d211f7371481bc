"""Findings 003 and 004 on vLLM 0.33.0's CPU tier: the hit tokens each costs on workloads.

    python bench/tier_cost.py [--requests N] [--seed S] [--layout NAME]
        [--workloads chat,shared-prefix,rag,agent] [--tier-chunks 64,256,1024]
        [--policy lru|arc] [--json FILE]

Each workload (``sim.workload``, seeded) runs through the modelled tier
(``sim.tier_sim``, cold GPU cache, one request at a time) on a fresh tier per cell.

Finding 003 (the load cap loses a chunk): the workloads set no
``kv_transfer_params["max_load_tokens"]``, so each request gets one from a seeded cap
mode: ``cap512`` / ``cap1024`` (every request capped at that many tokens: a client's
round budget), ``capL`` (every request capped at the largest multiple of ``L``, the least
common multiple of the chunk sizes, below its prompt's last token: the caps finding 003
names), ``random`` (seeded per request: half the requests uncapped, the rest a cap drawn
from 1 to the prompt, every other one rounded down to a multiple of ``L``, as
``bench/load_cap_loss.py --random`` draws). Two measures per cell:
``same tier``: on the stock run, each request's lookup is also evaluated with the fix on
the same tier answers (the tokens the cap rule costs that request, nothing else changed);
``own tier``: stock and fix each run on their own tier (the fix's loads change what the
tier keeps), total hit tokens compared.

Finding 004 (the EAGLE pop gives a chunk back): the simulator's layouts (``sim.tier_layouts``)
have no EAGLE group and its store path models no EAGLE (replay boundary, decode
hold-back), so an EAGLE layout cannot be run end to end. What it measures: on the stock
uncapped run, each request's lookup evaluated again on the same tier answers with the
attention (sliding-window) group flagged ``eagle`` (the draft group is an attention group
in every real EAGLE row): the requests whose hit drops and the tokens, against the hit
without the flag. A lookup-only proxy on the tier's real contents, not an EAGLE run.
With EAGLE, vLLM retains each prompt's Mamba state one scheduler block lower
(``replay_boundaries``, v1/core/kv_cache_coordinator.py:65-86), where the pop lands when
the EAGLE chunk is the scheduler block (every real EAGLE row; the Triton layout here): a
popped request then loses one chunk (``1-chunk cost`` = popped requests x one window
chunk). The simulator retains the non-EAGLE state, so the proxy's raw drop
(``proxy drop``) often falls past it to an older state or to no hit: an upper bound.

Deterministic (seeded). Exit 0 (it measures); bad input: one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import releases  # noqa: E402
from model.evaluate import Outcome, evaluate  # noqa: E402
from model.scenario import Scenario  # noqa: E402
from sim.tier import POLICIES, TierConfig  # noqa: E402
from sim.tier_layouts import LAYOUTS, TierLayout  # noqa: E402
from sim.tier_sim import LoadCap, TierSim, TierSimConfig  # noqa: E402
from sim.workload import WORKLOADS, Request, make_trace  # noqa: E402

STOCK, FIX = releases.newest("chunked").name, releases.fix_for("003").name
CAP_MODES = ("cap512", "cap1024", "capL", "random")


def lcm_chunk(layout: TierLayout) -> int:
    return math.lcm(*layout.tokens_per_chunk())


def load_cap(mode: str, layout: TierLayout, seed: int) -> LoadCap:
    L = lcm_chunk(layout)
    if mode.startswith("cap") and mode[3:].isdigit():
        budget = int(mode[3:])
        return lambda req: budget
    if mode == "capL":
        return lambda req: max(0, (req.prompt_len - 1) // L * L)

    def draw(req: Request) -> int | None:
        rng = random.Random(f"{seed}/{req.rid}")
        if rng.random() < 0.5:
            return None
        cap = rng.randint(1, req.prompt_len)
        if rng.random() < 0.5 and cap >= L:
            cap = cap // L * L
        return cap
    return draw


class Probe(TierSim):
    """A tier run that evaluates each request's lookup a second time on the same tier
    answers, transformed by ``alt`` (the fix, or the EAGLE flag), and records both hits."""

    def __init__(self, cfg: TierSimConfig, semantics: str, alt: Callable[[Scenario], Scenario],
                 load_cap: LoadCap | None = None) -> None:
        super().__init__(cfg, semantics, load_cap)
        self.alt = alt
        self.pairs: list[tuple[int, int]] = []
        self.new_wrong_state = 0  # the alternative restores a state off its hit, stock not

    def _evaluate(self, s: Scenario) -> Outcome:
        out = super()._evaluate(s)
        alt = evaluate(self.alt(s))
        if out.refused is None and alt.refused is None:
            self.pairs.append((out.hit_tokens or 0, alt.hit_tokens or 0))
            bad = [any(v.invariant == "no-partial-state" for v in o.violations)
                   for o in (out, alt)]
            self.new_wrong_state += bad[1] and not bad[0]
        return out


def with_fix(s: Scenario) -> Scenario:
    return replace(s, semantics=FIX)


def with_eagle(s: Scenario) -> Scenario:
    last = len(s.groups) - 1  # the attention (sliding-window) group, sim.tier_layouts
    return replace(s, groups=tuple(replace(g, eagle=True) if i == last else g
                                   for i, g in enumerate(s.groups)))


def pairs_tally(pairs: list[tuple[int, int]], unit: int | None = None) -> dict[str, Any]:
    """``pairs``: (stock hit, alternative hit) per request."""
    up = [(a, b) for a, b in pairs if b > a]
    down = [(a, b) for a, b in pairs if b < a]
    out: dict[str, Any] = {"lookups": len(pairs), "stock_hit_tokens": sum(a for a, _ in pairs),
                           "alt_hit_tokens": sum(b for _, b in pairs),
                           "alt_higher": len(up), "alt_lower": len(down),
                           "tokens_up": sum(b - a for a, b in up),
                           "tokens_down": sum(a - b for a, b in down)}
    if unit is not None:
        out["every_drop_one_unit"] = all(a - b == unit for a, b in down)
        big = [(a, b) for a, b in down if a - b > unit]
        out["drops_over_one_unit"] = len(big)
        out["tokens_over_one_unit"] = sum(a - b for a, b in big)
    return out


def run_cell(layout: TierLayout, workload: str, n: int, seed: int, chunks: int,
             policy: str) -> dict[str, Any]:
    trace = make_trace(workload, n, seed, layout.hash_block)
    cfg = TierSimConfig(layout, TierConfig(chunks, policy))
    cell: dict[str, Any] = {"workload": workload, "tier_chunks": chunks, "policy": policy,
                            "requests": n, "prompt_tokens": sum(r.prompt_len for r in trace)}
    caps: dict[str, Any] = {}
    for mode in CAP_MODES:
        cap = load_cap(mode, layout, seed)
        probe = Probe(cfg, STOCK, with_fix, cap)
        stock = probe.run(trace, workload)
        fix = TierSim(cfg, FIX, cap).run(trace, workload)
        caps[mode] = {"same_tier": pairs_tally(probe.pairs),
                      "own_tier": {"stock_hit_tokens": stock.hit_tokens,
                                   "fix_hit_tokens": fix.hit_tokens,
                                   "stock_hit_requests": stock.hit_requests,
                                   "fix_hit_requests": fix.hit_requests,
                                   "stock_corrupted": stock.corrupted,
                                   "fix_corrupted": fix.corrupted},
                      "same_tier_new_wrong_state": probe.new_wrong_state}
    cell["finding_003"] = caps
    probe = Probe(cfg, STOCK, with_eagle)
    plain = probe.run(trace, workload)
    # alt is the EAGLE-flagged lookup: its drops are the pop's cost
    cell["finding_004"] = {**pairs_tally(probe.pairs, layout.window_block),
                           "hit_requests": plain.hit_requests,
                           "new_wrong_state": probe.new_wrong_state}
    return cell


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layout", default="nemotronh-swa-tiny-flashinfer")
    ap.add_argument("--workloads", default="chat,shared-prefix,rag,agent")
    ap.add_argument("--tier-chunks", default="64,256,1024")
    ap.add_argument("--policy", default="lru")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    if not 1 <= a.requests <= 100_000:
        return _bad(f"--requests: expected 1 to 100000, got {a.requests}")
    if a.layout not in LAYOUTS:
        return _bad(f"--layout: expected one of {', '.join(LAYOUTS)}, got {a.layout}")
    workloads = tuple(a.workloads.split(","))
    if any(w not in WORKLOADS for w in workloads):
        return _bad(f"--workloads: expected some of {', '.join(WORKLOADS)}, got {a.workloads}")
    try:
        tiers = _ints(a.tier_chunks)
    except ValueError:
        return _bad(f"--tier-chunks: expected comma-separated integers, got {a.tier_chunks}")
    if any(t < 1 for t in tiers):
        return _bad(f"--tier-chunks: expected positive sizes, got {a.tier_chunks}")
    if a.policy not in POLICIES:
        return _bad(f"--policy: expected one of {', '.join(POLICIES)}, got {a.policy}")
    layout = LAYOUTS[a.layout]
    cells = [run_cell(layout, w, a.requests, a.seed, t, a.policy)
             for w in workloads for t in tiers]
    print(f"layout {layout.name} (L = {lcm_chunk(layout)}, window chunk "
          f"{layout.window_block}), policy {a.policy}, {a.requests} requests per cell, "
          f"seed {a.seed}; {STOCK} vs {FIX}")
    print("finding 003: same tier = fix evaluated on the stock run's tier answers; "
          "own tier = each on its own tier")
    print(f"{'workload':14} {'tier':>5} {'cap':8} {'hit tok':>8} {'lossy req':>9} "
          f"{'lost tok':>8} {'fix lower':>9} {'own: stock':>10} {'own: fix':>9} "
          f"{'own diff':>8}")
    for c in cells:
        for mode, r in c["finding_003"].items():
            st, own = r["same_tier"], r["own_tier"]
            print(f"{c['workload']:14} {c['tier_chunks']:>5} {mode:8} "
                  f"{st['stock_hit_tokens']:>8,} {st['alt_higher']:>9,} "
                  f"{st['tokens_up']:>8,} {st['alt_lower']:>9,} "
                  f"{own['stock_hit_tokens']:>10,} {own['fix_hit_tokens']:>9,} "
                  f"{own['fix_hit_tokens'] - own['stock_hit_tokens']:>8,}")
    print("finding 004 (proxy: the same lookup with the window group flagged eagle, "
          "stock uncapped run; 1-chunk cost = popped requests x one window chunk; proxy "
          "drop = the flagged lookup's raw drop, larger where the pop lands below the one "
          "retained Mamba state: EAGLE's lower retained state is not modelled; 001 state = "
          "flagged lookups restoring a Mamba state off their hit where the plain one "
          "does not)")
    print(f"{'workload':14} {'tier':>5} {'hit req':>7} {'hit tok':>8} {'popped req':>10} "
          f"{'1-chunk cost':>12} {'share':>6} {'proxy drop':>10} {'> 1 chunk':>9} "
          f"{'001 state':>9}")
    for c in cells:
        e = c["finding_004"]
        cost = e["alt_lower"] * layout.window_block
        share = cost / e["stock_hit_tokens"] if e["stock_hit_tokens"] else 0.0
        print(f"{c['workload']:14} {c['tier_chunks']:>5} {e['hit_requests']:>7,} "
              f"{e['stock_hit_tokens']:>8,} {e['alt_lower']:>10,} {cost:>12,} "
              f"{share:>6.1%} {e['tokens_down']:>10,} {e['drops_over_one_unit']:>9,} "
              f"{e['new_wrong_state']:>9,}")
    if a.json is not None:
        a.json.write_text(json.dumps({"layout": layout.name, "lcm_chunk": lcm_chunk(layout),
                                      "policy": a.policy, "requests": a.requests,
                                      "seed": a.seed, "stock": STOCK, "fix": FIX,
                                      "cells": cells}, indent=1, sort_keys=True) + "\n")
    return 0


def _bad(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
