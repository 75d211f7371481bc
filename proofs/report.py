"""Running every (theorem, semantics) pair and writing report.json, report.md, pictures."""

from __future__ import annotations

import json
import multiprocessing
import sys
import time
from collections.abc import Sequence
from contextlib import nullcontext
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

    @property
    def matches(self) -> bool:
        ok = (self.verdict.status == "PROVED") if self.expected == "holds" else (
            self.verdict.status == "COUNTEREXAMPLE")
        # a precondition is shown necessary only by a counterexample when it is dropped
        return ok and all(n.status == "COUNTEREXAMPLE" for n in self.necessity)


NECESSITY_FOR = ("vllm-0.24.0",)  # the release whose guarantees the preconditions state


def run_one(theorem: str, semantics: str, timeout_s: float, necessity: bool) -> Row:
    thm = THEOREMS[theorem]
    v = check(theorem, semantics, int(timeout_s * 1000))
    expected = "holds" if thm.expected[semantics] else "fails"
    needs: list[Necessity] = []
    if necessity and expected == "holds" and v.status == "PROVED" and semantics in NECESSITY_FOR:
        for p in thm.preconditions:
            if PRECONDITIONS[p].scope:
                continue  # bounds the proof; not claimed necessary
            t0 = time.monotonic()
            rest = [q for q in thm.preconditions if q != p]
            w = check(theorem, semantics, int(timeout_s * 1000), assumed=rest)
            needs.append(Necessity(p, w.status, w.counterexample, time.monotonic() - t0))
    return Row(theorem, semantics, v, expected, tuple(needs))


def _scenario_name(row: Row, suffix: str = "") -> str:
    return f"{row.theorem}--{row.semantics}{suffix}"


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
            for p in THEOREMS[row.theorem].preconditions
        ],
        "counterexample": row.verdict.counterexample,
    }


def _picture(scen: dict[str, Any], path: Path, title: str) -> list[str]:
    s = parse_scenario(scen)
    o = evaluate(s, enforce=False)
    larger = None
    if path.name.startswith("maximality") and isinstance(o.layout, Layout):
        larger = larger_valid_hit(s, o.layout, get_semantics(o.semantics), o.hit_tokens)
    draw_png(s, o, path, title, larger=larger, unreachable=evaluate(s).refused)
    return token_line(s, o)


def write_report(rows: Sequence[Row], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "counterexamples").mkdir(exist_ok=True)
    md = ["# Lookup theorems: results", "",
          "Each theorem is checked against each semantics; sizes, prompt length, GPU hit and "
          "store content are symbolic and unbounded.", "",
          "| theorem | semantics | status | expected | matches | seconds |",
          "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        md.append(f"| {r.theorem} | {r.semantics} | {r.verdict.status} | {r.expected} | "
                  f"{'yes' if r.matches else 'NO'} | {r.verdict.seconds:.2f} |")
    md.append("")
    for name, thm in THEOREMS.items():
        md += [f"## {name}", "", thm.words, ""]
        if thm.preconditions:
            md.append("Preconditions:")
            for p in thm.preconditions:
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
            if r.verdict.counterexample:
                base = _scenario_name(r)
                (out / "counterexamples" / f"{base}.json").write_text(
                    json.dumps(r.verdict.counterexample, indent=1) + "\n")
                lines = _picture(r.verdict.counterexample, out / f"{base}.png",
                                 f"{name} fails on {r.semantics}")
                md += ["", f"Minimal counterexample (`counterexamples/{base}.json`):", "",
                       f"![{base}]({base}.png)", "", "```", *lines, "```"]
            for n in r.necessity:
                md.append(f"\n- dropping `{n.precondition}`: {n.status}")
                if n.counterexample:
                    base = _scenario_name(r, f"--without-{n.precondition}")
                    (out / "counterexamples" / f"{base}.json").write_text(
                        json.dumps(n.counterexample, indent=1) + "\n")
                    lines = _picture(n.counterexample, out / f"{base}.png",
                                     f"{name} on {r.semantics} without {n.precondition}")
                    md += ["", f"  ![{base}]({base}.png)", "", "```", *lines, "```"]
            md.append("")
    (out / "report.md").write_text("\n".join(md) + "\n")
    (out / "report.json").write_text(json.dumps(
        {"results": [row_json(r) for r in rows]}, indent=1) + "\n")


def _run_one(args: tuple[str, str, float, bool]) -> Row:
    return run_one(*args)


def run_all(theorems: Sequence[str], semantics: Sequence[str], timeout_s: float,
            necessity: bool = True, jobs: int = 1) -> list[Row]:
    """Every pair, ``jobs`` at a time (separate processes); a line per pair as it ends."""
    print(f"{'theorem':<20}{'semantics':<30}{'status':<16}{'expected':<10}"
          f"{'match':<7}{'seconds':>8}", flush=True)
    pairs = [(t, s, timeout_s, necessity) for t in theorems for s in semantics]
    rows: list[Row] = []
    with multiprocessing.Pool(jobs) if jobs > 1 else nullcontext() as pool:
        results = pool.imap(_run_one, pairs) if pool is not None else map(_run_one, pairs)
        for r in results:
            rows.append(r)
            extra = "".join(f"\n    without {n.precondition}: {n.status} ({n.seconds:.1f}s)"
                            for n in r.necessity)
            print(f"{r.theorem:<20}{r.semantics:<30}{r.verdict.status:<16}{r.expected:<10}"
                  f"{'yes' if r.matches else 'NO':<7}{r.verdict.seconds:>8.2f}{extra}",
                  flush=True)
            if r.verdict.note and not r.matches:
                print(f"    {r.verdict.note}", file=sys.stderr, flush=True)
    return rows
