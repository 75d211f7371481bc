"""Same seed, same output: the simulator, the rerun table, Hypothesis draws; and a
failing property leaves a scenario file that replays it."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

from hypothesis import given, seed, settings
from hypothesis import strategies as st

from releases import vllm_0_23_0, vllm_0_24_0
from sim.cli import main as sim_main
from tests import replay

V023 = vllm_0_23_0.SEMANTICS.name
V024 = vllm_0_24_0.SEMANTICS.name


def _printed(argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert sim_main(argv) == 0
    return out.getvalue()


def test_sim_run_same_seed_same_results() -> None:
    argv = ["run", "--workload", "chat", "--requests", "60", "--seed", "7", "--no-progress",
            "--jobs", "1", "--semantics", f"{V023},{V024}"]
    a, b = (_printed(argv) for _ in range(2))
    results = [[ln for ln in x.splitlines() if "/s" not in ln] for x in (a, b)]  # not rates
    assert results[0] == results[1] and "CPU hit tokens" in a


def test_sim_rerun_prints_the_same() -> None:
    argv = ["rerun", "--semantics", V024, "--lengths", "17-33", "--json"]
    assert _printed(argv) == _printed(argv)


def test_hypothesis_same_seed_same_draws() -> None:
    def draws() -> list[int]:
        seen: list[int] = []

        @seed(1234)
        @settings(max_examples=20, database=None)
        @given(st.integers(0, 10**6))
        def prop(n: int) -> None:
            seen.append(n)

        prop()
        return seen

    assert draws() == draws()


def test_failure_writes_a_replayable_scenario(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(replay, "FAILURES", tmp_path)
    scen = json.loads((Path(__file__).parent / "scenarios" / "seed-boundary-32.json")
                      .read_text())
    replay.remember(scen)
    path = replay.write_failure("tests/x.py::test_y[3]")
    assert path is not None and path.parent == tmp_path and path.name.startswith("test_y-")
    from model.cli import main as model_main
    with contextlib.redirect_stdout(io.StringIO()):
        assert model_main(["lookup", str(path)]) == 1  # replays: 0.23.0 breaks I1
