"""Benchmark: ``.ci/run`` end to end on a fresh clone, minutes per step.

    python bench/bench_ci.py [--rev REV] [--baseline-rev REV] [--envs DIR] [--out FILE]
                             [--keep]

Clones this repository at REV (default HEAD; committed code only) into a temporary
folder outside the checkout, makes a new virtual environment there and runs that clone's
``.ci/run`` exactly as written (``CI=true``), as CI runs it on a fresh machine. A shell
DEBUG trap stamps each top-level command of ``.ci/run`` with the time and the 1-minute
load average, so the table gives each step's minutes (steps under 5 s are summed into
one row). With --baseline-rev the same is done for that revision first, in the same
invocation, and the totals are printed as a ratio (measured / baseline).

The real schedulers' environments are the user cache CI reuses on a machine
(``~/.cache/offload-lookup-check/venvs``; ``.ci/run`` builds what is missing); --envs
names another folder (an empty one measures a machine that builds them all). Progress:
each step on stderr as it starts. The clone and its venv are deleted afterwards unless
--keep. Exit: 0 when every measured run passed, 1 when one failed (its output's last
lines printed), 2 on bad input.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parent.parent
SHORT_S = 5.0  # steps shorter than this are summed into one row
# the wrapper: a DEBUG trap (set -T: a sourced file's commands are traced only so)
# stamping each top-level command (epoch seconds, load average,
# the command on one line) into $BENCH_CI_LOG, then .ci/run sourced with $0 set to it
WRAPPER = r"""_stamp() {
    # .ci/run's own commands only: not inside its functions (together) or subshells
    [[ $BASH_SUBSHELL == 0 && ${#FUNCNAME[@]} -le 2 ]] || return 0
    local c=${BASH_COMMAND//$'\n'/ }
    printf '%s %s | %s\n' "$(date +%s.%N)" "$(cut -d' ' -f1 /proc/loadavg)" "$c" \
        >> "$BENCH_CI_LOG"
}
set -T
trap _stamp DEBUG
source "$0"
"""


@dataclass(frozen=True)
class Step:
    start_s: float  # from the run's start
    minutes: float
    load: float
    command: str


@dataclass(frozen=True)
class Run:
    rev: str
    steps: tuple[Step, ...]
    total_min: float
    exit_code: int
    tail: str  # the output's last lines (shown when it failed)


def bad(message: str) -> NoReturn:
    print(f"bench_ci: {message}", file=sys.stderr)
    raise SystemExit(2)


def resolve(rev: str) -> str:
    r = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                       cwd=ROOT, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        bad(f"--rev/--baseline-rev: {rev!r} is not a commit here")
    return r.stdout.strip()


def parse(log: str, end: float, exit_code: int) -> tuple[tuple[Step, ...], float]:
    """The trap's lines as steps: each lasts until the next one starts (the last one until
    ``end``); steps under SHORT_S summed into one row at the end."""
    stamps: list[tuple[float, float, str]] = []
    for line in log.splitlines():
        head, sep, command = line.partition(" | ")
        parts = head.split()
        if sep and len(parts) == 2:
            stamps.append((float(parts[0]), float(parts[1]), command.strip()))
    if not stamps:
        return (), 0.0
    t0 = stamps[0][0]
    steps, short = [], 0.0
    for (t, load, command), nxt in zip(stamps, [*stamps[1:], (end, 0.0, "")], strict=True):
        seconds = nxt[0] - t
        if seconds < SHORT_S:
            short += seconds
        else:
            steps.append(Step(t - t0, seconds / 60, load, command))
    if short:
        steps.append(Step(-1.0, short / 60, 0.0, f"{len(stamps) - len(steps)} steps under "
                          f"{SHORT_S:.0f} s each (exit {exit_code})"))
    return tuple(steps), (end - t0) / 60


def follow(log: Path, stop: threading.Event) -> None:
    """Print each step of ``log`` on stderr as it starts."""
    seen = 0
    while not stop.wait(2.0):
        if not log.exists():
            continue
        lines = log.read_text().splitlines()
        for line in lines[seen:]:
            command = line.partition(" | ")[2]
            print(f"  [{time.strftime('%H:%M:%S')}] {command[:110]}", file=sys.stderr)
        seen = len(lines)


def measure(sha: str, envs: Path | None, keep: bool) -> Run:
    where = Path(tempfile.mkdtemp(prefix=f"bench-ci-{sha[:7]}-"))
    clone, venv, log = where / "clone", where / "venv", where / "steps.log"
    print(f"bench_ci: {sha[:7]} in {where}", file=sys.stderr)
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        subprocess.run(["git", "checkout", "-q", sha], cwd=clone, check=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        env = {k: v for k, v in os.environ.items()
               if k not in ("VIRTUAL_ENV", "PYTHONPATH", "CROSSCHECK_VENVS",
                            "CROSSCHECK_LIGHT_BASE", "CONFORMANCE_SHARE",
                            "CROSSCHECK_EXAMPLES", "PYTEST_ADDOPTS")}
        env.update(CI="true", BENCH_CI_LOG=str(log), VIRTUAL_ENV=str(venv),
                   PATH=f"{venv / 'bin'}:{env.get('PATH', '')}")
        if envs is not None:
            env["CROSSCHECK_VENVS"] = str(envs)
        stop = threading.Event()
        watcher = threading.Thread(target=follow, args=(log, stop), daemon=True)
        watcher.start()
        # $0 is the clone's .ci/run, so its own `cd "$(dirname "$0")/.."` lands in the clone
        with open(where / "output.txt", "w") as out:
            r = subprocess.run(["bash", "-c", WRAPPER, str(clone / ".ci" / "run")],
                               cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, check=False)
        end = time.time()
        stop.set()
        watcher.join()
        steps, total = parse(log.read_text() if log.exists() else "", end, r.returncode)
        tail = "\n".join((where / "output.txt").read_text(errors="replace")
                         .splitlines()[-40:])
        return Run(sha, steps, total, r.returncode, tail)
    finally:
        if keep:
            print(f"bench_ci: kept {where}", file=sys.stderr)
        else:
            shutil.rmtree(where, ignore_errors=True)


def table(run: Run) -> str:
    rows = ["| from (min) | step | min | load |", "|---|---|---|---|"]
    for s in run.steps:
        start = "" if s.start_s < 0 else f"{s.start_s / 60:.1f}"
        load = "" if s.start_s < 0 else f"{s.load:.1f}"
        command = s.command if len(s.command) <= 100 else s.command[:97] + "..."
        rows.append(f"| {start} | `{command.replace('|', '/')}` | {s.minutes:.1f} | {load} |")
    rows.append(f"| | **total, exit {run.exit_code}** | **{run.total_min:.1f}** | |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rev", default="HEAD")
    p.add_argument("--baseline-rev", default=None)
    p.add_argument("--envs", type=Path, default=None,
                   help="CROSSCHECK_VENVS for the runs (default: .ci/run's own)")
    p.add_argument("--out", type=Path, default=None, help="also write the tables here")
    p.add_argument("--keep", action="store_true", help="keep the clones and their output")
    a = p.parse_args(argv)
    if a.envs is not None and a.envs.exists() and not a.envs.is_dir():
        bad(f"--envs: {a.envs} is not a folder")
    revs = [resolve(a.rev)] if a.baseline_rev is None else [resolve(a.baseline_rev),
                                                            resolve(a.rev)]
    print(f"bench_ci: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
    runs = [measure(sha, a.envs, a.keep) for sha in revs]
    parts = []
    for label, run in zip(["baseline", "measured"][-len(runs):], runs, strict=True):
        parts.append(f"## {label}: {run.rev[:7]}, .ci/run on a fresh clone, "
                     f"{run.total_min:.1f} min, exit {run.exit_code}\n\n{table(run)}\n")
    if len(runs) == 2:
        parts.append(f"measured / baseline: {runs[1].total_min / runs[0].total_min:.2f}x "
                     f"({runs[1].total_min:.1f} / {runs[0].total_min:.1f} min)\n")
    text = "\n".join(parts)
    print(text)
    if a.out is not None:
        a.out.write_text(text)
    failed = [r for r in runs if r.exit_code != 0]
    for r in failed:
        print(f"bench_ci: {r.rev[:7]} FAILED (exit {r.exit_code}); its last lines:\n{r.tail}",
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
