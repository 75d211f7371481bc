"""The reference model on the cases the mission names, bad input and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from model.evaluate import evaluate
from model.scenario import ScenarioError, parse_scenario, scenario_to_json
from releases import alt_cache_config_block_size, alt_round_num_hit, vllm_0_23_0, vllm_0_24_0

V023 = vllm_0_23_0.SEMANTICS.name
V024 = vllm_0_24_0.SEMANTICS.name
ROUND_NUM_HIT = alt_round_num_hit.SEMANTICS.name
CACHE_CONFIG = alt_cache_config_block_size.SEMANTICS.name

ROOT = Path(__file__).resolve().parent.parent


def mamba(prompt: int, semantics: str, mode: str = "align", **kw: Any) -> dict[str, Any]:
    return {"semantics": semantics, "block_size_factor": 1, "prompt_tokens": prompt,
            "num_computed_tokens": 0, **kw,
            "groups": [{"kind": "mamba", "gpu_block_size": 16, "mamba_cache_mode": mode,
                        "stored": "all"}]}


def violated(o: Any) -> set[str]:
    return {v.invariant for v in o.violations}


@pytest.mark.parametrize(("prompt", "semantics", "hit", "bad"), [
    (32, V023, 31, {"no-partial-state"}),
    (32, V024, 16, set()),
    (33, V023, 32, set()),
    (33, V024, 32, set()),
])
def test_seed_cases(prompt: int, semantics: str, hit: int, bad: set[str]) -> None:
    o = evaluate(parse_scenario(mamba(prompt, semantics)))
    assert o.hit_tokens == hit
    assert violated(o) == bad


def test_seed_load_brings_state_at_32() -> None:
    o = evaluate(parse_scenario(mamba(32, V023)))
    assert [(tuple(ld.blocks), ld.state_position) for ld in o.loads] == [((1,), 32)]


def test_mamba_all_mode_breaks_on_0_24_0() -> None:
    # vLLM issue #51094 (fixed upstream in 0.28.0): the fix only rounds for align mode
    o = evaluate(parse_scenario(mamba(32, V024, mode="all")))
    assert o.hit_tokens == 31
    assert "no-partial-state" in violated(o)


def test_sub_block_copy_restores_the_gpu_block_state() -> None:
    """block_size_factor 2, GPU hit 16, hit 32 (ends at 48, inside offloaded block 1):
    the worker copies only sub-block 0 of offloaded block 1 into GPU block 2
    (gpu_worker.py:321, block index from scheduler.py:749): the state saved at token 48
    if one was stored there, not the one at the end of the offloaded block (64). Only
    the last sub-block is surely stored, so the invariant still fails, saying why."""
    raw = mamba(64, ROUND_NUM_HIT, block_size_factor=2, num_computed_tokens=16)
    o = evaluate(parse_scenario(raw))
    assert o.hit_tokens == 32 and violated(o) == {"no-partial-state"}
    assert [(tuple(ld.blocks), ld.copies, ld.state_position, ld.state_in_last_sub_block)
            for ld in o.loads] == [((1,), ((1, 0, 2),), 48, False)]
    assert "restores sub-block 0 of offloaded block 1" in o.violations[0].message
    assert not violated(evaluate(parse_scenario(raw), V024))


def test_resumed_request_reads_num_tokens() -> None:
    """A resumed request's output tokens count: the lookup reads request.num_tokens."""
    new = evaluate(parse_scenario(mamba(32, V024)))
    resumed = evaluate(parse_scenario(mamba(32, V024, output_tokens=17)))
    assert new.hit_tokens == 16 and resumed.hit_tokens == 48


def test_context_parallel_scales_the_block_size() -> None:
    o = evaluate(parse_scenario(mamba(64, V024, context_parallel_size=2)))
    assert o.layout is not None and o.layout.groups[0].offloaded_block_size == 32
    assert o.hit_tokens == 32
    two = mamba(64, V024, context_parallel_size=2)
    two["groups"].append({"kind": "full_attention", "gpu_block_size": 16, "stored": "all"})
    assert "context_parallel_size" in (evaluate(parse_scenario(two)).refused or "")


def test_alt_cache_config_stale_block_size() -> None:
    # a stale mamba_block_size smaller than the GPU block: the hit ends inside a block
    raw = mamba(64, CACHE_CONFIG, block_size_factor=2, mamba_block_size=8)
    o = evaluate(parse_scenario(raw))
    assert o.hit_tokens == 56 and "no-partial-state" in violated(o)
    # a stale size of one GPU block with factor 2: the worker copies the sub-block whose
    # state would be the one at the hit's end (gpu_worker.py:321), not a surely stored one
    raw = mamba(64, CACHE_CONFIG, block_size_factor=2, mamba_block_size=16)
    o = evaluate(parse_scenario(raw))
    assert o.hit_tokens == 48 and o.loads[0].state_position == 48
    assert "restores sub-block 0" in o.violations[0].message


def test_deferred_and_being_loaded() -> None:
    raw = mamba(48, V024)
    raw["groups"][0]["deferred"] = [1]
    assert evaluate(parse_scenario(raw)).hit_tokens is None
    raw["groups"][0]["deferred"] = []
    raw["groups"][0]["being_loaded"] = [1]
    assert evaluate(parse_scenario(raw)).hit_tokens is None
    raw["enable_prefix_caching"] = False  # vLLM tracks loads only with prefix caching
    assert evaluate(parse_scenario(raw)).hit_tokens == 32


def test_skip_reading_and_in_flight_are_0_24_0_only() -> None:
    raw = mamba(48, V024, skip_reading_prefix_cache=True)
    assert evaluate(parse_scenario(raw)).hit_tokens == 0
    assert evaluate(parse_scenario(raw), V023).hit_tokens == 47
    raw = mamba(48, V024, in_flight_transfers=True)
    assert evaluate(parse_scenario(raw)).hit_tokens is None
    assert evaluate(parse_scenario(raw), V023).hit_tokens == 47


def test_eagle_sliding_window_pops_a_block() -> None:
    raw = {"semantics": V024, "block_size_factor": 1, "prompt_tokens": 64,
           "num_computed_tokens": 0,
           "groups": [{"kind": "full_attention", "gpu_block_size": 16, "stored": "all"},
                      {"kind": "sliding_window", "gpu_block_size": 16, "sliding_window": 16,
                       "eagle": True, "stored": "all"}]}
    assert evaluate(parse_scenario(raw)).hit_tokens == 48
    assert evaluate(parse_scenario(raw), V023).hit_tokens == 63


def test_convergence_reruns_sliding_windows() -> None:
    # two window groups whose acceptable ends interleave: the loop ping-pongs down
    raw = {"semantics": V024, "block_size_factor": 1, "prompt_tokens": 161,
           "num_computed_tokens": 0,
           "groups": [{"kind": "sliding_window", "gpu_block_size": 16, "sliding_window": 32,
                       "stored": [0, 1, 3, 4, 6, 7, 8, 9]},
                      {"kind": "sliding_window", "gpu_block_size": 16, "sliding_window": 32,
                       "stored": [2, 3, 5, 6, 8]}]}
    o = evaluate(parse_scenario(raw))
    assert o.lookup is not None and o.lookup.passes == 3
    assert [st.max_hit_after for st in o.lookup.steps] == [160, 112, 80, 64, 32, 32]
    assert o.hit_tokens == 0


@pytest.mark.parametrize(("patch", "field"), [
    ({"semantics": "vllm-9"}, "semantics"),
    ({"prompt_tokens": 0}, "prompt_tokens"),
    ({"prompt_tokens": "32"}, "prompt_tokens"),
    ({"groups": []}, "groups"),
    ({"colour": 1}, "colour"),
])
def test_bad_input_names_field(patch: dict[str, Any], field: str) -> None:
    raw = mamba(32, V024)
    raw.update(patch)
    with pytest.raises(ScenarioError, match=f"^{field}"):
        parse_scenario(raw)


def test_bad_group_fields() -> None:
    raw = mamba(32, V024)
    raw["groups"] = [{"kind": "sliding_window", "gpu_block_size": 16, "sliding_window": 0,
                      "stored": "all"}]
    with pytest.raises(ScenarioError, match=r"^groups\[0\]\.sliding_window"):
        parse_scenario(raw)
    raw["groups"] = [{"kind": "mamba", "gpu_block_size": 16, "mamba_cache_mode": "x",
                      "stored": "all"}]
    with pytest.raises(ScenarioError, match=r"^groups\[0\]\.mamba_cache_mode"):
        parse_scenario(raw)


def test_refused_layouts() -> None:
    raw = mamba(64, V024)
    raw["groups"].append({"kind": "mamba", "gpu_block_size": 32, "mamba_cache_mode": "align",
                          "stored": "all"})
    o = evaluate(parse_scenario(raw))
    # a Mamba group off the cache block size backs the hash size off to the lcm (32)
    assert o.refused and "base.py:493" in o.refused
    raw = mamba(64, V024, block_size_factor=2)
    raw["groups"].append({"kind": "full_attention", "gpu_block_size": 8, "stored": "all"})
    o = evaluate(parse_scenario(raw))
    assert o.refused and "base.py" in o.refused
    raw = mamba(64, V024, num_computed_tokens=8)
    assert evaluate(parse_scenario(raw)).refused
    assert evaluate(parse_scenario(raw), enforce=False).refused is None


def test_json_round_trip() -> None:
    raw = mamba(40, V024, in_flight_transfers=True, mamba_block_size=16)
    raw["groups"].append({"kind": "sliding_window", "gpu_block_size": 16, "sliding_window": 20,
                          "eagle": True, "stored": [0, 2], "deferred": [1],
                          "being_loaded": [2]})
    s = parse_scenario(raw)
    assert parse_scenario(json.loads(json.dumps(scenario_to_json(s)))) == s


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "model", *args], cwd=ROOT,
                          capture_output=True, text=True, check=False)


def test_cli_exit_codes_and_json(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps(mamba(33, V023)))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    seed = ROOT / "tests/scenarios/seed-boundary-32.json"
    assert run_cli("lookup", str(good)).returncode == 0
    r = run_cli("lookup", str(seed), "--json")
    assert r.returncode == 1
    line = json.loads(r.stdout)
    assert line["hit_tokens"] == 31 and line["violations"][0]["invariant"] == "no-partial-state"
    r = run_cli("lookup", str(good), str(bad), "--json")
    assert r.returncode == 2
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert lines[0]["hit_tokens"] == 32 and "error" in lines[1]
    assert "Traceback" not in r.stderr
    r = run_cli("lookup", str(seed), "--explain")
    assert "VIOLATION no-partial-state" in r.stdout and "state at token 32" in r.stdout


def test_cli_directory(tmp_path: Path) -> None:
    for n in (32, 33):
        (tmp_path / f"{n}.json").write_text(json.dumps(mamba(n, V024)))
    r = run_cli("lookup", str(tmp_path), "--json")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 2


def test_in_flight_load_trips_0_23_0_assertion() -> None:
    # the real 0.23.0 scheduler asserts no job is pending when it issues the load
    raw = mamba(48, V023, in_flight_transfers=True)
    o = evaluate(parse_scenario(raw))
    assert o.hit_tokens == 47 and o.assertion and "scheduler.py:658" in o.assertion


def _per_block_prefix(g: Any, blocks: range) -> tuple[int | None, list[int]]:
    # the loop of scheduler.py:388 a block at a time: the reference the runs must match
    seen, hits, defer = [], 0, False
    for b in blocks:
        seen.append(b)
        a = g.answer(b)
        if a is None:
            defer, a = True, True
        if not a:
            break
        hits += 1
    return (None if defer else hits), seen


def _per_block_window(g: Any, blocks: range, window: int) -> tuple[int | None, list[int]]:
    # scheduler.py:407 a block at a time, from the end
    seen, run, defer = [], 0, False
    for idx in range(len(blocks) - 1, -1, -1):
        seen.append(blocks[idx])
        a = g.answer(blocks[idx])
        if a is None:
            defer, a = True, False
        run = run + 1 if a else 0
        if run == window:
            return (None if defer else idx + window), seen
    return (None if defer else run), seen


def _per_block_prefix_0_25(g: Any, blocks: range) -> tuple[int | None, list[int]]:
    # 0.25.0's scheduler.py:390 a block at a time: HIT counts, HIT_PENDING counts and
    # defers (:401), RETRY defers without counting and the scan goes on (:404), MISS stops
    seen, hits, defer = [], 0, False
    for b in blocks:
        seen.append(b)
        if b in g.deferred:
            defer = True
        elif b in g.pending:
            defer, hits = True, hits + 1
        elif g.holds(b):
            hits += 1
        else:
            break
    return (None if defer else hits), seen


def _per_block_window_0_25(g: Any, blocks: range, window: int) -> tuple[int | None, list[int]]:
    # 0.25.0's scheduler.py:412 a block at a time, from the end, on LookupResult answers:
    # HIT and HIT_PENDING extend the run (HIT_PENDING defers), RETRY breaks it and defers
    seen, run, defer = [], 0, False
    for idx in range(len(blocks) - 1, -1, -1):
        b = blocks[idx]
        seen.append(b)
        if b in g.deferred:  # RETRY (:433)
            defer, run = True, 0
        elif b in g.pending:  # HIT_PENDING (:427)
            defer, run = True, run + 1
        else:
            run = run + 1 if g.holds(b) else 0
        if run == window:
            return (None if defer else idx + window), seen
    return (None if defer else run), seen


def test_run_scans_match_per_block_scans() -> None:
    """The scans work on runs of listed blocks; a block-at-a-time loop gives the same
    answers and lookup order (stored, deferred, "all", windows, empty ranges)."""
    import random

    from model.lookup import _Manager, _maximal_prefix_lookup, _sliding_window_lookup
    from model.scenario import Group

    rng = random.Random(7)
    for _ in range(3000):
        n = rng.randint(0, 14)
        listed = frozenset(rng.sample(range(16), rng.randint(0, 12)))
        stored = None if rng.random() < 0.3 else listed
        deferred = frozenset(rng.sample(range(16), rng.randint(0, 2)))
        pending = frozenset(rng.sample(range(16), rng.randint(0, 2)))
        g = Group("sliding_window", 4, stored, 8, deferred=deferred, pending=pending)
        lo = rng.randint(0, 3)
        blocks = range(lo, max(lo, n))
        mgr = _Manager((g,))
        want, seen = _per_block_prefix(g, blocks)
        # 0.25.0's LookupResult answers look up the same blocks and answer the same
        assert _per_block_prefix_0_25(g, blocks) == (want, seen)
        assert _maximal_prefix_lookup(mgr, 0, blocks) == want
        window = rng.randint(1, 5)
        pending_hits = rng.random() < 0.5  # 0.25.0 on, else 0.23.0/0.24.0
        per_block = _per_block_window_0_25 if pending_hits else _per_block_window
        want_w, seen_w = per_block(g, blocks, window)
        assert _sliding_window_lookup(mgr, 0, blocks, window, pending_hits) == want_w
        looked = [b for _, first, stop, step in mgr.segments for b in range(first, stop, step)]
        assert looked == seen + seen_w


def test_work_is_bounded_by_listed_blocks_not_prompt() -> None:
    import time

    from model.scenario import MAX_TOKENS

    raw = {"semantics": V024, "block_size_factor": 1, "prompt_tokens": MAX_TOKENS,
           "num_computed_tokens": 0,
           "groups": [{"kind": "full_attention", "gpu_block_size": 1, "stored": "all",
                       "deferred": [5]},
                      {"kind": "sliding_window", "gpu_block_size": 1, "sliding_window": 10**6,
                       "stored": [0, 1, 7, MAX_TOKENS - 2], "being_loaded": [3]},
                      {"kind": "mamba", "gpu_block_size": 1, "mamba_cache_mode": "align",
                       "stored": "all"}]}
    t0 = time.monotonic()
    for sem in (V023, V024):
        for patch in ({}, {"deferred": []}):
            raw["groups"][0].update(patch)
            o = evaluate(parse_scenario(raw), sem)
            assert o.refused is None
    raw["groups"][1]["stored"] = "all"
    o = evaluate(parse_scenario(raw))
    assert o.hit_tokens == MAX_TOKENS - 1 and len(o.loads[0].blocks) == MAX_TOKENS - 1
    assert time.monotonic() - t0 < 5.0
