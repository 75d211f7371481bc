"""Every query the bounded 0.33.0 check (proofs/check_chunked.py) asks, answered by its
solver and by the one it used before (simplify, propagate-values, solve-eqs, smt with the
default arithmetic solver) on the same assertions; any answer that differs is printed.

    python bench/compare_solvers_chunked.py [--semantics NAME ...] [--theorem NAME ...]
                                         [--report DIR]

Runs the 0.33.0 rows as ``python -m proofs`` does (``proofs.results.run_one``: verdict,
necessity, the verdict over accepted layouts, witness), one process, and with --report
writes their report (what the new solver found) for comparison with another run's.
Exit 1 if any answer differs (an unknown from either side is counted apart).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import z3

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import releases  # noqa: E402
from proofs import check_chunked  # noqa: E402
from proofs.results import run_one  # noqa: E402
from proofs.theorems import THEOREMS  # noqa: E402
from publish.report import write_report  # noqa: E402

OLD = ("simplify", "propagate-values", "solve-eqs", "smt")
# the chunked release and finding 001's fixes
SEMANTICS = (releases.newest("chunked").name, *releases.fixes(finding="001"))
seen = {"queries": 0, "same": 0, "differ": 0, "unknown": 0, "new_s": 0.0, "old_s": 0.0}


class Shadowed(z3.Solver):
    """check() answers with this solver, then asks the old one the same assertions."""

    def check(self, *assumptions: z3.ExprRef) -> z3.CheckSatResult:
        t0 = time.process_time()
        res = super().check(*assumptions)
        t1 = time.process_time()
        old = z3.Then(*OLD).solver()
        old.set("timeout", 600_000)
        old.add(self.assertions())
        ref = old.check(*assumptions)
        seen["new_s"] += t1 - t0
        seen["old_s"] += time.process_time() - t1
        seen["queries"] += 1
        if z3.unknown in (res, ref):
            seen["unknown"] += 1
            print(f"  unknown: new {res}, old {ref}", flush=True)
        elif res == ref:
            seen["same"] += 1
        else:
            seen["differ"] += 1
            print(f"  DIFFER: new {res}, old {ref}", flush=True)
        return res


def _shadowed() -> z3.Solver:
    s = _new()
    s.__class__ = Shadowed
    return s


_new = check_chunked.new_solver


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--semantics", nargs="+", default=list(SEMANTICS))
    p.add_argument("--theorem", nargs="+", default=list(THEOREMS))
    p.add_argument("--report", type=Path, default=None)
    args = p.parse_args()
    check_chunked.new_solver = _shadowed
    rows = []
    for t in args.theorem:
        for s in args.semantics:
            if THEOREMS[t].covers(s):
                before = seen["queries"]
                rows.append(run_one(t, s, 300.0, True))
                print(f"{t} {s}: {rows[-1].verdict.status}, {seen['queries'] - before} "
                      f"queries", flush=True)
    if args.report is not None:
        write_report(rows, args.report)
    print(f"{seen['queries']} queries: {seen['same']} same answer, {seen['differ']} differ, "
          f"{seen['unknown']} with an unknown; CPU new solver {seen['new_s']:.1f}s, old "
          f"{seen['old_s']:.1f}s")
    return 1 if seen["differ"] else 0


if __name__ == "__main__":
    sys.exit(main())
