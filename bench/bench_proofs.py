"""Wall and CPU time of the full proofs run and of the main theorem, against the targets.

    python bench/bench_proofs.py [--tree DIR] [--baseline DIR | --baseline-rev REV]
                                 [--jobs N] [--timeout S] [--semantics NAME ...]

Runs, in this tree and (with --baseline or --baseline-rev) in another version of the
project, side by side in the same invocation (``--baseline-rev main`` measures main's
committed code, exported with ``git archive`` into a temporary directory):

* the main theorem alone: ``python -m publish --theorem no-partial-state --semantics
  vllm-0.24.0 --no-necessity --report DIR`` (target 2 s), and the seconds the full run's
  report gives it;
* the full main job, ``python -m publish --report DIR`` (target 30 s on a 2-core machine),
  and where its time went (the run's own ``time:`` lines on stderr: CPU per group of pairs,
  the spec's facts, the pages, the pictures).

Each figure is wall time, the CPU time of the child processes and the 1-minute load
average at its start and end (on a shared machine the wall time grows with the load; the
CPU time much less). With --semantics, the second figure is the run of those semantics
only (the part a change touches), without the 30 s target. Side by side it prints the
measured tree's CPU and wall time as a ratio of the baseline's and compares the two runs'
results (report.json's rows but their seconds, every counterexample file): exit 1 if
they differ, else 0 whatever the figures (this measures, it does not gate on speed). A
tree from before ``publish/`` (the main job was ``python -m proofs --report DIR`` then) is
run with ``proofs``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from releases import vllm_0_24_0  # noqa: E402

# the main theorem: PR #44599's claim on the release that shipped it
MAIN = ("no-partial-state", vllm_0_24_0.SEMANTICS.name)
TARGET_MAIN_S, TARGET_TOTAL_S = 2.0, 30.0


@dataclass(frozen=True)
class Timing:
    wall: float
    cpu: float
    rc: int
    load: tuple[float, float]  # 1-minute load average at the start and at the end
    where: tuple[str, ...] = ()  # the run's own "time:" lines (where its time went)


def _main_job(tree: Path) -> str:
    """The main job's module in ``tree``: ``publish``, or ``proofs`` before it existed."""
    return "publish" if (tree / "publish" / "__main__.py").is_file() else "proofs"


def _run(tree: Path, args: list[str], timeout: float) -> Timing:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    err = ""
    try:
        done = subprocess.run([sys.executable, "-m", _main_job(tree), *args], cwd=tree,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              timeout=timeout, env={**os.environ, "PYTHONPATH": str(tree)})
        rc, err = done.returncode, done.stderr
    except subprocess.TimeoutExpired:
        rc = 124
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    where = tuple(line[len("time:"):] for line in err.splitlines() if line.startswith("time:"))
    return Timing(wall, cpu, rc, (load0, os.getloadavg()[0]), where)


def _parts(t: Timing) -> dict[str, float]:
    """The CPU seconds the run itself gives its pairs, facts and pictures (its "time:"
    lines; a part it does not name is left out)."""
    out: dict[str, float] = {}
    for line in t.where:
        m = re.match(r" pairs and facts [\d.]+s wall, ([\d.]+)s CPU in the pairs, ([\d.]+)s in "
                     r"the facts", line)
        if m:
            out["pairs"], out["facts"] = float(m[1]), float(m[2])
        m = re.match(r" pictures \(\d+\) [\d.]+s wall, ([\d.]+)s CPU", line)
        if m:
            out["pictures"] = float(m[1])
    return out


def _main_in_report(report: Path) -> float | None:
    try:
        rows = json.loads((report / "report.json").read_text())["results"]
    except (OSError, ValueError, KeyError):
        return None
    return next((float(r["seconds"]) for r in rows
                 if (r["theorem"], r["semantics"]) == MAIN), None)


def measure(tree: Path, jobs: int, timeout: float, semantics: list[str] | None = None
            ) -> dict[str, object]:
    alone = _run(tree, ["--theorem", MAIN[0], "--semantics", MAIN[1], "--no-necessity",
                        "--report", tempfile.mkdtemp(prefix="bench-main-")], timeout)
    out = Path(tempfile.mkdtemp(prefix="bench-full-"))
    part = [] if semantics is None else ["--semantics", *semantics]
    full = _run(tree, ["--report", str(out), "--jobs", str(jobs), *part], timeout)
    return {"main_alone": alone, "full": full, "main_in_full": _main_in_report(out),
            "report": out}


def _without_seconds(x: object) -> object:
    """A report.json value with every "seconds" field dropped (the one part that moves)."""
    if isinstance(x, dict):
        return {k: _without_seconds(v) for k, v in x.items() if k != "seconds"}
    if isinstance(x, list):
        return [_without_seconds(v) for v in x]
    return x


def same_results(a: Path, b: Path) -> list[str]:
    """Where two reports' results differ (empty: none): report.json's rows (verdicts,
    notes, preconditions' necessity, counterexamples, witnesses; not the seconds) and
    every counterexample file, byte for byte."""
    diffs = []
    try:
        rows = [_without_seconds(json.loads((r / "report.json").read_text())["results"])
                for r in (a, b)]
    except (OSError, ValueError, KeyError) as e:
        return [f"report.json: not readable ({e})"]
    if rows[0] != rows[1]:
        assert isinstance(rows[0], list) and isinstance(rows[1], list)
        pairs = [(r.get("theorem"), r.get("semantics")) for r in rows[0] if isinstance(r, dict)]
        bad = [f"{t} on {s}" for (t, s), x, y in zip(pairs, rows[0], rows[1], strict=False)
               if x != y]
        diffs.append(f"report.json rows differ: {', '.join(bad) or 'the pairs run'}")
    files = [sorted(p.relative_to(r) for p in (r / "counterexamples").glob("*"))
             for r in (a, b)]
    if files[0] != files[1]:
        diffs.append(f"counterexample files: {len(files[0])} against {len(files[1])}")
    diffs += [f"{f} differs" for f in set(files[0]) & set(files[1])
              if (a / f).read_bytes() != (b / f).read_bytes()]
    return diffs


def export(rev: str) -> Path:
    """The project at git revision ``rev`` of this repository, in a temporary directory."""
    out = Path(tempfile.mkdtemp(prefix=f"bench-{rev.replace('/', '-')}-"))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True,
                             check=False)
    if archive.returncode != 0:
        raise ValueError(archive.stderr.decode().strip().splitlines()[-1])
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out


def _fmt(t: Timing) -> str:
    flag = "" if t.rc == 0 else f" (exit {t.rc})"
    return (f"{t.wall:7.1f}s wall {t.cpu:7.1f}s CPU{flag} (load average {t.load[0]:.1f} -> "
            f"{t.load[1]:.1f})")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", type=Path, metavar="DIR",
                   help="another checkout measured the same way (today's code)")
    p.add_argument("--baseline-rev", metavar="REV",
                   help="a git revision of this repository measured the same way (e.g. main)")
    p.add_argument("--tree", type=Path, default=ROOT, metavar="DIR",
                   help="the checkout to measure (default: this one)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=3600.0, metavar="S")
    p.add_argument("--semantics", nargs="+", default=None, metavar="NAME",
                   help="measure the run of these semantics only, not the full run (on a "
                        "shared machine: the part a change touches); the target then "
                        "does not apply")
    args = p.parse_args()
    trees = [("measured", args.tree.resolve())]
    if args.baseline is not None and args.baseline_rev is not None:
        print("--baseline-rev: give --baseline or --baseline-rev, not both", file=sys.stderr)
        return 2
    if args.baseline is not None:
        trees.insert(0, ("baseline", args.baseline.resolve()))
    if args.baseline_rev is not None:
        try:
            trees.insert(0, (f"baseline {args.baseline_rev}", export(args.baseline_rev)))
        except ValueError as e:
            print(f"--baseline-rev: {e}", file=sys.stderr)
            return 2
    for label, tree in trees:
        if not (tree / "proofs" / "__main__.py").is_file():
            print(f"--{'tree' if label == 'measured' else 'baseline'}: {tree} is not a "
                  f"checkout of this project", file=sys.stderr)
            return 2
    print(f"cores: {os.cpu_count()}, jobs: {args.jobs}, load average before: "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    results = []
    reports: list[Path] = []
    for label, tree in trees:
        r = measure(tree, args.jobs, args.timeout, args.semantics)
        assert isinstance(r["report"], Path)
        reports.append(r["report"])
        alone, full, in_full = r["main_alone"], r["full"], r["main_in_full"]
        assert isinstance(alone, Timing) and isinstance(full, Timing)
        in_full_s = "n/a" if in_full is None else f"{in_full:.1f}s"
        print(f"{label} ({tree}):", flush=True)
        print(f"  main theorem {MAIN[0]} on {MAIN[1]} alone: {_fmt(alone)} "
              f"(target {TARGET_MAIN_S:.0f}s, ratio {alone.wall / TARGET_MAIN_S:.1f}); "
              f"in the {'full' if args.semantics is None else 'part'} run: {in_full_s}", flush=True)
        what = "full" if args.semantics is None else f"--semantics {' '.join(args.semantics)}"
        target = (f" (target {TARGET_TOTAL_S:.0f}s, ratio {full.wall / TARGET_TOTAL_S:.1f})"
                  if args.semantics is None else "")
        print(f"  {what} python -m {_main_job(tree)}: {_fmt(full)}{target}; report in "
              f"{r['report']}",
              flush=True)
        # where the run's time went, as the run itself measured it (pairs per theorem and
        # family, the spec's facts, the pages, the pictures); older versions print nothing
        for line in full.where or ("  (the run does not say where its time went)",):
            print(f"    {line}", flush=True)
        results.append((label, alone, full, in_full_s))
    run = "full" if args.semantics is None else "part"
    if len(results) > 1:  # side by side
        print(f"\n{'':34}" + "".join(f"{label:>24}" for label, *_ in results)
              + f"{'target':>10}")
        rows = [
            ("main theorem alone, wall", [f"{a.wall:.1f}s" for _, a, _, _ in results],
             f"{TARGET_MAIN_S:.0f}s"),
            ("main theorem alone, CPU", [f"{a.cpu:.1f}s" for _, a, _, _ in results], ""),
            (f"main theorem in the {run} run", [x for *_, x in results],
             f"{TARGET_MAIN_S:.0f}s"),
            (f"{run} run, wall", [f"{f.wall:.1f}s" + ("" if f.rc == 0 else f" (exit {f.rc})")
                                  for _, _, f, _ in results],
             f"{TARGET_TOTAL_S:.0f}s" if args.semantics is None else ""),
            (f"{run} run, CPU", [f"{f.cpu:.1f}s" for _, _, f, _ in results], ""),
            (f"{run} run, load average", [f"{f.load[0]:.1f} -> {f.load[1]:.1f}"
                                          for _, _, f, _ in results], ""),
        ]
        parts = [_parts(f) for _, _, f, _ in results]
        for part, words in (("pairs", "the pairs (prover)"), ("facts", "the spec's facts"),
                            ("pictures", "the pictures")):
            rows.append((f"  of which {words}, CPU",
                         [f"{p[part]:.1f}s" if part in p else "n/a" for p in parts], ""))
        for name, cells, target in rows:
            print(f"{name:34}" + "".join(f"{c:>24}" for c in cells) + f"{target:>10}")
        base, now = results[0][2], results[-1][2]
        print(f"{run} run, measured / baseline: {now.cpu / base.cpu:.2f}x CPU, "
              f"{now.wall / base.wall:.2f}x wall")
        if "pairs" in parts[0] and "pairs" in parts[-1] and parts[0]["pairs"]:
            print(f"the pairs alone (the prover's CPU, facts and pictures apart), measured / "
                  f"baseline: {parts[-1]['pairs'] / parts[0]['pairs']:.2f}x CPU")
        # what the CPU figures count: the facts and pictures a run took from the cache of
        # earlier runs (publish/cache.py) cost it nothing, and are not in its figure
        for (label, _, f, _) in results:
            said = [w.strip() for w in f.where if w.startswith(" cache:")]
            print(f"counted in {label}: the CPU of every process of the run; "
                  + (said[0] if said else "facts and pictures all computed (no cache)"))
        diffs = same_results(reports[0], reports[-1])
        print(f"results: {'identical' if not diffs else 'DIFFERENT'} (report.json's rows "
              "but the seconds, and every counterexample file)")
        for d in diffs:
            print(f"  {d}")
        if diffs:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
