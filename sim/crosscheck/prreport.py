"""The PR check's report: Markdown ready to paste as a review comment (pure)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from model.citations import cite
from sim.crosscheck.mapping import semantics_for
from sim.crosscheck.prcheck import (
    CRASH,
    EXIT_BROKEN,
    EXIT_CHANGED,
    EXIT_SAME,
    Change,
    PRResult,
    Side,
)

VERDICT = {
    EXIT_SAME: "no modelled behaviour changed",
    EXIT_CHANGED: "modelled behaviour changed; no invariant broken",
    EXIT_BROKEN: "a changed behaviour breaks an invariant",
}
EXIT_NOTE = ("Exit status: 0 no modelled behaviour changed, 1 behaviour changed without "
             "breaking an invariant, 3 a change breaks an invariant (2 is bad input: one "
             "error line, no report).")


def _loads(side: Side) -> str:
    if side.refused is not None:
        return "—"
    if not side.loads:
        return "none"
    return "; ".join(f"g{g}: {list(b)}" for g, b in sorted(side.loads.items()))


def _hit(side: Side) -> str:
    if side.refused is not None:
        return f"refused ({side.refused})"
    if side.hit is None:
        return "deferred" if side.assertion is None else "— (lookup raised)"
    return str(side.hit)


def _broken(side: Side) -> str:
    if not side.judged:
        return "not evaluated (the release refuses this layout at start-up)"
    names = [f"**{n}**: {m}" for n, m in side.violations]
    if side.assertion:
        names.append(f"**{CRASH}**: {side.assertion}")
    return "<br>".join(names) or "none"


def compact(raw: dict[str, Any]) -> dict[str, Any]:
    """A scenario without its empty or default-off fields (for display)."""
    def keep(k: str, v: Any) -> bool:  # "stored": [] (nothing stored) stays
        # (``v is False``, not ``v == False``: a 0 such as num_computed_tokens is required)
        return k != "description" and (k == "stored" or not (v is False or v == []))

    out = {k: v for k, v in raw.items() if keep(k, v)}
    out["groups"] = [{k: v for k, v in g.items() if keep(k, v)} for g in raw["groups"]]
    return out


def _scenario_line(raw: dict[str, Any]) -> str:
    return json.dumps(compact(raw), sort_keys=True)


def _change(i: int, c: Change, version: str, path: Path | None = None) -> list[str]:
    head = (f"**breaks {', '.join(c.new_broken)}**" if c.breaks
            else "changed, no invariant broken")
    where = (f"`{path}`; `python -m model lookup {path} --explain` replays the release's "
             "side" if path is not None
             else "`python -m model lookup FILE --explain` replays the release's side")
    return [
        f"#### {i}. {head} — `{c.kind}` ({c.count} scenario{'s' * (c.count != 1)})",
        "",
        f"Shrunk scenario ({where}):",
        "",
        "```json",
        _scenario_line(c.scenario),
        "```",
        "",
        f"| | vLLM {version} (model, old) | this tree (real scheduler, new) |",
        "| --- | --- | --- |",
        f"| hit tokens | {_hit(c.old)} | {_hit(c.new)} |",
        f"| load plan (per group, what `prepare_load` gets) | {_loads(c.old)} | "
        f"{_loads(c.new)} |",
        f"| invariants broken | {_broken(c.old)} | {_broken(c.new)} |",
        "",
        "Differences: " + "; ".join(f"`{d}`" for d in c.diffs),
        "",
    ]


def render(r: PRResult) -> str:
    v = r.nearest.version
    code = r.exit_code
    dist = ", ".join(f"{k}: {n} lines" for k, n in sorted(r.nearest.distances.items()))
    lines = [
        f"## offload-lookup-check PR check: {VERDICT[code]} (exit {code})",
        "",
        f"- Base: the tree is checked against the model of **vLLM {v}** "
        f"(semantics `{semantics_for(v)}`): {r.nearest.reason}. "
        f"Declared version: {r.tree.version or 'none'}"
        + (f" (`{r.tree.version_source}`)" if r.tree.version_source else "")
        + f". Changed lines in the cited files per modelled release: {dist or 'n/a'}.",
        f"- Real code under test: the tree's Python files of the offloading connector, "
        f"`vllm/v1/kv_offload/` and `vllm/v1/core/` laid over vLLM {v} (compiled parts "
        f"are the release's).",
        f"- Scope: {r.checked} distinct scenarios (the seed's boundary case, "
        f"{r.corpus_files} corpus files, {r.generated} generated with seed {r.seed} by "
        "`sim/crosscheck/gen.py`: 1-4 groups of every kind and Mamba mode the release "
        "has, mixed block sizes and factors, prompts up to ~300 tokens, stores with "
        "holes, deferred and in-flight blocks, EAGLE, the request flags) in "
        f"{r.seconds:.0f} s. A scenario is a change when the "
        "hit, the order of store lookups, the load plan, a start-up refusal or a vLLM "
        f"assertion differs from the release's. {EXIT_NOTE}",
        "",
    ]
    breaking = [c for c in r.changes if c.breaks]
    lines += ["### Changed behaviour", ""]
    if not r.changes:
        lines += [f"None: on every scenario the tree's scheduler answers as vLLM {v} does.",
                  ""]
    else:
        lines += [f"{len(r.changes)} kind(s) of change, {len(breaking)} breaking an "
                  "invariant (evaluated on what the tree's scheduler did, against what the "
                  f"vLLM {v} model does on the same scenario).", ""]
        if r.first_break is not None and r.first_break_s is not None:
            saved = f" (`{r.first_break_file}`)" if r.first_break_file else ""
            lines += [f"First scenario that broke an invariant ({r.first_break_phase}, "
                      f"after {r.first_break_s:.0f} s), before shrinking{saved}: "
                      f"`{_scenario_line(r.first_break)}`", ""]
        for i, c in enumerate(r.changes, 1):
            path = r.scenario_files[i - 1] if i <= len(r.scenario_files) else None
            lines += _change(i, c, v, path)
    moved = [c for c in r.cited if c.status == "moved"]
    changed = [c for c in r.cited if c.status == "changed"]
    absent = sorted({c.path for c in r.cited if c.status == "not in tree"})
    lines += ["### Lines the model cites", ""]
    if not moved and not changed:
        n = sum(c.status == "unchanged" for c in r.cited)
        lines += [f"All {n} lines `model/citations.py` cites for vLLM {v} in files the tree "
                  "has are unchanged and in place.", ""]
    else:
        lines += [f"{len(changed)} cited line(s) changed, {len(moved)} moved, "
                  f"{len(r.cited) - len(changed) - len(moved)} unchanged or not in the tree, "
                  f"of {len(r.cited)} cited for vLLM {v}."
                  + (" Re-check the modelled steps of the changed ones:" if changed else ""),
                  ""]
    if changed:
        lines += ["| step | vLLM " + v + " | was | now in the tree |", "| --- | --- | --- | --- |"]
        for cl in changed:
            now = f"line {cl.tree_line}: `{cl.new_text}`" if cl.tree_line else "removed"
            lines.append(f"| `{cl.key}` | `{cite(v, cl.key)}` | `{cl.old_text}` | {now} |")
        lines.append("")
    if moved:
        lines += ["Moved, text unchanged: " + ", ".join(
            f"`{cl.key}` {cl.line}→{cl.tree_line}" for cl in moved), ""]
    if absent:
        lines += ["Cited files the tree does not have (not compared): "
                  + ", ".join(f"`vllm/{p}`" for p in absent), ""]
    if r.changed_files:
        lines += ["<details><summary>Python files under the overlaid paths that differ "
                  f"from vLLM {v}</summary>", ""]
        lines += [f"- `vllm/{p}`: {what} ({n} lines)" for p, what, n in r.changed_files]
        lines += ["", "</details>", ""]
    return "\n".join(lines)
