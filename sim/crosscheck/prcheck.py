"""The PR check: a vLLM source tree's real scheduler against its nearest modelled release.

``check_tree`` finds the nearest modelled release (``nearest_release``), lays the tree's
Python files over that release's environment (``tree.build_overlay``), and runs the
release's model semantics against the tree's real scheduler: the seed's boundary case,
the scenario corpus, then generated scenarios (``gen.py``).  A scenario on which they
differ is a changed behaviour; the tree's answer is turned into the model's result types
(``tree_side``) and the model's invariants are evaluated on it.  A change breaks an
invariant when the tree's answer violates one that the release's (the model's) does not
on the same scenario, or when the tree trips a vLLM assertion the release does not.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import releases
from model.evaluate import Outcome, evaluate
from model.invariants import AnyLayout, check_all
from model.layout import Layout
from model.load_plan import GroupLoad, LoadPlan
from model.scenario import (
    Scenario,
    ScenarioError,
    iter_scenario_paths,
    load_scenario_file,
    parse_scenario,
    scenario_to_json,
)
from sim.crosscheck.citediff import CitedLine, cited_paths, diff_citations
from sim.crosscheck.client import RealScheduler
from sim.crosscheck.compare import compare, model_view
from sim.crosscheck.envs import (
    ROOT,
    harness_python,
    modelled_releases,
    source_package,
    venvs_dir,
)
from sim.crosscheck.mapping import semantics_for, to_case
from sim.crosscheck.shrink import shrink, signature
from sim.crosscheck.tree import (
    Tree,
    TreeError,
    build_overlay,
    changed_lines,
    cited_distance,
    overlay_digest,
    overlay_files,
    release_tuple,
)

CORPUS = (ROOT / "tests" / "scenarios", ROOT / "docs" / "counterexamples")
SEED = {"semantics": releases.newest("block").name, "block_size_factor": 1, "prompt_tokens": 32,
        "num_computed_tokens": 0,
        "groups": [{"kind": "mamba", "gpu_block_size": 16, "mamba_cache_mode": "align",
                    "stored": "all"}]}
CRASH = "scheduler-assertion"  # the tree trips a vLLM assertion the release does not
# exit codes of ``python -m sim.crosscheck --vllm-source`` (documented in its --help)
EXIT_SAME = 0  # no modelled behaviour changed
EXIT_CHANGED = 1  # behaviour changed, no invariant broken
EXIT_BAD_INPUT = 2  # bad input: one error line, no report (argparse's code too)
EXIT_BROKEN = 3  # a changed behaviour breaks an invariant
EXIT_CODES = ("exit codes: 0 no modelled behaviour changed; 1 behaviour changed, no "
              "invariant broken; 2 bad input (one error line, no report); 3 a changed "
              "behaviour breaks an invariant")


@dataclass(frozen=True)
class Side:
    """One side's answer to a scenario, in the model's terms."""

    refused: str | None
    hit: int | None  # None: deferred (or refused, or the lookup raised)
    loads: dict[int, tuple[int, ...]] | None
    assertion: str | None  # a vLLM assertion in the lookup or the load
    violations: tuple[tuple[str, str], ...]  # (invariant, message)
    # False when the invariants could not be evaluated: the release refuses the layout
    # (no release layout to judge the tree's load by)
    judged: bool = True

    @property
    def broken(self) -> set[str]:
        return {name for name, _ in self.violations} | ({CRASH} if self.assertion else set())


@dataclass(frozen=True)
class Change:
    """One kind of changed behaviour, shrunk."""

    kind: str  # which fields differ (+ the invariants the tree newly breaks)
    count: int  # scenarios of this kind seen
    scenario: dict[str, Any]  # the shrunk scenario (JSON)
    diffs: tuple[str, ...]
    old: Side  # the release, as the model computes it
    new: Side  # the tree's real scheduler
    new_broken: tuple[str, ...]  # invariants broken by the tree and not by the release

    @property
    def breaks(self) -> bool:
        return bool(self.new_broken)


@dataclass(frozen=True)
class Nearest:
    version: str
    reason: str
    distances: dict[str, int]  # release -> changed lines in the cited files


@dataclass
class PRResult:
    tree: Tree
    nearest: Nearest
    changed_files: list[tuple[str, str, int]] = field(default_factory=list)
    cited: list[CitedLine] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    checked: int = 0  # distinct scenarios run on both sides
    corpus_files: int = 0
    generated: int = 0
    seed: int = 0
    seconds: float = 0.0
    first_change_s: float | None = None
    first_break_s: float | None = None
    first_break: dict[str, Any] | None = None  # the first (unshrunk) breaking scenario
    first_break_phase: str = ""
    startup_s: float = 0.0  # release choice, overlay and starting the real scheduler

    # the shrunk scenarios as replayable files (``write_scenarios``), one per change in
    # ``changes`` order, then the first breaking scenario before shrinking
    scenario_files: list[Path] = field(default_factory=list)
    first_break_file: Path | None = None

    @property
    def exit_code(self) -> int:
        if any(c.breaks for c in self.changes):
            return EXIT_BROKEN
        return EXIT_CHANGED if self.changes else EXIT_SAME


def _say(msg: str) -> None:
    print(f"[pr-check] {msg}", file=sys.stderr, flush=True)


def nearest_release(tree: Tree, forced: str | None = None) -> Nearest:
    """The modelled release to check the tree against.

    ``forced`` (``--base``) wins.  Otherwise the version the tree's metadata declares,
    when it is a modelled release; otherwise the release whose cited files (the files
    ``model/citations.py`` cites) differ from the tree's by the fewest lines, among the
    releases whose environment exists; otherwise the newest modelled release not newer
    than the declared version (the newest of all if none is declared).
    """
    releases = modelled_releases()
    distances = {}
    for v in releases:
        pkg = source_package(v)
        if pkg is not None:
            distances[v] = cited_distance(tree.package, pkg, cited_paths(v))
    if forced is not None:
        if forced not in releases:
            raise TreeError(f"--base: {forced!r} is not a modelled release "
                            f"(known: {', '.join(releases)})")
        return Nearest(forced, "given by --base", distances)
    if tree.version in releases:
        return Nearest(tree.version, f"the tree's {tree.version_source} declares it",
                       distances)
    if distances:
        best = min(distances, key=lambda v: (distances[v], releases.index(v) * -1))
        return Nearest(best, f"its cited files differ least from the tree's "
                       f"({distances[best]} changed lines)", distances)
    if tree.version is not None:
        older = [v for v in releases if release_tuple(v) <= release_tuple(tree.version)]
        if older:
            return Nearest(older[-1], f"the newest modelled release not newer than the "
                           f"declared {tree.version}", distances)
    return Nearest(releases[-1], "the newest modelled release (the tree declares no "
                   "version and no release environment exists yet)", distances)


def _evaluated(s: Scenario, semantics: str) -> Outcome:
    """The model's outcome; a request past a model precondition (a GPU hit no engine
    produces) is run without it, as ``compare.model_view`` does."""
    out = evaluate(s, semantics)
    if out.refused is not None:
        relaxed = evaluate(s, semantics, enforce=False)
        if relaxed.refused is None:
            return relaxed
    return out


def _state_position(s: Scenario, layout: AnyLayout, g: int, blocks: tuple[int, ...],
                    hit: int, boundary: int | None) -> int | None:
    """Where the recurrent state a Mamba group's load brings ends, by the model's rule
    for the release: the end of the last loaded offloaded block (``model/load_plan.py``);
    on 0.33.0 the partial-tail boundary, else the end of the last pending GPU block
    (``model/load_chunked.py``)."""
    if s.groups[g].kind != "mamba" or not blocks:
        return None
    if isinstance(layout, Layout):
        return (blocks[-1] + 1) * layout.groups[g].offloaded_block_size
    if boundary is not None:
        return int(boundary)
    tpb = layout.groups[g].tokens_per_block
    return -(-(s.num_computed_tokens + hit) // tpb) * tpb


def tree_side(s: Scenario, semantics: str, real: dict[str, Any]) -> Side:
    """The tree's real answer as the model's result types, with the model's invariants
    evaluated on it (the layout is the release's, as the model resolves it; the load's
    Mamba state position is the end of its last loaded block, as in
    ``model/load_plan.py``)."""
    if real.get("refused") is not None:
        return Side(real["refused"], None, None, None, ())
    hit = real.get("hit")
    loads = None if real.get("loads") is None else {g: tuple(b) for g, b in real["loads"]}
    assertion = real.get("lookup_error") or real.get("load_error")
    # None: the release refuses it, so there is no release layout to judge the load by
    layout = _evaluated(s, semantics).layout
    violations: tuple[tuple[str, str], ...] = ()
    if layout is None:
        return Side(None, hit, loads, assertion, (), judged=False)
    if hit is not None and loads is not None:
        boundary = real.get("tail_boundary")
        plan = LoadPlan(tuple(
            GroupLoad(g, blocks, _state_position(s, layout, g, blocks, hit, boundary))
            for g, blocks in sorted(loads.items())), None, boundary)
        violations = tuple((v.invariant, v.message) for v in check_all(s, layout, hit, plan))
    elif hit:
        violations = tuple((v.invariant, v.message)
                           for v in check_all(s, layout, hit, LoadPlan(())))
    return Side(None, hit, loads, assertion, violations)


def model_side(s: Scenario, semantics: str) -> Side:
    out = _evaluated(s, semantics)
    if out.refused is not None:
        return Side(out.refused, None, None, None, ())
    loads = {gl.group: tuple(gl.blocks) for gl in out.loads} if out.hit_tokens else None
    return Side(None, out.hit_tokens, loads, out.assertion,
                tuple((v.invariant, v.message) for v in out.violations))


Judged = tuple[str, tuple[str, ...], Side, Side, tuple[str, ...]]


def judge(real: RealScheduler, raw: dict[str, Any], semantics: str) -> Judged | None:
    """None when the tree and the release agree on ``raw``; else (kind, diffs, old
    side, new side, the invariants the tree newly breaks)."""
    s = parse_scenario(dict(raw, semantics=semantics))
    result = real.run(to_case(s))
    mv = model_view(s, semantics)
    verdict = compare(mv, result)
    if verdict.agree:
        return None
    if verdict.harness_problem:
        raise TreeError(f"--vllm-source: {verdict.harness_problem}")
    old, new = model_side(s, semantics), tree_side(s, semantics, result)
    # a GPU hit no engine produces (a hand-written scenario past a model precondition):
    # the harness's stand-in decides the load, so only the lookup counts, not the load
    broken = () if mv.precondition else tuple(sorted(new.broken - old.broken))
    kind = signature(verdict.diffs) + (f" | breaks {', '.join(broken)}" if broken else "")
    return kind, tuple(verdict.diffs), old, new, broken


def _corpus(paths: list[Path]) -> list[dict[str, Any]]:
    out = [SEED]
    for p in iter_scenario_paths(paths):
        try:
            out.append(scenario_to_json(load_scenario_file(p)))
        except ScenarioError:
            continue
    return out


def _generated(semantics: str, n: int, seed: int, visit: Callable[[dict[str, Any]], bool],
               done: Callable[[], int]) -> None:
    """Feed generated scenarios (Hypothesis seeds ``seed``, ``seed + 1``, ...: it draws
    a scenario twice now and then) to ``visit`` until it returns True or ``done()``
    (distinct scenarios checked) reaches ``n``."""
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as hseed

    from sim.crosscheck.gen import scenario_dicts

    class _Stop(Exception):
        pass

    stop = [False]
    for batch in range(100):
        if stop[0] or done() >= n:
            return

        @settings(max_examples=max(50, (n - done()) * 3 // 2), deadline=None,
                  database=None, suppress_health_check=list(HealthCheck),
                  phases=[Phase.generate], verbosity=Verbosity.quiet)
        @given(scenario_dicts(semantics))
        def prop(raw: dict[str, Any]) -> None:
            if stop[0] or done() >= n:
                raise _Stop
            if visit(raw):
                stop[0] = True
                raise _Stop

        try:
            hseed(seed + batch)(prop)()
        except _Stop:
            pass


def check_tree(tree: Tree, *, examples: int = 2000, seed: int = 0,
               corpus: list[Path] | None = None, base: str | None = None,
               stop_first: bool = False, shrink_budget: int = 400) -> PRResult:
    """Run the PR check on ``tree``.  ``stop_first``: stop at the first scenario that
    breaks an invariant (the known-bug benchmark times it)."""
    t0 = time.monotonic()
    nearest = nearest_release(tree, base)
    version = nearest.version
    semantics = semantics_for(version)
    _say(f"nearest modelled release: vLLM {version} ({nearest.reason})")
    result = PRResult(tree, nearest, seed=seed)
    # the release's full env when made, else its light env (made now): the scheduler
    # path imports no compiled module, and a full env costs 2 GB and minutes on CI
    harness_python(version)
    release_pkg = source_package(version)
    assert release_pkg is not None
    if version not in nearest.distances:
        nearest.distances[version] = cited_distance(tree.package, release_pkg,
                                                    cited_paths(version))
    for rel in sorted(set(overlay_files(tree.package)) | set(overlay_files(release_pkg))):
        a, b = release_pkg / rel, tree.package / rel
        if not rel.endswith(".py"):
            continue
        if not a.exists():
            result.changed_files.append((rel, "added", changed_lines(a, b)))
        elif not b.exists():
            result.changed_files.append((rel, "removed", changed_lines(a, b)))
        elif a.read_bytes() != b.read_bytes():
            result.changed_files.append((rel, "changed", changed_lines(a, b)))
    result.cited = diff_citations(version, release_pkg, tree.package)
    digest = overlay_digest(tree.package, f"{version}:{release_pkg}")
    overlay = build_overlay(release_pkg, tree.package,
                            venvs_dir() / "overlays" / f"vllm-{version}-{digest}")
    _say(f"overlay: {overlay} ({len(result.changed_files)} Python files differ "
         f"from the release)")
    found: dict[str, tuple[dict[str, Any], int]] = {}  # kind -> (first scenario, count)
    seen: set[str] = set()
    with RealScheduler(version, overlay) as real:
        result.startup_s = time.monotonic() - t0
        _say(f"harness up in {result.startup_s:.0f}s ({real.scheduler_file})")

        def visit(raw: dict[str, Any], phase: str) -> bool:
            key = json.dumps(dict(raw, semantics=semantics), sort_keys=True)
            if key in seen:
                return False
            seen.add(key)
            try:
                parse_scenario(raw)
                # a field the release's model does not cover (blocks_per_chunk before
                # 0.33.0) is bad input for it, as a malformed file is: not checked
                got = judge(real, raw, semantics)
            except ScenarioError:
                return False
            result.checked += 1
            if got is None:
                return False
            kind, broken = got[0], got[4]
            now = time.monotonic() - t0
            if result.first_change_s is None:
                result.first_change_s = now
            first, count = found.get(kind, (raw, 0))
            found[kind] = (first, count + 1)
            if broken and result.first_break_s is None:
                result.first_break_s = now
                result.first_break = dict(raw, semantics=semantics)
                result.first_break_phase = phase
                return stop_first
            return False

        stopped = False
        items = _corpus(list(corpus)) if corpus is not None else []
        result.corpus_files = max(0, len(items) - 1)
        for raw in items:
            if visit(raw, "seed" if raw is SEED else "corpus"):
                stopped = True
                break
        if not stopped and examples > 0:
            before = result.checked
            _generated(semantics, examples, seed, lambda raw: visit(raw, "generated"),
                       lambda: result.checked - before)
            result.generated = result.checked - before
        _say(f"{result.checked} scenarios checked, {len(found)} kind(s) of change")
        for kind, (raw, count) in sorted(found.items()):
            def same(v: dict[str, Any], kind: str = kind) -> str | None:
                got = judge(real, v, semantics)
                return None if got is None else got[0]

            small = shrink(dict(raw, semantics=semantics), same, budget=shrink_budget)
            got = judge(real, small, semantics)
            assert got is not None
            _, diffs, old, new, broken = got
            result.changes.append(Change(kind, count, small, diffs, old, new, broken))
    result.changes.sort(key=lambda c: (not c.breaks, -c.count, c.kind))
    result.seconds = time.monotonic() - t0
    return result


def _slug(text: str) -> str:
    words = "".join(c if c.isalnum() else " " for c in text).split()
    return "-".join(words)[:60] or "change"


def write_scenarios(result: PRResult, out_dir: Path) -> list[Path]:
    """Write every shrunk scenario of ``result`` (and the first breaking one before
    shrinking) as a scenario file ``python -m model lookup FILE`` replays; records the
    paths on ``result`` and returns them."""
    if result.changes or result.first_break is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    result.scenario_files = []
    for i, c in enumerate(result.changes, 1):
        data = scenario_to_json(parse_scenario(c.scenario))
        data["description"] = (f"PR check, change {i}: {c.kind}; "
                               + "; ".join(c.diffs))[:2000]
        path = out_dir / f"pr-check-{i:02d}-{_slug(c.kind)}.json"
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        result.scenario_files.append(path)
    if result.first_break is not None:
        data = scenario_to_json(parse_scenario(result.first_break))
        data["description"] = (f"PR check: the first scenario that broke an invariant "
                               f"({result.first_break_phase}), before shrinking")
        result.first_break_file = out_dir / "pr-check-first-break.json"
        result.first_break_file.write_text(json.dumps(data, indent=1, sort_keys=True)
                                           + "\n")
    return list(result.scenario_files) + (
        [result.first_break_file] if result.first_break_file else [])
