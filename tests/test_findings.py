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

from model.evaluate import evaluate
from model.scenario import load_scenario_file, parse_scenario
from sim.crosscheck.envs import env_python

pytestmark = pytest.mark.crosscheck

ROOT = Path(__file__).resolve().parents[1]
REPRO = ROOT / "docs" / "findings" / "vllm_tests" / "test_offloading_mamba_state_at_hit_end.py"


def run_in_newest(script: Path) -> dict[str, Any]:
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


def test_finding_001_reproductions_show_the_bug_on_real_033_scheduler() -> None:
    result = run_in_newest(REPRO)
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
    # the sliding-window route (the layout vLLM makes for a Mamba2 hybrid with
    # sliding-window attention on FlashInfer: Mamba group first, block 48; window
    # group block 32): after A ends, one LRU eviction of A's window chunk ending at 192
    sliding = result["engine_core_sliding"]
    assert sliding["tier_after_A"] == ["attn0@32", "attn1@64", "attn2@96", "attn3@128",
                                       "attn4@160", "attn5@192", "mamba3@192"]
    assert sliding["tier_after_B_holds_of_A"] == sliding["tier_after_A"][:5] + ["mamba3@192"]
    assert sliding["hit"] == 160
    assert wrong_states(sliding) == [(160, 192)]


SEARCH = ROOT / "sim" / "crosscheck" / "adapters" / "state_search_chunked.py"


def search_newest(family: str, cases: int, seed: int) -> dict[str, Any]:
    python = env_python("0.33.0")
    assert python.exists(), "no vLLM 0.33.0 env: python -m sim.crosscheck.envs --vllm 0.33.0"
    proc = subprocess.run([str(python), str(SEARCH), "--family", family, "--cases", str(cases),
                           "--seed", str(seed)], capture_output=True, text=True, timeout=600,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_reachable_layouts_restore_the_state_at_the_hit_end_on_real_033() -> None:
    # scope: Mamba (align) block = cache_config.block_size, attention blocks 1x or 2x
    # that, optional SWA / EAGLE groups, blocks_per_chunk 1-3, prefix_match_unit (partial
    # tails), max_load_tokens, max_num_new_tokens, GPU prefix hits; random stores
    result = search_newest("reachable", 2000, 1)
    assert result["violations"] == 0, result["examples"]
    assert result["cases"] == 2000 and result["hits"] > 500 and result["partial_tail_hits"] > 0


def test_search_finds_the_forced_layout_violation_on_real_033() -> None:
    # the same checker finds finding 001 once the Mamba block is twice the attention block
    result = search_newest("forced", 400, 1)
    assert result["violations"] > 0
    assert all("no-partial-state" in ex for ex in result["examples"])


FIX = ROOT / "sim" / "crosscheck" / "adapters" / "fix_check_chunked.py"


def test_proposed_fix_restores_the_state_at_the_hit_end_on_real_033() -> None:
    # docs/findings/001-fix.diff applied to the real 0.33.0 method in the 0.33.0 env
    python = env_python("0.33.0")
    assert python.exists(), "no vLLM 0.33.0 env: python -m sim.crosscheck.envs --vllm 0.33.0"
    proc = subprocess.run([str(python), str(FIX), "--check", "--cases", "300"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout)
    for name in ("connector", "engine_core", "engine_core_sliding"):
        assert wrong_states(result[name]) == [], result[name]
    assert result["connector"]["hit"] == 32  # the Mamba chunk ending at 32 is stored
    for name in ("search_forced", "search_reachable"):
        assert result[name]["violations"] == 0 and result[name]["hits"] > 50, result[name]
    # the same cases on the unfixed method: the forced family breaks, and where every
    # chunk is a multiple of the Mamba chunk the fix loses no hit token
    assert result["unfixed_search_forced"]["violations"] > 0
    assert (result["unfixed_search_reachable"]["hit_tokens"]
            == result["search_reachable"]["hit_tokens"])
    for name, fix in (("001-fix.diff", "001"), ("001-fix-rerun.diff", "001b")):
        assert (ROOT / "docs" / "findings" / name).read_text() == subprocess.run(
            [str(python), str(FIX), "--diff", "--fix", fix], capture_output=True, text=True,
            timeout=300, cwd=ROOT).stdout


REPRO_002 = ROOT / "docs" / "findings" / "vllm_tests" / "test_offloading_hit_inside_chunk.py"
SCENARIOS_002 = ROOT / "tests" / "scenarios" / "finding-002"


def test_finding_002_hit_inside_a_chunk_loses_nothing_on_real_033_engine_core() -> None:
    # docs/findings/002: the whole-blocks counterexample on 0.33.0 (hit shorter than the
    # full-attention chunk) through the real engine-core Scheduler and connector: the
    # load writes the GPU blocks up to cdiv(hit, block), copied from the chunk holding
    # the hit's end, and the engine computes from the hit on (the tokens past the hit are
    # recomputed); the Mamba state is the one at the hit's end
    result = run_in_newest(REPRO_002)
    one, two = result["bpc1"], result["bpc2"]
    assert one["hit"] == 1
    assert one["loads"] == [{"keys": ["attn0", "mamba0"],
                             "gpu_blocks": {"attn": [0, 1], "mamba": [0, 1]}}]
    assert one["computed"] == [{"from": 1, "tokens": 1}, {"from": 2, "tokens": 1}]
    assert one["mamba_states"] == [{"serves": [0, 1], "state_at": 1, "key_ends_at": 1}]
    # two blocks per chunk: the attention chunk [0, 4) is named, one GPU block copied
    assert two["hit"] == 2
    assert two["loads"] == [{"keys": ["attn0", "mamba0"],
                             "gpu_blocks": {"attn": [0, 1], "mamba": [1, 2]}}]
    assert two["computed"] == [{"from": 2, "tokens": 4}, {"from": 6, "tokens": 1}]
    assert two["mamba_states"] == [{"serves": [0, 2], "state_at": 2, "key_ends_at": 2}]
    # the model names the same hit, keys, GPU blocks and state, and still flags the
    # shape as a whole-blocks counterexample (the invariant is stricter than correctness)
    for name, real in (("hit-inside-full-attention-chunk.json", one),
                       ("hit-inside-full-attention-chunk-bpc2.json", two)):
        o = evaluate(load_scenario_file(SCENARIOS_002 / name))
        assert o.hit_tokens == real["hit"]
        attn, mamba = o.loads
        for load, label in ((attn, "attn"), (mamba, "mamba")):
            assert load.gpu_block_index is not None
            assert [load.gpu_block_index, load.gpu_block_index + load.gpu_blocks] == \
                real["loads"][0]["gpu_blocks"][label]
        assert mamba.state_position == real["mamba_states"][0]["state_at"]
        # keys by the token each ends at: the attention chunk holding the hit's end
        assert [len(attn.blocks), len(mamba.blocks)] == [1, 1]
        assert [v.invariant for v in o.violations] == ["whole-blocks"]


REPRO_003 = ROOT / "docs" / "findings" / "vllm_tests" / "test_offloading_load_cap_loses_a_chunk.py"
SCENARIO_003 = (ROOT / "tests" / "scenarios" / "vllm-0.33.0-maximality"
                / "mamba-load-cap-loses-a-chunk.json")


def test_finding_003_load_cap_loses_a_chunk_on_real_033_scheduler() -> None:
    # docs/findings/003: Mamba align, block 16, prompt 33, every chunk stored; a
    # max_load_tokens cap of 32 (below the prompt end) gets a hit of 16 on the real
    # engine-core Scheduler + OffloadingConnector, no cap or a cap of 33 gets 32
    result = run_in_newest(REPRO_003)
    assert result == {"None": 32, "33": 32, "32": 16}
    # the model gives the same lossy hit and names 32 as a valid hit (maximality)
    o = evaluate(load_scenario_file(SCENARIO_003))
    assert o.hit_tokens == result["32"]
    assert [v.invariant for v in o.violations] == ["maximality"]


VLLM_TEST = ROOT / "sim" / "crosscheck" / "adapters" / "vllm_test_chunked.py"


def test_finding_003_fix_keeps_the_chunk_on_real_033_scheduler() -> None:
    # docs/findings/003-fix.diff (the last-prompt-token rule as a minimum with
    # num_tokens - 1) applied to the real 0.33.0 method: the finding's vLLM-ready test
    # fails on the release as shipped and passes with the fix; the model's
    # alt-v033-cap-min gives the fixed hit and keeps maximality
    python = env_python("0.33.0")
    assert python.exists(), "no vLLM 0.33.0 env: python -m sim.crosscheck.envs --vllm 0.33.0"
    outcomes = {}
    for fix in (None, "003"):
        proc = subprocess.run([str(python), str(VLLM_TEST), str(REPRO_003)]
                              + ([] if fix is None else ["--fix", fix]),
                              capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr[-4000:]
        outcomes[fix] = json.loads(proc.stdout)["tests"]
    cap = "test_load_cap_keeps_the_chunk"
    control = "test_without_a_cap_below_the_prompt_the_hit_is_32"
    assert outcomes[None][cap].startswith("fail: ") and "hit 16" in outcomes[None][cap]
    assert outcomes[None][control] == "pass"
    assert outcomes["003"] == {cap: "pass", control: "pass"}
    o = evaluate(load_scenario_file(SCENARIO_003), "alt-v033-cap-min")
    assert (o.hit_tokens, o.violations) == (32, ())
    assert (ROOT / "docs" / "findings" / "003-fix.diff").read_text() == subprocess.run(
        [str(python), str(FIX), "--diff", "--fix", "003"], capture_output=True, text=True,
        timeout=300, cwd=ROOT).stdout


REPRO_004 = (ROOT / "docs" / "findings" / "vllm_tests"
             / "test_offloading_eagle_gives_a_chunk_back.py")
SCENARIO_004 = (ROOT / "tests" / "scenarios" / "vllm-0.33.0-maximality"
                / "jamba-flash-attn-eagle-pops-a-stored-chunk.json")


def test_finding_004_eagle_gives_a_chunk_back_on_real_033_scheduler() -> None:
    # docs/findings/004: jamba / FLASH_ATTN / EAGLE (Mamba align 80 x4, full 80 EAGLE),
    # every chunk stored: a 161-token prompt gets 80 on the real engine-core Scheduler +
    # OffloadingConnector (the EAGLE group pops [80, 160)); without the EAGLE flag, or
    # with a third chunk stored (prompt 240), 160
    result = run_in_newest(REPRO_004)
    assert result == {"eagle/161": 80, "plain/161": 160, "eagle/240": 160}
    # the model gives the same hits and names 160 as a valid hit (maximality) only
    # for the EAGLE pop at the prompt's end
    raw = json.loads(SCENARIO_004.read_text())
    o = evaluate(load_scenario_file(SCENARIO_004))
    assert (o.hit_tokens, [v.invariant for v in o.violations]) == (80, ["maximality"])
    plain = {**raw, "groups": [{k: v for k, v in g.items() if k != "eagle"}
                               for g in raw["groups"]]}
    for label, variant in (("plain/161", plain), ("eagle/240", {**raw, "prompt_tokens": 240})):
        variant = {k: v for k, v in variant.items() if k not in ("expect", "valid_hit")}
        o = evaluate(parse_scenario(variant))
        assert (o.hit_tokens, o.violations) == (result[label], ()), label
    # the vLLM-ready file documents intended behaviour: both its tests pass on 0.33.0
    proc = subprocess.run([str(env_python("0.33.0")), str(VLLM_TEST), str(REPRO_004)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert json.loads(proc.stdout)["tests"] == {
        "test_eagle_group_gives_the_trailing_chunk_back": "pass",
        "test_without_eagle_or_with_the_next_chunk_stored_the_hit_is_160": "pass"}
