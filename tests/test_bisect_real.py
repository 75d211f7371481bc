"""The bisect on one release's real scheduler (light env; ``-m crosscheck``): vLLM 0.28.0,
the release that fixed #51094, on #51094's reproduction and on finding 001's smallest one.
(#51094 re-introduced on 0.28.0 is detected by the known-bug benchmark, which CI runs.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.crosscheck import bisect

pytestmark = [pytest.mark.crosscheck, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parent.parent
BUG_51094 = ROOT / "tests/scenarios/vllm-0.24.0-breaks/mamba-all-mode-boundary.json"
F001 = ROOT / "tests/scenarios/vllm-0.33.0-breaks/attention-block-not-multiple-of-mamba-block.json"


def test_bisect_on_0_28_0() -> None:
    b = bisect.run_bisect([BUG_51094, F001], versions=("0.28.0",), say=lambda m: None)
    fixed, f001 = b.cells[(0, "0.28.0")], b.cells[(1, "0.28.0")]
    assert fixed.error is None and fixed.refused is None
    assert fixed.hit == 16 and fixed.breaks == ()  # #51100 rounds mode "all"
    assert f001.hit == 3 and f001.breaks == ("no-partial-state",)
    assert "state at 4" in f001.loads
    table = bisect.render(b)
    assert "`vllm-0.28.0`" in table  # the release's own model beside its real scheduler
