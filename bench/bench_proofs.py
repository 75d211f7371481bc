"""Solve times of every theorem against every semantics, measured in one run.

    python bench/bench_proofs.py [--necessity]

Prints one line per (theorem, semantics) with its status and seconds, then the main
theorem's time (no-partial-state on vllm-0.24.0), the total, and both against the
targets (main theorem 2 s, whole suite 30 s) as ratios. With --necessity it also times
showing each precondition necessary, as `python -m proofs` does.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from model.semantics import SEMANTICS  # noqa: E402
from proofs.report import run_one  # noqa: E402
from proofs.theorems import THEOREMS  # noqa: E402

MAIN = ("no-partial-state", "vllm-0.24.0")
TARGET_MAIN_S, TARGET_TOTAL_S = 2.0, 30.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--necessity", action="store_true")
    args = p.parse_args()
    total = 0.0
    main_s = 0.0
    print(f"{'theorem':<20}{'semantics':<30}{'status':<16}{'seconds':>8}")
    for t in THEOREMS:
        for s in SEMANTICS:
            t0 = time.perf_counter()
            row = run_one(t, s, 300, args.necessity)
            dt = time.perf_counter() - t0
            total += dt
            if (t, s) == MAIN:
                main_s = dt
            print(f"{t:<20}{s:<30}{row.verdict.status:<16}{dt:>8.2f}", flush=True)
    print(f"main theorem {MAIN[0]} on {MAIN[1]}: {main_s:.2f}s "
          f"(target {TARGET_MAIN_S:.0f}s, ratio {main_s / TARGET_MAIN_S:.2f})")
    print(f"total: {total:.1f}s (target {TARGET_TOTAL_S:.0f}s, ratio {total / TARGET_TOTAL_S:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
