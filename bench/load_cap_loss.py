"""Finding 003: the hit tokens a ``max_load_tokens`` cap below the prompt loses on 0.33.0.

    python bench/load_cap_loss.py [--json FILE]

For every accepted row of ``docs/layouts-vllm-0.33.0.json`` without an EAGLE group, the
model (``vllm-0.33.0``) looks up a prompt of ``2 L + 1`` tokens, ``L`` the least common
multiple of the row's chunk sizes, with every chunk stored, no GPU prefix hit, and
``max_load_tokens`` = ``L`` and ``2 L`` (caps that end on a boundary of every chunk,
below the prompt's last token). It compares the hit with the largest valid hit
(``model.maximality_v033``, complete chunks; ``2 L`` and ``L`` keep every rule). Rows
with an EAGLE group are left out: their trailing chunk is given away on purpose
(finding 003, last section). On the rows with ``L <= 160`` it also tries every cap from 1
to ``2 L`` and lists the caps that lose tokens (``sweep``). Deterministic: no randomness.
Exit 0 (it measures).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from model.evaluate import evaluate  # noqa: E402
from model.layout_v033 import ChunkLayout  # noqa: E402
from model.maximality_v033 import larger_valid_hit  # noqa: E402
from model.real_layouts import LayoutTemplate, load_templates  # noqa: E402
from model.scenario import parse_scenario  # noqa: E402

SWEEP_MAX_LCM = 160


def lookup(t: LayoutTemplate, prompt: int, cap: int) -> dict[str, int] | None:
    """The model's hit, the largest valid hit and the tokens lost, all chunks stored."""
    raw = t.scenario_json(semantics="vllm-0.33.0", prompt_tokens=prompt)
    raw["max_load_tokens"] = cap
    s = parse_scenario(raw)
    o = evaluate(s)
    if o.refused or not isinstance(o.layout, ChunkLayout) or o.hit_tokens is None:
        return None
    best = larger_valid_hit(s, o.layout, o.hit_tokens)
    valid = o.hit_tokens if best is None else best
    return {"hit": o.hit_tokens, "valid": valid, "lost": valid - o.hit_tokens}


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
        lossy = []
        for cap in range(1, 2 * lcm + 1):
            r = lookup(t, prompt, cap)
            if r is None or r["lost"]:
                lossy.append(cap)
        out["sweep"] = {"caps": 2 * lcm, "lossy_caps": lossy}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    rows: dict[str, Any] = {}
    for t in load_templates():
        if not t.accepted or any(g.eagle for g in t.groups):
            continue
        m = measure(t)
        if m is not None:
            rows[t.key] = m
    print(f"{'layout':56} {'L':>6} {'cap':>6} {'hit':>6} {'valid':>6} {'lost':>6}")
    for key, r in rows.items():
        for cap, c in r["caps"].items():
            print(f"{key:56} {r['lcm_chunk']:>6} {cap:>6} {c['hit']:>6} {c['valid']:>6} "
                  f"{c['lost']:>6}")
    cases = [c for r in rows.values() for c in r["caps"].values()]
    lossy = [c for c in cases if c["lost"]]
    print(f"rows {len(rows)}, lookups {len(cases)}, lossy {len(lossy)}, "
          f"tokens lost {sum(c['lost'] for c in lossy):,}, "
          f"largest loss {max((c['lost'] for c in lossy), default=0):,}")
    swept = {k: r["sweep"] for k, r in rows.items() if "sweep" in r}
    only_multiples = all(c % rows[k]["lcm_chunk"] == 0 for k, sw in swept.items()
                         for c in sw["lossy_caps"])
    print(f"sweep (every cap 1..2L, rows with L <= {SWEEP_MAX_LCM}): rows {len(swept)}, "
          f"caps {sum(sw['caps'] for sw in swept.values()):,}, lossy "
          f"{sum(len(sw['lossy_caps']) for sw in swept.values())}, "
          f"all lossy caps multiples of L: {only_multiples}")
    if a.json is not None:
        a.json.write_text(json.dumps({"layouts": rows}, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
