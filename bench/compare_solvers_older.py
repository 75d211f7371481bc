"""Every unrolled query the older family's counterexample search asks (proofs/check.py
``bmc``: vllm-0.23.0, vllm-0.24.0 and the two alternatives, every theorem, and the
necessity checks on vllm-0.24.0), answered by its solver (``check.new_bmc_solver``) and
by the one it used before (``check.new_solver``) on the same assertions; any answer that
differs is printed, with the CPU seconds of each.

    python bench/compare_solvers_older.py

Exit 1 if any answer differs.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import z3

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import releases  # noqa: E402
from proofs import check  # noqa: E402
from proofs.theorems import THEOREMS  # noqa: E402

seen = {"queries": 0, "differ": 0, "new_s": 0.0, "old_s": 0.0}
_solve = check._solve


def shadowed(cons, timeout_ms, make=check.new_solver):  # type: ignore[no-untyped-def]
    if make is not check.new_bmc_solver:
        return _solve(cons, timeout_ms, make)
    t0 = time.process_time()
    res, s = _solve(cons, timeout_ms, make)
    t1 = time.process_time()
    old, _ = _solve(cons, 60_000, check.new_solver)
    seen["new_s"] += t1 - t0
    seen["old_s"] += time.process_time() - t1
    seen["queries"] += 1
    if res != old:
        seen["differ"] += 1
        print(f"differs: new {res}, old {old}", flush=True)
    return res, s


NEWEST_BLOCK = releases.newest("block").name


def main() -> int:
    check._solve = shadowed
    for thm in THEOREMS:
        for sem in releases.names(family="block"):
            check.check(thm, sem, timeout_ms=300_000)
            for p in THEOREMS[thm].preconditions if sem == NEWEST_BLOCK else ():
                rest = [q for q in THEOREMS[thm].preconditions if q != p]
                check.check(thm, sem, rest, 300_000, search_first=True)
    print(f"{seen['queries']} bmc queries, {seen['differ']} answers differ; CPU s: "
          f"new {seen['new_s']:.2f}, old {seen['old_s']:.2f}")
    return 1 if seen["differ"] else 0


if __name__ == "__main__":
    z3.set_param("verbose", 0)
    sys.exit(main())
