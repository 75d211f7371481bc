"""``python -m proofs [--semantics NAME ...] [--theorem NAME ...] [--timeout S] [--jobs N]``
(``--sabotage [NAME ...]``: the sabotage suite, proofs/sabotage.py)

Checks every theorem against every semantics, prints a line per pair as it goes and a
verdict line (``PASS: ...`` or ``FAIL: ...``), and exits 0 only if every result matches
its declared expectation (and every precondition is shown necessary). It writes nothing:
the report, its pictures and the reviewers' spec come from ``python -m publish --report
DIR``, which runs the same pairs.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

from model.args import OneLineParser, bounded_float, bounded_int
from model.semantics import MODEL_SEMANTICS as SEMANTICS
from proofs.results import TABLE_HEADER, found_line, row_line, run_all
from proofs.theorems import THEOREMS


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The options of a proofs run (this CLI's, and ``python -m publish``'s)."""
    p.add_argument("--semantics", nargs="+", default=list(SEMANTICS), metavar="NAME")
    p.add_argument("--theorem", nargs="+", default=list(THEOREMS), metavar="NAME")
    p.add_argument("--timeout", type=bounded_float(0, 86400, "one day"), default=300.0,
                   metavar="S", help="seconds per theorem and semantics (default 300)")
    p.add_argument("--jobs", type=bounded_int(1, 64), default=min(2, os.cpu_count() or 1),
                   metavar="N",
                   help="pairs checked at once, in separate processes (default 2)")
    p.add_argument("--no-necessity", action="store_true",
                   help="skip showing each precondition necessary")


def refuse(args: argparse.Namespace) -> str | None:
    """Why the run's names or timeout are refused (one line), or None."""
    for name in args.semantics:
        if name not in SEMANTICS:
            return f"--semantics: unknown name {name!r} (known: {', '.join(SEMANTICS)})"
    for name in args.theorem:
        if name not in THEOREMS:
            return f"--theorem: unknown name {name!r} (known: {', '.join(THEOREMS)})"
    if args.timeout <= 0:
        return "--timeout: must be > 0 seconds"
    return None


def scope(args: argparse.Namespace) -> str:
    """The run's theorems and semantics, as its verdict line names them."""
    return (f"theorems: {'all' if set(args.theorem) == set(THEOREMS) else ', '.join(args.theorem)}"
            f"; semantics: {', '.join(args.semantics)}")


def tune_gc() -> None:
    """Python's cycle collector runs each time 700 objects more were made than freed and
    scans every live object it tracks: the proofs make and drop millions of Z3 wrapper
    objects. Collect rarer, and never the modules' objects imported so far (the pool's
    processes, forked after this, inherit both): python -m proofs --report DIR (today
    python -m publish) on the idle 2-core machine, 60.0-60.5 s CPU and 30.7-31.0 s wall in
    two runs before, 54.8-56.7 s CPU and 28.2-29.1 s wall in three after, peak memory
    245 MB against 238 MB."""
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m proofs", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(p)
    # what this CLI did before the report builder left proofs/: a pointer, not a traceback
    p.add_argument("--report", help=argparse.SUPPRESS)
    p.add_argument("--mutants", "--mutant", "--all-checks", nargs="*", dest="moved",
                   help=argparse.SUPPRESS)
    p.add_argument("--sabotage", nargs="*", metavar="NAME",
                   help="apply each one-line sabotage of the glue and model/ (proofs/"
                   "sabotage.py; NAME: those whose name contains it) in a copy and check "
                   "that it turns python -m proofs red")
    p.add_argument("--sabotage-part", default="0/1", metavar="K/N",
                   help="with --sabotage: every N-th sabotage from the K-th (CI: one of "
                   "two parts a day; default 0/1, all)")
    args = p.parse_args(argv)
    if args.sabotage is not None:
        from proofs import sabotage

        try:
            part = sabotage.parse_part(args.sabotage_part)
        except ValueError as e:
            p.error(f"argument --sabotage-part: {e}")
        return sabotage.main(args.sabotage, args.jobs, min(args.timeout, 120.0), part)
    if args.report is not None:
        p.error("argument --report: the report and spec are written by "
                "python -m publish --report DIR")
    if args.moved is not None:
        p.error("argument --mutants: the mutant catalogue runs with python -m publish --mutants")
    why = refuse(args)
    if why is not None:
        print(why, file=sys.stderr)
        return 2
    tune_gc()
    t0 = time.monotonic()
    # progress (a line per pair as it ends) on stderr; stdout opens with what the run
    # found about vLLM, then the table, then the verdict on the expectations
    rows = run_all(args.theorem, args.semantics, args.timeout, not args.no_necessity,
                   args.jobs, progress=sys.stderr)
    bad = [r for r in rows if not r.matches]
    found = found_line(rows)
    if found:
        print(f"found: {found}")
    print(TABLE_HEADER)
    for r in rows:
        print(row_line(r))
    print(f"{time.monotonic() - t0:.1f}s")
    print(f"{'FAIL' if bad else 'PASS'}: {len(rows) - len(bad)} of {len(rows)} results "
          f"match their expectation ({scope(args)})")
    return 1 if bad else 0
