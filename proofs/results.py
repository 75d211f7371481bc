"""The proofs' results: every (theorem, semantics) pair run (``run_all``, in a process
pool, with side tasks beside the pairs), a ``Row`` per pair and its JSON (``row_json``,
report.json's rows). The report, the spec and their pictures are written from these by
``publish``; ``python -m proofs`` prints them.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import releases
from model.semantics import get_semantics
from proofs import memo
from proofs.check import Verdict, check
from proofs.theorems import PRECONDITIONS, THEOREMS
from proofs.witness import Witness, witness


@dataclass(frozen=True)
class Necessity:
    """A precondition dropped: the counterexample that shows it is needed (or not)."""

    precondition: str
    status: str
    counterexample: dict[str, Any] | None
    seconds: float


@dataclass(frozen=True)
class Row:
    theorem: str
    semantics: str
    verdict: Verdict
    expected: str  # holds | fails
    necessity: tuple[Necessity, ...]
    witness: Witness | None = None  # a PROVED theorem's premises hold on some run
    # the verdict over every layout the release's start-up checks accept (no
    # precondition), and what is declared for it
    accepted: Verdict | None = None
    accepted_expected: str = "holds"

    @property
    def accepted_matches(self) -> bool:
        v = self.accepted if self.accepted is not None else self.verdict
        return _as_expected(v, self.accepted_expected, self.semantics)

    @property
    def matches(self) -> bool:
        ok = _as_expected(self.verdict, self.expected, self.semantics) and self.accepted_matches
        if self.verdict.status == "PROVED" and not (self.witness and self.witness.found):
            return False  # a proof without a witness may be vacuous
        # a precondition is shown necessary only by a counterexample when it is dropped
        return ok and all(n.status == "COUNTEREXAMPLE" for n in self.necessity)


def _as_expected(v: Verdict, expected: str, semantics: str) -> bool:
    """``holds`` asks for a proof over every layout the release accepts: a PROVED that
    holds only within a bounded scope (the bounded encoding, or a layered proof whose
    partial-tail layouts fell back to it, e.g. a layered query out of time on a loaded
    machine) does not match it, so a weaker claim cannot pass unnoticed."""
    if expected != "holds":
        return v.status == "COUNTEREXAMPLE"
    return v.status == "PROVED" and not _bounded(semantics, v)


def _bounded(semantics: str, v: Verdict) -> bool:
    """Whether ``v`` holds only within a bounded scope (``verdict_scope``)."""
    return v.tails_bounded is not None or (
        get_semantics(semantics).chunked and v.scope is None)


# the releases whose guarantees the preconditions state: PR #44599's (the first that
# aligns the hit to the Mamba block before the loop) and the newest
NECESSITY_FOR = (next(n for n in releases.releases() if releases.get(n).align_at == "max_hit"),
                 releases.newest().name)


def run_one(theorem: str, semantics: str, timeout_s: float, necessity: bool) -> Row:
    thm = THEOREMS[theorem]
    pre = thm.pre(semantics)
    v = check(theorem, semantics, timeout_ms=int(timeout_s * 1000))
    expected = "holds" if thm.expected[semantics] else "fails"
    needs: list[Necessity] = []
    if necessity and expected == "holds" and v.status == "PROVED" and semantics in NECESSITY_FOR:
        for p in pre:
            if PRECONDITIONS[p].scope:
                continue  # bounds the proof; not claimed necessary
            t0 = time.monotonic()
            rest = [q for q in pre if q != p]
            # claimed necessary: the counterexample search goes first
            w = check(theorem, semantics, rest, int(timeout_s * 1000),
                      search_first=True)
            needs.append(Necessity(p, w.status, w.counterexample, time.monotonic() - t0))
    wit = None
    if v.status == "PROVED" and v.scope is not None:  # 0.33.0's layered proof
        from proofs.layers_chunked import witness as witness_layered

        wit = witness_layered(theorem, get_semantics(semantics), pre)
    elif v.status == "PROVED" and get_semantics(semantics).chunked:
        from proofs.check_chunked import witness as witness_chunked

        wit = witness_chunked(theorem, semantics, pre)
    elif v.status == "PROVED":
        wit = witness(theorem, get_semantics(semantics), pre)
    accepted = None
    acc_expected = "holds" if thm.holds_over_accepted(semantics) else "fails"
    if pre and v.status == "PROVED":
        # proved under preconditions: does it hold over every layout the release accepts?
        # (with one precondition, dropping it is the same question)
        same = [n for n in needs if len(pre) == 1]
        accepted = (Verdict(same[0].status, same[0].seconds, same[0].counterexample)
                    if same else check(theorem, semantics, (), int(timeout_s * 1000),
                                       search_first=acc_expected == "fails"))
    return Row(theorem, semantics, v, expected, tuple(needs), wit, accepted, acc_expected)


def verdict_scope(semantics: str, v: Verdict | None = None) -> str | None:
    """The bound a verdict on ``semantics`` holds within (None: unbounded); ``v``'s own
    where it names one (0.33.0's layered proof)."""
    if v is not None and v.scope is not None:
        return v.scope
    if not get_semantics(semantics).chunked:
        return None
    from proofs.encoding_chunked import SCOPE

    return SCOPE.words()


def row_json(row: Row) -> dict[str, Any]:
    return {
        "theorem": row.theorem,
        "semantics": row.semantics,
        "status": row.verdict.status,
        "expected": row.expected,
        "matches": row.matches,
        "seconds": round(row.verdict.seconds, 3),
        "note": row.verdict.note,
        "preconditions": [
            {"name": p, "words": PRECONDITIONS[p].words, "in_vllm": PRECONDITIONS[p].in_vllm,
             "scope": PRECONDITIONS[p].scope,
             "necessary": next((n.status == "COUNTEREXAMPLE" for n in row.necessity
                                if n.precondition == p), None),
             "counterexample_when_dropped": next((n.counterexample for n in row.necessity
                                                  if n.precondition == p), None)}
            for p in THEOREMS[row.theorem].pre(row.semantics)
        ],
        "scope": verdict_scope(row.semantics, row.verdict),
        # the bounded encoding's scope (False: no bound, or the layered proof's words)
        "bounded": verdict_scope(row.semantics) is not None and row.verdict.scope is None,
        # layered, but its layouts with partial tails on only within the bounded scope
        "tails_bounded": row.verdict.tails_bounded,
        "counterexample": row.verdict.counterexample,
        "over_accepted_layouts": {
            "status": (row.accepted or row.verdict).status,
            "expected": row.accepted_expected,
            "counterexample": (row.accepted or row.verdict).counterexample},
        "witness": None if row.witness is None else {
            "found": row.witness.found, "hit": row.witness.hit,
            "valid_hit": row.witness.valid_hit, "note": row.witness.note,
            "scenario": row.witness.scenario},
    }


# the theorems whose pairs of one family (and ``cluster``) run in one process (True: the
# chunked releases and the fixes; False: the older releases): a process proves a query
# text once and finds a witness once per premises, and these share both (0.33.0: the
# aligned loop summary of no-partial-state is the one the partial-tail proofs of
# loads-stored-only and whole-blocks ask for, and leaves-last-token and termination need
# only witnesses the others find; the older family: witnesses shared across theorems,
# proofs/witness.py).
# 0.33.0's five take 28.0 s CPU together against 36.4 s apart (python -m proofs --jobs 1
# --semantics <the four> --theorem ..., one process per theorem, idle machine); a theorem
# not named runs in a group of its own.
GROUPS: dict[bool, tuple[tuple[str, ...], ...]] = {
    True: (("no-partial-state", "loads-stored-only", "whole-blocks", "leaves-last-token",
            "termination"), ("maximality",)),
    False: (("no-partial-state", "loads-stored-only", "leaves-last-token", "whole-blocks",
             "termination", "maximality"),)}


def group_of(chunked: bool, theorem: str) -> str:
    """The name of the group ``theorem``'s pairs of the family run in (``GROUPS``)."""
    return ", ".join(next((g for g in GROUPS[chunked] if theorem in g), (theorem,)))


# the chunked family's two parts (``cluster``)
MODE_ALL, NOT_ALL = "chunked, Mamba mode 'all'", "chunked"


def cluster(semantics: str) -> str:
    """The part of its family ``semantics``' groups run in: the chunked releases whose
    Mamba groups run mode 'all' (``ChunkSteps.mamba_all``: their complete-chunk steps
    differ, and so do most of their lemma queries) apart from the others (the newest
    release, its fixes and the release before it share most of theirs: 0.33.0's layered
    queries are 0.32.0's but for the partial tail); the block family whole. Each part's
    groups run in one process where they share what they ask; the parts keep both
    processes busy to the end, and a query two parts ask is still solved once per run
    (proofs/memo.py)."""
    sem = get_semantics(semantics)
    if not sem.chunked:
        return "older"
    return MODE_ALL if sem.steps.mamba_all else NOT_ALL


# CPU seconds each group takes (``GROUPS``, in each ``cluster``), from the pairs' seconds in
# docs/report.json (23b5fa2, load 1-2; the necessity checks, witnesses and checks over
# the accepted layouts come on top): run_all starts the longest first (LPT), so that no
# process is left with a long one at the end; a group not listed counts as 1 s. Only the
# order depends on them, never a result.
WEIGHT: dict[tuple[str, str], float] = {
    (NOT_ALL, group_of(True, "loads-stored-only")): 67.1, (NOT_ALL, "maximality"): 34.3,
    (MODE_ALL, group_of(True, "loads-stored-only")): 22.6, (MODE_ALL, "maximality"): 15.8,
    ("older", group_of(False, "maximality")): 30.6}


@dataclass(frozen=True)
class Side:
    """A task the run's processes take besides the pairs (the spec's facts)."""

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    seconds: float  # its CPU seconds (measured): where it goes in the order
    first: bool = False  # before every pair (e.g. a Z3 search, in a fresh process)


Pair = tuple[str, str, float, bool]


@dataclass(frozen=True)
class Live:
    """What the process running a group does as each of its pairs ends (a group runs for
    minutes on a loaded machine; its first pairs should not wait for its last)."""

    stream: str | None = None  # "stdout" or "stderr": the pair's line printed there
    spill: str | None = None  # a folder: the pair's row pickled there (``spilled``)
    memo: str | None = None  # a folder: the run's solver answers (``proofs.memo``)


# label, a group of pairs or a side task, and what happens as each pair ends (without a
# stream the caller prints the group's lines when the whole group ends)
Work = tuple[str, "Sequence[Pair] | Side", Live]


def _run_one(args: Pair) -> Row:
    return run_one(*args)


def _work(item: Work) -> tuple[str, list[Row] | Any, float]:
    """Run a group of pairs (or a side task) in this process: (label, its rows or result,
    its CPU seconds), each pair's line printed and its row spilled as ``live`` says."""
    label, what, live = item
    memo.use(live.memo)
    t0 = time.process_time()
    if isinstance(what, Side):
        out: list[Row] | Any = what.fn(*what.args)
    else:
        out = []
        for args in what:
            memo.LABEL[0] = f"{args[0]} {args[1]}"
            out.append(run_one(*args))
            if live.stream is not None:
                _print_row(out[-1], getattr(sys, live.stream))
            if live.spill is not None:
                _spill(out[-1], Path(live.spill))
    memo.save_counts()
    return label, out, time.process_time() - t0


def _spill(row: Row, folder: Path) -> None:
    """Keep a finished pair's row where an interrupted run finds it (written whole, then
    renamed: an interrupt leaves no half a file under the name ``spilled`` reads)."""
    name = f"{os.getpid()}-{time.monotonic_ns()}"
    part = folder / f"{name}.part"
    part.write_bytes(pickle.dumps(row))
    part.replace(folder / f"{name}.row")


def spilled(folder: Path) -> list[Row]:
    """The rows the processes spilled into ``folder``, in the order they ended."""
    paths = sorted(folder.glob("*.row"), key=lambda p: int(p.stem.split("-")[1]))
    return [pickle.loads(p.read_bytes()) for p in paths]


TABLE_HEADER = (f"{'theorem':<20}{'semantics':<30}{'status':<16}{'expected':<10}"
                f"{'match':<7}{'seconds':>8}")


def row_line(r: Row) -> str:
    """A pair's line of the results table (with its necessity checks below it)."""
    extra = "".join(f"\n    without {n.precondition}: {n.status} ({n.seconds:.1f}s)"
                    for n in r.necessity)
    return (f"{r.theorem:<20}{r.semantics:<30}{r.verdict.status:<16}{r.expected:<10}"
            f"{'yes' if r.matches else 'NO':<7}{r.verdict.seconds:>8.2f}{extra}")


def _say(line: str, stream: Any) -> None:
    """``line`` and its newline in one write: pool processes share the stream, and
    ``print`` writes the two apart (unbuffered, another process's line came between)."""
    stream.write(line + "\n")
    stream.flush()


def _print_row(r: Row, progress: Any = None) -> None:
    _say(row_line(r), progress or sys.stdout)
    if r.verdict.note and not r.matches:
        _say(f"    {r.verdict.note}", sys.stderr)
    if r.accepted is not None and r.accepted.note and not r.accepted_matches:
        _say(f"    over the layouts the release accepts: {r.accepted.note}", sys.stderr)
    if r.witness is not None and not r.witness.found:
        _say(f"    no witness: {r.witness.note}", sys.stderr)


def run_all(theorems: Sequence[str], semantics: Sequence[str], timeout_s: float,
            necessity: bool = True, jobs: int = 1, pool: Any = None,
            side: Sequence[Side] = (), results: dict[str, Any] | None = None,
            cpu: dict[str, float] | None = None,
            done_rows: Callable[[list[Row]], None] | None = None,
            ends: list[float] | None = None, progress: Any = None,
            spill: Path | None = None) -> list[Row]:
    """Every pair, ``jobs`` at a time (separate processes; or in ``pool``); a line per pair
    as it ends. The ``side`` tasks run in the same processes, their results put in
    ``results`` by name; ``cpu`` gets each group's (and side task's) CPU seconds;
    ``done_rows`` is called with each group's rows as they end; ``ends`` gets the time
    (time.monotonic) each group or side task ended at, in order; the table's lines go to
    ``progress`` (default stdout) as pairs end (for sys.stdout or sys.stderr the process
    that ran the pair prints it; another stream gets a group's lines when it ends); with
    ``spill``, each pair's row is also kept in that folder as it ends (``spilled``: what
    an interrupted run had finished)."""
    print(TABLE_HEADER, file=progress or sys.stdout, flush=True)
    # to the console's streams the process that ran a pair prints its line as it ends
    # the run's solver answers, shared by its processes (proofs.memo)
    answers = tempfile.TemporaryDirectory(prefix="proofs-answers-")
    live = Live("stdout" if progress is None or progress is sys.stdout
                else "stderr" if progress is sys.stderr else None,
                None if spill is None else str(spill), answers.name)
    pairs = [(t, s, timeout_s, necessity) for t in theorems for s in semantics
             if THEOREMS[t].covers(s)]
    results = {} if results is None else results
    cpu = {} if cpu is None else cpu
    # a group's pairs (GROUPS: theorems of one family) in one process: many of their
    # queries are the same text, which a process proves once (layers_chunked.prove,
    # maximality_layers_chunked.prove, check._answer), and their witnesses the same
    groups: dict[tuple[str, str], list[Pair]] = {}
    for p in pairs:
        chunked = get_semantics(p[1]).chunked
        groups.setdefault((cluster(p[1]), group_of(chunked, p[0])), []).append(p)
    weight = {k: WEIGHT.get(k, 1.0) for k in groups}
    total = sum(weight.values()) + sum(s.seconds for s in side)
    work: list[tuple[float, Work]] = []
    for k, g in groups.items():
        # a group longer than a process's share of the run would alone set the run's
        # length: its halves go apart (each still shares its queries within itself)
        parts = [g[:len(g) // 2], g[len(g) // 2:]] if (
            jobs > 1 and len(g) > 1 and weight[k] > total / jobs) else [g]
        for i, part in enumerate(parts):
            half = f", part {i + 1} of {len(parts)}" if len(parts) > 1 else ""
            work.append((weight[k] * len(part) / len(g),
                         (f"{k[1]} ({k[0]}, {len(part)} pairs{half})", part, live)))
    work += [(s.seconds, (s.name, s, Live())) for s in side if not s.first]
    # longest first (stable: equal weights keep the order above); the side tasks marked
    # first before all
    todo = ([(s.name, s, Live()) for s in side if s.first]
            + [w for _, w in sorted(work, key=lambda x: -x[0])])
    rows: list[Row] = []
    jobs = min(jobs, len(todo))
    own = pool is None and jobs > 1
    if own:
        pool = multiprocessing.Pool(jobs)
    try:
        if pool is not None:
            done = pool.imap_unordered(_work, todo)
        else:  # this process, in the report's order (side tasks last)
            done = map(_work, [(f"{p[0]} on {p[1]}", [p], live) for p in pairs]
                       + [(s.name, s, Live()) for s in side])
        names = {s.name for s in side}
        for label, out, seconds in done:
            if label in names:
                results[label] = out
            else:
                for r in out:
                    rows.append(r)
                    if live.stream is None:  # else printed as the pair ended
                        _print_row(r, progress)
                if done_rows is not None:
                    done_rows(out)
            cpu[label] = seconds
            if ends is not None:
                ends.append(time.monotonic())
    finally:
        if own:
            pool.close()
            pool.join()
        n = memo.total(Path(answers.name))
        memo.use(None)
        answers.cleanup()
    if n.solved or n.reused:
        print(f"time:   solver queries: {n.solved} solved, {n.reused} answered by the same "
              f"query solved before in this run ({n.reused_s:.1f}s of solving where it was "
              "solved; proofs/memo.py)", file=sys.stderr, flush=True)
    order = [(t, s) for t, s, _, _ in pairs]
    return sorted(rows, key=lambda r: order.index((r.theorem, r.semantics)))


def answered_by(theorem: str, release: str) -> list[str]:
    """The findings whose fix, built on ``release``, is declared to hold ``theorem`` with
    less than the release needs: over every accepted layout where the release fails
    there, or under fewer preconditions (scope ones apart)."""
    thm = THEOREMS[theorem]

    def needs(s: str) -> tuple[bool, set[str]]:
        return (thm.holds_over_accepted(s),
                {p for p in thm.pre(s) if not PRECONDITIONS[p].scope})

    if not thm.covers(release):
        return []
    over, pre = needs(release)
    out = set()
    for fix in releases.fixes(of=release):
        s = releases.get(fix)
        if s.finding is None or not thm.covers(fix) or not thm.expected[fix]:
            continue
        fix_over, fix_pre = needs(fix)
        if (fix_over and not over) or fix_pre < pre:
            out.add(s.finding)
    return sorted(out)


def found_line(rows: Sequence[Row]) -> str | None:
    """What the run found about the newest release it covers, apart from whether the
    project's expectations held: the theorems that fail on some layout the release
    accepts (each with the findings whose fix answers it, ``answered_by``), and those
    proved for every such layout (None: no release row)."""
    covered = {r.semantics for r in rows}
    newest = next((n for n in reversed(releases.releases()) if n in covered), None)
    if newest is None:
        return None
    fails, holds, open_ = [], [], []
    for r in rows:
        if r.semantics != newest:
            continue
        over = r.accepted if r.accepted is not None else r.verdict
        if over.status == "COUNTEREXAMPLE" or r.verdict.status == "COUNTEREXAMPLE":
            fails.append(r.theorem)
        elif over.status == "PROVED":
            holds.append(r.theorem)
        else:
            open_.append(r.theorem)
    parts = []
    if fails:
        named = [f"{t} (finding {', '.join(f)})" if (f := answered_by(t, newest)) else t
                 for t in fails]
        parts.append(f"{', '.join(named)} FAIL on layouts it accepts")
    if holds:
        parts.append(f"{', '.join(holds)} hold on every layout it accepts")
    if open_:
        parts.append(f"no verdict for {', '.join(open_)}")
    return f"vLLM {releases.get(newest).base_version}: {'; '.join(parts)}"
