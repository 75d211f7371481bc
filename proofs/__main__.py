"""``python -m proofs [--semantics NAME ...] [--theorem NAME ...] [--report DIR] [--timeout S]``

Checks every theorem against every semantics, prints a line per pair as it goes, writes
report.json, report.md, the pictures and (when every theorem and semantics ran) the
reviewers' spec (spec.md and spec/*.md, with HTML: proofs/spec.py) to DIR, and exits 0 only if every
result matches its declared expectation (and every precondition is shown necessary).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from model.semantics import SEMANTICS
from proofs.report import run_all, write_report
from proofs.spec import collect_facts, write_spec
from proofs.theorems import THEOREMS


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m proofs", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--semantics", nargs="+", default=list(SEMANTICS), metavar="NAME")
    p.add_argument("--theorem", nargs="+", default=list(THEOREMS), metavar="NAME")
    p.add_argument("--report", type=Path, default=Path("report"), metavar="DIR")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="seconds per theorem and semantics (default 300)")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), metavar="N",
                   help="pairs checked at once, in separate processes (default 2)")
    p.add_argument("--no-necessity", action="store_true",
                   help="skip showing each precondition necessary")
    args = p.parse_args(argv)
    for name in args.semantics:
        if name not in SEMANTICS:
            print(f"--semantics: unknown name {name!r} (known: {', '.join(SEMANTICS)})",
                  file=sys.stderr)
            return 2
    for name in args.theorem:
        if name not in THEOREMS:
            print(f"--theorem: unknown name {name!r} (known: {', '.join(THEOREMS)})",
                  file=sys.stderr)
            return 2
    if args.timeout <= 0:
        print("--timeout: must be > 0 seconds", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    if args.jobs < 1:
        print("--jobs: must be >= 1", file=sys.stderr)
        return 2
    rows = run_all(args.theorem, args.semantics, args.timeout, not args.no_necessity,
                   args.jobs)
    write_report(rows, args.report)
    spec = ""
    if set(args.theorem) == set(THEOREMS) and set(args.semantics) == set(SEMANTICS):
        pages = write_spec(args.report, collect_facts())  # the reviewers' spec
        spec = f", spec in {pages[0]}"
    bad = [r for r in rows if not r.matches]
    print(f"{len(rows) - len(bad)} of {len(rows)} results match their expectation "
          f"({time.monotonic() - t0:.1f}s); report in {args.report}/report.md{spec}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
