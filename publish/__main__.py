"""``python -m publish [--report DIR] [--semantics NAME ...] [--theorem NAME ...] [--timeout S]``

The main job: checks every theorem against every semantics (as ``python -m proofs`` does),
prints a line per pair as it goes, writes report.json, report.md, the counterexample files
and the pictures and (when every theorem and semantics ran) the reviewers' spec (spec.md
and spec/*.md with HTML, and spec-facts.json: the simulator's numbers and two Z3 searches,
computed in the same process pool while the pairs run) to DIR, and exits 0 only if every
result matches its declared expectation (and every precondition is shown necessary).
Everything is written in a temporary directory beside DIR and moved into place only when
complete; report.md and the console start/end with one verdict line, and a failed or
interrupted run leaves a FAIL report and none of an earlier run's artefacts.

``python -m publish --mutants [--mutant NAME ...] [--all-checks]`` runs the mutant
catalogue instead (``publish.mutation``).
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
import traceback
from functools import partial
from pathlib import Path
from typing import Any

from model.args import OneLineParser, output_dir
from model.semantics import MODEL_SEMANTICS as SEMANTICS
from proofs.cli import add_run_arguments, refuse, scope, tune_gc
from proofs.results import Row, Side, found_line, run_all, spilled
from proofs.theorems import THEOREMS
from publish import cache
from publish.facts import FACT_PARTS, PAIR_FACTS, collect_facts, fact_part, facts_from_pairs
from publish.names import PR_RELEASE
from publish.report import Drawing, EarlyPictures, draw_all, incomplete_report, write_report
from publish.spec import write_spec
from publish.staging import publish, publish_failed, staging, stamp


def _every_finished(ended: list[Row], spill: Path) -> list[Row]:
    """The pairs an interrupted run finished: the rows of the groups that ended, then those
    the processes spilled from groups that did not (each pair once)."""
    seen = {(r.theorem, r.semantics) for r in ended}
    more = [r for r in spilled(spill) if (r.theorem, r.semantics) not in seen]
    return ended + list({(r.theorem, r.semantics): r for r in more}.values())


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m publish", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(p)
    p.add_argument("--report", type=output_dir, default=Path("report"), metavar="DIR")
    p.add_argument("--mutants", action="store_true",
                   help="check which theorem, test or cross-check kills each mutant of the "
                        f"{PR_RELEASE} lookup (proofs/mutants.py) instead")
    p.add_argument("--mutant", nargs="+", default=None, metavar="NAME",
                   help="with --mutants: only these")
    p.add_argument("--all-checks", action="store_true",
                   help="with --mutants: also run the tests and cross-check on mutants a "
                        "theorem already killed")
    args = p.parse_args(argv)
    if args.mutants or args.mutant:
        from publish.mutation import all_names, run

        names = args.mutant or all_names()
        unknown = [n for n in names if n not in all_names()]
        if unknown or not args.mutants:
            p.error(f"argument --mutant: unknown name {unknown[0]!r} (known: see "
                    "proofs/mutants.py)" if unknown else "argument --mutant: needs --mutants")
        timeout = args.timeout if "--timeout" in (argv or sys.argv) else 300.0
        return run(names, timeout, args.jobs, args.all_checks)
    why = refuse(args)
    if why is not None:
        print(why, file=sys.stderr)
        return 2
    t0 = time.monotonic()
    tune_gc()
    cache.enable()  # the facts and pictures of unchanged inputs: kept between runs
    out: Path = args.report
    full = set(args.theorem) == set(THEOREMS) and set(args.semantics) == set(SEMANTICS)
    tmp: Path | None = None
    # one pool for the whole run: the pairs, the spec's facts beside them (the Z3 searches
    # first, in fresh processes; the simulator's runs where the schedule puts them) and
    # then every picture of the report and the spec at once
    pool = multiprocessing.Pool(args.jobs) if args.jobs > 1 else None
    found: str | None = None
    # the pairs that finished, kept for the report of an interrupted run: those of the
    # groups that ended, and those the processes spilled as each pair ended
    finished: list[Row] = []
    spill = tempfile.TemporaryDirectory(prefix="proofs-rows-")
    try:
        tmp = staging(out)
        # a fact that a pair computes anyway is taken from its row (PAIR_FACTS); one the
        # cache holds for these inputs from there (publish.cache), the rest in the pool
        facts: dict[str, Any] = {}
        if full:
            for name in FACT_PARTS:
                got, value = cache.fact(name) if name not in PAIR_FACTS else (False, None)
                if got:
                    facts[name] = value
        side = [Side(name, fact_part, (name,), seconds, first=not name.startswith("sim:"))
                for name, seconds in FACT_PARTS.items()
                if name not in PAIR_FACTS and name not in facts
                ] if full and pool is not None else []
        ends: list[float] = []
        cpu: dict[str, float] = {}
        t1 = time.monotonic()
        # each row's pictures go into the pool as the row ends (behind the pairs)
        scratch = tempfile.TemporaryDirectory(prefix="proofs-pictures-")
        early = EarlyPictures(pool, Path(scratch.name), full) if pool is not None else None

        def done_rows(rows: list[Row]) -> None:
            finished.extend(rows)
            if early is not None:
                early.rows(rows)

        rows = run_all(args.theorem, args.semantics, args.timeout, not args.no_necessity,
                       args.jobs, pool, side, facts, cpu,
                       done_rows, ends, spill=Path(spill.name))
        t2 = time.monotonic()
        drawings: list[Drawing] = []
        write_report(rows, tmp, args.jobs, drawings)
        if full:
            # the reviewers' spec, its pages (facts the pool did not compute: here)
            write_spec(tmp, collect_facts(facts | facts_from_pairs(rows)), args.jobs,
                       drawings)
        t3 = time.monotonic()
        cpu["pictures"] = draw_all(drawings, args.jobs, pool, early)
        scratch.cleanup()
        t4 = time.monotonic()
        # process-seconds idle at the end of the pairs: each process's last task ended
        # before the run's last one (the early pictures' time to run)
        idle = sum(ends[-1] - e for e in ends[-args.jobs:-1]) if len(ends) > 1 else 0.0
        _times(cpu, len(drawings), t2 - t1, t3 - t2, t4 - t3,
               len(early.drawn) if early is not None else 0, idle)
        bad = [r for r in rows if not r.matches]
        verdict = (f"{'FAIL' if bad else 'PASS'}: {len(rows) - len(bad)} of {len(rows)} "
                   f"results match their expectation ({scope(args)})")
        found = found_line(rows)
        stamp(tmp / "report.md", verdict, found)
        publish(tmp, out)
    except BaseException as e:  # noqa: BLE001 - a partial run must not look green
        if not isinstance(e, KeyboardInterrupt | OSError):
            traceback.print_exc()  # a bug, not bad input: show where
        if isinstance(e, KeyboardInterrupt):
            finished = _every_finished(finished, Path(spill.name))
        why = str(e).splitlines()[0] if str(e) else ""
        verdict = (f"FAIL: the run did not complete ({type(e).__name__}"
                   f"{': ' + why if why else ''}; {scope(args)})")
        if isinstance(e, KeyboardInterrupt) and finished:
            verdict = (f"FAIL: INCOMPLETE: interrupted with {len(finished)} pairs finished, "
                       f"listed below ({scope(args)})")
        try:
            publish_failed(tmp, out, verdict)
            if isinstance(e, KeyboardInterrupt) and finished:
                incomplete_report(finished, out / "report.md", verdict)
        except OSError as e2:
            print(f"--report: cannot write to {out} ({e2.strerror})", file=sys.stderr)
            return 2
        print(f"report in {out}/report.md", file=sys.stderr)
        print(verdict)
        return 130 if isinstance(e, KeyboardInterrupt) else (2 if isinstance(e, OSError) else 1)
    finally:
        if pool is not None:
            pool.terminate()
        spill.cleanup()
    spec = f", spec in {out}/spec.md" if full else ""
    print(f"{time.monotonic() - t0:.1f}s; report in {out}/report.md{spec}")
    if found:
        print(f"found: {found}")
    print(verdict)
    return 1 if bad else 0


def _times(cpu: dict[str, float], drawn: int, pairs_s: float, write_s: float,
           draw_s: float, early: int = 0, idle: float = 0.0) -> None:
    """Where the run's time went (stderr, one line each; bench/bench_proofs.py reads the
    lines starting "time:")."""
    facts = {k: v for k, v in cpu.items() if k in FACT_PARTS}
    groups = {k: v for k, v in cpu.items() if k not in FACT_PARTS and k != "pictures"}
    say = partial(print, file=sys.stderr, flush=True)
    say(f"time: pairs and facts {pairs_s:.1f}s wall, {sum(groups.values()):.1f}s CPU in "
        f"the pairs, {sum(facts.values()):.1f}s in the facts")
    for label, s in sorted(groups.items(), key=lambda x: -x[1]):
        say(f"time:   {label}: {s:.1f}s CPU")
    hits = cache.HITS
    say("time: cache: " + (
        f"{hits.get('facts', 0)} of the spec's facts and {hits.get('pictures', 0)} pictures "
        "taken from earlier runs (publish/cache.py, keyed by their inputs' content: no CPU "
        "here), the rest computed and counted" if cache.enabled() else
        "off (PUBLISH_CACHE=off): every fact and picture computed and counted"))
    if facts:
        say(f"time:   facts ({', '.join(facts)}): {sum(facts.values()):.1f}s CPU")
    say(f"time:   tail: {idle:.1f}s of processes with no pair or fact left (from each one's "
        "last to the run's last; the early pictures' time)")
    say(f"time: report and spec pages {write_s:.1f}s wall (this process)")
    say(f"time: pictures ({drawn}) {draw_s:.1f}s wall, {cpu['pictures']:.1f}s CPU"
        + (f" ({early} drawn while the pairs ran)" if early else ""))


if __name__ == "__main__":
    sys.exit(main())
