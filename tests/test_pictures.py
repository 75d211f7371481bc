"""Every counterexample picture draws a load wherever its answer loads, on the token axis
(issue 26): the chunked lookup's keys are token ends, not block indices."""

from __future__ import annotations

import json
from pathlib import Path

import releases
from model.evaluate import evaluate
from model.explain import cells, draw_png, load_spans
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
