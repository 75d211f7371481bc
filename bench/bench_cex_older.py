"""The older family's least counterexample searches (proofs/check.py ``counterexample``),
pinned by bisecting (``PIN_UPWARD = PROMPT_UPWARD = 0``), upward first (the values in
check.py), or upward for one of the two, interleaved A/B in one process over z3 seeds,
with their CPU seconds; exit 1 if any two give a different counterexample anywhere.

    python bench/bench_cex_older.py [--seeds 0 1 2]

The searches are those of every pair of vllm-0.23.0, vllm-0.24.0, alt-round-num-hit and
alt-cache-config-block-size with their necessity checks (recorded from one run of
``report.run_one``, which also builds every unrolled query once, so neither side pays
for building).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import z3

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import releases  # noqa: E402
from proofs import check, report  # noqa: E402
from proofs.theorems import THEOREMS  # noqa: E402

SEMANTICS = releases.names(family="block")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = ap.parse_args()
    calls: list[tuple[Any, ...]] = []
    orig = check.counterexample

    def record(*a: Any) -> check.Verdict:
        calls.append(a)
        return orig(*a)

    check.counterexample = record  # type: ignore[assignment]
    for t in THEOREMS:
        for s in SEMANTICS:
            if THEOREMS[t].covers(s):
                report.run_one(t, s, 300.0, True)
    check.counterexample = orig
    upward = (check.PIN_UPWARD, check.PROMPT_UPWARD)
    sides = {"bisect": (0, 0), "upward": upward, "pins upward": (upward[0], 0),
             "prompt upward": (0, upward[1])}
    cpu: dict[str, list[float]] = {k: [] for k in sides}
    found: dict[str, list[str]] = {k: [] for k in sides}
    for seed in args.seeds:
        z3.set_param("smt.random_seed", seed)
        for name, (pin, prompt) in (sides.items() if seed % 2 == 0
                                    else reversed(sides.items())):
            check.PIN_UPWARD, check.PROMPT_UPWARD = pin, prompt
            t0 = time.process_time()
            got = [orig(*a) for a in calls]
            cpu[name].append(time.process_time() - t0)
            found[name] += [json.dumps([v.status, v.counterexample], sort_keys=True)
                            for v in got]
        print(f"seed {seed}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in cpu.items()))
    check.PIN_UPWARD, check.PROMPT_UPWARD = upward
    print(f"{len(calls)} searches, CPU over seeds {args.seeds}: " + "; ".join(
        f"{k} mean {statistics.mean(v):.2f} max {max(v):.2f} s" for k, v in cpu.items()))
    same = all(v == found["bisect"] for v in found.values())
    print("same counterexamples" if same else "DIFFERENT counterexamples")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
