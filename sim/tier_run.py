"""The tier simulation's grid: one trace through every (tier size, policy, semantics) of a
layout (``sim.tier_sim``), with its table, JSON and plot.

Each cell replays the same trace (``sim.workload``, hashed at the layout's hash block) on
a fresh tier. Per cell: the requests, those with a hit, the hit tokens and those lost
against the first semantics of the run on the same tier size and policy (a fix's cost),
the requests whose restored Mamba state was saved past or before the hit's end
(corrupted: the output can differ from the cold run) and their rate, and the loads of
keys the tier lacks (where vLLM asserts). With ``preempt`` (``sim.tier_preempt.plan``,
the same plan for every cell): the preempted requests, those preempted mid-prefill, the
resumed lookups that hit, their tokens and those lost, and the resumed loads that
restored a wrong state or tainted chunks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sim.progress import ProgressBar
from sim.tier import TierConfig
from sim.tier_layouts import TierLayout
from sim.tier_preempt import plan
from sim.tier_sim import TierSim, TierSimConfig, TierSummary
from sim.workload import make_trace


@dataclass(frozen=True)
class TierGrid:
    layout: TierLayout
    workload: str
    requests: int
    seed: int
    semantics: tuple[str, ...]
    tier_chunks: tuple[int, ...]
    policies: tuple[str, ...]
    step_tokens: int = 2048
    preempt: float = 0.0  # the share of requests preempted and resumed (sim.tier_preempt)
    resume_after: tuple[int, int] = (1, 8)


def run_grid(grid: TierGrid, show_progress: bool = True) -> list[TierSummary]:
    cells = [(n, p, s) for n in grid.tier_chunks for p in grid.policies for s in grid.semantics]
    total = grid.requests * len(cells)
    bar = ProgressBar(total, f"{grid.workload} x{len(cells)}", show_progress)
    out = []
    for i, (chunks, policy, sem) in enumerate(cells):
        trace = make_trace(grid.workload, grid.requests, grid.seed, grid.layout.hash_block)
        plans = plan(trace, grid.preempt, grid.seed, grid.resume_after) if grid.preempt else None
        cfg = TierSimConfig(grid.layout, TierConfig(chunks, policy), grid.step_tokens)
        out.append(TierSim(cfg, sem, seed=grid.seed).run(
            trace, grid.workload, _offset(bar, i * grid.requests), plans))
    bar.finish(total)
    return out


def _offset(bar: ProgressBar, base: int) -> Callable[[int], None]:
    def update(done: int) -> None:
        bar.update(base + done)
    return update


def lost_tokens(summaries: Sequence[TierSummary]) -> dict[tuple[int, str, str], int]:
    """Hit tokens each cell loses against the run's first semantics on the same tier."""
    first: dict[tuple[int, str], int] = {}
    for s in summaries:
        first.setdefault((s.tier_chunks, s.policy), s.hit_tokens)
    return {(s.tier_chunks, s.policy, s.semantics): first[(s.tier_chunks, s.policy)] - s.hit_tokens
            for s in summaries}


COLUMNS = ("tier", "policy", "semantics", "requests", "hit req", "hit tokens", "lost",
           "corrupted", "rate", "missing loads", "evictions", "refused stores")
# with preemptions: the preempted requests (those mid-prefill), their resumed hits, the
# resumed hits' tokens and those lost against the run's first semantics, and the resumed
# loads that corrupted
RESUME_COLUMNS = ("preempted", "in prefill", "resume hits", "resume hit tok", "resume lost",
                  "resume corrupted")


def lost_resume_tokens(summaries: Sequence[TierSummary]) -> dict[tuple[int, str, str], int]:
    """Resumed hit tokens each cell loses against the run's first semantics."""
    first: dict[tuple[int, str], int] = {}
    for s in summaries:
        first.setdefault((s.tier_chunks, s.policy), s.resume_hit_tokens)
    return {(s.tier_chunks, s.policy, s.semantics):
            first[(s.tier_chunks, s.policy)] - s.resume_hit_tokens for s in summaries}


def table(summaries: Sequence[TierSummary]) -> str:
    lost = lost_tokens(summaries)
    lost_resume = lost_resume_tokens(summaries)
    resumes = any(s.preempted for s in summaries)
    columns = COLUMNS + RESUME_COLUMNS if resumes else COLUMNS
    rows = [list(columns)]
    for s in summaries:
        cell = (s.tier_chunks, s.policy, s.semantics)
        row = [str(s.tier_chunks), s.policy, s.semantics, f"{s.requests:,}",
               f"{s.hit_requests:,}", f"{s.hit_tokens:,}", f"{lost[cell]:,}",
               f"{s.corrupted:,}", f"{s.corrupted_rate:.4%}", f"{s.missing_loads:,}",
               f"{s.evictions:,}", f"{s.failed_stores:,}"]
        if resumes:
            row += [f"{s.preempted:,}", f"{s.preempted_in_prefill:,}",
                    f"{s.resume_hit_requests:,}",
                    f"{s.resume_hit_tokens:,}", f"{lost_resume[cell]:,}",
                    f"{s.resume_corrupted:,}"]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(columns))]
    lines = ["  ".join(c.ljust(widths[i]) if i < 3 else c.rjust(widths[i])
                       for i, c in enumerate(r)) for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def to_json(grid: TierGrid, summaries: Sequence[TierSummary]) -> dict[str, Any]:
    lost = lost_tokens(summaries)
    doc: dict[str, Any] = {"layout": asdict(grid.layout), "workload": grid.workload,
                           "requests": grid.requests, "seed": grid.seed,
                           "step_tokens": grid.step_tokens}
    if grid.preempt:
        lost_resume = lost_resume_tokens(summaries)
        doc["preempt"] = grid.preempt
        doc["resume_after"] = list(grid.resume_after)
    doc["cells"] = [
        {**asdict(s), "corrupted_rate": s.corrupted_rate,
         "lost_tokens": lost[(s.tier_chunks, s.policy, s.semantics)],
         **({"lost_resume_tokens": lost_resume[(s.tier_chunks, s.policy, s.semantics)]}
            if grid.preempt else {})}
        for s in summaries]
    return doc


def plot(grid: TierGrid, summaries: Sequence[TierSummary], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for policy in grid.policies:
        for sem in grid.semantics:
            cells = [s for s in summaries if s.policy == policy and s.semantics == sem]
            xs = [s.tier_chunks for s in cells]
            label = f"{sem} / {policy}"
            ax1.plot(xs, [100 * s.corrupted_rate for s in cells], marker="o", label=label)
            ax2.plot(xs, [s.hit_tokens for s in cells], marker="o", label=label)
    for ax, what in ((ax1, "corrupted requests (%)"), (ax2, "hit tokens")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("CPU tier size (chunks)")
        ax.set_ylabel(what)
        ax.grid(alpha=0.3)
    ax1.legend(fontsize=7)
    preempt = f", {grid.preempt:.0%} preempted" if grid.preempt else ""
    fig.suptitle(f"{grid.layout.name}, {grid.workload}{preempt}, {grid.requests:,} requests, "
                 f"seed {grid.seed}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(out: Path, grid: TierGrid, summaries: Sequence[TierSummary]) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    stem = f"tier-{grid.layout.name}-{grid.workload}" + ("-preempt" if grid.preempt else "")
    jpath, ppath = out / f"{stem}.json", out / f"{stem}.png"
    jpath.write_text(json.dumps(to_json(grid, summaries), indent=1) + "\n")
    plot(grid, summaries, ppath)
    return jpath, ppath
