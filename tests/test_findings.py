"""The findings' reproductions on the real vLLM 0.33.0 scheduler, in its own environment.

Marked ``crosscheck``: run by ``.ci/run`` after ``python -m sim.crosscheck.envs --vllm
0.33.0`` made (or reused) the environment.  The reproductions of findings 001 and 003 are
files for vLLM's ``tests/v1/kv_connector/unit/offloading_connector/``
(``docs/findings/vllm_tests/``), written on vLLM 0.33.0's own test helpers; they run under
pytest in that tree (``sim.crosscheck.vllm_tests``: the helpers come from the release's
source distribution), on the release as shipped (they fail: the bug) and with the
proposed fix applied in process (they pass).  Findings 002 and 004 pin intended
behaviour: their files pass on the release.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from model.evaluate import evaluate
from model.scenario import load_scenario_file, parse_scenario
from releases import fix_003_cap_min
from sim.crosscheck import forkserver
from sim.crosscheck.client import harness_env
from sim.crosscheck.envs import env_python
from sim.crosscheck.vllm_tests import run_vllm_tests, run_vllm_tests_by_file

CAP_MIN = fix_003_cap_min.SEMANTICS.name

# on the xdist worker of the newest release's files (its fork servers: --dist loadgroup)
pytestmark = [pytest.mark.crosscheck, pytest.mark.xdist_group("newest")]

ROOT = Path(__file__).resolve().parents[1]
VLLM_TESTS = ROOT / "docs" / "findings" / "vllm_tests"
REPRO = VLLM_TESTS / "test_offloading_mamba_state_at_hit_end.py"


@functools.cache
def _stock() -> dict[str, dict[str, str]]:
    # every vLLM-ready test file on the unpatched 0.33.0, in one pytest process (vLLM's
    # import is most of a run's time); each test below reads its own file's outcomes
    return run_vllm_tests_by_file(sorted(VLLM_TESTS.glob("test_*.py")))


def stock(test_file: Path) -> dict[str, str]:
    """``test_file``'s outcomes on the unpatched vLLM 0.33.0."""
    return _stock()[test_file.stem]


def test_finding_001_reproductions_show_the_bug_on_real_033_scheduler() -> None:
    # the OffloadingConnectorScheduler (vLLM's MockOffloadingSpec) on the layout 0.33.0
    # builds for a Mamba2 hybrid with sliding-window attention on FlashInfer (Mamba 48,
    # window block 32), the window chunk ending at 192 missing; the forced full-attention
    # shape (attention 16, Mamba 32), attention chunk 3 missing; the engine-core Scheduler
    # with the real CPU tier, whose LRU evicts A's window chunk ending at 192 before the
    # Mamba chunk ending there (the test asserts the tier's contents on the way)
    outcomes = stock(REPRO)
    sliding, full, engine = (outcomes[name] for name in (
        "test_sliding_window_block_below_mamba_block",
        "test_full_attention_block_below_mamba_block",
        "test_engine_core_lru_tier_sliding_window_block_below_mamba_block"))
    wrong = "-token hit restores the Mamba state saved at token "
    assert sliding.startswith("fail: ") and f"a 160{wrong}192" in sliding
    assert full.startswith("fail: ") and f"a 48{wrong}64" in full
    assert engine.startswith("fail: ") and f"a 160{wrong}192" in engine


def test_finding_001_completed_fix_passes_the_reproductions_on_real_033() -> None:
    # docs/findings/001-fix-rerun.diff applied in process to the real 0.33.0 method
    outcomes = run_vllm_tests([REPRO], fix="001b")
    assert len(outcomes) == 3 and set(outcomes.values()) == {"pass"}, outcomes


SEARCH = ROOT / "sim" / "crosscheck" / "adapters" / "state_search_chunked.py"


def search_newest(family: str, cases: int, seed: int) -> dict[str, Any]:
    python = env_python("0.33.0")
    assert python.exists(), "no vLLM 0.33.0 env: python -m sim.crosscheck.envs --vllm 0.33.0"
    proc = forkserver.run([str(python), str(SEARCH), "--family", family, "--cases",
                           str(cases), "--seed", str(seed)], env=harness_env(), timeout=600,
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
    # docs/findings/001-fix.diff applied to the real 0.33.0 method in the 0.33.0 env:
    # the random searches find no wrong state; the reproductions pass
    python = env_python("0.33.0")
    assert python.exists(), "no vLLM 0.33.0 env: python -m sim.crosscheck.envs --vllm 0.33.0"
    proc = forkserver.run([str(python), str(FIX), "--check", "--cases", "300"],
                          env=harness_env(), timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout)
    for name in ("search_forced", "search_reachable"):
        assert result[name]["violations"] == 0 and result[name]["hits"] > 50, result[name]
    # the same cases on the unfixed method: the forced family breaks, and where every
    # chunk is a multiple of the Mamba chunk the fix loses no hit token
    assert result["unfixed_search_forced"]["violations"] > 0
    assert (result["unfixed_search_reachable"]["hit_tokens"]
            == result["search_reachable"]["hit_tokens"])
    outcomes = run_vllm_tests([REPRO], fix="001")
    assert set(outcomes.values()) == {"pass"}, outcomes
    for name, fix in (("001-fix.diff", "001"), ("001-fix-rerun.diff", "001b")):
        assert (ROOT / "docs" / "findings" / name).read_text() == forkserver.run(
            [str(python), str(FIX), "--diff", "--fix", fix], env=harness_env(), timeout=300,
            cwd=ROOT).stdout


REPRO_002 = VLLM_TESTS / "test_offloading_hit_inside_chunk.py"
SCENARIOS_002 = ROOT / "tests" / "scenarios" / "finding-002"


def test_finding_002_hit_inside_a_chunk_loses_nothing_on_real_033_engine_core() -> None:
    # docs/findings/002: the whole-blocks counterexample on 0.33.0 (hit shorter than the
    # full-attention chunk) through the real engine-core Scheduler and connector: the
    # load writes the GPU blocks up to cdiv(hit, block), copied from the chunk holding
    # the hit's end, and the engine computes from the hit on (the tokens past the hit are
    # recomputed); the Mamba state is the one at the hit's end
    # (the vLLM-ready file pins these values itself; both cases pass on 0.33.0)
    assert stock(REPRO_002) == {
        "test_engine_core_hit_inside_full_attention_chunk[bpc1]": "pass",
        "test_engine_core_hit_inside_full_attention_chunk[bpc2]": "pass"}
    # what the file pins: hit, GPU blocks [first, stop) per group, the state's position
    pinned = {"hit-inside-full-attention-chunk.json": (1, {"attn": [0, 1], "mamba": [0, 1]}),
              "hit-inside-full-attention-chunk-bpc2.json": (2, {"attn": [0, 1],
                                                                "mamba": [1, 2]})}
    # the model names the same hit, keys, GPU blocks and state, and still flags the
    # shape as a whole-blocks counterexample (the invariant is stricter than correctness)
    for name, (hit, gpu_blocks) in pinned.items():
        o = evaluate(load_scenario_file(SCENARIOS_002 / name))
        assert o.hit_tokens == hit
        attn, mamba = o.loads
        for load, label in ((attn, "attn"), (mamba, "mamba")):
            assert load.gpu_block_index is not None
            assert [load.gpu_block_index, load.gpu_block_index + load.gpu_blocks] == \
                gpu_blocks[label]
        assert mamba.state_position == hit
        # keys by the token each ends at: the attention chunk holding the hit's end
        assert [len(attn.blocks), len(mamba.blocks)] == [1, 1]
        assert [v.invariant for v in o.violations] == ["whole-blocks"]


REPRO_003 = VLLM_TESTS / "test_offloading_load_cap_loses_a_chunk.py"
SCENARIO_003 = (ROOT / "tests" / "scenarios" / "vllm-0.33.0-maximality"
                / "mamba-load-cap-loses-a-chunk.json")


CAP_TESTS = ("test_mamba_load_cap_keeps_the_chunk[None]",
             "test_mamba_load_cap_keeps_the_chunk[33]",
             "test_mamba_load_cap_keeps_the_chunk[32]",
             "test_sliding_window_load_cap_keeps_the_chunk[True]",
             "test_sliding_window_load_cap_keeps_the_chunk[False]")


def test_finding_003_load_cap_loses_a_chunk_on_real_033_scheduler() -> None:
    # docs/findings/003: a 33-token prompt, every chunk stored, max_load_tokens 32: hit 16
    # where 32 keeps every rule, on one Mamba group (align, block 16; vLLM's
    # MockOffloadingSpec) and on full attention + a sliding window (vLLM's RequestRunner,
    # sync and async scheduling); no cap or a cap of 33 gets 32
    outcomes = stock(REPRO_003)
    assert sorted(outcomes) == sorted(CAP_TESTS)
    for name, outcome in outcomes.items():
        if name.endswith(("[None]", "[33]")):
            assert outcome == "pass", (name, outcome)
        else:
            assert outcome.startswith("fail: ") and "max_load_tokens=32: hit 16" in outcome
    # the model gives the same lossy hit and names 32 as a valid hit (maximality)
    o = evaluate(load_scenario_file(SCENARIO_003))
    assert o.hit_tokens == 16
    assert [v.invariant for v in o.violations] == ["maximality"]


def test_finding_003_fix_keeps_the_chunk_on_real_033_scheduler() -> None:
    # docs/findings/003-fix.diff (the last-prompt-token rule as a minimum with
    # num_tokens - 1) applied to the real 0.33.0 method: every test passes; the model's
    # alt-v033-cap-min gives the fixed hit and keeps maximality
    outcomes = run_vllm_tests([REPRO_003], fix="003")
    assert outcomes == dict.fromkeys(CAP_TESTS, "pass"), outcomes
    o = evaluate(load_scenario_file(SCENARIO_003), CAP_MIN)
    assert (o.hit_tokens, o.violations) == (32, ())
    python = env_python("0.33.0")
    assert (ROOT / "docs" / "findings" / "003-fix.diff").read_text() == forkserver.run(
        [str(python), str(FIX), "--diff", "--fix", "003"], env=harness_env(), timeout=300,
        cwd=ROOT).stdout


REPRO_004 = VLLM_TESTS / "test_offloading_eagle_gives_a_chunk_back.py"
SCENARIO_004 = (ROOT / "tests" / "scenarios" / "vllm-0.33.0-maximality"
                / "jamba-flash-attn-eagle-pops-a-stored-chunk.json")


EAGLE_TESTS = {"test_eagle_group_gives_the_trailing_chunk_back[161-True-80]": "pass",
               "test_eagle_group_gives_the_trailing_chunk_back[161-False-160]": "pass",
               "test_eagle_group_gives_the_trailing_chunk_back[240-True-160]": "pass"}


def test_finding_004_eagle_gives_a_chunk_back_on_real_033_scheduler() -> None:
    # docs/findings/004: jamba / FLASH_ATTN / EAGLE (Mamba align 80 x4, full 80 EAGLE),
    # every chunk stored: a 161-token prompt gets 80 on the real OffloadingConnector-
    # Scheduler (the EAGLE group pops [80, 160)); without the EAGLE flag, or with a third
    # chunk stored (prompt 240), 160.  The vLLM-ready file documents intended behaviour:
    # its three cases (hits in their ids) pass on 0.33.0
    assert stock(REPRO_004) == EAGLE_TESTS
    result = {"eagle/161": 80, "plain/161": 160, "eagle/240": 160}
    # the model gives the same hits and names 160 as a valid hit (maximality) only
    # for the EAGLE pop at the prompt's end
    raw = json.loads(SCENARIO_004.read_text())
    o = evaluate(load_scenario_file(SCENARIO_004))
    assert (o.hit_tokens, [v.invariant for v in o.violations]) == (result["eagle/161"],
                                                                    ["maximality"])
    plain = {**raw, "groups": [{k: v for k, v in g.items() if k != "eagle"}
                               for g in raw["groups"]]}
    for label, variant in (("plain/161", plain), ("eagle/240", {**raw, "prompt_tokens": 240})):
        variant = {k: v for k, v in variant.items() if k not in ("expect", "valid_hit")}
        o = evaluate(parse_scenario(variant))
        assert (o.hit_tokens, o.violations) == (result[label], ()), label
