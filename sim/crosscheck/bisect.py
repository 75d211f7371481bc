"""``python -m sim.crosscheck --bisect FILE [FILE...]``: a scenario on every release's real
scheduler, 0.23.0 - 0.33.0 (issue 24).

Each release runs in its light environment (``envs.ensure_light_env``: the shared base
plus the release's ``.py`` files) through its adapter (``client.harness_for``:
``harness.py`` up to 0.25.x, ``harness_chunked.py`` from 0.26.0).  Per scenario and
release the table says:

- *start-up*: whether the release's own start-up checks accept the scenario's layout
  (the harness builds the real ``VllmConfig`` / ``KVCacheConfig`` / offloading spec and
  scheduler; a refusal is their exception);
- *hit*: ``get_num_new_matched_tokens``' answer (None: deferred);
- *loads*: what ``update_state_after_alloc`` hands to ``prepare_load`` per group (block
  indices up to 0.25.x, key end tokens from 0.26.0) and the token a Mamba group's
  restored state was saved at;
- *breaks*: ``model.invariants`` run on the real answer (the real hit and the real
  load turned into a ``LoadPlan``; the layout from the block model's or the chunked
  model's start-up, whose block and chunk sizes every release of that family shares);
  where no layout can be built, the hit compared with the file's ``expect``; and
  ``maximality`` where the hit is below the file's ``valid_hit``.

Releases without model semantics in ``releases/`` run the real scheduler only; the
table says so.  Aliases (``envs.ALIASES``) are not run: their row is their target's,
with the scheduler source hash that shows them identical.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import releases
from model import layout_chunked
from model.invariants import check_all
from model.layout import Layout, Refused, resolve_layout
from model.layout_chunked import ChunkLayout
from model.load_plan import GroupLoad, LoadPlan
from model.scenario import Scenario, ScenarioError, load_scenario_file
from sim.crosscheck import envs
from sim.crosscheck.client import HARNESS_V033, harness_for
from sim.crosscheck.mapping import to_case

# (version, cases) -> one real result per case; the default starts the release's harness
Runner = Callable[[str, Sequence[dict[str, Any]]], list[dict[str, Any]]]


class BisectError(ValueError):
    """Bad input: one line."""


@dataclass(frozen=True)
class Cell:
    """One scenario on one release."""

    version: str
    model: str | None  # the release's semantics name, None: real scheduler only
    alias_of: str | None
    alias_sha: str | None
    refused: str | None
    hit: int | None
    loads: str  # rendered
    breaks: tuple[str, ...] | None  # None: could not be judged
    how: str
    error: str | None = None  # the harness failed on this case
    missing: tuple[str, ...] = ()  # scenario fields this release does not have


# scenario fields a release before this one does not have (docs/releases.md, the field
# table): the harness passes them on and that release ignores them (or, for pending,
# answers as deferred), so its row is not the scenario the file describes
FIELD_SINCE = {"pending": "0.25.0", "blocks_per_chunk": "0.26.0", "stored_tails": "0.28.0",
               "pending_tails": "0.28.0", "deferred_tails": "0.28.0",
               "max_num_new_tokens": "0.30.0", "max_load_tokens": "0.31.0"}


def missing_fields(s: Scenario, version: str) -> list[str]:
    """The scenario's fields that ``version`` does not have."""
    used = {
        "pending": any(g.pending for g in s.groups),
        "blocks_per_chunk": s.blocks_per_chunk not in (None, 1),
        "stored_tails": any(g.stored_tails for g in s.groups),
        "pending_tails": any(g.pending_tails for g in s.groups),
        "deferred_tails": any(g.deferred_tails for g in s.groups),
        "max_num_new_tokens": s.max_num_new_tokens is not None,
        "max_load_tokens": s.max_load_tokens is not None,
    }
    key = envs.version_key(version)
    return [f for f, on in used.items() if on and key < envs.version_key(FIELD_SINCE[f])]


def release_model(version: str) -> str | None:
    try:
        return releases.by_version(version).name
    except ValueError:
        return None


def chunked(version: str) -> bool:
    return harness_for(version) == HARNESS_V033


def _layout_scenario(s: Scenario) -> Scenario:
    """The scenario as the models' start-up takes it: mode ``all`` (gone in 0.32.0, the
    0.33.0 model refuses it) laid out as ``align``; the invariants still read ``s``."""
    groups = tuple(dataclasses.replace(g, mamba_cache_mode="align")
                   if g.mamba_cache_mode == "all" else g for g in s.groups)
    return dataclasses.replace(s, groups=groups)


def real_plan(s: Scenario, version: str, result: dict[str, Any]
              ) -> tuple[Layout | ChunkLayout, LoadPlan] | str:
    """The real answer as the model's (layout, load plan), or why it cannot be."""
    try:
        if chunked(version):
            layout: Layout | ChunkLayout = layout_chunked.resolve_layout(_layout_scenario(s))
        else:
            sem = releases.by_version(version) if release_model(version) else releases.newest(
                "block")
            layout = resolve_layout(_layout_scenario(s), sem)
    except (Refused, ScenarioError, ValueError) as e:
        return f"no model layout ({str(e).splitlines()[0][:80]})"
    hit = result.get("hit")
    if not hit or result.get("load_error") or result.get("loads") is None:
        return layout, LoadPlan(())
    loads = {g: list(v) for g, v in result["loads"]}
    out = []
    if isinstance(layout, ChunkLayout):
        gpu = result.get("gpu")
        if gpu is None:
            return "the harness did not report the GPU side of the load"
        boundary = result.get("tail_boundary")
        for cfg, g in zip(layout.groups, s.groups, strict=True):
            size, first = gpu[0][cfg.group_idx], gpu[1][cfg.group_idx]
            state = None
            if g.kind == "mamba" and size:
                state = boundary if boundary is not None else (first + size) * cfg.tokens_per_block
            out.append(GroupLoad(cfg.group_idx, tuple(loads.get(cfg.group_idx, ())), state,
                                 first, size))
        return layout, LoadPlan(tuple(out), None, boundary)
    copies = result.get("copies")
    if copies is None:
        return "the harness did not report the worker's copies"
    factor = layout.block_size_factor
    for bcfg, g in zip(layout.groups, s.groups, strict=True):
        group = copies[bcfg.group_idx]
        blocks = loads.get(bcfg.group_idx, [])
        rng = range(blocks[0], blocks[-1] + 1) if blocks else range(0)
        if not group:
            out.append(GroupLoad(bcfg.group_idx, rng, None))
            continue
        _, last_sub, last_pos = group[-1]
        state = (last_pos + 1) * bcfg.gpu_block_size  # as model/load_plan.py (CP included)
        out.append(GroupLoad(
            bcfg.group_idx, rng, state if g.kind == "mamba" else None,
            state_in_last_sub_block=last_sub == factor - 1,
            copy_start=group[0][2], copy_end=last_pos + 1, factor=factor))
    return layout, LoadPlan(tuple(out))


def _span(xs: Sequence[int]) -> str:
    if not xs:
        return "-"
    if len(xs) > 2 and all(b - a == xs[1] - xs[0] for a, b in zip(xs, xs[1:], strict=False)):
        return f"{xs[0]}..{xs[-1]} ({len(xs)})"
    return ",".join(str(x) for x in xs)


def render_loads(version: str, result: dict[str, Any],
                 plan: LoadPlan | None) -> str:
    if result.get("load_error"):
        return f"load assertion: {result['load_error'][:90]}"
    if result.get("loads") is None:
        return "-"
    unit = "keys ending at" if chunked(version) else "blocks"
    states = {gl.group: gl.state_position for gl in (plan.loads if plan else ())
              if gl.state_position is not None}
    parts = []
    for g, xs in result["loads"]:
        part = f"g{g} {unit} {_span(list(xs))}"
        if g in states:
            part += f", state at {states[g]}"
        parts.append(part)
    if result.get("tail_boundary") is not None:
        parts.append(f"tail {result['tail_boundary']}")
    return "; ".join(parts)


def judge(s: Scenario, version: str, result: dict[str, Any]
          ) -> tuple[tuple[str, ...] | None, str, LoadPlan | None]:
    """(invariants broken, how it was judged, the plan) for one real answer."""
    hit = result.get("hit")
    extra: list[str] = []
    if s.valid_hit is not None and hit is not None and hit < s.valid_hit:
        extra.append("maximality")
    got = real_plan(s, version, result)
    if isinstance(got, str):
        if s.expect is not None and s.expect.hit_tokens != "any":
            same = hit == s.expect.hit_tokens
            how = f"{got}; hit {'=' if same else '≠'} the file's expect {s.expect.hit_tokens}"
            return tuple(extra), how, None
        return (tuple(extra) or None), got, None
    layout, plan = got
    broken = sorted({v.invariant for v in check_all(s, layout, hit, plan)})
    how = "model.invariants on the real hit and load"
    if extra:
        how += f"; maximality: hit below the file's valid_hit {s.valid_hit}"
    return tuple(broken + extra), how, plan


def cell(s: Scenario, version: str, result: dict[str, Any]) -> Cell:
    model = release_model(version)
    if "error" in result:
        return Cell(version, model, None, None, None, None, "-", None, "-",
                    error=str(result["error"]).splitlines()[0][:160])
    if result.get("refused") is not None:
        return Cell(version, model, None, None, result["refused"], None, "-", None,
                    "refused at start-up")
    hit = result.get("hit")
    if result.get("lookup_error"):
        return Cell(version, model, None, None, None, None, "-", None,
                    f"lookup assertion: {result['lookup_error'][:120]}")
    broken, how, plan = judge(s, version, result)
    missing = missing_fields(s, version)
    if missing:
        how = f"{', '.join(missing)}: not a field of this release (ignored); " + how
    return Cell(version, model, None, None, None, hit, render_loads(version, result, plan),
                broken, how, missing=tuple(missing))


def light_runner(version: str, cases: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The release's real scheduler in its light env, one harness for all cases."""
    from sim.crosscheck.client import HarnessError, RealScheduler

    python = envs.ensure_light_env(version)
    out: list[dict[str, Any]] = []
    with RealScheduler(version, python=python) as real:
        for case in cases:
            try:
                out.append(real.run(case))
            except HarnessError as e:
                out.append({"error": str(e)})
        info = real._call({"op": "info"})
        if info.get("compiled"):
            # the light envs carry no compiled vLLM module; a full env would show one here
            out = [dict(r, compiled=info["compiled"]) for r in out]
    return out


@dataclass
class Bisect:
    paths: list[Path]
    scenarios: list[Scenario]
    cells: dict[tuple[int, str], Cell]
    versions: tuple[str, ...]
    seconds: dict[str, float]


def load_files(files: Sequence[str | Path]) -> tuple[list[Path], list[Scenario]]:
    if not files:
        raise BisectError("--bisect: no scenario file given")
    paths, scens = [], []
    for f in files:
        p = Path(f)
        if not p.is_file():
            raise BisectError(f"--bisect: {p}: no such file")
        try:
            scens.append(load_scenario_file(p))
        except ScenarioError as e:
            raise BisectError(f"--bisect: {e}") from None
        paths.append(p)
    return paths, scens


def parse_versions(text: str | None, day_of_year: int | None = None) -> tuple[str, ...]:
    """``--releases``: comma-separated releases, ``rotate`` (the release of the day) or
    nothing (every release)."""
    if not text:
        return envs.ALL_RELEASES
    if text == "rotate":  # the cross-check's release of the day (envs.release_of_the_day)
        today = envs.release_of_the_day(day_of_year)
        return (today or envs.VERSIONS[-1],)  # every release pinned: the newest
    out = tuple(v.strip() for v in text.split(",") if v.strip())
    bad = [v for v in out if v not in envs.ALL_RELEASES]
    if bad or not out:
        raise BisectError(f"--releases: unknown release {(bad or [''])[0]!r} "
                          f"(known: {', '.join(envs.ALL_RELEASES)})")
    return out


def run_bisect(files: Sequence[str | Path], versions: Sequence[str] | None = None,
               runner: Runner = light_runner,
               say: Callable[[str], None] | None = None) -> Bisect:
    paths, scens = load_files(files)
    say = say or (lambda m: print(m, file=sys.stderr, flush=True))
    wanted = tuple(versions or envs.ALL_RELEASES)
    cases = [to_case(s) for s in scens]
    cells: dict[tuple[int, str], Cell] = {}
    seconds: dict[str, float] = {}
    ran: dict[str, list[dict[str, Any]]] = {}
    for n, v in enumerate(wanted, 1):
        target = envs.ALIASES.get(v)
        if target is not None:
            try:
                _, _, sha = envs.alias_evidence(v)
            except ValueError as e:  # a differing source, or no wheel to read
                sha = f"not shown: {e}"
            if target not in ran:
                ran[target] = _run(runner, target, cases, seconds)
            for i, s in enumerate(scens):
                c = cell(s, target, ran[target][i])
                cells[(i, v)] = dataclasses.replace(c, version=v, alias_of=target,
                                                    alias_sha=sha)
            say(f"[bisect] {n}/{len(wanted)} vLLM {v}: alias of {target} "
                f"(scheduler.py sha256 {sha[:16]}), not run")
            continue
        if v not in ran:
            ran[v] = _run(runner, v, cases, seconds)
        for i, s in enumerate(scens):
            cells[(i, v)] = cell(s, v, ran[v][i])
        hits = ", ".join(str(cells[(i, v)].hit) for i in range(len(scens)))
        say(f"[bisect] {n}/{len(wanted)} vLLM {v}: {len(scens)} scenario(s) in "
            f"{seconds.get(v, 0):.1f}s; hits {hits}")
    return Bisect(paths, scens, cells, wanted, seconds)


def _run(runner: Runner, version: str, cases: list[dict[str, Any]],
         seconds: dict[str, float]) -> list[dict[str, Any]]:
    t0 = time.monotonic()
    try:
        got = runner(version, cases)
    except Exception as e:  # an env or harness that does not start: every case says so
        line = (str(e).strip().splitlines() or [type(e).__name__])[0]
        got = [{"error": f"{type(e).__name__}: {line}"} for _ in cases]
    seconds[version] = time.monotonic() - t0
    return got


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(b: Bisect, *, command: str | None = None, root: Path | None = None,
           only: Sequence[int] | None = None) -> str:
    """The affected-releases tables (Markdown), one per scenario (``only``: these)."""
    out: list[str] = []
    if command:
        out.append(f"<!-- generated by `{command}`; do not edit by hand -->")
    for i, (p, s) in enumerate(zip(b.paths, b.scenarios, strict=True)):
        if only is not None and i not in only:
            continue
        shown = p
        if root is not None:
            try:
                shown = p.resolve().relative_to(root)
            except ValueError:
                pass
        if out:
            out.append("")
        out.append(f"**`{shown}`** (written for `{s.semantics}`)")
        out.append("")
        out.append(summary(b, i))
        out.append("")
        out.append("| release | model | start-up | hit | loads | breaks | judged by |")
        out.append("|---|---|---|---|---|---|---|")
        for v in b.versions:
            c = b.cells[(i, v)]
            model = f"`{c.model}`" if c.model else "none: real scheduler only"
            if c.alias_of:
                sha = c.alias_sha or ""
                model = (f"= {c.alias_of} (`scheduler.py` sha256 {sha[:16]} in both wheels)"
                         if not sha.startswith("not shown") else
                         f"= {c.alias_of} (identity {_md(sha[:120])})")
            if c.error:
                out.append(f"| {v} | {model} | ? | ? | - | ? | harness error: {_md(c.error)} |")
                continue
            startup = "accepted" if c.refused is None else f"refused: {_md(c.refused[:100])}"
            hit = "-" if c.refused is not None else ("None (deferred)" if c.hit is None
                                                     else str(c.hit))
            if c.breaks is None:
                breaks = "?" if c.refused is None else "-"
            else:
                breaks = ", ".join(f"**{x}**" for x in c.breaks) or "none"
            out.append(f"| {v} | {model} | {startup} | {hit} | {_md(c.loads)} | {breaks} "
                       f"| {_md(c.how)} |")
    return "\n".join(out)


def spans(versions: Sequence[str], of: Sequence[str]) -> str:
    """``versions`` (a subset of ``of``, in its order) as runs: '0.23.0 - 0.27.1, 0.33.0'."""
    if not versions:
        return "none"
    chosen = set(versions)
    runs: list[list[str]] = []
    prev_in = False
    for v in of:
        if v in chosen:
            if prev_in:
                runs[-1].append(v)
            else:
                runs.append([v])
        prev_in = v in chosen
    return ", ".join(r[0] if len(r) == 1 else f"{r[0]} - {r[-1]}" for r in runs)


def summary(b: Bisect, i: int) -> str:
    """One line per scenario: which releases break what, which refuse the layout."""
    cells = [b.cells[(i, v)] for v in b.versions]
    parts = []
    names = sorted({x for c in cells for x in (c.breaks or ())})
    for name in names:
        hit = [c.version for c in cells if name in (c.breaks or ())]
        parts.append(f"breaks **{name}** on {spans(hit, b.versions)}")
    clean = [c.version for c in cells if c.refused is None and c.error is None
             and c.breaks == ()]
    if clean:
        parts.append(f"no invariant broken on {spans(clean, b.versions)}")
    refused = [c.version for c in cells if c.refused is not None]
    if refused:
        parts.append(f"layout refused at start-up by {spans(refused, b.versions)}")
    for f in sorted({f for c in cells for f in c.missing}):
        without = [c.version for c in cells if f in c.missing]
        parts.append(f"`{f}` is not a field of {spans(without, b.versions)} (ignored there)")
    failed = [c.version for c in cells if c.error is not None]
    if failed:
        parts.append(f"harness error on {spans(failed, b.versions)}")
    return "Affected: " + "; ".join(parts) + "."


def affected(b: Bisect, invariant: str) -> dict[int, list[str]]:
    """Per scenario, the releases whose real answer breaks ``invariant``."""
    return {i: [v for v in b.versions if invariant in (b.cells[(i, v)].breaks or ())]
            for i in range(len(b.scenarios))}
