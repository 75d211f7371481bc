"""Each sabotage of ``python -m proofs --sabotage`` (proofs/sabotage.py) names a line its
file holds exactly once: an edit of that file that moves or rewrites the line turns this
fast test red, not CI's sabotage step half an hour later (two anchors went stale when the
0.31.0 start-up rules rewrote them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from proofs.sabotage import SABOTAGES, Sabotage

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("s", SABOTAGES, ids=lambda s: s.name)
def test_each_sabotage_line_is_written_once(s: Sabotage) -> None:
    text = (ROOT / s.path).read_text()
    assert text.count(s.old) == 1, f"{s.path}: {s.old!r} occurs {text.count(s.old)} times"
    assert s.old != s.new
