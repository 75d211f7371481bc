"""bench/bench_ci.py: the per-step table from its trap's log, and bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import bench_ci  # noqa: E402


def test_steps_last_until_the_next_one_and_short_ones_are_summed() -> None:
    log = ("1000.0 1.5 | pip install\n"
           "1060.0 2.0 | ruff check .\n"
           "1061.0 2.0 | mypy model\n"
           "1063.0 2.5 | python -m pytest\n")
    steps, total = bench_ci.parse(log, end=1243.0, exit_code=0)
    assert [(s.command, round(s.minutes, 2)) for s in steps[:2]] == [
        ("pip install", 1.0), ("python -m pytest", 3.0)]
    assert steps[0].load == 1.5 and steps[1].start_s == 63.0
    assert steps[2].command.startswith("2 steps under 5 s") and round(steps[2].minutes * 60) == 3
    assert round(total, 2) == 4.05
    assert "| **total, exit 0** | **4.0** |" in bench_ci.table(
        bench_ci.Run("abc1234", steps, total, 0, ""))


def test_an_empty_log_is_no_steps() -> None:
    assert bench_ci.parse("", end=5.0, exit_code=1) == ((), 0.0)


def test_an_unknown_revision_is_one_line_and_exit_2() -> None:
    r = subprocess.run([sys.executable, "bench/bench_ci.py", "--rev", "no-such-rev"],
                       cwd=ROOT, capture_output=True, text=True, check=False)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == "bench_ci: --rev/--baseline-rev: 'no-such-rev' is not a commit here"
