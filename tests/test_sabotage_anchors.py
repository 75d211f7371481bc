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


def test_the_parts_of_a_day_together_are_the_whole_catalogue() -> None:
    from proofs.sabotage import parse_part, selected

    halves = [selected(part=parse_part(f"{k}/2")) for k in (0, 1)]
    assert sorted(s.name for h in halves for s in h) == sorted(s.name for s in SABOTAGES)
    assert not {s.name for s in halves[0]} & {s.name for s in halves[1]}
    assert selected() == list(SABOTAGES)


def test_a_bad_part_is_one_line_and_exit_2() -> None:
    import subprocess
    import sys

    for bad in ("2/2", "1", "a/b", "0/0", "0/65"):
        r = subprocess.run([sys.executable, "-m", "proofs", "--sabotage", "--sabotage-part",
                            bad], capture_output=True, text=True, check=False)
        assert r.returncode == 2, (bad, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "--sabotage-part" in r.stderr
