"""``python -m publish --mutants``: which theorem, test or cross-check kills each mutant.

For every mutant of ``proofs.mutants`` (applied to model and encoding together):

- the theorem it must break (``Mutant.killer``), checked on PR #44599's release under the
  theorem's preconditions: killed only by a COUNTEREXAMPLE that ``model/`` replays (a
  proof or an ``unknown`` is not a kill); termination, which no run violates, by a failed
  proof obligation;
- the cross-check against the GPU measurements (``sim/gpu/results``: the real vLLM 0.23.0
  and 0.24.0 engines on an H200): killed when the model's hit disagrees, unexplained;
- the tests the catalogue names for it (``Mutant.tests``), then the default test suite,
  in a subprocess (``OLC_MUTANT`` set; tests/conftest.py applies it): the first failing
  test; pytest-timeout turns a mutant that loops into a failure.

Each mutant runs in a fresh process with an empty proof cache (``proofs.check`` skips
queries it proved before: proved of other code, they would hide a kill), cheapest check
first, stopping at the first kill (``--all-checks``: every check). A mutant is killed
when any of them kills it, and one with a ``killer`` must be killed by that theorem. The
run ends with one verdict line; exit 0 only if every mutant is killed or proved
equivalent.

It lives beside the report builder, not in ``proofs/``, because its cross-check runs the
simulator's GPU comparison (``sim.gpu.report``): ``proofs/`` imports no ``sim``.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from proofs.mutants import BY_NAME, ENV, MUTANTS, Mutant, applied, prove_equivalent
from publish.names import PR_RELEASE

ROOT = Path(__file__).resolve().parent.parent
# the committed-docs staleness tests compare text, not behaviour: not a semantic kill
DESELECT = ("tests/test_spec.py::test_spec_md_is_current",
            "tests/test_spec.py::test_spec_html_is_current")


@dataclass(frozen=True)
class Kill:
    mutant: str
    theorem: str  # the killer theorem's verdict, or "-"
    crosscheck: str  # "killed: ..." or "survived"
    tests: str  # the first failing test, or "survived"
    seconds: float
    equivalence: str | None = None  # a Z3 proof that the mutant computes the same

    @property
    def equivalent(self) -> bool:
        return self.equivalence is not None and self.equivalence.startswith("PROVED")

    @property
    def killed(self) -> bool:
        m = BY_NAME[self.mutant]
        by_theorem = theorem_kills(self.theorem)
        if m.killer is not None:
            return by_theorem
        return self.crosscheck.startswith("killed") or self.tests.startswith("killed")


class _Alarm(Exception):
    pass


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise _Alarm()


def by_theorem(m: Mutant, timeout_s: float) -> str:
    if m.killer is None:
        return "-"
    from model.semantics import get_semantics
    from proofs.check import check, prove
    from proofs.theorems import THEOREMS

    t0 = time.monotonic()
    with applied(m.name):
        thm = THEOREMS[m.killer]
        if m.killer == "termination":  # no run violates it (it loops): its proof must fail
            status, where = prove(thm, get_semantics(PR_RELEASE), thm.preconditions,
                                  int(timeout_s * 1000))
            verdict = ("COUNTEREXAMPLE to a proof obligation" if status == "FAILED"
                       else status)
            return f"{verdict} {m.killer} ({time.monotonic() - t0:.0f}s; {where})"
        v = check(m.killer, PR_RELEASE, timeout_ms=int(timeout_s * 1000))
    return f"{v.status} {m.killer} ({v.seconds:.0f}s)"


def theorem_kills(verdict: str) -> bool:
    """A counterexample replayed by model/ (or a failed obligation of termination)."""
    return verdict.startswith("COUNTEREXAMPLE")


def by_gpu_crosscheck(m: Mutant, limit_s: int = 60) -> str:
    from sim.gpu.report import RESULTS, compare, load_results, unexplained

    cases = load_results(RESULTS)
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(limit_s)
    try:
        with applied(m.name):
            bad = unexplained(compare(cases, None))
    except _Alarm:
        return f"killed: the model did not answer within {limit_s}s"
    except Exception as e:  # noqa: BLE001 - a mutant may crash the model
        return f"killed: the model raised {type(e).__name__}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    if bad:
        c = bad[0]
        return (f"killed: {len(bad)} GPU measurements, e.g. {c.case.name} length "
                f"{c.row.length}: {'; '.join(c.disagreements())}")
    return "survived"


def by_tests(m: Mutant, limit_s: int = 900) -> str:
    """The tests the catalogue names for the mutant first (seconds), then the whole
    default suite (a minute): the first failing test."""
    if m.tests:
        first = _pytest(m, list(m.tests), limit_s)
        if first != "survived":
            return first
    return _pytest(m, [], limit_s)


def _pytest(m: Mutant, selection: list[str], limit_s: int) -> str:
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
           "--timeout=300", "--ignore=tests/test_mutants.py",  # applies mutants itself
           *[a for d in DESELECT for a in ("--deselect", d)], *selection]
    env = {**os.environ, ENV: m.name, "PYTHONHASHSEED": "0"}
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=limit_s, check=False)
    except subprocess.TimeoutExpired:
        return f"killed: the suite ran past {limit_s}s"
    if r.returncode == 0:
        return "survived"
    if r.returncode in (4, 5):  # a usage error or no test collected: nothing ran
        return f"survived (not run: pytest exit {r.returncode}: {' '.join(selection)})"
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", r.stdout, re.M)
    first = failed[0] if failed else f"pytest exit {r.returncode}"
    if "Timeout >" in r.stdout:  # pytest-timeout: slow (a loaded machine), not wrong
        return f"timed out (not a kill): {first}"
    return "killed: " + first


def run_one(args: tuple[str, float, bool]) -> Kill:
    """The checks for one mutant, cheapest first, stopping at the first that settles it
    (``all_checks``: every check): the killer theorem, or the equivalence proof; then the
    GPU cross-check (seconds), the named tests (seconds), the whole default suite."""
    name, timeout_s, all_checks = args
    m = BY_NAME[name]
    t0 = time.monotonic()
    thm = by_theorem(m, timeout_s)
    eq = prove_equivalent(name)
    settled = (theorem_kills(thm) if m.killer is not None
               else eq is not None and eq.startswith("PROVED"))
    cc = tests = "-"
    if all_checks or not settled:
        cc = by_gpu_crosscheck(m)
        if all_checks or not cc.startswith("killed"):
            tests = by_tests(m)
    return Kill(name, thm, cc, tests, time.monotonic() - t0, eq)


def run(names: Sequence[str], timeout_s: float, jobs: int, all_checks: bool) -> int:
    """Check each mutant, a line each as it ends, and a verdict line; exit 0 iff all die."""
    t0 = time.monotonic()
    work = [(n, timeout_s, all_checks) for n in names]
    kills: list[Kill] = []
    print(f"{len(work)} mutants of the {PR_RELEASE} lookup (model and encoding together)",
          flush=True)
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(jobs, maxtasksperchild=1) as pool:  # a process per mutant
        for k in pool.imap(run_one, work):
            kills.append(k)
            m = BY_NAME[k.mutant]
            status = "KILLED    " if k.killed else ("EQUIVALENT" if k.equivalent
                                                          else "SURVIVED  ")
            print(f"{status} {k.mutant} ({m.words}; {k.seconds:.0f}s)\n"
                  f"    theorem: {k.theorem}\n    GPU cross-check: {k.crosscheck}\n"
                  f"    tests: {k.tests}"
                  + (f"\n    equivalence: {k.equivalence}" if k.equivalence else ""),
                  flush=True)
    alive = [k.mutant for k in kills if not (k.killed or k.equivalent)]
    equivalent = sum(k.equivalent and not k.killed for k in kills)
    by_proofs = sum(theorem_kills(k.theorem) for k in kills)
    print(f"{'FAIL' if alive else 'PASS'}: {len(kills) - len(alive)} of {len(kills)} mutants "
          f"killed or proved equivalent ({by_proofs} killed by a theorem, {equivalent} proved "
          f"equivalent, the rest killed by a test or the GPU cross-check)"
          f"{'; alive: ' + ', '.join(alive) if alive else ''} "
          f"[{time.monotonic() - t0:.0f}s]")
    return 1 if alive else 0


def all_names() -> list[str]:
    return [m.name for m in MUTANTS]
