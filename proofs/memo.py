"""Solver answers shared by the processes of one run: a query asked in one process (a
lemma that two releases or fixes state in the same terms, a bounded template that a
necessity check and the release's own check both unroll) is solved once per run, not
once per process.

Each answer is kept in the run's folder (``use``; none: nothing is kept or read) under
the query's fingerprint, the SHA-256 of the solver's name and settings and of Z3's
structural hash of each assertion (process-independent, cheap), with the SHA-256 of the
query's full text (each assertion's SMT-LIB form, the name and settings: ``digest``)
beside it. A query is answered from the folder only when a line under its fingerprint
carries its very digest: the same query, so the same answer. Only sat and unsat are
kept (an unknown depends on the time left, and is asked again), and only where the
caller reads nothing but the answer (no model: a counterexample or witness is always
solved, so its text cannot change). A query that took less than ``KEEP_S`` to solve is
not kept (its text would cost about as much as solving it again).

The folder lives for one run (``proofs.results.run_all``): a changed encoding, a
sabotage or another run never finds these answers. With PROOFS_MEMO_LOG=FILE each query
through ``check`` appends a line there (process, pair, solver, fingerprint, answer, CPU
seconds, whether reused): where the solving time goes.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import z3

# solve times below this are not kept (seconds)
KEEP_S = 0.05

_FOLDER: list[Path] = []  # the run's folder (none: off)


@dataclass
class Counts:
    """This process's queries through ``solve``: solved here, answered from the folder,
    kept for the others."""

    solved: int = 0
    reused: int = 0
    kept: int = 0
    reused_s: float = 0.0  # the solve time the reused answers took where they were solved


COUNTS = Counts()


def use(folder: str | Path | None) -> None:
    """Keep and read answers in ``folder`` from now on (None: neither); the counts start
    again at 0 when the folder changes."""
    if _FOLDER != ([] if folder is None else [Path(folder)]):
        _FOLDER[:] = [] if folder is None else [Path(folder)]
        COUNTS.solved = COUNTS.reused = COUNTS.kept = 0
        COUNTS.reused_s = 0.0


def folder() -> Path | None:
    return _FOLDER[0] if _FOLDER else None


Settings = Sequence[tuple[str, object]]


def fingerprint(how: str, settings: Settings, q: Sequence[z3.ExprRef]) -> str:
    """The query's file name: its solver, settings and the assertions' structural hashes."""
    h = hashlib.sha256(f"{how}\0{sorted((k, repr(v)) for k, v in settings)!r}\0{len(q)}".encode())
    for a in q:
        h.update(a.hash().to_bytes(4, "little"))
    return h.hexdigest()[:40]


def digest(how: str, settings: Settings, q: Sequence[z3.ExprRef]) -> str:
    """The SHA-256 of the query's full text (its assertions in SMT-LIB form, in order)."""
    h = hashlib.sha256(f"{how}\0{sorted((k, repr(v)) for k, v in settings)!r}".encode())
    for a in q:
        h.update(b"\0")
        h.update(a.sexpr().encode())
    return h.hexdigest()


_ANSWER = {"sat": z3.sat, "unsat": z3.unsat}


def lookup(how: str, settings: Settings, q: Sequence[z3.ExprRef],
           only: z3.CheckSatResult | None = None) -> z3.CheckSatResult | None:
    """The answer another process (or this one) kept for this very query, or None;
    ``only``: that answer alone (e.g. unsat where a sat answer's model is needed)."""
    base = folder()
    if base is None:
        return None
    try:
        lines = (base / fingerprint(how, settings, q)).read_text().splitlines()
    except OSError:
        return None
    mine = digest(how, settings, q)
    for line in lines:
        parts = line.split()
        if len(parts) == 4 and parts[0] == mine and parts[1] in _ANSWER:
            res = _ANSWER[parts[1]]
            if only is not None and res != only:
                return None
            COUNTS.reused += 1
            COUNTS.reused_s += float(parts[2])
            return res
    return None


def keep(how: str, settings: Settings, q: Sequence[z3.ExprRef], res: z3.CheckSatResult,
         seconds: float) -> None:
    """Keep ``res`` for the query (sat or unsat only; not below ``KEEP_S``)."""
    base = folder()
    if base is None or res == z3.unknown or seconds < KEEP_S:
        return
    line = f"{digest(how, settings, q)} {res} {seconds:.3f} {os.getpid()}\n".encode()
    # one short append: whole lines, whichever process writes beside it
    fd = os.open(base / fingerprint(how, settings, q), os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    COUNTS.kept += 1


def check(s: z3.Solver, how: str, settings: Settings = (),
          only: z3.CheckSatResult | None = None) -> z3.CheckSatResult:
    """``s.check()`` for solver ``s`` (made by ``how`` with ``settings``; its assertions
    are the query), answered from the run's folder where it holds the answer (``only``:
    where it is that answer, e.g. unsat where a sat answer's model is read)."""
    if folder() is None:
        return s.check()
    q = list(s.assertions())
    got = lookup(how, settings, q, only)
    if got is not None:
        _log(how, settings, q, got, 0.0, True)
        return got
    t0 = time.process_time()
    res = s.check()
    COUNTS.solved += 1
    if only is None or res == only:
        keep(how, settings, q, res, time.process_time() - t0)
    _log(how, settings, q, res, time.process_time() - t0, False)
    return res


LABEL: list[str] = [""]  # the pair being run (for the log)


def _log(how: str, settings: Settings, q: Sequence[z3.ExprRef], res: z3.CheckSatResult,
         seconds: float, reused: bool) -> None:
    log = os.environ.get("PROOFS_MEMO_LOG")
    if not log:
        return
    with open(log, "a") as f:
        f.write(f"{os.getpid()}\t{LABEL[0]}\t{how[:30]}\t{fingerprint(how, settings, q)}\t"
                f"{res}\t{seconds:.3f}\t{int(reused)}\n")


def save_counts() -> None:
    """This process's counts, into the run's folder (``total``)."""
    base = folder()
    if base is None:
        return
    c = COUNTS
    (base / f"counts-{os.getpid()}").write_text(
        f"{c.solved} {c.reused} {c.kept} {c.reused_s:.3f}\n")


def total(base: Path) -> Counts:
    """Every process's counts in ``base`` (``save_counts``), summed."""
    out = Counts()
    for p in base.glob("counts-*"):
        try:
            solved, reused, kept, reused_s = p.read_text().split()
        except (OSError, ValueError):
            continue
        out.solved += int(solved)
        out.reused += int(reused)
        out.kept += int(kept)
        out.reused_s += float(reused_s)
    return out
