"""Finding 004: the hit tokens 0.33.0's EAGLE pop gives back on the real EAGLE/MTP rows.

    python bench/eagle_pop_loss.py [--random N] [--json FILE]

For every accepted row of ``docs/layouts-vllm-0.33.0.json`` with an EAGLE group, the model
(``vllm-0.33.0``) looks up prompts with every chunk stored and no GPU prefix hit:
``k L + r`` tokens for ``k`` = 1, 2, 3 and ``r`` = 0, 1, ``L / 2``, ``L - 1`` (``L`` the
least common multiple of the row's chunk sizes; on the rows with ``L <= 160`` every
prompt from 1 to ``3 L + 1``). Each hit is compared with the largest valid complete-chunk
hit (``model.maximality_chunked``) and with the hit of the same lookup with the row's EAGLE
flag taken off (``plain``). ``--random N`` adds N seeded random stores per row
(``bench_fix001.draw_store``: prompt, GPU hit, stored prefix, a few evicted keys), same
comparisons. Every lookup also records the invariants other than maximality the model
finds broken (expected: none). Deterministic (no randomness without ``--random``; seeded
per row with it). Exit 0 (it measures).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import releases  # noqa: E402
from model.evaluate import evaluate  # noqa: E402
from model.layout_chunked import ChunkLayout  # noqa: E402
from model.maximality_chunked import larger_valid_hit  # noqa: E402
from model.real_layouts import LayoutTemplate, load_templates  # noqa: E402
from model.scenario import Scenario, parse_scenario, scenario_to_json  # noqa: E402

SWEEP_MAX_LCM = 160
SEED = 4
STOCK = releases.newest("chunked").name


def plain(s: Scenario) -> Scenario:
    """The same lookup with every group's EAGLE flag off."""
    raw = scenario_to_json(s)
    raw["groups"] = [{k: v for k, v in g.items() if k != "eagle"} for g in raw["groups"]]
    return parse_scenario(raw)


def compare(s: Scenario) -> dict[str, Any] | None:
    o, p = evaluate(s), evaluate(plain(s))
    if (o.refused or not isinstance(o.layout, ChunkLayout) or o.hit_tokens is None
            or p.hit_tokens is None):
        return None
    best = larger_valid_hit(s, o.layout, o.hit_tokens)
    valid = o.hit_tokens if best is None else best
    return {"prompt": s.prompt_tokens, "hit": o.hit_tokens, "valid": valid,
            "lost": valid - o.hit_tokens, "plain": p.hit_tokens,
            "other_violations": sorted({v.invariant for v in o.violations}
                                       - {"maximality"})}


def lcm_chunk(t: LayoutTemplate) -> int:
    return math.lcm(*(g.block_size * (t.blocks_per_chunk or 1) for g in t.groups))


def prompts(t: LayoutTemplate) -> list[int]:
    L = lcm_chunk(t)
    if L <= SWEEP_MAX_LCM:
        return list(range(1, 3 * L + 2))
    return sorted({k * L + r for k in (1, 2, 3) for r in (0, 1, L // 2, L - 1)})


def tally(rows: list[dict[str, Any]], eagle_chunk: int) -> dict[str, Any]:
    lossy = [r for r in rows if r["lost"]]
    return {"lookups": len(rows), "lossy": len(lossy),
            "tokens_lost": sum(r["lost"] for r in lossy),
            "loss_is_one_eagle_chunk": all(r["lost"] == eagle_chunk for r in lossy),
            "losses_in_eagle_chunks": {
                f"{n}": sum(r["lost"] / eagle_chunk == n for r in lossy) for n in (1, 2, 3)},
            "losses_not_whole_eagle_chunks": sum(r["lost"] % eagle_chunk != 0 for r in lossy),
            "plain_reaches_valid_where_lossy": sum(r["plain"] == r["valid"] for r in lossy),
            "other_violations": sum(bool(r["other_violations"]) for r in rows),
            "other_invariants": sorted({v for r in rows for v in r["other_violations"]}),
            "lossy_prompts_mod_L": sorted({r["prompt"] % r["L"] for r in lossy})
            if lossy and "L" in lossy[0] else []}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--random", type=int, default=0, metavar="N",
                    help="seeded random stores per EAGLE row (default 0: none)")
    a = ap.parse_args(argv)
    if not 0 <= a.random <= 1_000_000:
        print(f"error: --random: expected 0 to 1000000, got {a.random}", file=sys.stderr)
        return 2
    from bench_fix001 import draw_store

    out: dict[str, Any] = {}
    print(f"{'layout':40} {'L':>5} {'prompts':>7} {'lossy':>5} {'lost':>8} "
          f"{'1 chunk':>7} {'plain=valid':>11} {'other':>5}"
          + (f" {'random':>6} {'lossy':>5} {'lost':>8}" if a.random else ""))
    for t in load_templates():
        if not t.accepted or not any(g.eagle for g in t.groups):
            continue
        L = lcm_chunk(t)
        eagle_chunk = max(g.block_size * (t.blocks_per_chunk or 1)
                          for g in t.groups if g.eagle)
        rows = []
        for p in prompts(t):
            r = compare(t.scenario(semantics=STOCK, prompt_tokens=p))
            if r is not None:
                rows.append({**r, "L": L})
        row: dict[str, Any] = {"L": L, "all_stored": tally(rows, eagle_chunk)}
        line = (f"{t.key:40} {L:>5} {len(rows):>7} {row['all_stored']['lossy']:>5} "
                f"{row['all_stored']['tokens_lost']:>8,} "
                f"{str(row['all_stored']['loss_is_one_eagle_chunk']):>7} "
                f"{row['all_stored']['plain_reaches_valid_where_lossy']:>11} "
                f"{row['all_stored']['other_violations']:>5}")
        if a.random:
            rng = random.Random(f"{SEED}/{t.key}")
            rand = [r for r in (compare(draw_store(rng, t)) for _ in range(a.random))
                    if r is not None]
            row["random"] = tally(rand, eagle_chunk)
            row["random"].pop("lossy_prompts_mod_L")
            line += (f" {len(rand):>6} {row['random']['lossy']:>5} "
                     f"{row['random']['tokens_lost']:>8,}")
        out[t.key] = row
        print(line)
    for part in ("all_stored", "random"):
        parts = [r[part] for r in out.values() if part in r]
        if not parts:
            continue
        print(f"{part}: rows {len(parts)}, lookups {sum(p['lookups'] for p in parts):,}, "
              f"lossy {sum(p['lossy'] for p in parts):,}, tokens lost "
              f"{sum(p['tokens_lost'] for p in parts):,}, every loss one EAGLE chunk "
              f"{all(p['loss_is_one_eagle_chunk'] for p in parts)} (losses of 1, 2, 3 "
              f"EAGLE chunks: "
              f"{[sum(p['losses_in_eagle_chunks'][n] for p in parts) for n in '123']}, "
              f"other: {sum(p['losses_not_whole_eagle_chunks'] for p in parts)}), "
              f"plain hit = valid on "
              f"{sum(p['plain_reaches_valid_where_lossy'] for p in parts):,} lossy lookups, "
              f"lookups breaking another invariant "
              f"{sum(p['other_violations'] for p in parts)} "
              f"({sorted({i for p in parts for i in p['other_invariants']})})")
    if a.json is not None:
        a.json.write_text(json.dumps({"seed": SEED, "random_per_row": a.random,
                                      "layouts": out}, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
