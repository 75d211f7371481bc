"""The reviewers' reference spec (``docs/spec.md`` and its pages ``docs/spec/*.md``, each
with an HTML twin), generated.

    python -m publish --report docs/    # runs the proofs, then writes the spec next to them
    python -m publish.spec docs/        # re-renders from the committed results (no Z3 run)

The words live in Jinja2 Markdown templates (``publish/templates/*.md.j2``; what vLLM
enforces of each precondition in ``publish/templates/preconditions.toml``); this module
only gathers the facts they are filled from (the expensive ones: ``publish.facts``).
``CodeFacts`` is what the code states (the model's words and pictures for the worked
examples, the committed GPU results) and ``Results`` is what running the tools produced
(``report.json`` from the proofs, ``spec-facts.json`` with the seed-layout counterexample
and the simulator's numbers): every verdict, scope and counterexample the spec shows is
read from ``Results``. HTML comes from the Markdown by markdown-it-py. Nothing
run-dependent reaches the spec, so the same inputs give the same bytes;
``tests/test_spec.py`` checks exactly that.
"""

from __future__ import annotations

import html
import inspect
import json
import re
import sys
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import jinja2
from markdown_it import MarkdownIt
from mdit_py_plugins.anchors import anchors_plugin
from mdit_py_plugins.anchors.index import slugify

import model.semantics
import releases as releases_registry
from model import citations, invariants, load_plan, lookup, maximality
from model.evaluate import evaluate
from model.explain import explain, token_line
from model.layout import Layout
from model.maximality import larger_valid_hit
from model.proposed_assert import FIRES_IN, proposed_assertion_fires
from model.scenario import parse_scenario
from model.semantics import Semantics, get_semantics
from proofs import abstract, theorems
from proofs.theorems import PRECONDITIONS, THEOREMS
from publish.facts import FACTS, collect_facts
from publish.names import (
    BEFORE_PR,
    BY_ROLE,
    FINDING_001_FIX,
    PR_RELEASE,
    ROUND_NUM_HIT,
    SIM_SEMANTICS,
)
from publish.report import Drawing, draw_all, picture_title
from releases import by_version

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = Path(__file__).resolve().parent / "templates"
SEED_FILE = "tests/scenarios/seed-boundary-32.json"
GPU_RESULTS = "sim/gpu/results"
REGRESSION_FILE = "docs/vllm/test_offloading_mamba_align.py"
CI_WORKFLOW = "docs/ci/offload-lookup-check.yml"
VLLM_TAG = "https://github.com/vllm-project/vllm/blob/v{version}/vllm/{path}#L{lines}"
# page (relative to the docs directory) -> template
PAGES = {"spec.md": "spec.md.j2", "spec/lookup.md": "lookup.md.j2",
         "spec/releases.md": "releases.md.j2",
         "spec/counterexamples.md": "counterexamples.md.j2",
         "spec/evidence.md": "evidence.md.j2", "spec/for-vllm.md": "for-vllm.md.j2",
         "spec/citations.md": "citations.md.j2"}
IMG = "spec/img"
# ROUND_NUM_HIT's failure at vLLM-like sizes: GPU block 16, offloaded block 32, a GPU hit
# of one GPU block (a whole GPU block, but not a whole offloaded block)
ALT_SCALED: dict[str, Any] = {
    "semantics": ROUND_NUM_HIT, "block_size_factor": 2, "prompt_tokens": 64,
    "num_computed_tokens": 16,
    "groups": [{"kind": "full_attention", "gpu_block_size": 16, "stored": "all"},
               {"kind": "mamba", "gpu_block_size": 16, "mamba_cache_mode": "align",
                "stored": "all"}]}
# sim/gpu/results/<case>.json: the real engines of the releases before and with PR #44599
GPU_CASES = (f"{BEFORE_PR}-mamba-stock", f"{PR_RELEASE}-mamba-stock",
             f"{PR_RELEASE}-mamba-fix-disabled", f"{BEFORE_PR}-hybrid-stock",
             f"{PR_RELEASE}-hybrid-stock", f"{PR_RELEASE}-mamba-stock-all")
GPU_LENGTHS = (31, 32, 33, 47, 48, 49, 64, 65)
# a counterexample file may carry the larger valid hit of a maximality counterexample
LARGER_FIELDS = ("valid_hit", "larger_valid_hit", "larger_hit")


# --- the inputs -------------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    """One scenario under one semantics, as ``python -m model lookup --explain`` shows it."""

    scenario: dict[str, Any]
    semantics: str
    hit: int | None
    violations: tuple[str, ...]
    words: str  # model.explain.explain
    picture: tuple[str, ...]  # model.explain.token_line
    state_at: int | None  # the Mamba state position the load brings (None: no load)
    refused: str | None  # why a real engine would not produce this request (or None)
    larger: int | None  # the largest valid hit above the returned one (None: none)
    assertion_fires: bool  # the proposed update_state_after_alloc assertion


def _scenario_only(scenario: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in scenario.items() if k not in LARGER_FIELDS}


def example(scenario: dict[str, Any], semantics: str | None = None) -> Example:
    s = parse_scenario(_scenario_only(scenario))
    o = evaluate(s, semantics, enforce=False)
    assert o.layout is not None, o.refused
    state = next((ld.state_position for ld in o.loads
                  if ld.state_position is not None and s.groups[ld.group].restores_state), None)
    larger = next((scenario[k] for k in LARGER_FIELDS if isinstance(scenario.get(k), int)),
                  None)
    if larger is None and isinstance(o.layout, Layout):  # 0.33.0's files carry theirs
        larger = larger_valid_hit(s, o.layout, get_semantics(o.semantics), o.hit_tokens)
    return Example(scenario, o.semantics, o.hit_tokens,
                   tuple(v.invariant for v in o.violations), explain(s, o),
                   tuple(token_line(s, o)), state, evaluate(s, semantics).refused, larger,
                   proposed_assertion_fires(s, o.layout, o.hit_tokens, o.loads))


@dataclass(frozen=True)
class CodeFacts:
    """What the code says (cheap to compute; no solver, no simulator)."""

    anchors: dict[str, str]  # name -> link (from docs/spec/) to the model/proofs source line
    seed: dict[str, Any]  # the seed's scenario file (one Mamba align group, block 16)
    examples: dict[str, Example]  # "seed@<release>", ... and every counterexample
    gpu: dict[str, dict[int, tuple[int | None, bool]]]  # case -> length -> (hit, same output)


@dataclass(frozen=True)
class Results:
    """What running the tools produced (read back from the committed files)."""

    rows: tuple[dict[str, Any], ...]  # report.json's results
    facts: dict[str, Any] = field(default_factory=dict)  # spec-facts.json

    def row(self, theorem: str, semantics: str) -> dict[str, Any] | None:
        return next((r for r in self.rows
                     if r["theorem"] == theorem and r["semantics"] == semantics), None)


def _anchor(obj: Any) -> str:
    src = inspect.getsourcefile(obj)
    assert src is not None
    rel = Path(src).resolve().relative_to(ROOT).as_posix()
    return f"../../{rel}#L{inspect.getsourcelines(obj)[1]}"


ANCHORED: dict[str, Any] = {
    "lookup": lookup.lookup,
    "get_num_new_matched_tokens": lookup.get_num_new_matched_tokens,
    "load_plan": load_plan.load_plan,
    "no-partial-state": invariants.no_partial_state,
    "loads-stored-only": invariants.loads_stored_only,
    "leaves-last-token": invariants.leaves_last_token,
    "whole-blocks": invariants.whole_blocks,
    "maximality": maximality.is_valid_hit,
    "termination": lookup.lookup,
    "z3:no-partial-state": theorems.violates_no_partial_state,
    "z3:loads-stored-only": theorems.violates_loads_stored_only,
    "z3:leaves-last-token": theorems.violates_leaves_last_token,
    "z3:whole-blocks": theorems.violates_whole_blocks,
    "z3:maximality": theorems.valid_hit,
    "z3:termination": abstract.obligations,
    "PRECONDITIONS": theorems.precondition_formula,
}


def _key(scenario: dict[str, Any], semantics: str | None = None) -> str:
    return json.dumps([scenario, semantics], sort_keys=True)


def _cex(r: dict[str, Any], suffix: str, heading: str, scenario: dict[str, Any],
         without: str | None) -> dict[str, Any]:
    head = f"{r['theorem']} on {r['semantics']}{heading}"
    return {"theorem": r["theorem"], "semantics": r["semantics"], "without": without,
            "name": f"{r['theorem']}--{r['semantics']}{suffix}", "heading": head,
            "anchor": slugify(head), "scenario": scenario}


def _counterexamples(results: Results) -> list[dict[str, Any]]:
    """Every counterexample of the results: the theorem's own, the one over every layout
    the release accepts (where the report gives it apart), and one per dropped
    precondition; named as the report names their files."""
    out = []
    for r in results.rows:
        if r.get("counterexample"):
            # a row may carry the larger valid hit of a maximality counterexample
            larger = {k: r[k] for k in LARGER_FIELDS if isinstance(r.get(k), int)}
            out.append(_cex(r, "", "", r["counterexample"] | larger, None))
        accepted = (r.get("over_accepted_layouts") or {}).get("counterexample")
        if accepted and accepted != r.get("counterexample"):
            out.append(_cex(r, "--accepted", " over every accepted layout", accepted,
                            "every precondition"))
        for p in r.get("preconditions", []):
            if p.get("counterexample_when_dropped"):
                out.append(_cex(r, f"--without-{p['name']}", f" without {p['name']}",
                                p["counterexample_when_dropped"], p["name"]))
    return out


def _anchor_of(results: Results, theorem: str, semantics: str, suffix: str) -> str | None:
    name = f"{theorem}--{semantics}{suffix}"
    return next((c["anchor"] for c in _counterexamples(results) if c["name"] == name), None)


def _gpu_case(path: Path) -> dict[int, tuple[int | None, bool]]:
    data = json.loads(path.read_text())
    return {r["length"]: (r.get("connector_hit"), bool(r["equal"])) for r in data["lengths"]}


def fixed_semantics(scenario: dict[str, Any]) -> str:
    """The semantics a counterexample is shown beside: PR #44599's release for the older
    ones, finding 001's completed fix for vLLM 0.33.0's."""
    if get_semantics(scenario["semantics"]).chunked:
        return FINDING_001_FIX
    return PR_RELEASE


def gather_code_facts(results: Results, root: Path = ROOT) -> CodeFacts:
    seed = json.loads((root / SEED_FILE).read_text())
    examples: dict[str, Example] = {}
    for name in (BEFORE_PR, PR_RELEASE):
        examples[f"seed@{name}"] = example(seed, name)
    for name in (ROUND_NUM_HIT, PR_RELEASE):
        examples[f"scaled@{name}"] = example(ALT_SCALED, name)
    scenarios = [c["scenario"] for c in _counterexamples(results)]
    scenarios += [results.facts[k] for k in ("seed_counterexample",
                                             "alt_round_num_hit_counterexample")
                  if results.facts.get(k)]
    for scen in scenarios:
        examples[_key(scen)] = example(scen)
        fixed = fixed_semantics(scen)
        examples[_key(scen, fixed)] = example(scen, fixed)
    gpu = {name: _gpu_case(root / GPU_RESULTS / f"{name}.json") for name in GPU_CASES
           if (root / GPU_RESULTS / f"{name}.json").exists()}
    anchors = {name: _anchor(obj) for name, obj in ANCHORED.items()}
    return CodeFacts(anchors, seed, examples, gpu)


def load_results(directory: Path) -> Results:
    report = json.loads((directory / "report.json").read_text())
    facts_path = directory / FACTS
    facts = json.loads(facts_path.read_text()) if facts_path.exists() else {}
    return Results(tuple(report["results"]), facts)


# --- what the templates are filled with -------------------------------------------------


def all_semantics() -> dict[str, Semantics]:
    """Every semantics the model knows, with or without proofs (a release the Z3 encoding
    does not cover yet is kept apart in ``model.semantics``)."""
    known = getattr(model.semantics, "MODEL_SEMANTICS", model.semantics.SEMANTICS)
    return dict(known)


def columns() -> dict[str, Semantics]:
    """The first screen's columns: the newest release (vLLM 0.33.0, the one reviewers
    work on) and its fixes first, then the older releases and their alternatives."""
    known = all_semantics()
    return dict(sorted(known.items(), key=lambda kv: (not kv[1].chunked,)))


def releases() -> tuple[str, ...]:
    """The vLLM releases that have a semantics and cited lines, oldest first."""
    modelled = {s.base_version for s in all_semantics().values()}
    return tuple(v for v in citations.releases() if v in modelled)


def vllm_link(version: str, key: str, short: bool = False) -> str:
    """``[`scheduler.py:556-559`](tag link)`` for step ``key`` of ``version`` ('' if none)."""
    where = citations.span(version, key)
    if where is None:
        return ""
    path, first, last = where
    lines = str(first) if first == last else f"{first}-{last}"
    anchor = str(first) if first == last else f"{first}-L{last}"
    url = VLLM_TAG.format(version=version, path=path, lines=anchor)
    label = f":{lines}" if short else f"{path.rsplit('/', 1)[-1]}:{lines}"
    return f"[`{label}`]({url})"


def cite(shown: Sequence[str], key: str) -> str:
    """The newest shown release's line, with each older one's beside it where it exists."""
    versions = [v for v in shown if citations.span(v, key)]
    if not versions:
        raise KeyError(f"no release of {list(shown)} cites {key!r}")
    newest, older = versions[-1], versions[:-1]
    extra = "; ".join(f"{v}: {vllm_link(v, key, short=True)}" for v in reversed(older))
    only = f" ({newest} only)" if len(shown) > 1 and not older else ""
    return vllm_link(newest, key) + (f" ({extra})" if extra else only)


def shown_releases(results: Results) -> tuple[str, ...]:
    """The releases the spec's text is about: of those with proof results (else all), the
    newest and PR #44599's pair (the last release without the fix and the first with it);
    every other release's lines are on spec/citations.md."""
    with_rows = {r["semantics"] for r in results.rows}
    proved = tuple(v for v in releases() if by_version(v).name in with_rows)
    if not proved:
        return releases()
    story = {releases_registry.get(n).base_version for n in (BEFORE_PR, PR_RELEASE)}
    return tuple(v for v in proved if v in story or v == proved[-1])


def _cell(expected: str | None, status: str | None, matches: bool,
          anchor: str | None) -> dict[str, Any]:
    words = {"PROVED": "proved", "COUNTEREXAMPLE": "counterexample",
             "UNKNOWN": "unknown (no verdict)"}
    obtained = "not run" if status is None else words.get(status, status.lower())
    return {"expected": expected, "obtained": obtained, "matches": matches,
            "counterexample": anchor}


def matrix(results: Results) -> list[dict[str, Any]]:
    """Theorem rows x semantics cells: expected, obtained, whether they match; and, where
    the report gives it apart, the verdict over every layout the release accepts."""
    out = []
    names = list(dict.fromkeys([*THEOREMS, *(r["theorem"] for r in results.rows)]))
    for name in names:
        cells = []
        for sem in columns():
            r = results.row(name, sem)
            if r is None:
                cells.append(_cell(None, None, False, None) | {"accepted": None})
                continue
            cell = _cell(r["expected"], str(r["status"]), bool(r["matches"]),
                         _anchor_of(results, name, sem, ""))
            cell["bounded"] = bool(r.get("scope")) and r.get("bounded", True)
            cell["tails_bounded"] = bool(r.get("tails_bounded"))
            acc = r.get("over_accepted_layouts") or {}
            apart = bool(acc) and bool(r["preconditions"]) and (
                acc.get("status") != r["status"] or acc.get("expected") != r["expected"])
            cell["accepted"] = _cell(
                acc["expected"], str(acc["status"]),
                acc["status"] == ("PROVED" if acc["expected"] == "holds" else "COUNTEREXAMPLE"),
                _anchor_of(results, name, sem, "--accepted") or cell["counterexample"],
            ) if apart else None
            cells.append(cell)
        out.append({"theorem": name, "cells": cells})
    return out


def verdict(results: Results, theorem: str, semantics: str) -> dict[str, Any]:
    """A reviewer's word for one theorem on one semantics: ``holds`` (proved for every
    layout the release accepts), ``holds if`` (proved under the preconditions ``pre``; a
    counterexample over every accepted layout at ``otherwise``), ``fails`` (a
    counterexample at ``link``), ``no verdict`` or ``not run``."""
    r = results.row(theorem, semantics)
    out: dict[str, Any] = {"word": "not run", "pre": [], "link": None, "otherwise": None,
                           "bounded": False}
    if r is None:
        return out
    out["bounded"] = bool(r.get("scope")) and r.get("bounded", True)
    pre = [p["name"] for p in r.get("preconditions", []) if not p.get("scope")]
    acc = r.get("over_accepted_layouts") or {}
    if r["status"] == "COUNTEREXAMPLE":
        return out | {"word": "fails", "link": _anchor_of(results, theorem, semantics, "")}
    if r["status"] != "PROVED":
        return out | {"word": "no verdict"}
    if not pre or acc.get("status") == "PROVED":
        return out | {"word": "holds"}
    return out | {"word": "holds if", "pre": pre,
                  "otherwise": _anchor_of(results, theorem, semantics, "--accepted")}


def fix_cost(fix: str) -> list[dict[str, Any]]:
    """What a fix of finding 001 costs in hit tokens, per family of stores, as
    ``bench/bench_fix001.py`` measured it (``bench/results/fix001.json``)."""
    path = ROOT / "bench" / "results" / "fix001.json"
    if not path.exists():
        return []
    families = json.loads(path.read_text())["families"]
    return [{"family": f["family"], "scenarios": f["scenarios"],
             "lost_percent": f["lost_percent"][fix]}
            for f in families if fix in f["lost_percent"]]


def newest_table(results: Results) -> dict[str, Any]:
    """The first screen's table: the newest release with results and its fixes, each
    theorem in a reviewer's words."""
    newest = proved_release(results)
    cols = [newest, *releases_registry.fixes(of=newest)]
    rows = [{"theorem": t, "cells": [verdict(results, t, c) for c in cols]}
            for t in dict.fromkeys([*THEOREMS, *(r["theorem"] for r in results.rows)])]
    return {"columns": [{"name": c, "sem": get_semantics(c)} for c in cols], "rows": rows}


def older_table(results: Results) -> dict[str, Any]:
    """The same words for every other semantics with results (older releases and their
    review alternatives)."""
    shown = {c["name"] for c in newest_table(results)["columns"]}
    cols = [c for c in columns() if c not in shown]
    rows = [{"theorem": t, "cells": [verdict(results, t, c) for c in cols]}
            for t in dict.fromkeys([*THEOREMS, *(r["theorem"] for r in results.rows)])]
    return {"columns": [{"name": c, "sem": get_semantics(c)} for c in cols], "rows": rows}


def proved_release(results: Results) -> str:
    """The newest release semantics that has results (its preconditions are the table's)."""
    return by_version(shown_releases(results)[-1]).name


def guarantee_releases(results: Results) -> tuple[str, ...]:
    """The releases whose preconditions the first screen lists: the newest with results
    and vLLM 0.24.0 (PR #44599's release), newest first."""
    return tuple(dict.fromkeys((proved_release(results), PR_RELEASE)))


def _guarantee_rows(results: Results) -> dict[str, dict[str, Any]]:
    """Each precondition of the rows of ``guarantee_releases``: which theorems assume it
    (on which release), whether a counterexample shows it necessary, whether it is a
    proof scope."""
    out: dict[str, dict[str, Any]] = {}
    for r in results.rows:
        if r["semantics"] not in guarantee_releases(results):
            continue
        for p in r.get("preconditions", []):
            # the code's text is the maintained one; the results hold a copy
            known = PRECONDITIONS.get(p["name"])
            e = out.setdefault(p["name"], {"name": p["name"], "words": p["words"],
                                           "in_vllm": known.in_vllm if known
                                           else p.get("in_vllm", ""),
                                           "scope": bool(p.get("scope")), "assumed_by": []})
            e["assumed_by"].append({
                "theorem": r["theorem"], "necessary": p.get("necessary"),
                "release": get_semantics(r["semantics"]).base_version,
                "counterexample": _anchor_of(results, r["theorem"], r["semantics"],
                                             f"--without-{p['name']}")})
    return out


def preconditions(results: Results, env: jinja2.Environment) -> list[dict[str, Any]]:
    """The rows of the first screen's table: vLLM's enforcement and what breaks it; those
    the newest release's theorems assume first (the others are older releases')."""
    data = tomllib.loads((TEMPLATES / "preconditions.toml").read_text())
    newest = releases_registry.newest().base_version
    rows = []
    found = _guarantee_rows(results).items()
    for name, e in sorted(found, key=lambda ne: all(a["release"] != newest
                                                      for a in ne[1]["assumed_by"])):
        if e["scope"]:
            continue
        d = data.get(name, {})
        runtime = PRECONDITIONS[name].runtime if name in PRECONDITIONS else False
        rows.append(e | {
            "runtime": runtime,
            "enforced": env.from_string(d["enforced"]).render() if "enforced" in d else None,
            "breaks": (env.from_string(d["breaks"]).render() if "breaks" in d
                       else e["in_vllm"]),
        })
    return rows


def scope(results: Results) -> dict[str, Any]:
    """What the proofs cover, from the results: the group layout and every scope
    precondition a row assumes (a theorem proved only inside it)."""
    limits: dict[str, list[str]] = {}
    for r in results.rows:
        for p in r.get("preconditions", []):
            if p.get("scope"):
                words = limits.setdefault(r["theorem"], [])
                if p["words"] not in words:
                    words.append(p["words"])
    layouts = sorted({r["scope"] if isinstance(r["scope"], str)
                      else json.dumps(r["scope"], sort_keys=True)
                      for r in results.rows if r.get("scope") and r.get("bounded", True)}
                     | {r["tails_bounded"] for r in results.rows if r.get("tails_bounded")})
    # a layered 0.33.0 row whose partial-tail layouts stay bounded: a limit on its theorem
    for r in results.rows:
        if r.get("tails_bounded") and r["status"] == "PROVED":
            words = limits.setdefault(r["theorem"], [])
            w = ("partial tails are off, for vLLM 0.33.0 and its fixes (with them on: "
                 "bounded scope¹, which the layered tail proof does not yet reach)")
            if w not in words:
                words.append(w)
    # rows with a verdict over every layout the release's start-up checks accept come
    # from proofs that cover any layout (proofs/results.py); before that, the template
    any_layout = any("over_accepted_layouts" in r for r in results.rows)
    names = {"full_attention": "full attention", "sliding_window": "sliding window",
             "mamba": "Mamba"}
    kinds = [names.get(str(k), str(k)) for k in theorems.TEMPLATE]
    unproved = [r for r in results.rows if r["status"] not in ("PROVED", "COUNTEREXAMPLE")]
    any_bounded = any(r.get("scope") and r.get("bounded", True) for r in results.rows)
    return {"limits": limits, "kinds": kinds, "reported": layouts, "any_layout": any_layout,
            "any_bounded": any_bounded,
            "unproved": [f"{r['theorem']} on {r['semantics']}" for r in unproved],
            "semantics_without_results": [s for s in all_semantics()
                                          if not any(r["semantics"] == s
                                                     for r in results.rows)]}


def scenario_words(s: dict[str, Any]) -> str:
    """A one-line description of a scenario file."""
    parts = []
    for i, g in enumerate(s["groups"]):
        kind = {"full_attention": "full attention", "sliding_window":
                f"sliding window {g.get('sliding_window')}", "mamba":
                f"Mamba {g.get('mamba_cache_mode')}"}[g["kind"]]
        held = "all stored" if g["stored"] == "all" else f"stored {g['stored']}"
        extra = ", EAGLE" if g.get("eagle") else ""
        deferred = f", deferred {g['deferred']}" if g.get("deferred") else ""
        parts.append(f"g{i} {kind}{extra}, GPU block {g['gpu_block_size']}, {held}{deferred}")
    more = ""
    if s.get("mamba_block_size") is not None:
        more = f", `cache_config.mamba_block_size` = {s['mamba_block_size']}"
    return (f"prompt {s['prompt_tokens']} tokens, GPU hit {s['num_computed_tokens']}, "
            f"block_size_factor {s['block_size_factor']}{more}; " + "; ".join(parts))


def _sim_rows(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"semantics": s, **run["semantics"][s],
             "corrupted_other": run["semantics"][s]["corrupted"]
             - run["semantics"][s]["corrupted_direct"]}
            for s in SIM_SEMANTICS if s in run["semantics"]]


def findings() -> list[dict[str, str]]:
    """``docs/findings/NNN-*.md``: name and title (the first heading, without its number)."""
    out = []
    for path in sorted((ROOT / "docs" / "findings").glob("[0-9][0-9][0-9]-*.md")):
        first = path.read_text(encoding="utf-8").splitlines()[0]
        out.append({"name": path.name, "title": first.lstrip("# ").split(" — ", 1)[-1]})
    return out


def context(code: CodeFacts, results: Results, env: jinja2.Environment) -> dict[str, Any]:
    seed = code.seed
    cexs = [c | {"example": code.examples[_key(c["scenario"])],
                 "fixed": code.examples[_key(c["scenario"], fixed_semantics(c["scenario"]))],
                 "fixed_semantics": fixed_semantics(c["scenario"])}
            for c in _counterexamples(results)]
    rerun = {sem: [(n, h, bad) for n, h, bad in rows if n % 16 in (0, 1)]
             for sem, rows in results.facts.get("rerun", {}).items()}
    seed_cex = results.facts.get("seed_counterexample")
    alt = results.facts.get("alt_round_num_hit_counterexample")
    return {
        "code": code, "results": results, "releases": shown_releases(results),
        "names": BY_ROLE,
        "all_releases": releases(),
        "newest": proved_release(results), "semantics": columns(), "theorems": THEOREMS,
        "guarantee_releases": guarantee_releases(results),
        "matrix": matrix(results), "preconditions": preconditions(results, env),
        "answer": newest_table(results), "older": older_table(results),
        "finding_fix": {f: releases_registry.fix_for(f, completed=True).name
                        for f in ("001", "003")},
        "fix_cost": fix_cost(releases_registry.fix_for("001", completed=True).name),
        "guarantee": _guarantee_rows(results), "scope": scope(results),
        "findings": findings(),
        "seed": seed, "T": seed["prompt_tokens"],
        "B": seed["groups"][0]["gpu_block_size"] * seed["block_size_factor"],
        "old": code.examples[f"seed@{BEFORE_PR}"], "new": code.examples[f"seed@{PR_RELEASE}"],
        "seed_file": SEED_FILE, "counterexamples": cexs,
        "seed_cex": seed_cex and {"scenario": seed_cex,
                                  "example": code.examples[_key(seed_cex)],
                                  "fixed": code.examples[_key(seed_cex, PR_RELEASE)]},
        "alt_cex": alt and {"scenario": alt, "example": code.examples[_key(alt)]},
        "scaled": {"scenario": ALT_SCALED, "alt": code.examples[f"scaled@{ROUND_NUM_HIT}"],
                   "fixed": code.examples[f"scaled@{PR_RELEASE}"]},
        "sim": {label: run | {"rows": _sim_rows(run)}
                for label, run in results.facts.get("sim", {}).items()},
        "sim_semantics": SIM_SEMANTICS, "rerun": rerun,
        "gpu": code.gpu, "gpu_lengths": GPU_LENGTHS,
        "regression_file": REGRESSION_FILE, "ci_workflow": CI_WORKFLOW,
        "fires_in": FIRES_IN,
        "tokens": citations.tokens,
        "citation_keys": list(dict.fromkeys(k for v in releases()
                                            for k in citations._LINES[v])),
        "files": (citations.SCHED, citations.BASE, citations.UTILS, citations.SINGLE,
                  citations.CORE, citations.KVM, citations.MODELCFG),
    }


def environment(shown: Sequence[str]) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True, autoescape=False,
                             extensions=["jinja2.ext.do"])
    env.globals.update(cite=partial(cite, tuple(shown)), vllm=vllm_link, words=scenario_words,
                       span=citations.span)
    env.filters["n"] = lambda x: f"{x:,}"
    env.filters["slug"] = slugify
    return env


# --- Markdown to HTML -------------------------------------------------------------------

_CSS = ("body{font-family:sans-serif;max-width:72em;margin:2em auto;padding:0 1em;"
        "line-height:1.45}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #bbb;padding:.25em .5em;vertical-align:top}"
        "th{background:#eee}pre{background:#f6f6f6;padding:.6em;overflow-x:auto}"
        "code{background:#f2f2f2}img{max-width:100%}")


def to_html(markdown: str, title: str) -> str:
    """The page as HTML (markdown-it-py, GitHub-style heading anchors; links to the
    Markdown pages point at their HTML twins)."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table").use(
        anchors_plugin, max_level=4)
    tokens = md.parse(markdown)
    for tok in tokens:
        for child in tok.children or []:
            href = str(child.attrGet("href") or "")
            path, _, frag = href.partition("#")
            # the spec's own pages have HTML twins; findings are Markdown only
            if (child.type == "link_open" and path.endswith(".md") and "://" not in path
                    and "findings/" not in path):
                child.attrSet("href", path[:-3] + ".html" + (f"#{frag}" if frag else ""))
    body = str(md.renderer.render(tokens, md.options, {}))
    head = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>\n")
    return head + body + "</body></html>\n"


# --- rendering and writing --------------------------------------------------------------


_VLLM_URL = re.compile(r"\]\((https://github\.com/vllm-project/vllm/blob/[^)\s]+)\)")


def references(markdown: str) -> str:
    """vLLM source links as numbered reference links, defined at the page's end, so that
    the Markdown reads as text: ``[`scheduler.py:452`][3]``."""
    numbers: dict[str, int] = {}

    def number(m: re.Match[str]) -> str:
        return f"][{numbers.setdefault(m.group(1), len(numbers) + 1)}]"

    body = _VLLM_URL.sub(number, markdown)
    if not numbers:
        return body
    return body.rstrip("\n") + "\n\n" + "".join(f"[{n}]: {url}\n" for url, n in numbers.items())


def render(code: CodeFacts, results: Results) -> dict[str, str]:
    """Every page's Markdown, by path relative to the docs directory; a pure function."""
    env = environment(shown_releases(results))
    ctx = context(code, results, env)
    return {page: references(str(env.get_template(template).render(ctx)))
            for page, template in PAGES.items()}


def pictures(results: Results) -> dict[str, tuple[dict[str, Any], str, str]]:
    """Every picture the pages show: file (relative to docs) -> (scenario, semantics, title)
    (from the results alone)."""
    out: dict[str, tuple[dict[str, Any], str, str]] = {}
    for c in _counterexamples(results):
        # the report's title: the report's picture of it, copied where the two are the same
        suffix = c["name"].removeprefix(f"{c['theorem']}--{c['semantics']}")
        out[f"{IMG}/{c['name']}.png"] = (c["scenario"], c["semantics"],
                                         picture_title(c["theorem"], c["semantics"], suffix))
    seed = results.facts.get("seed_counterexample")
    if seed:
        for name in (BEFORE_PR, PR_RELEASE):
            version = get_semantics(name).base_version
            out[f"{IMG}/seed-{name}.png"] = (
                seed, name, f"{seed['prompt_tokens']}-token prompt, block 16, on vLLM {version}")
    out[f"{IMG}/{ROUND_NUM_HIT}-scaled.png"] = (ALT_SCALED, ROUND_NUM_HIT,
                                                f"{ROUND_NUM_HIT} at vLLM-like sizes")
    alt = results.facts.get("alt_round_num_hit_counterexample")
    if alt:
        out[f"{IMG}/{ROUND_NUM_HIT}.png"] = (alt, ROUND_NUM_HIT,
                                             f"{ROUND_NUM_HIT}, GPU hit whole GPU blocks")
    return out


def _drawing(scenario: dict[str, Any], semantics: str, path: Path, title: str,
             maximality_picture: bool) -> Drawing:
    ex = example(scenario, semantics)
    return Drawing(_scenario_only(scenario), semantics, path, title,
                   ex.larger if maximality_picture else None, ex.refused)


def drawings(directory: Path, drawn: dict[str, tuple[dict[str, Any], str, str]]
             ) -> list[Drawing]:
    """``pictures``' pictures, to be drawn into ``directory``."""
    return [_drawing(scen, sem, directory / rel, title,
                     rel.split("/")[-1].startswith("maximality"))
            for rel, (scen, sem, title) in drawn.items()]


def row_drawings(directory: Path, rows: Sequence[dict[str, Any]]) -> list[Drawing]:
    """The pictures the spec will show of these rows of report.json (and those that need
    no result), before the run has every row (``publish.report.EarlyPictures``)."""
    results = Results(tuple(rows))
    (directory / IMG).mkdir(parents=True, exist_ok=True)
    return drawings(directory, pictures(results))


def write_spec(directory: Path, facts: dict[str, Any] | None = None, jobs: int = 1,
               queue: list[Drawing] | None = None) -> list[Path]:
    """Write every page (Markdown and HTML) and picture into ``directory`` (next to
    report.json), the pictures ``jobs`` at a time (with ``queue``: put there, for the
    caller to draw); with ``facts`` also (re)write spec-facts.json."""
    if facts is not None:
        (directory / FACTS).write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n")
    results = load_results(directory)
    code = gather_code_facts(results)
    (directory / IMG).mkdir(parents=True, exist_ok=True)
    drawn = pictures(results)
    for old in (directory / IMG).glob("*.png"):
        if f"{IMG}/{old.name}" not in drawn:
            old.unlink()
    todo = drawings(directory, drawn)
    if queue is None:
        draw_all(todo, jobs)
    else:
        queue.extend(todo)
    written = []
    for rel, md in render(code, results).items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(md)
        title = md.splitlines()[0].lstrip("# ")
        path.with_suffix(".html").write_text(to_html(md, title))
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m publish.spec DIR [--facts]``: re-render DIR/spec.md from DIR/report.json."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m publish.spec", description=main.__doc__)
    p.add_argument("directory", type=Path)
    p.add_argument("--facts", action="store_true",
                   help="also re-run the seed-layout search and the simulator")
    a = p.parse_args(argv)
    if not (a.directory / "report.json").exists():
        print(f"{a.directory}/report.json: missing (run python -m publish --report "
              f"{a.directory})", file=sys.stderr)
        return 2
    written = write_spec(a.directory, collect_facts() if a.facts else None)
    print("spec: " + " ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
