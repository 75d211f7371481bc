"""The side-by-side summary: a text table, a JSON report and a plot."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from model.invariants import INVARIANTS
from sim.config import EngineConfig
from sim.metrics import Summary

_ROWS: tuple[tuple[str, str], ...] = (
    ("requests", "requests"),
    ("lookups", "lookups (model.evaluate)"),
    ("deferred", "  deferred lookups"),
    ("deferred_loading", "    because a hit block was being loaded"),
    ("hit_rate", "hit rate (GPU+CPU tokens / prompt tokens)"),
    ("gpu_hit_tokens", "GPU hit tokens"),
    ("cpu_hit_tokens", "CPU hit tokens (loaded)"),
    ("recomputed_tokens", "recomputed tokens"),
    ("cpu_hit_requests", "requests with a CPU hit"),
    ("oracle_hit_tokens", "best correct CPU hit tokens (oracle)"),
    ("given_away_tokens", "  tokens given away vs the oracle"),
    ("above_oracle", "  lookups answering beyond the oracle"),
    *((f"violations.{n}", f"violations: {n}") for n in INVARIANTS),
    ("missing_loads", "loads of unstored blocks (vLLM asserts)"),
    ("assertions", "load-window assertions"),
    ("wrong_state", "wrong Mamba state after the prompt"),
    ("corrupted", "corrupted outputs"),
    ("corrupted_direct", "  own lookup violated no-partial-state"),
    ("corrupted_inherited", "  from a wrong state cached earlier"),
    ("corrupted_divergence", "  0.24.0 hybrid local hit past the Mamba hit"),
    ("dirty_attention", "0.24.0 hybrid local hit past an attention hit"),
    ("model_disagreements", "model/simulator disagreements"),
    ("cpu_stored_blocks", "CPU blocks stored"),
    ("cpu_evictions", "CPU evictions"),
    ("gpu_evictions", "GPU evictions"),
    ("steps", "engine steps"),
    ("waiting_steps", "request-steps spent waiting"),
    ("requests_per_s", "requests/s"),
    ("lookups_per_s", "lookups/s"),
)


def _value(s: Summary, key: str) -> Any:
    if key.startswith("violations."):
        return s.violations[key.split(".", 1)[1]]
    return getattr(s, key)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3f}" if v < 10 else f"{v:,.0f}"
    return f"{v:,}"


def table(summaries: Sequence[Summary]) -> str:
    head = ["", *(s.semantics for s in summaries)]
    rows = [head] + [[label, *(_fmt(_value(s, key)) for s in summaries)]
                     for key, label in _ROWS]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = []
    for j, r in enumerate(rows):
        lines.append("  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i])
                               for i, c in enumerate(r)))
        if j == 0:
            lines.append("-" * len(lines[0]))
    return "\n".join(lines)


def to_json(summaries: Sequence[Summary], *, workload: str, requests: int, seed: int,
            config: EngineConfig) -> dict[str, Any]:
    return {"workload": workload, "requests": requests, "seed": seed,
            "config": {k: getattr(config, k) for k in config.__dataclass_fields__},
            "semantics": [s.to_json() for s in summaries]}


def plot(summaries: Sequence[Summary], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [s.semantics for s in summaries]
    x = list(range(len(names)))
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    ax = axes[0][0]
    ax.bar(x, [s.hit_rate for s in summaries], label="GPU + CPU")
    ax.bar(x, [s.cpu_hit_rate for s in summaries], label="CPU only")
    ax.set_title("hit rate (tokens)")
    ax.legend()
    ax = axes[0][1]
    gpu = [s.gpu_hit_tokens for s in summaries]
    loaded = [s.cpu_hit_tokens for s in summaries]
    recomputed = [s.recomputed_tokens for s in summaries]
    ax.bar(x, gpu, label="GPU prefix hit", color="lightgray")
    ax.bar(x, loaded, bottom=gpu, label="loaded from CPU")
    ax.bar(x, recomputed, bottom=[a + b for a, b in zip(gpu, loaded, strict=True)],
           label="recomputed")
    ax.set_title("prompt tokens: GPU hit, loaded from CPU, recomputed")
    ax.legend()
    ax = axes[1][0]
    width = 0.8 / len(INVARIANTS)
    for i, name in enumerate(INVARIANTS):
        ax.bar([v + i * width - 0.4 + width / 2 for v in x],
               [s.violations[name] for s in summaries], width, label=name)
    ax.set_title("lookups violating each invariant")
    ax.legend(fontsize="small")
    ax = axes[1][1]
    ax.bar(x, [s.corrupted_direct for s in summaries], label="own no-partial-state load")
    ax.bar(x, [s.corrupted_inherited for s in summaries],
           bottom=[s.corrupted_direct for s in summaries], label="inherited wrong state")
    ax.bar(x, [s.corrupted_divergence for s in summaries],
           bottom=[s.corrupted_direct + s.corrupted_inherited for s in summaries],
           label="0.24.0 hybrid local-hit divergence")
    ax.bar(x, [s.missing_loads for s in summaries],
           bottom=[s.corrupted for s in summaries], label="load of unstored block", hatch="//")
    ax.set_title("corrupted outputs (and crashing loads)")
    ax.legend(fontsize="small")
    for row in axes:
        for a in row:
            a.set_xticks(x)
            a.set_xticklabels(names, rotation=15, fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(directory: Path, summaries: Sequence[Summary], *, workload: str,
                 requests: int, seed: int, config: EngineConfig) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    data = to_json(summaries, workload=workload, requests=requests, seed=seed, config=config)
    jpath = directory / "sim-report.json"
    jpath.write_text(json.dumps(data, indent=2, default=list) + "\n")
    ppath = directory / "sim-report.png"
    plot(summaries, ppath, f"{workload}: {requests:,} requests, seed {seed}")
    return jpath, ppath
