"""Every counterexample picture draws a load wherever its answer loads, on the token axis
(issue 26): the chunked lookup's keys are token ends, not block indices.  The same for
the text pictures (report.md, the spec): their "loaded" rows mark every column a load
reads, and a chunked group's row shows its chunks with the store's answer for each."""

from __future__ import annotations

import json
from pathlib import Path

import releases
from model.evaluate import evaluate
from model.explain import cells, draw_png, load_spans, token_line
from model.layout_chunked import ChunkLayout
from model.scenario import parse_scenario

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted((ROOT / "docs" / "counterexamples").glob("*.json"))


def test_every_load_is_drawn_on_the_axis() -> None:
    chunked = 0
    for path in FILES:
        s = parse_scenario(json.loads(path.read_text()))
        o = evaluate(s, enforce=False)
        if o.refused:
            continue
        chunked += isinstance(o.layout, ChunkLayout)
        for load in o.loads:
            spans = load_spans(s, o, load.group)
            assert len(spans) == len(load.blocks), path.name
            for first, stop in spans:
                assert 0 <= first < stop <= s.num_tokens, (path.name, load.group, first, stop)
        for i in range(len(s.groups)):
            for first, stop, _ in cells(s, o, i):
                assert 0 <= first < stop <= s.num_tokens, path.name
    assert chunked >= 5  # the newest release's counterexamples are among them


def test_a_chunked_picture_is_drawn(tmp_path: Path) -> None:
    newest = releases.newest().name
    path = next(p for p in FILES if p.name == f"no-partial-state--{newest}--accepted.json")
    s = parse_scenario(json.loads(path.read_text()))
    o = evaluate(s, enforce=False)
    assert isinstance(o.layout, ChunkLayout) and o.loads
    out = tmp_path / "p.png"
    draw_png(s, o, out)
    assert out.stat().st_size > 1000


PAD = 28  # the text picture's label column


def _rows(s_lines: list[str]) -> list[tuple[str, str]]:
    """(label, columns) of a text picture's group and loaded rows."""
    return [(line[:PAD].strip(), line[PAD:]) for line in s_lines[3:]]


def test_every_text_picture_draws_each_load_where_it_reads() -> None:
    chunked = 0
    for path in FILES:
        s = parse_scenario(json.loads(path.read_text()))
        o = evaluate(s, enforce=False)
        if o.refused:
            continue
        lines = token_line(s, o)
        scale = int(lines[0].split("= ")[1].split(" ")[0])
        rows = _rows(lines)
        loads = {ld.group: ld for ld in o.loads if ld.blocks}
        at = 0
        for i in range(len(s.groups)):
            label, cols = rows[at]
            assert label.startswith(f"g{i} "), (path.name, label)
            for first, _, mark in cells(s, o, i):
                assert cols[first // scale] == mark, (path.name, i, first)
            at += 1
            if i not in loads:
                continue
            label, read = rows[at]
            assert label == "loaded (S=state)", path.name
            at += 1
            want = {c for first, stop in load_spans(s, o, i)
                    for c in range(first // scale, (stop - 1) // scale + 1)}
            got = {c for c, ch in enumerate(read) if ch in "^S"}
            assert want <= got, (path.name, i, sorted(want - got))
            assert got - want <= {c for c, ch in enumerate(read) if ch == "S"}, path.name
        assert at == len(rows), path.name
        chunked += isinstance(o.layout, ChunkLayout)
    assert chunked >= 5


def test_a_chunked_text_picture_shows_pending_and_retry_chunks() -> None:
    newest = releases.newest().name
    s = parse_scenario({
        "semantics": newest, "block_size_factor": 1, "prompt_tokens": 80,
        "num_computed_tokens": 0,
        "groups": [{"kind": "full_attention", "gpu_block_size": 16, "stored": [0, 1],
                    "pending": [2], "deferred": [3]}]})
    o = evaluate(s, enforce=False)
    lines = token_line(s, o)
    assert "P pending (HIT_PENDING)" in lines[0] and "? RETRY" in lines[0]
    assert _rows(lines)[0][1].startswith("#" * 32 + "P" * 16 + "?" * 16)
