"""Words and pictures for one scenario's outcome (the spec and the CLI share them)."""

from __future__ import annotations

from pathlib import Path

from model.evaluate import Outcome
from model.layout import cdiv
from model.scenario import Group, Scenario
from model.semantics import get_semantics

WIDTH = 96


def _group_label(g: Group, i: int, obs: int) -> str:
    kind = {"full_attention": "full", "sliding_window": f"swa w={g.sliding_window}",
            "mamba": f"mamba {g.mamba_cache_mode}"}[g.kind]
    return f"g{i} {kind}{' eagle' if g.eagle else ''} ({obs}t)"


def _cell(g: Group, b: int) -> str:
    if b in g.being_loaded:
        return "L"
    if b in g.deferred:
        return "?"
    return "#" if g.holds(b) else "."


def token_line(s: Scenario, o: Outcome) -> list[str]:
    """Text picture: the token line, each group's offloaded blocks, the hit, the state."""
    factor = s.block_size_factor
    T = s.num_tokens
    scale = max(1, cdiv(T, WIDTH))
    cols = cdiv(T, scale)
    lines = [f"one column = {scale} token(s); # stored  . missing  ? deferred  L being loaded"]
    ruler = [" "] * (cols + 4)
    for pos in range(0, T + 1, max(1, 8 * scale)):
        label = str(pos)
        c = pos // scale
        for k, ch in enumerate(label):
            if c + k < len(ruler):
                ruler[c + k] = ch
    pad = 28
    lines.append(" " * pad + "".join(ruler))
    end = s.num_computed_tokens + (o.hit_tokens or 0)
    marks = []
    for c in range(cols):
        t = c * scale
        marks.append("g" if t < s.num_computed_tokens else ("H" if t < end else "-"))
    lines.append(f"{'prompt (g=GPU hit, H=hit)':<{pad}}" + "".join(marks) + "|")
    loads = {load.group: load for load in o.loads}
    for i, g in enumerate(s.groups):
        obs = g.gpu_block_size * s.context_parallel_size * factor
        row = []
        for c in range(cols):
            b = (c * scale) // obs
            full = (b + 1) * obs <= T
            row.append(_cell(g, b) if full else " ")
        load = loads.get(i)
        lines.append(f"{_group_label(g, i, obs):<{pad}}" + "".join(row))
        if load is not None and load.blocks:
            lrow = [" "] * cols
            for b in load.blocks:
                for c in range(b * obs // scale, min(cols, cdiv((b + 1) * obs, scale))):
                    lrow[c] = "^"
            if load.state_position is not None:
                c = min(cols - 1, max(0, load.state_position // scale - 1))
                lrow[c] = "S"
            lines.append(f"{'  loaded (S=state)':<{pad}}" + "".join(lrow))
    return lines


def explain(s: Scenario, o: Outcome) -> str:
    """The lookup in words, as the loop ran, then the picture and the verdict."""
    sem = get_semantics(o.semantics)
    out = [f"semantics {sem.name}: {sem.summary}"]
    out.append(f"prompt {s.prompt_tokens} tokens, GPU prefix hit {s.num_computed_tokens}, "
               f"block_size_factor {s.block_size_factor}")
    if s.output_tokens or s.context_parallel_size != 1:
        out.append(f"resumed request: {s.output_tokens} output tokens (num_tokens "
                   f"{s.num_tokens}); context_parallel_size {s.context_parallel_size}")
    if o.refused:
        out.append(o.refused)
        return "\n".join(out)
    assert o.layout is not None and o.lookup is not None
    lay = o.layout
    for c in lay.groups:
        w = c.sliding_window_size_in_blocks
        out.append(f"  group {c.group_idx}: {c.kind}, offloaded block {c.offloaded_block_size} "
                   f"tokens, {'prefix lookup' if w is None else f'window of {w} block(s)'}"
                   f"{', EAGLE' if c.is_eagle_group else ''}")
    if lay.mamba_align_size is not None and sem.align_at != "none":
        where = "max_hit_size_tokens" if sem.align_at == "max_hit" else "num_hit_tokens"
        out.append(f"  Mamba alignment: {where} rounded down to {lay.mamba_align_size}")
    for st in o.lookup.steps:
        hits = "deferred" if st.num_hit_blocks is None else f"{st.num_hit_blocks} block(s)"
        out.append(f"  pass {st.pass_no} group {st.group}: max hit {st.max_hit_before} -> "
                   f"blocks [{st.queried[0]}, {st.queried[1]}) -> {hits} -> max hit "
                   f"{st.max_hit_after}{'  (' + st.note + ')' if st.note else ''}")
    hit = "deferred (None)" if o.hit_tokens is None else f"{o.hit_tokens} tokens"
    out.append(f"result: {hit} ({o.lookup.reason})")
    for load in o.loads:
        state = "" if load.state_position is None else f", state at token {load.state_position}"
        out.append(f"  load group {load.group}: blocks {list(load.blocks)}{state}")
    if o.assertion:
        out.append(f"  vLLM assertion would fail: {o.assertion}")
    out.extend(token_line(s, o))
    if o.violations:
        out.extend(f"VIOLATION {v.invariant}: {v.message}" for v in o.violations)
    else:
        out.append("no invariant violated")
    return "\n".join(out)


def draw_png(s: Scenario, o: Outcome, path: Path, title: str = "") -> None:
    """The same picture as ``token_line``, drawn with matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    T = s.num_tokens
    n = len(s.groups)
    fig, ax = plt.subplots(figsize=(min(16, 4 + T / 6), 1.6 + 0.9 * n))
    end = s.num_computed_tokens + (o.hit_tokens or 0)
    y0 = n
    ax.add_patch(Rectangle((0, y0), T, 0.6, color="#dddddd"))
    if s.num_computed_tokens:
        ax.add_patch(Rectangle((0, y0), s.num_computed_tokens, 0.6, color="#8fbc8f"))
    if o.hit_tokens:
        ax.add_patch(Rectangle((s.num_computed_tokens, y0), o.hit_tokens, 0.6, color="#4682b4"))
    ax.text(-0.5, y0 + 0.3, "prompt", ha="right", va="center", fontsize=9)
    ax.axvline(end, color="#4682b4", ls="--", lw=1)
    loads = {load.group: load for load in o.loads}
    colors = {"#": "#9acd32", ".": "#ffffff", "?": "#ffd700", "L": "#ffa500"}
    for i, g in enumerate(s.groups):
        y = n - 1 - i
        obs = g.gpu_block_size * s.context_parallel_size * s.block_size_factor
        for b in range(T // obs):
            ax.add_patch(Rectangle((b * obs, y), obs, 0.6, facecolor=colors[_cell(g, b)],
                                   edgecolor="black", lw=0.6))
        load = loads.get(i)
        if load is not None:
            for b in load.blocks:
                ax.add_patch(Rectangle((b * obs, y - 0.15), obs, 0.1, color="#4682b4"))
            if load.state_position is not None:
                bad = load.state_position != end and g.restores_state
                ax.plot([load.state_position], [y + 0.3], marker="v", ms=10,
                        color="red" if bad else "black")
        ax.text(-0.5, y + 0.3, _group_label(g, i, obs), ha="right", va="center", fontsize=9)
    ax.set_xlim(-0.5, T + 0.5)
    ax.set_ylim(-0.4, n + 0.9)
    ax.set_yticks([])
    ax.set_xlabel("token position (green: stored, white: missing, yellow: deferred; "
                  "blue bar: loaded; triangle: restored state)")
    verdict = "; ".join(f"{v.invariant}" for v in o.violations) or "no violation"
    ax.set_title(title or f"{o.semantics}: hit {o.hit_tokens} - {verdict}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
