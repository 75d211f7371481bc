"""Finding 002: which real 0.33.0 layouts give a hit that ends inside a group's chunk.

    python bench/reach_whole_blocks.py [--per-layout N] [--seed S] [--json FILE]

For every accepted row of ``docs/layouts-vllm-0.33.0.json`` the model (``vllm-0.33.0``)
runs ``--per-layout`` stores: a prompt of up to four of the row's largest chunks plus a
few tokens, a GPU prefix hit of whole scheduler blocks, and per group an arbitrary subset
of the chunks the prompt wrote (each kept with a probability drawn per group from 1 (three
times in seven), 0.9, 0.7, 0.5, 0.2), an over-approximation of what the CPU tier's LRU
can leave after evictions of other requests. Per row it counts the non-zero complete-chunk hits and,
among them, the hits

- shorter than some group's chunk (``whole-blocks`` as the model checks it),
- not a multiple of some attention (full or sliding-window) group's chunk: the load then
  copies that chunk's GPU blocks up to ``cdiv(hit, block)`` and the engine recomputes the
  tokens past the hit (finding 002: nothing is lost),
- not a multiple of the Mamba group's GPU block: the state restored is past the hit
  (``no-partial-state``, finding 001).

Deterministic: same arguments, same output. Exit 0 (it measures).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import releases  # noqa: E402
from model.evaluate import evaluate  # noqa: E402
from model.layout_chunked import ChunkLayout  # noqa: E402
from model.real_layouts import LayoutTemplate, load_templates  # noqa: E402
from model.scenario import Scenario  # noqa: E402

KEEP = (1.0, 1.0, 1.0, 0.9, 0.7, 0.5, 0.2)


def draw(rng: random.Random, t: LayoutTemplate) -> Scenario:
    bpc = t.blocks_per_chunk or 1
    chunk = max(g.block_size for g in t.groups) * bpc
    scheduler_block = math.lcm(*(g.block_size for g in t.groups))
    prompt = rng.randint(1, 4 * chunk) + rng.randint(0, 3)
    gpu_hit = rng.choice((0, 0, 0, rng.randint(0, (prompt - 1) // scheduler_block)))
    stored = []
    for g in t.groups:
        keep = rng.choice(KEEP)
        stored.append([c for c in range(prompt // (g.block_size * bpc))
                       if rng.random() < keep])
    return t.scenario(semantics=releases.newest("chunked").name, prompt_tokens=prompt,
                      num_computed_tokens=gpu_hit * scheduler_block, stored=stored)


def classify(s: Scenario) -> Counter[str] | None:
    o = evaluate(s)
    if o.refused or not isinstance(o.layout, ChunkLayout):
        return None
    c: Counter[str] = Counter(scenarios=1)
    hit = o.hit_tokens
    if not hit or o.tail_boundary is not None:
        return c
    c["hits"] += 1
    end = s.num_computed_tokens + hit
    groups = list(zip(o.layout.groups, s.groups, strict=True))
    if any(hit < cfg.tokens_per_chunk for cfg, _ in groups):
        c["shorter than a chunk"] += 1
    if any(end % cfg.tokens_per_chunk for cfg, g in groups if g.kind != "mamba"):
        c["inside an attention chunk"] += 1
    if any(end % cfg.tokens_per_block for cfg, g in groups if g.kind == "mamba"):
        c["inside a Mamba block"] += 1
    for v in sorted({v.invariant for v in o.violations}):
        c[f"breaks {v}"] += 1
    return c


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-layout", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    if not 0 <= a.per_layout <= 100_000:
        print(f"--per-layout: expected 0..100000, got {a.per_layout}", file=sys.stderr)
        return 2
    rows: dict[str, dict[str, int]] = {}
    for t in load_templates():
        if not t.accepted:
            continue
        rng = random.Random(f"{a.seed}/{t.key}")
        total: Counter[str] = Counter()
        for _ in range(a.per_layout):
            c = classify(draw(rng, t))
            if c is not None:
                total += c
        rows[t.key] = dict(sorted(total.items()))
    cols = ("scenarios", "hits", "shorter than a chunk", "inside an attention chunk",
            "inside a Mamba block", "breaks whole-blocks", "breaks no-partial-state")
    print(f"{'layout':44} " + " ".join(f"{c[:14]:>14}" for c in cols))
    for key, r in rows.items():
        print(f"{key:44} " + " ".join(f"{r.get(c, 0):>14,}" for c in cols))
    every: Counter[str] = Counter()
    for r in rows.values():
        every.update(r)
    print(f"{'all ' + str(len(rows)) + ' rows':44} "
          + " ".join(f"{every.get(c, 0):>14,}" for c in cols))
    if a.json is not None:
        out: dict[str, Any] = {"seed": a.seed, "per_layout": a.per_layout, "layouts": rows,
                               "all": dict(sorted(every.items()))}
        a.json.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
