"""Benchmark: lookups/s through ``model.evaluate`` and requests/s through the simulator,
and how both grow with prompt length and the number of KV-cache groups (one run).

    python bench/bench_sim.py [--quick] [--json FILE]

Groups are N-1 full-attention groups plus one Mamba (align) group, block 16. The
lookup scenarios hold every attention block and every fourth Mamba state (a GPU hit
of 0); the simulator runs a trace of prompts of exactly that length, 30% of them
resent, under vLLM 0.24.0 semantics. Each cell shows the rate and its cost relative
to the smallest cell (time per operation / baseline time per operation).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import releases  # noqa: E402
from model.evaluate import evaluate  # noqa: E402
from model.scenario import Group, Scenario  # noqa: E402
from sim.config import EngineConfig  # noqa: E402
from sim.engine import Engine  # noqa: E402
from sim.ssm import VOCAB  # noqa: E402
from sim.workload import Request, TokenSeq  # noqa: E402

SEMANTICS = releases.newest("block").name


def scenario(prompt: int, groups: int) -> Scenario:
    nb = prompt // 16
    attn = Group("full_attention", 16, frozenset(range(nb)))
    mamba = Group("mamba", 16, frozenset(range(3, nb, 4)), mamba_cache_mode="align")
    return Scenario(SEMANTICS, 1, prompt, 0, (attn,) * (groups - 1) + (mamba,),
                    mamba_block_size=16)


def lookups_per_s(prompt: int, groups: int, min_time: float) -> float:
    s = scenario(prompt, groups)
    evaluate(s)
    n, t0 = 0, time.perf_counter()
    while True:
        for _ in range(50):
            evaluate(s)
        n += 50
        dt = time.perf_counter() - t0
        if dt >= min_time:
            return n / dt


def trace(prompt: int, n: int, seed: int = 0) -> list[Request]:
    rng = np.random.default_rng([seed, prompt])
    out: list[Request] = []
    for i in range(n):
        if out and rng.random() < 0.3:
            prev = out[int(rng.integers(max(0, len(out) - 200), len(out)))]
            out.append(Request(i, i, prev.seq, prompt, 16))
        else:
            toks = rng.integers(0, VOCAB, size=prompt, dtype=np.uint8)
            out.append(Request(i, i, TokenSeq(toks, 16), prompt, 16))
    return out


def requests_per_s(prompt: int, groups: int, n: int) -> float:
    tr = trace(prompt, n)
    # a GPU cache of ~20 requests: most resends are served from the CPU store
    cfg = EngineConfig(attention_groups=groups - 1, gpu_blocks=20 * groups * prompt // 16,
                       cpu_blocks=1_000_000)
    s = Engine(cfg, SEMANTICS).run(tr)
    return s.requests_per_s


def _table(title: str, prompts: list[int], groups: list[int],
           rates: dict[tuple[int, int], float]) -> str:
    base = rates[(prompts[0], groups[0])]
    head = f"{'prompt':>7} | " + " | ".join(f"{g} group{'s' if g > 1 else '':1s}".rjust(20)
                                           for g in groups)
    lines = [title, head, "-" * len(head)]
    for p in prompts:
        cells = [f"{rates[(p, g)]:>10,.0f} ({base / rates[(p, g)]:6.2f}x)".rjust(20)
                 for g in groups]
        lines.append(f"{p:>7} | " + " | ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    a = ap.parse_args(argv)
    prompts = [64, 256, 1024] if a.quick else [64, 256, 1024, 4096]
    groups = [1, 2, 4] if a.quick else [1, 2, 4, 8]
    min_time = 0.05 if a.quick else 0.4
    n = 600 if a.quick else 3000
    t0 = time.perf_counter()
    lk = {(p, g): lookups_per_s(p, g, min_time) for p in prompts for g in groups}
    rq = {(p, g): requests_per_s(p, g, max(200, n * 256 // max(p, 256)))
          for p in prompts for g in groups}
    print(_table(f"model.evaluate: lookups/s ({SEMANTICS}; cost x the 64-token 1-group cell)",
                 prompts, groups, lk))
    print()
    print(_table("simulator: requests/s (cost x the 64-token 1-group cell)",
                 prompts, groups, rq))
    print(f"\nmeasured in one run, {time.perf_counter() - t0:.1f}s")
    if a.json is not None:
        a.json.write_text(json.dumps({
            "semantics": SEMANTICS,
            "lookups_per_s": [{"prompt": p, "groups": g, "rate": r} for (p, g), r in lk.items()],
            "requests_per_s": [{"prompt": p, "groups": g, "rate": r} for (p, g), r in rq.items()],
        }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
