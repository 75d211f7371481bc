"""The findings' reproductions on the real vLLM 0.33.0 scheduler, in its own environment.

Marked ``crosscheck``: run by ``.ci/run`` after ``python -m sim.crosscheck.envs --vllm
0.33.0`` made (or reused) the environment.  Each reproduction is a file written for vLLM's
``tests/v1/kv_connector/unit/`` (``docs/findings/vllm_tests/``); run as a script it prints
what the real scheduler did as JSON, and this test asserts that it still shows the bug.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sim.crosscheck.envs import env_python

pytestmark = pytest.mark.crosscheck

ROOT = Path(__file__).resolve().parents[1]
REPRO = ROOT / "docs" / "findings" / "vllm_tests" / "test_offloading_mamba_state_at_hit_end.py"


def run_in_033(script: Path) -> dict[str, Any]:
    python = env_python("0.33.0")
    assert python.exists(), "no vLLM 0.33.0 env: python -m sim.crosscheck.envs --vllm 0.33.0"
    proc = subprocess.run([str(python), str(script)], capture_output=True,
                          text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def wrong_states(result: dict[str, Any]) -> list[tuple[int, int]]:
    """(hit end, token the restored Mamba state was saved at) for every wrong load."""
    return [(load["serves"][1], load["state_at"]) for load in result["mamba_loads"]
            if load["state_at"] != load["serves"][1]]


def test_finding_001_mamba_state_past_hit_end_on_real_033_scheduler() -> None:
    result = run_in_033(REPRO)
    connector, engine = result["connector"], result["engine_core"]
    # the OffloadingConnectorScheduler with a store missing attention chunk 3
    assert connector["hit"] == 48
    assert wrong_states(connector) == [(48, 64)]
    # the engine-core Scheduler with the real CPU tier: its LRU evicts A's tail,
    # attention before Mamba at equal positions, while A is still running
    assert engine["tier_after_A"] == [
        "attn0@16", "attn1@32", "attn2@48", "attn3@64", "attn4@80", "attn5@96",
        "mamba1@64", "mamba2@96"]
    assert engine["tier_after_B_holds_of_A"] == ["attn0@16", "attn1@32", "attn2@48",
                                                  "mamba1@64"]
    assert engine["hit"] == 48
    assert wrong_states(engine) == [(48, 64)]
