"""Running every (theorem, semantics) pair and writing report.json, report.md, pictures."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model.evaluate import evaluate
from model.explain import draw_png, token_line
from model.layout import Layout
from model.maximality import larger_valid_hit
from model.scenario import parse_scenario
from model.semantics import get_semantics
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
    """Whether ``v`` holds only within a bounded scope (``_scope``)."""
    return v.tails_bounded is not None or (
        get_semantics(semantics).chunked and v.scope is None)


# the releases whose guarantees the preconditions state
NECESSITY_FOR = ("vllm-0.24.0", "vllm-0.33.0")


def run_one(theorem: str, semantics: str, timeout_s: float, necessity: bool) -> Row:
    thm = THEOREMS[theorem]
    pre = thm.pre(semantics)
    v = check(theorem, semantics, int(timeout_s * 1000))
    expected = "holds" if thm.expected[semantics] else "fails"
    needs: list[Necessity] = []
    if necessity and expected == "holds" and v.status == "PROVED" and semantics in NECESSITY_FOR:
        for p in pre:
            if PRECONDITIONS[p].scope:
                continue  # bounds the proof; not claimed necessary
            t0 = time.monotonic()
            rest = [q for q in pre if q != p]
            # claimed necessary: the counterexample search goes first
            w = check(theorem, semantics, int(timeout_s * 1000), assumed=rest,
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
                    if same else check(theorem, semantics, int(timeout_s * 1000), assumed=(),
                                       search_first=acc_expected == "fails"))
    return Row(theorem, semantics, v, expected, tuple(needs), wit, accepted, acc_expected)


def _scope(semantics: str, v: Verdict | None = None) -> str | None:
    """The bound a verdict on ``semantics`` holds within (None: unbounded); ``v``'s own
    where it names one (0.33.0's layered proof)."""
    if v is not None and v.scope is not None:
        return v.scope
    if not get_semantics(semantics).chunked:
        return None
    from proofs.encoding_chunked import SCOPE

    return SCOPE.words()


def _scenario_name(row: Row, suffix: str = "") -> str:
    return f"{row.theorem}--{row.semantics}{suffix}"


def picture_title(theorem: str, semantics: str, suffix: str = "") -> str:
    """The title of the picture of counterexample ``{theorem}--{semantics}{suffix}``
    (the spec draws the same one under the same title: drawn once, copied)."""
    if suffix == "--accepted":
        return f"{theorem} on {semantics}, no precondition"
    if suffix.startswith("--without-"):
        return f"{theorem} on {semantics} without {suffix.removeprefix('--without-')}"
    return f"{theorem} fails on {semantics}"


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
        "scope": _scope(row.semantics, row.verdict),
        # the bounded encoding's scope (False: no bound, or the layered proof's words)
        "bounded": _scope(row.semantics) is not None and row.verdict.scope is None,
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


@dataclass(frozen=True)
class Drawing:
    """One picture: ``model.explain.draw_png``'s arguments, resolved (cheap: no drawing)."""

    scenario: dict[str, Any]  # as parse_scenario reads it
    semantics: str | None  # None: the scenario's own
    path: Path
    title: str
    larger: int | None  # a maximality counterexample's larger valid hit
    unreachable: str | None  # why no engine produces this input

    def key(self) -> str:
        """Equal for two drawings of the same bytes (all but the file name)."""
        return json.dumps([self.scenario, self.semantics or self.scenario.get("semantics"),
                           self.title, self.larger, self.unreachable], sort_keys=True)


def _picture(scen: dict[str, Any], path: Path, title: str, drawings: list[Drawing]
             ) -> list[str]:
    """The token lines of ``scen``; its picture is queued on ``drawings``."""
    s = parse_scenario(scen)
    o = evaluate(s, enforce=False)
    larger = None
    if path.name.startswith("maximality") and isinstance(o.layout, Layout):
        larger = larger_valid_hit(s, o.layout, get_semantics(o.semantics), o.hit_tokens)
    elif path.name.startswith("maximality") and isinstance(scen.get("valid_hit"), int):
        larger = scen["valid_hit"]  # 0.33.0: the file carries it (model.maximality_chunked)
    drawings.append(Drawing(scen, None, path, title, larger, evaluate(s).refused))
    return token_line(s, o)


def draw(d: Drawing) -> float:
    """Draw one picture; its CPU seconds."""
    t0 = time.process_time()
    s = parse_scenario(d.scenario)
    draw_png(s, evaluate(s, d.semantics, enforce=False), d.path, d.title, larger=d.larger,
             unreachable=d.unreachable)
    return time.process_time() - t0


class EarlyPictures:
    """Pictures put in the run's pool while the pairs still run, each as soon as its row
    exists (queued behind every pair and fact, so a process takes one only when it has
    nothing else left): ``draw_all`` then copies them instead of drawing them again."""

    def __init__(self, pool: Any, scratch: Path, spec: bool = False) -> None:
        self.pool, self.scratch, self.spec = pool, scratch, spec  # spec: the run writes it
        self.drawn: dict[str, tuple[Path, Any]] = {}  # Drawing.key() -> (file, its result)
        self.calls = 0

    def rows(self, rows: list[Row]) -> None:
        """Queue the pictures of ``rows``, the report's (as ``write_report`` names and
        titles them) and, with ``spec``, the spec's (``proofs.spec.row_drawings``)."""
        from proofs.spec import row_drawings

        queue: list[Drawing] = []
        self.calls += 1
        scratch = self.scratch / str(self.calls)
        write_report(rows, scratch, queue=queue)
        if self.spec:
            queue += row_drawings(scratch, [row_json(r) for r in rows])
        for d in queue:
            if d.key() not in self.drawn:
                self.drawn[d.key()] = (d.path, self.pool.apply_async(draw, (d,)))


def draw_all(drawings: Sequence[Drawing], jobs: int = 1, pool: Any = None,
             early: EarlyPictures | None = None) -> float:
    """Draw the pictures, ``jobs`` at a time (or in ``pool``); a picture that another one
    repeats byte for byte (the report's and the spec's of one counterexample under the
    same title) is drawn once and copied, and so is one already drawn in ``early``.
    Their CPU seconds."""
    first: dict[str, Drawing] = {}
    copies: list[tuple[Drawing | Path, Drawing]] = []
    cpu = 0.0
    for _, result in (early.drawn.values() if early is not None else ()):
        cpu += result.get()
    for d in drawings:
        if early is not None and d.key() in early.drawn:
            copies.append((early.drawn[d.key()][0], d))
        elif d.key() in first:
            copies.append((first[d.key()], d))
        else:
            first[d.key()] = d
    todo = list(first.values())
    jobs = min(jobs, len(todo))
    if pool is not None:
        cpu += float(sum(pool.map(draw, todo, chunksize=1)))
    elif jobs <= 1:
        cpu += sum(draw(d) for d in todo)
    else:
        with multiprocessing.Pool(jobs) as p:
            cpu += float(sum(p.map(draw, todo, chunksize=1)))
    for src, dst in copies:
        shutil.copyfile(src if isinstance(src, Path) else src.path, dst.path)
    return cpu


def write_report(rows: Sequence[Row], out: Path, jobs: int = 1,
                 queue: list[Drawing] | None = None) -> None:
    """report.md, report.json, the counterexample files and their pictures (drawn
    ``jobs`` at a time; with ``queue``, put there to be drawn by the caller)."""
    out.mkdir(parents=True, exist_ok=True)
    drawings: list[Drawing] = [] if queue is None else queue
    (out / "counterexamples").mkdir(exist_ok=True)
    md = ["# Lookup theorems: results", "",
          "Each theorem is checked against each semantics; sizes, prompt length, GPU hit and "
          "store content are symbolic and unbounded (for the vllm-0.33.0 and alt-v033-* "
          "rows marked bounded, the prompt is at most 3 chunks of each group: see their "
          "bounded scope).", "",
          "The first verdict is over every layout the release's start-up checks accept "
          "(no precondition); the second, where a theorem "
          "has preconditions, under them. Layouts: any number of groups of each kind, "
          "each with its own block size, EAGLE on any of them, any block_size_factor and "
          "window (the loop is proved for any number of groups: proofs/abstract.py). "
          "vLLM 0.33.0 and its fixes (vllm-0.33.0, alt-v033-*) are proved for every "
          "layout 0.33.0 accepts by a layered proof (proofs/layers_chunked.py; partial "
          "tails: proofs/tail_layers_chunked.py) where it closes, the scope named beside "
          "each; the "
          "others are checked by an exact bounded encoding (proofs/encoding_chunked.py): "
          "their verdicts hold within the bounded scope named beside each (every token "
          "size still symbolic and unbounded; a PROVED one comes with termination "
          "proved over the same layouts, so the loop unrolled there cuts no run short); "
          "a counterexample is valid whatever the scope.", "",
          "| theorem | semantics | over accepted layouts | expected | with preconditions "
          "| expected | matches | seconds |",
          "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        names = ", ".join(f"`{p}`" for p in THEOREMS[r.theorem].pre(r.semantics))
        acc = (r.accepted or r.verdict).status
        av = r.accepted or r.verdict
        if _scope(r.semantics, av):
            acc += f" ({'' if av.scope else 'bounded: '}{_scope(r.semantics, av)})"
        with_pre = f"{r.verdict.status} ({names})" if names else "(none)"
        if names and r.accepted is not None and r.verdict.scope:
            with_pre += f" ({r.verdict.scope})"
        md.append(f"| {r.theorem} | {r.semantics} | {acc} | {r.accepted_expected} | "
                  f"{with_pre} | {r.expected if names else ''} | "
                  f"{'yes' if r.matches else 'NO'} | {r.verdict.seconds:.2f} |")
    md.append("")
    for name, thm in THEOREMS.items():
        md += [f"## {name}", "", thm.words, ""]
        v033 = thm.pre("vllm-0.33.0") if thm.covers("vllm-0.33.0") else thm.preconditions
        # a fix of 0.33.0 checked under other preconditions than the release's rows
        own = {s: thm.pre(s) for s in thm.expected
               if get_semantics(s).chunked and thm.pre(s) != v033}
        if thm.preconditions or v033:
            md.append("Preconditions" + (f" (vLLM 0.33.0's rows: {', '.join(v033) or 'none'}"
                                         + "".join(f"; {s}: {', '.join(p) or 'none'}"
                                                   for s, p in own.items()) + ")"
                                         if v033 != thm.preconditions else "") + ":")
            for p in dict.fromkeys(thm.preconditions + v033):
                pre = PRECONDITIONS[p]
                md.append(f"- `{p}`: {pre.words}. In vLLM: {pre.in_vllm}")
            md.append("")
        for r in rows:
            if r.theorem != name:
                continue
            md.append(f"### {name} on {r.semantics}: {r.verdict.status} "
                      f"(expected {r.expected})")
            if r.verdict.note:
                md.append(f"\n{r.verdict.note}")
            if r.witness is not None:
                w = r.witness
                what = (f"a valid hit of {w.valid_hit}" if w.valid_hit is not None
                        else f"a hit of {w.hit} that restores a Mamba state")
                md.append(f"\nNot vacuous: witness with {what}, replayed through model/ "
                          f"(`{json.dumps(w.scenario, sort_keys=True)}`)."
                          + (f" {w.note}" if w.note else "") if w.found
                          else f"\nNO WITNESS: {w.note}")
            if r.verdict.counterexample:
                base = _scenario_name(r)
                (out / "counterexamples" / f"{base}.json").write_text(
                    json.dumps(r.verdict.counterexample, indent=1) + "\n")
                lines = _picture(r.verdict.counterexample, out / f"{base}.png",
                                 picture_title(name, r.semantics), drawings)
                md += ["", f"Minimal counterexample (`counterexamples/{base}.json`):", "",
                       f"![{base}]({base}.png)", "", "```", *lines, "```"]
            if r.accepted is not None:
                md.append(f"\nOver every layout the release accepts: {r.accepted.status} "
                          f"(expected {r.accepted_expected}).")
                if r.accepted.counterexample:
                    base = _scenario_name(r, "--accepted")
                    (out / "counterexamples" / f"{base}.json").write_text(
                        json.dumps(r.accepted.counterexample, indent=1) + "\n")
                    lines = _picture(r.accepted.counterexample, out / f"{base}.png",
                                     picture_title(name, r.semantics, "--accepted"),
                                     drawings)
                    md += ["", f"  ![{base}]({base}.png)", "", "```", *lines, "```"]
            for n in r.necessity:
                md.append(f"\n- dropping `{n.precondition}`: {n.status}")
                if n.counterexample:
                    base = _scenario_name(r, f"--without-{n.precondition}")
                    (out / "counterexamples" / f"{base}.json").write_text(
                        json.dumps(n.counterexample, indent=1) + "\n")
                    lines = _picture(n.counterexample, out / f"{base}.png",
                                     picture_title(name, r.semantics,
                                                   f"--without-{n.precondition}"), drawings)
                    md += ["", f"  ![{base}]({base}.png)", "", "```", *lines, "```"]
            md.append("")
    if queue is None:
        draw_all(drawings, jobs)
    (out / "report.md").write_text("\n".join(md) + "\n")
    (out / "report.json").write_text(json.dumps(
        {"results": [row_json(r) for r in rows]}, indent=1) + "\n")


# the theorems whose pairs of one family run in one process (True: vLLM 0.33.0 and its
# fixes; False: the older releases): a process proves a query text once and finds a
# witness once per premises, and these share both (0.33.0: the aligned loop summary of
# no-partial-state is the one the partial-tail proofs of loads-stored-only and
# whole-blocks ask for, and leaves-last-token and termination need only witnesses the
# others find; the older family: witnesses shared across theorems, proofs/witness.py).
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


# CPU seconds each group takes (``GROUPS``), measured with the per-group figures the run
# prints (``python -m proofs --report DIR`` on stderr, bench/bench_proofs.py): run_all
# starts the longest first (LPT), so that no process is left with a long one at the end;
# a group not listed counts as 1 s. Only the order depends on them, never a result.
WEIGHT: dict[tuple[bool, str], float] = {  # measured on main 21bd57d with gc tuned
    (True, group_of(True, "loads-stored-only")): 23.0, (True, "maximality"): 10.2,
    (False, group_of(False, "maximality")): 12.3}


@dataclass(frozen=True)
class Side:
    """A task the run's processes take besides the pairs (the spec's facts)."""

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    seconds: float  # its CPU seconds (measured): where it goes in the order
    first: bool = False  # before every pair (e.g. a Z3 search, in a fresh process)


Pair = tuple[str, str, float, bool]
Work = tuple[str, "Sequence[Pair] | Side"]  # label, a group of pairs or a side task


def _run_one(args: Pair) -> Row:
    return run_one(*args)


def _work(item: Work) -> tuple[str, list[Row] | Any, float]:
    """Run a group of pairs (or a side task) in this process: (label, its rows or result,
    its CPU seconds)."""
    label, what = item
    t0 = time.process_time()
    out = (what.fn(*what.args) if isinstance(what, Side)
           else [run_one(*args) for args in what])
    return label, out, time.process_time() - t0


def _print_row(r: Row) -> None:
    extra = "".join(f"\n    without {n.precondition}: {n.status} ({n.seconds:.1f}s)"
                    for n in r.necessity)
    print(f"{r.theorem:<20}{r.semantics:<30}{r.verdict.status:<16}{r.expected:<10}"
          f"{'yes' if r.matches else 'NO':<7}{r.verdict.seconds:>8.2f}{extra}", flush=True)
    if r.verdict.note and not r.matches:
        print(f"    {r.verdict.note}", file=sys.stderr, flush=True)
    if r.witness is not None and not r.witness.found:
        print(f"    no witness: {r.witness.note}", file=sys.stderr, flush=True)


def run_all(theorems: Sequence[str], semantics: Sequence[str], timeout_s: float,
            necessity: bool = True, jobs: int = 1, pool: Any = None,
            side: Sequence[Side] = (), results: dict[str, Any] | None = None,
            cpu: dict[str, float] | None = None,
            done_rows: Callable[[list[Row]], None] | None = None,
            ends: list[float] | None = None) -> list[Row]:
    """Every pair, ``jobs`` at a time (separate processes; or in ``pool``); a line per pair
    as it ends. The ``side`` tasks run in the same processes, their results put in
    ``results`` by name; ``cpu`` gets each group's (and side task's) CPU seconds;
    ``done_rows`` is called with each group's rows as they end; ``ends`` gets the time
    (time.monotonic) each group or side task ended at, in order."""
    print(f"{'theorem':<20}{'semantics':<30}{'status':<16}{'expected':<10}"
          f"{'match':<7}{'seconds':>8}", flush=True)
    pairs = [(t, s, timeout_s, necessity) for t in theorems for s in semantics
             if THEOREMS[t].covers(s)]
    results = {} if results is None else results
    cpu = {} if cpu is None else cpu
    # a group's pairs (GROUPS: theorems of one family) in one process: many of their
    # queries are the same text, which a process proves once (layers_chunked.prove,
    # maximality_layers_chunked.prove, check._answer), and their witnesses the same
    groups: dict[tuple[bool, str], list[Pair]] = {}
    for p in pairs:
        chunked = get_semantics(p[1]).chunked
        groups.setdefault((chunked, group_of(chunked, p[0])), []).append(p)
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
                         (f"{k[1]} ({'0.33.0 family' if k[0] else 'older'}, "
                          f"{len(part)} pairs{half})", part)))
    work += [(s.seconds, (s.name, s)) for s in side if not s.first]
    # longest first (stable: equal weights keep the order above); the side tasks marked
    # first before all
    todo = ([(s.name, s) for s in side if s.first]
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
            done = map(_work, [(f"{p[0]} on {p[1]}", [p]) for p in pairs]
                       + [(s.name, s) for s in side])
        names = {s.name for s in side}
        for label, out, seconds in done:
            if label in names:
                results[label] = out
            else:
                for r in out:
                    rows.append(r)
                    _print_row(r)
                if done_rows is not None:
                    done_rows(out)
            cpu[label] = seconds
            if ends is not None:
                ends.append(time.monotonic())
    finally:
        if own:
            pool.close()
            pool.join()
    order = [(t, s) for t, s, _, _ in pairs]
    return sorted(rows, key=lambda r: order.index((r.theorem, r.semantics)))
