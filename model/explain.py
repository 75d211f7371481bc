"""Words and pictures for one scenario's outcome (the spec and the CLI share them)."""

from __future__ import annotations

from pathlib import Path

from model.evaluate import Outcome
from model.layout import cdiv
from model.layout_chunked import ChunkLayout
from model.lookup_chunked import answer
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
    """Text picture: the token line, each group's offloaded blocks (the chunked lookup: its
    chunks, with the store's answer for each), what its load reads, the hit, the state."""
    T = s.num_tokens
    scale = max(1, cdiv(T, WIDTH))
    cols = cdiv(T, scale)
    chunked = isinstance(o.layout, ChunkLayout)
    legend = ("# stored (HIT)  . missing  ? RETRY  P pending (HIT_PENDING)  L being loaded"
              if chunked else "# stored  . missing  ? deferred  L being loaded")
    lines = [f"one column = {scale} token(s); {legend}"]
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
        units = cells(s, o, i)  # equal units from token 0, the whole ones only
        size = (o.layout.groups[i].tokens_per_chunk if isinstance(o.layout, ChunkLayout)
                else g.gpu_block_size * s.context_parallel_size * s.block_size_factor)
        # a column shows the unit its first token is in (blank past the last whole one)
        row = [units[k][2] if (k := c * scale // size) < len(units) else " "
               for c in range(cols)]
        lines.append(f"{_group_label(g, i, size):<{pad}}" + "".join(row))
        load = loads.get(i)
        if load is not None and load.blocks:
            spans = load_spans(s, o, i)
            lrow = [" "] * cols
            for c in range(cols):  # a column per `scale` tokens: marked where it reads
                if any(first < (c + 1) * scale and c * scale < stop for first, stop in spans):
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
    if isinstance(lay, ChunkLayout):
        return _explain_chunked(s, o, lay)
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
        blocks = load.blocks
        shown = (str(list(blocks)) if len(blocks) <= 16
                 else f"[{blocks[0]}, ..., {blocks[-1]}] ({len(blocks):,} blocks)")
        out.append(f"  load group {load.group}: blocks {shown}{state}")
    if o.assertion:
        out.append(f"  vLLM assertion would fail: {o.assertion}")
    out.extend(token_line(s, o))
    if o.violations:
        out.extend(f"VIOLATION {v.invariant}: {v.message}" for v in o.violations)
    else:
        out.append("no invariant violated")
    return "\n".join(out)


def _tokens(n: int) -> str:
    return f"{n} token" + ("" if n == 1 else "s")


COLORS = {"#": "#9acd32", ".": "#ffffff", "?": "#ffd700", "L": "#ffa500", "P": "#87ceeb"}
CELL_WORDS = {"#": "stored block", ".": "missing block", "?": "deferred block",
              "L": "block being loaded", "P": "pending block"}
# the chunked lookup (0.33.0): the store's answer for a chunk (lookup_chunked.answer)
CHUNK_CELL = {"HIT": "#", "MISS": ".", "RETRY": "?", "HIT_PENDING": "P"}
CHUNK_WORDS = {"#": "stored chunk (HIT)", ".": "missing chunk (MISS)",
               "?": "chunk answering RETRY", "L": "chunk being loaded",
               "P": "chunk answering HIT_PENDING"}


def cells(s: Scenario, o: Outcome, i: int) -> list[tuple[int, int, str]]:
    """Group ``i``'s offloaded units on the token axis: (first token, stop, cell mark).
    The block lookup draws its offloaded blocks; the chunked one its chunks, each with the
    store's answer for it."""
    g = s.groups[i]
    if isinstance(o.layout, ChunkLayout):
        tpc = o.layout.groups[i].tokens_per_chunk
        out = []
        for c in range(s.num_tokens // tpc):
            mark = "L" if c in g.being_loaded else CHUNK_CELL[answer(g, (c + 1) * tpc, tpc)]
            out.append((c * tpc, (c + 1) * tpc, mark))
        return out
    obs = g.gpu_block_size * s.context_parallel_size * s.block_size_factor
    return [(b * obs, (b + 1) * obs, _cell(g, b)) for b in range(s.num_tokens // obs)]


def load_spans(s: Scenario, o: Outcome, i: int) -> list[tuple[int, int]]:
    """The token ranges group ``i``'s load reads: offloaded blocks (block lookup) or keys,
    each from its chunk's start to the token it ends at (chunked lookup; a partial-tail
    key ends inside its chunk)."""
    load = next((ld for ld in o.loads if ld.group == i), None)
    if load is None:
        return []
    if isinstance(o.layout, ChunkLayout):
        tpc = o.layout.groups[i].tokens_per_chunk
        return [((e - 1) // tpc * tpc, e) for e in load.blocks]
    g = s.groups[i]
    obs = g.gpu_block_size * s.context_parallel_size * s.block_size_factor
    return [(b * obs, (b + 1) * obs) for b in load.blocks]
GPU_HIT, HIT, LARGER, BAD = "#8fbc8f", "#4682b4", "#9370db", "#d62728"


def draw_png(s: Scenario, o: Outcome, path: Path, title: str = "",
             larger: int | None = None, unreachable: str | None = None) -> None:
    """The same picture as ``token_line``, drawn with matplotlib, with a legend of every
    colour and mark it uses. ``larger``: a larger valid hit to draw beside the returned one
    (maximality); ``unreachable``: why no engine produces this input (drawn as a badge)."""
    import textwrap

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.layout_engine import ConstrainedLayoutEngine
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle
    from matplotlib.ticker import MaxNLocator
    from PIL import Image

    T = s.num_tokens
    n = len(s.groups)
    c = s.num_computed_tokens
    width = max(7.5, min(16.0, 4 + T / 6))
    extra = 1 if larger is not None else 0
    # a Figure on the Agg canvas, without pyplot (whose import costs about a second)
    fig = Figure(figsize=(width, 2.6 + 0.8 * (n + extra)), dpi=110,
                 layout=ConstrainedLayoutEngine(w_pad=0.1, h_pad=0.1))  # a margin all round
    canvas = FigureCanvasAgg(fig)
    ax = fig.subplots()
    end = c + (o.hit_tokens or 0)
    handles: list[Patch | Line2D] = []
    seen: set[str] = set()

    def legend(key: str, handle: Patch | Line2D) -> None:
        if key not in seen:
            seen.add(key)
            handles.append(handle)

    y0 = n
    ax.add_patch(Rectangle((0, y0), T, 0.6, facecolor="#dddddd", edgecolor="black", lw=0.4))
    legend("prompt", Patch(facecolor="#dddddd", edgecolor="black", lw=0.4,
                           label="prompt token (not hit)"))
    if c:
        ax.add_patch(Rectangle((0, y0), c, 0.6, color=GPU_HIT))
        legend("gpu", Patch(color=GPU_HIT, label=f"GPU prefix hit ({_tokens(c)})"))
    if o.hit_tokens:
        ax.add_patch(Rectangle((c, y0), o.hit_tokens, 0.6, color=HIT))
        legend("hit", Patch(color=HIT, label=f"returned CPU hit ({_tokens(o.hit_tokens)})"))
    ax.text(-0.5, y0 + 0.3, "prompt", ha="right", va="center", fontsize=9)
    ax.axvline(end, color=HIT, ls="--", lw=1)
    legend("end", Line2D([], [], color=HIT, ls="--", label=f"hit ends at token {end}"))
    if larger is not None:
        y = n + 1
        ax.add_patch(Rectangle((c, y), larger, 0.6, facecolor="none", edgecolor=LARGER,
                               hatch="//", lw=1.2))
        ax.text(-0.5, y + 0.3, "larger valid hit", ha="right", va="center", fontsize=9,
                color=LARGER)
        ax.axvline(c + larger, color=LARGER, ls=":", lw=1.2)
        legend("larger", Patch(facecolor="none", edgecolor=LARGER, hatch="//",
                               label=f"larger valid hit ({_tokens(larger)}, to token "
                                     f"{c + larger}) the lookup gave away"))
    loads = {load.group: load for load in o.loads}
    chunked = isinstance(o.layout, ChunkLayout)
    words = CHUNK_WORDS if chunked else CELL_WORDS
    for i, g in enumerate(s.groups):
        y = n - 1 - i
        obs = g.gpu_block_size * s.context_parallel_size * s.block_size_factor
        for first, stop, cell in cells(s, o, i):
            ax.add_patch(Rectangle((first, y), stop - first, 0.6, facecolor=COLORS[cell],
                                   edgecolor="black", lw=0.6))
            legend(cell, Patch(facecolor=COLORS[cell], edgecolor="black", lw=0.6,
                               label=words[cell]))
        load = loads.get(i)
        if load is not None:
            for first, stop in load_spans(s, o, i):
                ax.add_patch(Rectangle((first, y - 0.15), stop - first, 0.1, color=HIT))
                legend("load", Patch(color=HIT, label="chunk (key) the load reads" if chunked
                                     else "block the load reads"))
            if load.state_position is not None and g.restores_state:
                bad = load.state_position != end
                ax.plot([load.state_position], [y + 0.3], marker="v", ms=10,
                        color=BAD if bad else "black", ls="none")
                key = "bad" if bad else "state"
                legend(key, Line2D([], [], marker="v", ms=9, ls="none",
                                   color=BAD if bad else "black",
                                   label="restored Mamba state, not where the hit ends"
                                   if bad else "restored Mamba state, where the hit ends"))
        ax.text(-0.5, y + 0.3, _group_label(g, i, obs), ha="right", va="center", fontsize=9)
    ax.set_xlim(-0.5, T + 0.5)
    ax.set_ylim(-0.4, n + extra + 0.9)
    ax.set_yticks([])
    ax.set_xlabel("token position")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    verdict = "; ".join(f"{v.invariant} broken" for v in o.violations) or "no invariant broken"
    if larger is not None:
        verdict += f"; a larger valid hit ({larger} > {o.hit_tokens or 0}) is given away"
    head = title or f"{o.semantics}: " + ("deferred" if o.hit_tokens is None
                                          else f"hit {o.hit_tokens}")
    chars = int(width * 11)
    ax.set_title(textwrap.fill(f"{head}: {verdict}", chars), fontsize=10)
    if unreachable:
        fig.suptitle(textwrap.fill("NO ENGINE PRODUCES THIS INPUT: " + unreachable, chars),
                     fontsize=8, color="white", backgroundcolor=BAD)
    fig.legend(handles=handles, loc="outside lower center", ncol=2 if width < 10 else 3,
               fontsize=8, frameon=False)
    # one draw (the constrained layout runs inside it; savefig would lay out, measure a
    # tight box and draw again), written as RGB by Pillow with no metadata: the same
    # input gives the same bytes
    canvas.draw()  # type: ignore[no-untyped-call]  # (matplotlib's Agg canvas: no hints)
    rgba = canvas.buffer_rgba()  # type: ignore[no-untyped-call]
    Image.frombuffer("RGBA", canvas.get_width_height(physical=True), rgba).convert(
        "RGB").save(path, format="png")


def _explain_chunked(s: Scenario, o: Outcome, lay: ChunkLayout) -> str:
    """vLLM 0.33.0: the layout, each group's turn, the partial tail and the load."""
    assert o.lookup is not None
    out = [f"semantics {o.semantics}: blocks_per_chunk {lay.blocks_per_chunk}, "
           f"tokens_per_hash {lay.tokens_per_hash}, partial tails "
           f"{'on' if lay.supports_partial_tail else 'off'}"]
    for c in lay.groups:
        w = c.sliding_window_size_in_chunks
        out.append(f"  group {c.group_idx}: {c.kind}, chunk {c.tokens_per_chunk} tokens, "
                   f"{'prefix lookup' if w is None else f'window of {w} chunk(s)'}"
                   f"{', EAGLE' if c.is_eagle_group else ''}")
    if lay.mamba_align_size is not None:
        out.append(f"  Mamba alignment: max_hit_size_tokens rounded down to "
                   f"{lay.mamba_align_size}")
    for st in o.lookup.steps:
        hits = "deferred" if st.num_hit_blocks is None else f"{st.num_hit_blocks} chunk(s)"
        out.append(f"  pass {st.pass_no} group {st.group}: max hit {st.max_hit_before} -> "
                   f"chunks [{st.queried[0]}, {st.queried[1]}) -> {hits} -> max hit "
                   f"{st.max_hit_after}{'  (' + st.note + ')' if st.note else ''}")
    out.append("  keys looked up (group, end token): " + " ".join(
        f"({g},{e})" for g, e in o.lookups))
    hit = "deferred (None)" if o.hit_tokens is None else f"{o.hit_tokens} tokens"
    out.append(f"result: {hit} ({o.lookup.reason})")
    for load in o.loads:
        state = "" if load.state_position is None else f", state at token {load.state_position}"
        out.append(f"  load group {load.group}: keys ending at {list(load.blocks)}{state}")
    for v in o.violations:
        out.append(f"VIOLATION {v.invariant}: {v.message}")
    if not o.violations:
        out.append("no invariant violated")
    return "\n".join(out)
