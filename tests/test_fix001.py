"""Finding 001 (docs/findings/001-mamba-state-past-hit-end.md) and its fix as model semantics.

``alt-v033-reround-mamba`` is vLLM 0.33.0's lookup with ``max_hit_size_tokens`` rounded down
to the Mamba chunk again after each group's cut (docs/findings/001-fix.diff);
``alt-v033-reround-mamba-rerun`` also looks the sliding-window groups up again when that
round-down cuts a confirmed window (docs/findings/001-fix-rerun.diff). The finding's
scenario files break ``no-partial-state`` on 0.33.0 and keep it with either fix; the fix as
written then loads a window chunk the store lacks (``finding-001-fix-breaks/``), the
completed fix does not. On the cross-check generator's 0.33.0 scenarios neither fix
restores a state past the hit, the completed one breaks nothing 0.33.0 keeps, and where
every chunk is a multiple of the Mamba chunk neither changes a hit or a load.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from model.evaluate import evaluate
from model.layout_chunked import ChunkLayout
from model.scenario import Scenario, iter_scenario_paths, load_scenario_file
from releases import alt_round_num_hit, fix_001_reround, fix_001_reround_rerun, vllm_0_33_0
from sim.crosscheck.gen import scenarios

ROOT = Path(__file__).resolve().parents[1]
FINDING_DIRS = (ROOT / "tests" / "scenarios" / "vllm-0.33.0-breaks",
                ROOT / "tests" / "scenarios" / "finding-001")
STOCK, FIX, RERUN = (vllm_0_33_0.SEMANTICS.name, fix_001_reround.SEMANTICS.name,
                     fix_001_reround_rerun.SEMANTICS.name)
FIX_BREAKS = ROOT / "tests" / "scenarios" / "finding-001-fix-breaks"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "model", "lookup", *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_finding_scenarios_replay_as_violations_on_033_and_ok_with_the_fix() -> None:
    paths = [str(p) for p in iter_scenario_paths([str(d) for d in FINDING_DIRS])]
    assert len(paths) == 6
    stock = _cli(*paths, "--semantics", STOCK)
    assert stock.returncode == 1, stock.stderr
    assert stock.stdout.count("- no-partial-state") == len(paths), stock.stdout
    for side in (FIX, RERUN):
        fixed = _cli(*paths, "--semantics", side)
        assert fixed.returncode == 0, fixed.stdout + fixed.stderr
        assert fixed.stdout.count(" - ok") == len(paths), fixed.stdout


def test_fix_as_written_loads_an_unstored_window_chunk_and_the_completed_fix_does_not() -> None:
    stock = _cli(str(FIX_BREAKS), "--semantics", STOCK)
    assert stock.returncode == 1 and "hit 160 - no-partial-state" in stock.stdout, stock.stdout
    fixed = _cli(str(FIX_BREAKS), "--semantics", FIX)
    assert fixed.returncode == 1, fixed.stdout
    assert fixed.stdout.count("- loads-stored-only") == 2, fixed.stdout
    assert "hit 144 - loads-stored-only" in fixed.stdout  # the GPU layout's sizes
    assert "hit 156 - loads-stored-only" in fixed.stdout  # the PR check's shrunk case
    rerun = _cli(str(FIX_BREAKS), "--semantics", RERUN)
    assert rerun.returncode == 0 and "hit 48 - ok" in rerun.stdout, rerun.stdout
    assert "hit 0 - ok" in rerun.stdout, rerun.stdout


def test_finding_reproductions_hit_what_the_real_033_scheduler_hits() -> None:
    # the real 0.33.0 scheduler's answers (docs/findings/001: the reproductions on the
    # unfixed method; fix_check_chunked.py --check on the fixed one), replayed on the model
    want = {  # file: ((0.33.0 hit, Mamba state at), (fixed hit, Mamba state at)); both fixes
        "engine-core-sliding-window-gpu-layout.json": ((160, 192), (0, None)),
        "engine-core-lru-forced.json": ((48, 64), (0, None)),
        "connector-stand-in-forced.json": ((48, 64), (32, 32)),
    }
    for name, sides in want.items():
        s = load_scenario_file(FINDING_DIRS[1] / name)
        for side, (hit, state) in zip((STOCK, FIX, RERUN), sides + sides[1:], strict=True):
            o = evaluate(s, side)
            states = [ld.state_position for ld in o.loads if ld.state_position is not None]
            assert (o.hit_tokens, states[0] if states else None) == (hit, state), (name, side)


def _divisible(layout: ChunkLayout) -> bool:
    m = layout.mamba_align_size
    return m is None or all(g.tokens_per_chunk % m == 0 for g in layout.groups)


def _check(s: Scenario) -> None:
    stock, fixed, rerun = evaluate(s, STOCK), evaluate(s, FIX), evaluate(s, RERUN)
    assert (stock.refused is None) == (fixed.refused is None) == (rerun.refused is None)
    if stock.refused:
        return
    broken = {v.invariant for v in stock.violations} - {"no-partial-state"}
    assert "no-partial-state" not in {v.invariant for v in fixed.violations}, fixed.violations
    assert {v.invariant for v in rerun.violations} <= broken, rerun.violations
    assert isinstance(stock.layout, ChunkLayout)
    if _divisible(stock.layout):  # neither fix changes anything there
        for o in (fixed, rerun):
            assert (o.hit_tokens, o.loads) == (stock.hit_tokens, stock.loads)


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(scenarios(STOCK))
def test_fix_keeps_no_partial_state_on_generated_033_scenarios(s: Scenario) -> None:
    _check(s)


@pytest.mark.slow
@settings(max_examples=5000, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(scenarios(STOCK))
def test_fix_keeps_no_partial_state_on_many_generated_033_scenarios(s: Scenario) -> None:
    _check(s)


def test_crosscheck_semantics_option_refuses_bad_input(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    from sim.crosscheck.cli import main
    from sim.crosscheck.mapping import fix_for

    assert fix_for("0.33.0", STOCK) is None
    assert (fix_for("0.33.0", FIX), fix_for("0.33.0", RERUN)) == ("001", "001b")
    for argv in (["--vllm", "0.24.0", "--semantics", FIX],
                 ["--vllm", "0.33.0", "--semantics", alt_round_num_hit.SEMANTICS.name],
                 ["--vllm", "0.24.0,0.33.0", "--semantics", FIX]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "error: --semantics:" in err[0], err
