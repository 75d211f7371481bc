"""Fast tests of the cross-check's pure parts (no vLLM environment needed)."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings

from model.scenario import parse_scenario, scenario_to_json
from releases import vllm_0_23_0, vllm_0_24_0
from sim.crosscheck import envs
from sim.crosscheck.compare import ModelView, compare, model_view
from sim.crosscheck.gen import scenario_dicts
from sim.crosscheck.mapping import to_case

V023 = vllm_0_23_0.SEMANTICS.name
V024 = vllm_0_24_0.SEMANTICS.name

SEED = {
    "semantics": V024, "block_size_factor": 1, "prompt_tokens": 32,
    "num_computed_tokens": 0,
    "groups": [{"kind": "mamba", "gpu_block_size": 16, "mamba_cache_mode": "align",
                "stored": "all"}],
}


def test_case_maps_groups_store_and_flags() -> None:
    raw = {
        "semantics": V024, "block_size_factor": 2, "prompt_tokens": 100,
        "num_computed_tokens": 32, "in_flight_transfers": True,
        "skip_reading_prefix_cache": True, "enable_prefix_caching": False,
        "groups": [
            {"kind": "sliding_window", "gpu_block_size": 16, "sliding_window": 48,
             "eagle": True, "stored": [2, 1], "deferred": [3], "being_loaded": [1]},
            {"kind": "mamba", "gpu_block_size": 16, "mamba_cache_mode": "align",
             "stored": "all"},
        ],
    }
    case = to_case(parse_scenario(raw))
    assert case["extra_config"] == {"block_size": 32}
    assert case["groups"][0] == {"kind": "sliding_window", "block_size": 16,
                                 "sliding_window": 48, "mamba_cache_mode": None,
                                 "eagle": True}
    assert case["groups"][1]["mamba_cache_mode"] == "align"
    none: dict[str, list[int]] = {"pending": [], "stored_tails": [], "pending_tails": [],
                                  "deferred_tails": []}  # the 0.33.0 answers, unset here
    assert case["store"] == [{"stored": [1, 2], "deferred": [3], **none},
                             {"stored": None, "deferred": [], **none}]
    assert case["being_loaded"] == [[0, 1]]
    assert case["in_flight_transfers"] and case["skip_reading_prefix_cache"]
    assert case["enable_prefix_caching"] is False
    assert case["prompt_tokens"] == 100 and case["num_computed_tokens"] == 32
    json.dumps(case)  # the harness protocol is JSON


def test_factor_one_passes_no_offloaded_block_size() -> None:
    assert to_case(parse_scenario(SEED))["extra_config"] == {}


@settings(max_examples=200, deadline=None)
@given(scenario_dicts())
def test_generated_scenarios_parse_round_trip_and_map(raw: dict) -> None:
    s = parse_scenario(raw)
    assert parse_scenario(scenario_to_json(s)) == s
    case = to_case(s)
    assert len(case["groups"]) == len(case["store"]) == len(s.groups)
    json.dumps(case)


def _real(**kw: object) -> dict:
    base = {"refused": None, "hit": 16, "lookups": [[0, 0]], "keys_ok": True,
            "loads": [[0, [0]]], "unknown_load_keys": 0, "copies": [[[0, 0, 0]]]}
    base.update(kw)
    return base


def test_compare_seed_model_against_recorded_real_results() -> None:
    s = parse_scenario(SEED)
    assert compare(model_view(s, V024), _real()).agree
    # the real 0.23.0 scheduler hits 31 tokens and loads block 1 on the seed
    real23 = _real(hit=31, lookups=[[0, 1]], loads=[[0, [1]]], copies=[[[1, 0, 1]]])
    assert compare(model_view(s, V023), real23).agree
    v = compare(model_view(s, V024), real23)
    assert not v.agree and any(d.startswith("hit:") for d in v.diffs)


def test_compare_refusals_and_harness_problems() -> None:
    mv = ModelView("refused by base.py:507", None, (), None, None)
    assert compare(mv, {"refused": "AssertionError at vllm/...: x", "keys_ok": True}).agree
    assert not compare(mv, _real()).agree
    ok = ModelView(None, 16, ((0, 0),), {0: (0,)}, None, {0: ((0, 0, 0),)})
    v = compare(ok, _real(keys_ok=False))
    assert not v.agree and v.harness_problem
    assert not compare(ok, _real(lookups=[[0, 1]])).agree
    assert compare(ok, _real(lookups=[[0, 1]]), check_lookups=False).agree
    assert not compare(ok, _real(loads=[[0, [1]]])).agree
    assert not compare(ok, _real(load_error="AssertionError")).agree
    # the same offloaded keys, but the worker fills another GPU block or sub-block
    v = compare(ok, _real(copies=[[[0, 1, 1]]]))
    assert not v.agree and v.diffs[0].startswith("worker copies")
    assert not compare(ok, _real(copies=None)).agree


def test_model_copies_follow_the_sub_block_skip() -> None:
    """Factor 2, GPU hit of one GPU block: the worker skips sub-block 0 of offloaded
    block 0 (block index 1 % 2, gpu_worker.py:321) and fills GPU blocks 1, 2, 3."""
    raw = dict(SEED, block_size_factor=2, prompt_tokens=80, num_computed_tokens=16,
               groups=[{"kind": "full_attention", "gpu_block_size": 16, "stored": "all"}])
    mv = model_view(parse_scenario(raw), V024)
    assert mv.hit == 48 and mv.copies == {0: ((0, 1, 1), (1, 0, 2), (1, 1, 3))}


def test_compare_checks_the_gpu_side_of_a_0_33_0_load() -> None:
    mv = ModelView(None, 16, ((0, 16),), {0: (16,)}, None, gpu=((1,), (0,)))
    real = _real(lookups=[[0, 16]], loads=[[0, [16]]])
    assert compare(mv, dict(real, gpu=[[1], [0]])).agree
    assert not compare(mv, dict(real, gpu=[[1], [1]])).agree


def test_env_recipe_names_pinned_requirements() -> None:
    for v in envs.VERSIONS:
        text = envs.requirements_file(v).read_text()
        assert "-r common.txt" in text
        assert envs.stamp_text(v).startswith(f"vllm=={v} torch==2.13.0")
    common = (envs.REQUIREMENTS / "common.txt").read_text().splitlines()
    pins = [ln for ln in common if ln and not ln.startswith("#")]
    assert pins and all("==" in ln for ln in pins)
    assert not any(ln.startswith(("torch", "vllm")) for ln in pins)
    assert "gguf" in envs.requirements_file("0.23.0").read_text()


def test_shrink_keeps_the_kind_of_disagreement() -> None:
    from sim.crosscheck.shrink import shrink, signature

    big = {
        "semantics": V023, "block_size_factor": 2, "prompt_tokens": 200,
        "num_computed_tokens": 0, "in_flight_transfers": True,
        "groups": [
            {"kind": "sliding_window", "gpu_block_size": 16, "sliding_window": 40,
             "stored": [0, 1, 3], "deferred": [2]},
            {"kind": "mamba", "gpu_block_size": 16, "mamba_cache_mode": "align",
             "stored": "all"},
        ],
    }

    def check(raw: dict) -> str | None:  # "disagrees" while the flag is set and 2+ blocks
        return "x" if raw.get("in_flight_transfers") and raw["prompt_tokens"] >= 2 else None

    small = shrink(big, check)
    assert small["in_flight_transfers"] and small["prompt_tokens"] == 2
    assert len(small["groups"]) == 1 and small["block_size_factor"] == 1
    assert signature(["load assertion: model None vs real 'AssertionError at "
                      "vllm/distributed/x.py:658: '", "hit: model 1 vs real 2"]) == (
        "hit + load assertion@vllm/distributed/x.py:658")


def test_env_build_refused_before_it_starts_when_the_disk_is_short(tmp_path, monkeypatch,
                                                                   capsys) -> None:
    # the last CI run filled its disk half way through a full environment (pip: "No space
    # left on device", then a traceback); a short disk is now one line and exit 2, and the
    # folder it would have filled is not made
    monkeypatch.setenv("CROSSCHECK_VENVS", str(tmp_path / "venvs"))
    monkeypatch.setattr(envs, "FULL_ENV_NEED_GB", envs.free_gb(tmp_path) + 1000.0)
    assert envs.main(["--vllm", envs.VERSIONS[-1]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "GB free, a full environment needs" in err[0]
    assert "CROSSCHECK_VENVS=" in err[0]
    assert not (tmp_path / "venvs").exists()


def test_both_sides_time_a_lookup_alike() -> None:
    """The model and the real harness time a scenario's lookup the same way: one untimed
    warm-up, then the best of the same number of timed calls (compare.TIMED_CALLS, the
    harness's TIMED_CALLS: the harness runs in a vLLM env and cannot import ours)."""
    import re

    from sim.crosscheck import compare

    core = (Path(__file__).resolve().parent.parent / "sim" / "crosscheck" / "adapters"
            / "harness_core.py").read_text()
    found = re.search(r"^TIMED_CALLS = (\d+)$", core, re.M)
    assert found is not None and int(found.group(1)) == compare.TIMED_CALLS >= 2
