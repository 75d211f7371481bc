"""The simulator end to end: the chat trace under 0.23.0 and 0.24.0, attribution of
every corrupted output to a no-partial-state violation, reproducibility, rerun."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from releases import alt_cache_config_block_size, alt_round_num_hit, vllm_0_23_0, vllm_0_24_0
from sim.config import EngineConfig
from sim.engine import Engine
from sim.metrics import RequestResult
from sim.rerun import rerun_one
from sim.runner import RunSpec, run_side_by_side
from sim.ssm import VOCAB
from sim.workload import Request, TokenSeq, make_trace

V023 = vllm_0_23_0.SEMANTICS.name
V024 = vllm_0_24_0.SEMANTICS.name
ROUND_NUM_HIT = alt_round_num_hit.SEMANTICS.name
CACHE_CONFIG = alt_cache_config_block_size.SEMANTICS.name

N = 3000


@pytest.fixture(scope="module")
def chat_results() -> dict[str, tuple[Engine, list[RequestResult]]]:
    trace = make_trace("chat", N, 0)
    out = {}
    for name in (V023, V024):
        engine = Engine(EngineConfig(), name, keep_results=True, workload="chat")
        engine.run(trace)
        assert engine.results is not None
        out[name] = (engine, engine.results)
    return out


def test_chat_corrupts_under_0_23_and_not_under_0_24(
        chat_results: dict[str, tuple[Engine, list[RequestResult]]]) -> None:
    old, new = chat_results[V023][0], chat_results[V024][0]
    assert old.counters.requests == new.counters.requests == N
    assert old.counters.corrupted > 0
    assert old.counters.violations["no-partial-state"] > 0
    assert new.counters.corrupted == 0 and new.counters.wrong_state == 0
    assert all(v == 0 for v in new.counters.violations.values())
    assert old.counters.model_disagreements == new.counters.model_disagreements == 0
    # 0.24.0 answers the best correct hit every time: it gives no token away
    assert new.counters.given_away_tokens == 0 and new.counters.above_oracle == 0
    # 0.23.0 answers beyond it exactly on the lookups that break no-partial-state
    assert old.counters.above_oracle == old.counters.violations["no-partial-state"]
    assert old.counters.given_away_tokens == 0


def _check_attribution(results: list[RequestResult]) -> None:
    by_id = {r.rid: r for r in results}
    for r in results:
        if r.corrupted or r.wrong_state:
            # its own start state was wrong, or it inherited a wrong state that a request
            # whose own start state was wrong put in a cache
            assert r.poison is not None and r.cause is not None, r
            origin = by_id[r.poison]
            assert origin.cause == r.cause and not origin.inherited, (r, origin)
            assert r.inherited == (r.poison != r.rid), r
            if r.cause == "no-partial-state":
                assert "no-partial-state" in origin.violations and origin.cpu_hit > 0, origin
            else:
                assert r.cause == "local-hit-divergence" and origin.cpu_hit == 0, origin
        # and every no-partial-state violation produced a wrong state
        if "no-partial-state" in r.violations:
            assert r.wrong_state and r.poison == r.rid and r.cause == "no-partial-state", r


def test_every_corrupted_output_coincides_with_a_no_partial_state_violation(
        chat_results: dict[str, tuple[Engine, list[RequestResult]]]) -> None:
    for _engine, results in chat_results.values():
        _check_attribution(results)
        # the pure Mamba model has no other cause
        assert all(r.cause in (None, "no-partial-state") for r in results)


def test_clean_paths_really_match_cold() -> None:
    # verify_clean runs the recurrence on every request and raises if a path the
    # engine calls clean diverges from the cold computation
    trace = make_trace("chat", 600, 5)
    for name in (V023, V024):
        cfg = EngineConfig(verify_clean=True, gpu_blocks=128)
        s = Engine(cfg, name).run(trace)
        assert s.requests == 600


def test_runs_are_reproducible_and_independent_of_processes() -> None:
    spec = RunSpec("shared-prefix", 800, 3, (V023, V024), EngineConfig())
    a = run_side_by_side(spec, jobs=1, show_progress=False)
    b = run_side_by_side(spec, jobs=2, show_progress=False)
    strip = [replace(s, wall_s=0.0) for s in a]
    assert strip == [replace(s, wall_s=0.0) for s in b]
    assert a[0].corrupted > 0 and a[1].corrupted == 0


def test_hybrid_model_and_chunked_prefill() -> None:
    cfg = EngineConfig(attention_groups=1, max_num_batched_tokens=64, gpu_blocks=400,
                       verify_clean=True)
    trace = make_trace("shared-prefix", 600, 2)
    for name in (V023, V024, ROUND_NUM_HIT,
                 CACHE_CONFIG):
        engine = Engine(cfg, name, keep_results=True)
        s = engine.run(trace)
        assert engine.results is not None
        assert s.refused == 0 and s.model_disagreements == 0
        _check_attribution(engine.results)
        if name == V023:
            assert s.corrupted_divergence == 0 and s.dirty_attention == 0
        else:
            # 0.24.0's per-group local hit for hybrid models (vLLM #46453 family)
            assert s.corrupted_direct == 0 and s.violations["no-partial-state"] == 0


def test_wrong_state_poisons_the_gpu_cache_for_later_requests() -> None:
    # 0.23.0: prompt 32 cold, GPU cleared, prompt 32 again (31-token CPU hit, the state
    # saved at 32 loaded at 31, token 31 recomputed on it): the block at 32 is cached
    # with that wrong state, and a 40-token prompt extending it hits it on the GPU.
    rng = np.random.default_rng(0)
    seq = TokenSeq(rng.integers(0, VOCAB, size=40, dtype=np.uint8), 16)
    engine = Engine(EngineConfig(), V023, keep_results=True)
    engine.submit(Request(0, 0, seq, 32, 8))
    engine.drain()
    engine.clear_gpu()
    engine.submit(Request(1, 100, seq, 32, 8))
    engine.submit(Request(2, 200, seq, 40, 8))
    engine.drain()
    assert engine.results is not None
    r0, r1, r2 = engine.results
    assert (r1.cpu_hit, r1.corrupted, r1.poison) == (31, True, 1)
    assert r1.violations == ("no-partial-state",)
    assert (r2.gpu_hit, r2.cpu_hit, r2.violations) == (32, 0, ())
    assert r2.wrong_state and r2.poison == 1
    assert engine.counters.corrupted_inherited == int(r2.corrupted)
    # 0.24.0 on the same requests: no CPU hit for the boundary prompt, nothing wrong
    fixed = Engine(EngineConfig(), V024, keep_results=True)
    fixed.submit(Request(0, 0, seq, 32, 8))
    fixed.drain()
    fixed.clear_gpu()
    fixed.submit(Request(1, 100, seq, 32, 8))
    fixed.submit(Request(2, 200, seq, 40, 8))
    fixed.drain()
    assert fixed.results is not None
    assert [r.wrong_state for r in fixed.results] == [False] * 3
    assert fixed.results[1].cpu_hit == 0


def _expected_rerun(length: int, semantics: str) -> tuple[int, bool]:
    # what the cold run stores: the state at the last block boundary <= length only
    last = length - length % 16
    if length % 16 == 0:
        return (length - 1, True) if semantics == V023 else (0, False)
    return last, False


@pytest.mark.parametrize("semantics", [V023, V024])
def test_rerun_predictions(semantics: str) -> None:
    for length in range(17, 81):
        r = rerun_one(length, semantics, EngineConfig())
        assert (r.hit_tokens, r.corrupted) == _expected_rerun(length, semantics), length
        assert r.stored_blocks == (length // 16 - 1,)


def test_rerun_alternatives() -> None:
    # rounding num_hit_tokens instead loads block 0, which the cold run never stored
    r = rerun_one(32, ROUND_NUM_HIT, EngineConfig())
    assert (r.hit_tokens, r.missing_load, r.violations) == (16, True, ("loads-stored-only",))
    # a stale cache_config.mamba_block_size smaller than the block does not protect
    stale = EngineConfig(cache_mamba_block_size=8)
    r = rerun_one(32, CACHE_CONFIG, stale)
    assert r.hit_tokens == 24 and r.violations == ("no-partial-state",) and r.wrong_state
    assert rerun_one(32, CACHE_CONFIG, EngineConfig()).hit_tokens == 0


def test_rerun_keeping_the_gpu_cache_matches_the_control_runs() -> None:
    # the GPU check's control runs (second send served from the GPU prefix cache):
    # pure Mamba: GPU hit 16/0/32/0/0 at 18/32/33/48/80, nothing diverges; hybrid on
    # 0.24.0 with a connector: the local hit is the attention hit (16/16/32/32/64) and
    # the boundary lengths diverge (the per-group local hit, vLLM #46453 family)
    lengths = (18, 32, 33, 48, 64, 80)
    pure = [rerun_one(n, V024, EngineConfig(), keep_gpu_cache=True) for n in lengths]
    assert [r.gpu_hit for r in pure] == [16, 0, 32, 0, 0, 0]
    assert not any(r.corrupted for r in pure)
    hybrid = [rerun_one(n, V024, EngineConfig(attention_groups=1), keep_gpu_cache=True)
              for n in lengths]
    assert [r.gpu_hit for r in hybrid] == [16, 16, 32, 32, 48, 64]
    assert [r.corrupted for r in hybrid] == [False, True, False, True, True, True]
    assert {r.cause for r in hybrid if r.corrupted} == {"local-hit-divergence"}
    old = [rerun_one(n, V023, EngineConfig(attention_groups=1), keep_gpu_cache=True)
           for n in lengths]
    assert [r.gpu_hit for r in old] == [16, 0, 32, 0, 0, 0]
