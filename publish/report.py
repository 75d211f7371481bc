"""The report: report.md, report.json, the counterexample files and their pictures, from the
rows of a proofs run (``proofs.results``); the pictures drawn in the run's pool."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import releases
from model.evaluate import evaluate
from model.explain import draw_png, token_line
from model.layout import Layout
from model.maximality import larger_valid_hit
from model.scenario import parse_scenario
from model.semantics import get_semantics
from proofs.results import Row, row_json, verdict_scope
from proofs.theorems import PRECONDITIONS, THEOREMS
from publish import cache


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
    cache.keep_picture(d.key(), d.path)  # for the next run (the main job's only)
    return time.process_time() - t0


class _Kept:
    """A picture taken from the cache (``publish.cache``): drawn with no CPU here."""

    def get(self) -> float:
        return 0.0


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
        titles them) and, with ``spec``, the spec's (``publish.spec.row_drawings``)."""
        from publish.spec import row_drawings

        queue: list[Drawing] = []
        self.calls += 1
        scratch = self.scratch / str(self.calls)
        write_report(rows, scratch, queue=queue)
        if self.spec:
            queue += row_drawings(scratch, [row_json(r) for r in rows])
        for d in queue:
            if d.key() not in self.drawn:
                self.drawn[d.key()] = (d.path, _Kept() if cache.picture(d.key(), d.path)
                                       else self.pool.apply_async(draw, (d,)))


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
    todo = [d for d in first.values() if not cache.picture(d.key(), d.path)]
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
    newest = releases.newest().name
    (out / "counterexamples").mkdir(exist_ok=True)
    md = ["# Lookup theorems: results", "",
          "Each theorem is checked against each semantics; sizes, prompt length, GPU hit and "
          f"store content are symbolic and unbounded (for the {newest} and alt-v033-* "
          "rows marked bounded, the prompt is at most 3 chunks of each group: see their "
          "bounded scope).", "",
          "The first verdict is over every layout the release's start-up checks accept "
          "(no precondition); the second, where a theorem "
          "has preconditions, under them. Layouts: any number of groups of each kind, "
          "each with its own block size, EAGLE on any of them, any block_size_factor and "
          "window (the loop is proved for any number of groups: proofs/abstract.py). "
          f"vLLM 0.33.0 and its fixes ({newest}, alt-v033-*) are proved for every "
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
    # each scope is written once, below the table; a row names it by its number
    scopes: dict[str, int] = {}

    def scope_ref(text: str) -> str:
        return f"scope {scopes.setdefault(text, len(scopes) + 1)}"

    for r in rows:
        names = ", ".join(f"`{p}`" for p in THEOREMS[r.theorem].pre(r.semantics))
        acc = (r.accepted or r.verdict).status
        av = r.accepted or r.verdict
        if verdict_scope(r.semantics, av):
            acc += (f" ({'' if av.scope else 'bounded, '}"
                    f"{scope_ref(verdict_scope(r.semantics, av) or '')})")
        with_pre = f"{r.verdict.status} ({names})" if names else "(none)"
        if names and r.accepted is not None and r.verdict.scope:
            with_pre += f" ({scope_ref(r.verdict.scope)})"
        md.append(f"| {r.theorem} | {r.semantics} | {acc} | {r.accepted_expected} | "
                  f"{with_pre} | {r.expected if names else ''} | "
                  f"{'yes' if r.matches else 'NO'} | {r.verdict.seconds:.2f} |")
    md.append("")
    if scopes:
        md += ["Scopes named in the table:", ""]
        md += [f"{n}. {text}" for text, n in scopes.items()]
        md.append("")
    for name, thm in THEOREMS.items():
        md += [f"## {name}", "", thm.words, ""]
        release_pre = thm.pre(newest) if thm.covers(newest) else thm.preconditions
        # a fix of 0.33.0 checked under other preconditions than the release's rows
        own = {s: thm.pre(s) for s in thm.expected
               if get_semantics(s).chunked and thm.pre(s) != release_pre}
        if thm.preconditions or release_pre:
            md.append("Preconditions" + (f" (vLLM 0.33.0's rows: "
                                         f"{', '.join(release_pre) or 'none'}"
                                         + "".join(f"; {s}: {', '.join(p) or 'none'}"
                                                   for s, p in own.items()) + ")"
                                         if release_pre != thm.preconditions else "") + ":")
            for p in dict.fromkeys(thm.preconditions + release_pre):
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



def incomplete_report(rows: Sequence[Row], report_md: Path, verdict: str) -> None:
    """An interrupted run's report.md: the pairs that finished, under ``verdict`` (an
    INCOMPLETE FAIL) first and last; no report.json, so nothing reads it as a whole run."""
    with tempfile.TemporaryDirectory(prefix="proofs-incomplete-") as scratch:
        write_report(rows, Path(scratch), queue=[])
        body = (Path(scratch) / "report.md").read_text()
    report_md.write_text(f"{verdict}\n\n{body.rstrip()}\n\n{verdict}\n")
