"""Finding 001's fix on the model: what it costs in hit tokens and which invariants it keeps,
vLLM 0.33.0 (``vllm-0.33.0``) side by side with the fix as proposed
(``alt-v033-reround-mamba``, docs/findings/001-fix.diff) and the completed fix
(``alt-v033-reround-mamba-rerun``, docs/findings/001-fix-rerun.diff).

    python bench/bench_fix001.py [--per-layout N] [--generated N] [--seed S] [--json FILE]
                                 [--scenarios-out DIR]

The simulator (``python -m sim run``) models one block size for every group, full
attention plus one Mamba group, and the 0.23.0/0.24.0 load; it cannot run 0.33.0's
layouts (per-group block sizes, sliding windows, chunks), so this script measures on the
model instead, on the same stores for both semantics:

1. real layouts: every accepted row of ``docs/layouts-vllm-0.33.0.json``, ``--per-layout``
   stores each, drawn as ``sim.layouts.strategy`` draws them (what one engine writes of a
   prompt, sometimes with a few of one group's chunks evicted) from ``random.Random`` seeded
   per row. A row is "reachable, divisible" when every group's chunk is a multiple of the
   Mamba chunk; the finding's rows (nemotron-h-swa on FlashInfer) are not;
2. the cross-check generator's 0.33.0 scenarios (``sim.crosscheck.gen``: arbitrary stores,
   caps, partial tails, pending/retry answers, EAGLE, and the forced layouts whose
   attention chunk is not a multiple of the Mamba chunk), ``--generated`` distinct ones.

Per family and semantics: scenarios, hits, hit tokens, hit tokens lost against 0.33.0,
loads that restore a Mamba state not at the hit's end (``no-partial-state``), loads of keys
the store does not hold (``loads-stored-only``) and any other invariant broken.
Deterministic: same arguments, same output.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import releases  # noqa: E402
from model.evaluate import evaluate  # noqa: E402
from model.layout_chunked import ChunkLayout  # noqa: E402
from model.real_layouts import LayoutTemplate, load_templates  # noqa: E402
from model.scenario import Scenario, scenario_to_json  # noqa: E402

STOCK, FIX, RERUN = (releases.newest("chunked").name, releases.fix_for("001").name,
                     releases.fix_for("001", completed=True).name)
SIDES = (STOCK, FIX, RERUN)


@dataclass
class Tally:
    scenarios: int = 0
    hits: Counter[str] = field(default_factory=Counter)
    hit_tokens: Counter[str] = field(default_factory=Counter)
    broken: Counter[str] = field(default_factory=Counter)  # "side invariant" -> scenarios
    changed: Counter[str] = field(default_factory=Counter)  # fix -> hits it changed

    def add(self, s: Scenario) -> bool:
        """Evaluate ``s`` on both sides; False if 0.33.0 refuses it."""
        outs = [evaluate(s, side) for side in SIDES]
        if any(o.refused for o in outs):
            return False
        self.scenarios += 1
        for side, o in zip(SIDES, outs, strict=True):
            self.hits[side] += bool(o.hit_tokens)
            self.hit_tokens[side] += o.hit_tokens or 0
            for name in sorted({v.invariant for v in o.violations}):
                self.broken[f"{side} {name}"] += 1
        for side, o in zip(SIDES[1:], outs[1:], strict=True):
            self.changed[side] += o.hit_tokens != outs[0].hit_tokens
        return True

    def row(self, name: str) -> dict[str, Any]:
        base = self.hit_tokens[STOCK]
        lost = {side: base - self.hit_tokens[side] for side in SIDES[1:]}
        return {
            "family": name, "scenarios": self.scenarios, "changed": dict(self.changed),
            "hits": dict(self.hits), "hit_tokens": dict(self.hit_tokens),
            "lost_tokens": lost,
            "lost_percent": {side: round(100 * v / base, 2) if base else 0.0
                             for side, v in lost.items()},
            "broken": dict(sorted(self.broken.items())),
        }


def divisible(layout: ChunkLayout) -> bool:
    """Every group's chunk is a multiple of the Mamba chunk (the fix cannot change a hit)."""
    m = layout.mamba_align_size
    return m is None or all(g.tokens_per_chunk % m == 0 for g in layout.groups)


def draw_store(rng: random.Random, t: LayoutTemplate) -> Scenario:
    """``sim.layouts.strategy.real_layout_scenarios``' draw, from ``rng``."""
    bpc = t.blocks_per_chunk or 1
    scheduler_block = math.lcm(*(g.block_size for g in t.groups))
    unit = t.hash_block_size or scheduler_block
    prompt = max(1, rng.randint(1, 3 * scheduler_block * bpc // unit) * unit
                 + rng.randint(0, unit - 1))
    gpu_hit_blocks = rng.randint(0, (prompt - 1) // scheduler_block)
    most = prompt + scheduler_block * bpc
    stored_tokens = most - rng.randint(0, most)
    stored: list[Any] = [list(range(stored_tokens // (g.block_size * bpc))) for g in t.groups]
    if rng.random() < 0.5:
        victim = rng.randrange(len(t.groups))
        # Hypothesis's st.sets draws few elements: evict a handful of keys
        k = min(len(stored[victim]), rng.choice((0, 1, 1, 2, 3, 5)))
        evicted = set(rng.sample(stored[victim], k))
        stored[victim] = [b for b in stored[victim] if b not in evicted]
    return t.scenario(semantics=STOCK, prompt_tokens=prompt,
                      num_computed_tokens=gpu_hit_blocks * scheduler_block, stored=stored)


def real_layouts(per_layout: int, seed: int, out: Path | None = None
                 ) -> tuple[dict[str, Tally], dict[str, Tally]]:
    per_row: dict[str, Tally] = {}
    families = {"real, divisible": Tally(), "real, not divisible (finding 001)": Tally()}
    for t in load_templates():
        if not t.accepted:
            continue
        rng = random.Random(f"{seed}/{t.key}")
        tally = per_row.setdefault(t.key, Tally())
        for _ in range(per_layout):
            s = draw_store(rng, t)
            o = evaluate(s, STOCK)
            if o.refused or not isinstance(o.layout, ChunkLayout):
                continue
            fam = "real, divisible" if divisible(o.layout) else (
                "real, not divisible (finding 001)")
            if out is not None and not divisible(o.layout):
                out.mkdir(parents=True, exist_ok=True)
                name = f"{t.key.replace('/', '_')}-{tally.scenarios:03d}.json"
                (out / name).write_text(json.dumps(scenario_to_json(s), sort_keys=True) + "\n")
            tally.add(s)
            families[fam].add(s)
    return per_row, families


def generated(n: int, seed: int) -> dict[str, Tally]:
    from sim.crosscheck.gen import distinct

    drawn = distinct(STOCK, n, seed)
    families = {"generated, divisible": Tally(), "generated, not divisible": Tally()}
    for s in drawn:
        o = evaluate(s, STOCK)
        if o.refused or not isinstance(o.layout, ChunkLayout):
            continue
        families["generated, divisible" if divisible(o.layout)
                 else "generated, not divisible"].add(s)
    return families


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-layout", type=int, default=200)
    ap.add_argument("--generated", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--scenarios-out", type=Path, default=None, metavar="DIR",
                    help="also write the finding-layout stores as scenario files (for "
                    "python -m sim.crosscheck --scenarios DIR)")
    a = ap.parse_args(argv)
    for name, value in (("per-layout", a.per_layout), ("generated", a.generated)):
        if not 0 <= value <= 100_000:
            print(f"--{name}: expected 0..100000, got {value}", file=sys.stderr)
            return 2
    per_row, fams = real_layouts(a.per_layout, a.seed, a.scenarios_out)
    fams.update(generated(a.generated, a.seed))
    rows = [t.row(name) for name, t in fams.items()]
    rows_layout = [t.row(key) for key, t in per_row.items()]
    print(f"{'family':36} {'scen':>6} {'side':29} {'hits':>6} {'hit tokens':>11} "
          f"{'lost':>7} {'no-partial-state':>16} {'loads-stored-only':>17}")
    shown = rows + [r for r in rows_layout
                    if any(r["changed"].values())
                    or r["broken"].get(f"{STOCK} no-partial-state")]
    for r in shown:
        for i, side in enumerate(SIDES):
            lost = "" if side == STOCK else f"{r['lost_percent'][side]}%"
            print(f"{r['family'][:36] if i == 0 else '':36} "
                  f"{r['scenarios'] if i == 0 else '':>6} {side:29} "
                  f"{r['hits'].get(side, 0):>6} {r['hit_tokens'].get(side, 0):>11,} "
                  f"{lost:>7} {r['broken'].get(f'{side} no-partial-state', 0):>16} "
                  f"{r['broken'].get(f'{side} loads-stored-only', 0):>17}")
    for r in rows:
        other = {k: v for k, v in r["broken"].items()
                 if "no-partial-state" not in k and "loads-stored-only" not in k}
        if other:
            print(f"  {r['family']}: other invariants broken: {other}")
    if a.json is not None:
        a.json.write_text(json.dumps({"seed": a.seed, "per_layout": a.per_layout,
                                      "generated": a.generated, "families": rows,
                                      "layouts": rows_layout}, indent=1, sort_keys=True)
                          + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
