"""Where the older family's CPU time goes: every pair of vllm-0.23.0, vllm-0.24.0,
alt-round-num-hit and alt-cache-config-block-size (with the necessity checks, witnesses
and the checks over accepted layouts, as ``python -m proofs`` runs them), in this
process, one after another, with the CPU seconds and calls of each phase.

    python bench/bench_older.py

Phases (inclusive; a phase's figure contains those nested in it): prove (the layered
proof, proofs/check.py ``prove``) and its solver calls; counterexample (the least
counterexample search) and its unrolled queries (``bmc``, their solver calls, the queries
built), the pinning; witness and its solver calls. Exit 1 if a pair does not match its
expectation.
"""

from __future__ import annotations

import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import releases  # noqa: E402
from proofs import check, report, witness  # noqa: E402
from proofs.theorems import THEOREMS  # noqa: E402

SEMANTICS = releases.names(family="block")
SECONDS: defaultdict[str, float] = defaultdict(float)
CALLS: Counter[str] = Counter()


def _timed(module: Any, name: str, label: Callable[..., str]) -> None:
    fn = getattr(module, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            key = label(*args, **kwargs)
            SECONDS[key] += time.process_time() - t0
            CALLS[key] += 1

    setattr(module, name, wrapper)


def _solve_label(cons: Any, timeout_ms: int, make: Any = check.new_solver) -> str:
    return "  bmc solver calls" if make is check.new_bmc_solver else "  prove solver calls"


def main() -> int:
    _timed(check, "_solve", _solve_label)
    _timed(check, "prove", lambda *a, **k: "prove")
    _timed(check, "counterexample", lambda *a, **k: "counterexample")
    _timed(check, "bmc", lambda *a, **k: "  bmc (unrolled queries)")
    _timed(check, "_unrolled", lambda *a, **k: "  bmc queries built")
    _timed(check, "_pin", lambda *a, **k: "  pinning")
    _timed(witness, "_solve_alone", lambda *a, **k: "  witness solver calls")
    _timed(report, "witness", lambda *a, **k: "witness")
    t0 = time.process_time()
    rows = [report.run_one(t, s, 300.0, True) for t in THEOREMS for s in SEMANTICS
            if THEOREMS[t].covers(s)]
    total = time.process_time() - t0
    ok = all(r.matches for r in rows)
    print(f"{len(rows)} pairs, {'all match' if ok else 'NOT all match'}: {total:.2f} s CPU")
    for key in ("prove", "  prove solver calls", "counterexample", "  bmc (unrolled queries)",
                "  bmc solver calls", "  bmc queries built", "  pinning", "witness",
                "  witness solver calls"):
        print(f"  {key:<28}{SECONDS[key]:7.2f} s  {CALLS[key]:5d} calls")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
