"""Finding 003: the hit tokens a ``max_load_tokens`` cap below the prompt loses on 0.33.0,
and what its proposed fix (``alt-v033-cap-min``, docs/findings/003-fix.diff) regains.

    python bench/load_cap_loss.py [--random N] [--generated N] [--json FILE]

For every accepted row of ``docs/layouts-vllm-0.33.0.json`` without an EAGLE group, the
model (``vllm-0.33.0``) looks up a prompt of ``2 L + 1`` tokens, ``L`` the least common
multiple of the row's chunk sizes, with every chunk stored, no GPU prefix hit, and
``max_load_tokens`` = ``L`` and ``2 L`` (caps that end on a boundary of every chunk,
below the prompt's last token). It compares the hit with the largest valid hit
(``model.maximality_chunked``, complete chunks; ``2 L`` and ``L`` keep every rule). Rows
with an EAGLE group are left out: their trailing chunk is given away on purpose
(finding 003, last section). On the rows with ``L <= 160`` it also tries every cap from 1
to ``2 L`` and lists the caps that lose tokens (``sweep``). Each lookup runs on 0.33.0 as
released (``hit``) and with finding 003's fix (``fix_hit``, semantics ``alt-v033-cap-min``):
``regained`` = ``fix_hit - hit``, ``fix_lost`` = ``valid - fix_hit``; the sweep lists the
caps where the fix loses tokens and those where it changes the hit. ``--random N``: on
every accepted row (EAGLE rows too), N seeded random stores (``bench_fix001.draw_store``:
prompt, GPU hit, stored prefix, a few evicted keys) with a ``max_load_tokens`` drawn from
1 to the tokens past the GPU hit, every other one a multiple of ``L`` (a cap on a chunk
boundary of every group, the kind that loses a chunk), the hits of 0.33.0 and of the
fix side by side: how often the fix raises or lowers the hit and by how many tokens.
Deterministic (seeded per row). ``--generated N``: N scenarios of the layered proof's
conformance generator (``tests/gen_chunked.chunk_dict`` with ``LAYERS`` less its multipass
share, seed 3: any layout of up to 4 groups, HIT_PENDING / RETRY answers, EAGLE), a cap
forced on each, stock vs fix split by EAGLE. Exit 0 (it measures).
"""

from __future__ import annotations

import argparse
import dataclasses
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
from model.scenario import parse_scenario, scenario_to_json  # noqa: E402

SWEEP_MAX_LCM = 160
SEED = 3
STOCK, FIX = releases.newest("chunked").name, releases.fix_for("003").name


def lookup(t: LayoutTemplate, prompt: int, cap: int) -> dict[str, int] | None:
    """The model's hit on 0.33.0 and with the fix, the largest valid hit and the tokens
    each loses, all chunks stored."""
    raw = t.scenario_json(semantics=STOCK, prompt_tokens=prompt)
    raw["max_load_tokens"] = cap
    s = parse_scenario(raw)
    o, f = evaluate(s), evaluate(s, FIX)
    if (o.refused or not isinstance(o.layout, ChunkLayout) or o.hit_tokens is None
            or f.hit_tokens is None):
        return None
    best = larger_valid_hit(s, o.layout, o.hit_tokens)
    valid = o.hit_tokens if best is None else best
    return {"hit": o.hit_tokens, "valid": valid, "lost": valid - o.hit_tokens,
            "fix_hit": f.hit_tokens, "regained": f.hit_tokens - o.hit_tokens,
            "fix_lost": valid - f.hit_tokens}


def measure(t: LayoutTemplate) -> dict[str, Any] | None:
    bpc = t.blocks_per_chunk or 1
    lcm = math.lcm(*(g.block_size * bpc for g in t.groups))
    prompt = 2 * lcm + 1
    out: dict[str, Any] = {"lcm_chunk": lcm, "prompt": prompt, "caps": {}}
    for cap in (lcm, 2 * lcm):
        r = lookup(t, prompt, cap)
        if r is None:
            return None
        out["caps"][str(cap)] = r
    if lcm <= SWEEP_MAX_LCM:
        lossy, fix_lossy, changed = [], [], []
        for cap in range(1, 2 * lcm + 1):
            r = lookup(t, prompt, cap)
            if r is None or r["lost"]:
                lossy.append(cap)
            if r is None or r["fix_lost"]:
                fix_lossy.append(cap)
            if r is None or r["regained"]:
                changed.append(cap)
        out["sweep"] = {"caps": 2 * lcm, "lossy_caps": lossy, "fix_lossy_caps": fix_lossy,
                        "fix_changed_caps": changed}
    return out


def random_stores(per_row: int) -> dict[str, dict[str, int]]:
    """Stock vs fix on seeded random stores and caps, per family (EAGLE rows or not)."""
    from bench_fix001 import draw_store

    out: dict[str, dict[str, int]] = {}
    for t in load_templates():
        if not t.accepted:
            continue
        fam = out.setdefault("EAGLE rows" if any(g.eagle for g in t.groups)
                             else "rows without EAGLE",
                             {"lookups": 0, "raised": 0, "lowered": 0, "tokens_regained": 0,
                              "tokens_lost": 0})
        rng = random.Random(f"{SEED}/{t.key}")
        for _ in range(per_row):
            s = draw_store(rng, t)
            room = max(1, s.prompt_tokens - s.num_computed_tokens)
            lcm = math.lcm(*(g.block_size * (t.blocks_per_chunk or 1) for g in t.groups))
            cap = rng.randint(1, room)
            if rng.random() < 0.5 and room >= lcm:  # on a boundary of every chunk
                cap = lcm * rng.randint(1, room // lcm)
            s = parse_scenario({**scenario_to_json(s), "max_load_tokens": cap})
            o, f = evaluate(s), evaluate(s, FIX)
            if o.refused or o.hit_tokens is None or f.hit_tokens is None:
                continue
            fam["lookups"] += 1
            d = f.hit_tokens - o.hit_tokens
            fam["raised"] += d > 0
            fam["lowered"] += d < 0
            fam["tokens_regained"] += max(d, 0)
            fam["tokens_lost"] += max(-d, 0)
    return out


def generated(n: int) -> dict[str, dict[str, int]]:
    """Stock vs fix on the layered test's generator, a cap on each (EAGLE or not)."""
    from tests.gen_chunked import LAYERS, chunk_dict

    layers = dataclasses.replace(LAYERS, multipass=0.0)  # the draws these figures came from
    rng = random.Random(SEED)
    out: dict[str, dict[str, int]] = {}
    done = 0
    while done < n:
        raw = chunk_dict(rng, STOCK, layers)
        if "max_load_tokens" not in raw and "max_num_new_tokens" not in raw:
            raw["max_load_tokens"] = rng.randint(0, raw["prompt_tokens"])
        s = parse_scenario(raw)
        o, f = evaluate(s), evaluate(s, FIX)
        if o.refused or o.hit_tokens is None or f.hit_tokens is None:
            continue
        done += 1
        fam = out.setdefault("EAGLE" if any(g.eagle for g in s.groups) else "no EAGLE",
                             {"lookups": 0, "raised": 0, "lowered": 0})
        fam["lookups"] += 1
        fam["raised"] += f.hit_tokens > o.hit_tokens
        fam["lowered"] += f.hit_tokens < o.hit_tokens
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--random", type=int, default=0, metavar="N",
                    help="random stores and caps per accepted row (default 0: none)")
    ap.add_argument("--generated", type=int, default=0, metavar="N",
                    help="generated scenarios with a cap (default 0: none)")
    a = ap.parse_args(argv)
    for name, value in (("random", a.random), ("generated", a.generated)):
        if not 0 <= value <= 1_000_000:
            print(f"error: --{name}: expected 0 to 1000000, got {value}", file=sys.stderr)
            return 2
    rows: dict[str, Any] = {}
    for t in load_templates():
        if not t.accepted or any(g.eagle for g in t.groups):
            continue
        m = measure(t)
        if m is not None:
            rows[t.key] = m
    print(f"{'layout':48} {'L':>6} {'cap':>6} {'valid':>6} {'hit':>6} {'lost':>6} "
          f"{'fix':>6} {'regain':>6} {'fixlost':>7}")
    for key, r in rows.items():
        for cap, c in r["caps"].items():
            print(f"{key:48} {r['lcm_chunk']:>6} {cap:>6} {c['valid']:>6} {c['hit']:>6} "
                  f"{c['lost']:>6} {c['fix_hit']:>6} {c['regained']:>6} {c['fix_lost']:>7}")
    cases = [c for r in rows.values() for c in r["caps"].values()]
    lossy = [c for c in cases if c["lost"]]
    print(f"rows {len(rows)}, lookups {len(cases)}, lossy {len(lossy)}, "
          f"tokens lost {sum(c['lost'] for c in lossy):,}, "
          f"largest loss {max((c['lost'] for c in lossy), default=0):,}")
    print(f"with the fix ({FIX}): lossy {sum(1 for c in cases if c['fix_lost'])}, "
          f"tokens regained {sum(c['regained'] for c in cases):,}, "
          f"hit lowered {sum(1 for c in cases if c['regained'] < 0)}")
    swept = {k: r["sweep"] for k, r in rows.items() if "sweep" in r}
    only_multiples = all(c % rows[k]["lcm_chunk"] == 0 for k, sw in swept.items()
                         for c in sw["lossy_caps"])
    print(f"sweep (every cap 1..2L, rows with L <= {SWEEP_MAX_LCM}): rows {len(swept)}, "
          f"caps {sum(sw['caps'] for sw in swept.values()):,}, lossy "
          f"{sum(len(sw['lossy_caps']) for sw in swept.values())}, "
          f"all lossy caps multiples of L: {only_multiples}; with the fix lossy "
          f"{sum(len(sw['fix_lossy_caps']) for sw in swept.values())}, hit changed "
          f"{sum(len(sw['fix_changed_caps']) for sw in swept.values())} "
          f"(the stock lossy caps: "
          f"{all(sw['fix_changed_caps'] == sw['lossy_caps'] for sw in swept.values())})")
    rand = random_stores(a.random) if a.random else {}
    for fam, r in rand.items():
        print(f"random stores and caps, {fam} ({a.random} per row): lookups "
              f"{r['lookups']:,}, fix raises the hit {r['raised']:,} "
              f"(+{r['tokens_regained']:,} tokens), lowers it {r['lowered']:,} "
              f"(-{r['tokens_lost']:,} tokens)")
    gen = generated(a.generated) if a.generated else {}
    for fam, r in sorted(gen.items()):
        print(f"generated with a cap, {fam}: lookups {r['lookups']:,}, fix raises the hit "
              f"{r['raised']:,}, lowers it {r['lowered']:,}")
    if a.json is not None:
        data: dict[str, Any] = {"layouts": rows}
        if gen:
            data["generated"] = {"n": a.generated, "seed": SEED, "families": gen}
        if rand:
            data["random"] = {"per_row": a.random, "seed": SEED, "families": rand}
        a.json.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
