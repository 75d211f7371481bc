"""vllm-0.33.0 in the model: seed cases, partial tails, answers, caps, start-up checks.

The expected numbers were checked against the real 0.33.0 scheduler (sim/crosscheck,
harness_chunked); the cross-check suite replays the scenario files named here.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from model.cli import main as model_main
from model.evaluate import evaluate
from model.invariants import no_partial_state
from model.layout_chunked import resolve_layout
from model.load_plan import GroupLoad, LoadPlan
from model.scenario import (
    ScenarioError,
    iter_scenario_paths,
    load_scenario_file,
    parse_scenario,
    scenario_to_json,
)
from releases import vllm_0_24_0, vllm_0_33_0

ROOT = Path(__file__).resolve().parents[1]
V = vllm_0_33_0.SEMANTICS.name


def _seed(prompt: int, **top: Any) -> dict[str, Any]:
    return {"semantics": V, "block_size_factor": 1, "prompt_tokens": prompt,
            "num_computed_tokens": 0, **top,
            "groups": [{"kind": "mamba", "gpu_block_size": 16, "mamba_cache_mode": "align",
                        "stored": "all"}]}


@pytest.mark.parametrize(("prompt", "hit"), [(32, 16), (33, 32), (31, 16), (49, 48)])
def test_seed_cases_give_0_33_0s_answers(prompt: int, hit: int) -> None:
    o = evaluate(parse_scenario(_seed(prompt)))
    assert o.refused is None and o.hit_tokens == hit and not o.violations
    assert [(ld.blocks, ld.state_position) for ld in o.loads] == [((hit,), hit)]


def test_every_scenario_file_answers_or_is_refused_naming_a_check() -> None:
    paths = iter_scenario_paths([ROOT / "tests" / "scenarios", ROOT / "docs" / "counterexamples"])
    assert paths
    for p in paths:
        # a maximality file's valid_hit is a claim about its own semantics (under another
        # release it may not be a valid hit at all), so it is left out here
        o = evaluate(replace(load_scenario_file(p), valid_hit=None), V)
        assert o.refused is None or o.refused.startswith("refused by vllm/"), (p, o.refused)


def test_partial_tail_hit_loads_the_state_at_the_boundary() -> None:
    s = load_scenario_file(ROOT / "tests/scenarios/vllm-0.33.0/partial-tail-hit.json")
    o = evaluate(s)
    assert o.hit_tokens == 36 and o.tail_boundary == 36 and not o.violations
    assert [(ld.blocks, ld.state_position) for ld in o.loads] == [
        ((16, 32, 36), None), ((36,), 36)]
    assert o.lookups == ((0, 16), (0, 32), (1, 32), (0, 36), (1, 36))


def test_pending_and_retry_tail_keys_defer_a_zero_hit() -> None:
    s = load_scenario_file(ROOT / "tests/scenarios/vllm-0.33.0/partial-tail-pending-retry.json")
    o = evaluate(s)
    assert o.hit_tokens is None and o.loads == ()


def test_pending_chunk_defers_and_retry_keeps_scanning() -> None:
    raw = _seed(49)
    raw["groups"] = [{"kind": "full_attention", "gpu_block_size": 16, "stored": "all",
                      "pending": [1]}]
    assert evaluate(parse_scenario(raw)).hit_tokens is None
    raw["groups"][0] = {"kind": "full_attention", "gpu_block_size": 16, "stored": [0],
                        "deferred": [1]}
    o = evaluate(parse_scenario(raw))
    # RETRY does not count as a hit but the scan goes on to the MISS after it
    assert o.hit_tokens is None and o.lookups == ((0, 16), (0, 32), (0, 48))


def test_load_cap_aligns_to_chunks_and_new_token_cap_does_not() -> None:
    assert evaluate(parse_scenario(_seed(49, max_load_tokens=40))).hit_tokens == 32
    raw = _seed(49, max_num_new_tokens=40)
    raw["groups"] = [{"kind": "full_attention", "gpu_block_size": 16, "stored": "all"}]
    # max_num_new_tokens is not rounded to chunks (scheduler.py:863, 917): a hit may end
    # inside a full-attention chunk, whose whole key is loaded
    o = evaluate(parse_scenario(raw))
    assert o.hit_tokens == 40 and o.loads[0].blocks == (16, 32, 48)
    assert evaluate(parse_scenario(dict(raw, max_num_new_tokens=8))).hit_tokens == 0


def test_blocks_per_chunk_gives_each_group_its_own_chunk_size() -> None:
    raw = _seed(100, blocks_per_chunk=2)
    raw["groups"] = [{"kind": "full_attention", "gpu_block_size": 16, "stored": "all"},
                     {"kind": "full_attention", "gpu_block_size": 32, "stored": "all"}]
    s = parse_scenario(raw)
    lay = resolve_layout(s)
    assert [g.tokens_per_chunk for g in lay.groups] == [32, 64]
    assert lay.tokens_per_hash == 16 and not lay.supports_partial_tail
    assert evaluate(s).hit_tokens == 64


@pytest.mark.parametrize(("change", "check"), [
    ({"groups": [{"kind": "mamba", "gpu_block_size": 16, "mamba_cache_mode": "all",
                  "stored": "all"}]}, "config/cache.py:176"),
    ({"groups": [{"kind": "mamba", "gpu_block_size": 16, "mamba_cache_mode": "none",
                  "stored": "all"}]}, "model_executor/models/config.py:764"),
    ({"enable_prefix_caching": False}, "model_executor/models/config.py:781"),
    ({"blocks_per_chunk": 2, "block_size_factor": 2}, "offloading/config.py:126"),
    ({"hash_block_size": 4}, "kv_cache_utils.py:853"),
    ({"block_size_factor": 2, "groups": [
        {"kind": "full_attention", "gpu_block_size": 16, "stored": "all"},
        {"kind": "full_attention", "gpu_block_size": 32, "stored": "all"}]},
     "offloading/config.py:142"),
])
def test_start_up_refusals_name_the_0_33_0_check(change: dict[str, Any], check: str) -> None:
    o = evaluate(parse_scenario(dict(_seed(32), **change)))
    assert o.refused is not None and check in o.refused


def test_older_releases_ignore_nothing_silently() -> None:
    older = vllm_0_24_0.SEMANTICS.name
    raw = dict(_seed(32, blocks_per_chunk=2), semantics=older)
    with pytest.raises(ScenarioError,
                       match=f"^blocks_per_chunk: not modelled for {re.escape(older)}"):
        evaluate(parse_scenario(raw))
    # a HIT_PENDING block is a not-ready (None) answer for the older manager
    raw = dict(_seed(33), semantics=older)
    raw["groups"] = [dict(raw["groups"][0], pending=[1])]
    assert evaluate(parse_scenario(raw)).hit_tokens is None


def test_new_fields_round_trip() -> None:
    raw = _seed(40, hash_block_size=4, max_load_tokens=30, max_num_new_tokens=20,
                blocks_per_chunk=1)
    raw["groups"][0].update(pending=[1], stored_tails=[36], pending_tails=[12],
                            deferred_tails=[8])
    s = parse_scenario(raw)
    assert parse_scenario(scenario_to_json(s)) == s


def test_bad_new_fields_are_one_line_errors(capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    p = tmp_path / "bad.json"
    p.write_text(f'{{"semantics": "{V}", "block_size_factor": 1, "prompt_tokens": 4, '
                 '"num_computed_tokens": 0, "blocks_per_chunk": 0, "groups": '
                 '[{"kind": "full_attention", "gpu_block_size": 2, "stored": "all"}]}')
    assert model_main(["lookup", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "blocks_per_chunk: must be >= 1" in err


def test_no_partial_state_names_the_partial_tail_key() -> None:
    s = load_scenario_file(ROOT / "tests/scenarios/vllm-0.33.0/partial-tail-hit.json")
    lay = resolve_layout(s)
    wrong = LoadPlan((GroupLoad(1, (36,), 32),), None, 36)
    (v,) = no_partial_state(s, lay, 36, wrong)
    assert "partial-tail key" in v.message and "token 32" in v.message


def test_mamba_chunk_not_at_hit_end_is_flagged() -> None:
    p = ROOT / "tests/scenarios/vllm-0.33.0-breaks/attention-chunk-not-multiple-of-mamba-chunk.json"
    o = evaluate(load_scenario_file(p))
    assert o.hit_tokens == 48
    assert [v.invariant for v in o.violations] == ["no-partial-state"]


def test_absurd_prompt_is_refused_in_one_line(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    p = tmp_path / "huge.json"
    p.write_text(f'{{"semantics": "{V}", "block_size_factor": 1, '
                 '"prompt_tokens": 1000000000000, "num_computed_tokens": 0, "groups": '
                 '[{"kind": "full_attention", "gpu_block_size": 16, "stored": "all"}]}')
    assert model_main(["lookup", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "prompt_tokens:" in err


def test_real_nemotron_h_swa_layout_with_one_evicted_window_chunk_breaks() -> None:
    # docs/layouts-vllm-0.33.0.md row nemotron-h-swa/FLASHINFER/none; real 0.33.0 agrees
    p = ROOT / ("tests/scenarios/vllm-0.33.0-breaks/"
                "nemotron-h-swa-flashinfer-evicted-window-chunk.json")
    o = evaluate(load_scenario_file(p))
    assert o.hit_tokens == 1920 and o.loads[0].blocks == (2080,)
    assert o.loads[0].state_position == 2080
    assert [v.invariant for v in o.violations] == ["no-partial-state"]


def test_fields_the_v033_model_does_not_read_are_bad_input() -> None:
    s = load_scenario_file(ROOT / "tests/scenarios/vllm-0.33.0/partial-tail-hit.json")
    for name, value in (("output_tokens", 3), ("context_parallel_size", 2)):
        with pytest.raises(ScenarioError, match=f"^{name}: not modelled for {re.escape(V)}"):
            evaluate(replace(s, **{name: value}))
