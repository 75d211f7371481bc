"""Preemption and resume through the 0.33.0 CPU tier (``sim.tier_preempt``,
``TierSim.preempt`` / ``resume``, ``python -m sim run --preempt``): the plan is seeded, a
preempted request's stores are flushed and it looks the tier up again on resume (over
its prompt and the tokens it decoded), finding 001 reached on resume, and the flags."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import releases
from sim.cli import main
from sim.tier import TierConfig
from sim.tier_layouts import LAYOUTS
from sim.tier_preempt import DECODE, PREFILL, Preemption, plan, resume_index, with_output
from sim.tier_sim import TierSim, TierSimConfig
from sim.workload import Request, TokenSeq, make_trace

RELEASE = releases.reference("chunked").name
FIX = next(n for n in releases.fixes(finding="001") if releases.get(n).reround_rerun)
BLOCK = releases.names(family="block")[0]
TINY = LAYOUTS["nemotronh-swa-tiny-flashinfer"]


def _tokens(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, size=n, dtype=np.uint8)


def _sim(chunks: int, semantics: str = RELEASE, step: int = 2048,
         policy: str = "lru") -> TierSim:
    return TierSim(TierSimConfig(TINY, TierConfig(chunks, policy), step), semantics)


def test_plan_is_seeded_and_a_higher_rate_preempts_a_superset() -> None:
    trace = make_trace("chat", 400, 5, TINY.hash_block)
    low, high = plan(trace, 0.2, 5), plan(trace, 0.5, 5)
    assert low == plan(trace, 0.2, 5) and low != plan(trace, 0.2, 6)
    assert set(low) < set(high) and all(high[r] == p for r, p in low.items())
    assert 0.1 < len(low) / len(trace) < 0.3
    assert {p.phase for p in high.values()} == {PREFILL, DECODE}
    assert all(1 <= p.resume_after <= 8 and 1 <= p.decoded < max(2, trace[r].reply_len)
               for r, p in high.items())
    with pytest.raises(ValueError, match="rate"):
        plan(trace, 1.5, 0)


def test_mid_prefill_preemption_resumes_through_the_tier() -> None:
    # 300 tokens in steps of 96: preempted after the first step, its window chunks ending
    # at 32, 64, 96 stored (flushed); no Mamba state there, so the resumed lookup misses,
    # the request recomputes and stores the rest as if never preempted
    a = _tokens(3, 300)
    sim = _sim(64, step=96)
    live = sim.preempt(Request(0, 0, TokenSeq(a, 16), 300, 20), Preemption(PREFILL, 1, 5, 1))
    assert live.preempted == PREFILL
    assert sorted(live.ctx.position(k) or 0 for k in sim.tier.held()) == [32, 64, 96]
    assert all(c.ref_cnt == 0 for c in sim.tier.held().values())  # stores completed
    r = sim.resume(live)
    assert (r.preempted, r.hit_tokens, r.resume_hit, r.differs) == (PREFILL, 0, 0, False)
    plain = _sim(64, step=96)
    plain.run_request(Request(0, 0, TokenSeq(a, 16), 300, 20))
    assert set(plain.tier.held()) == set(sim.tier.held())
    again = sim.run_request(Request(1, 1, TokenSeq(a, 16), 300, 20))
    assert (again.hit_tokens, again.state_from, again.wrong_state) == (288, 288, False)


@pytest.mark.parametrize("decoded", [5, 100])
def test_mid_decode_resume_looks_up_prompt_and_output(decoded: int) -> None:
    # 200 tokens: window chunks to 192 and the Mamba state at 192 stored before the
    # preemption; resumed with 205 or 300 tokens the lookup may reach 192 or 288, but
    # only the prompt was stored (offload_prompt_only): 192, state 192; nothing new stored
    sim = _sim(64)
    live = sim.preempt(Request(0, 0, TokenSeq(_tokens(3, 200), 16), 200, 120),
                       Preemption(DECODE, 1, decoded, 1))
    held = set(sim.tier.held())
    assert len(held) == 7
    r = sim.resume(live)
    assert live.total == 200 + decoded
    assert (r.preempted, r.resume_hit, r.resume_wrong, r.resume_missing) == \
        (DECODE, 192, False, False)
    assert set(sim.tier.held()) == held


def test_output_tokens_and_resume_order() -> None:
    seq = TokenSeq(_tokens(4, 100), 16)
    req = Request(0, 0, seq, 60, 30, chat=True)
    assert with_output(req, 30, 0) is seq  # a chat reply is in the conversation's tokens
    short = Request(1, 0, TokenSeq(_tokens(4, 60), 16), 60, 30)
    out = with_output(short, 10, 0)
    assert len(out.tokens) == 70 and out.hashes_upto(3) == short.seq.hashes_upto(3)
    assert np.array_equal(out.tokens, with_output(short, 10, 0).tokens)
    # the next turn (its prompt begins with this one's) waits for the resumed request
    nxt = Request(2, 5, seq, 100, 10, chat=True)
    other = Request(3, 5, TokenSeq(_tokens(5, 80), 16), 80, 10)
    p = Preemption(DECODE, 1, 5, 3)
    assert resume_index([req, other, nxt, other, other], 0, p, 16) == 2
    assert resume_index([req, other, other, other, other], 0, p, 16) == 4


def test_finding_001_on_resume_and_the_fix() -> None:
    # shared-prefix on a 16-chunk ARC tier, half the requests preempted: requests whose
    # first pass restored the right state resume with a wrong one under 0.33.0 (the
    # request's own window chunk evicted while the Mamba chunk stayed); the fix none
    trace = make_trace("shared-prefix", 150, 0, TINY.hash_block)
    plans = plan(trace, 0.5, 0)
    out = {}
    for sem in (RELEASE, FIX):
        sim = _sim(16, sem, step=192, policy="arc")
        out[sem] = sim.run(trace, "shared-prefix", None, plans)
        rerun = _sim(16, sem, step=192, policy="arc").run(trace, "shared-prefix", None, plans)
        assert replace(rerun, wall_s=0) == replace(out[sem], wall_s=0)
        if sem == RELEASE:
            fresh = [r for r in sim.results
                     if r.resume_wrong and not (r.wrong_state or r.inherited)]
            assert fresh and all(r.resume_hit < r.hit_tokens for r in fresh)
    assert out[RELEASE].preempted == out[FIX].preempted == len(plans)
    assert out[RELEASE].resume_corrupted > 0
    assert out[FIX].corrupted == out[FIX].resume_corrupted == out[FIX].missing_loads == 0


def test_sim_run_with_preemption(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["run", "--workload", "shared-prefix", "--requests", "150", "--semantics",
               f"{RELEASE},{FIX}", "--tier-chunks", "16", "--tier-policy", "arc",
               "--preempt", "0.5", "--max-num-batched-tokens", "192", "--no-progress",
               "--fail-on-corruption", FIX, "--report", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "50% preempted" in out and "resume corrupted" in out and "verdict: PASS" in out
    report = json.loads((tmp_path / f"tier-{TINY.name}-shared-prefix-preempt.json").read_text())
    assert report["preempt"] == 0.5 and report["resume_after"] == [1, 8]
    cells = {c["semantics"]: c for c in report["cells"]}
    assert cells[RELEASE]["resume_corrupted"] > 0 == cells[FIX]["resume_corrupted"]
    assert cells[FIX]["lost_resume_tokens"] == \
        cells[RELEASE]["resume_hit_tokens"] - cells[FIX]["resume_hit_tokens"]


@pytest.mark.parametrize("argv, flag", [
    (["--preempt", "1.5"], "--preempt"),
    (["--preempt", "x"], "--preempt"),
    (["--resume-after", "5-2"], "--resume-after"),
    (["--semantics", BLOCK, "--preempt", "0.1"], "--preempt"),
])
def test_bad_preempt_input_names_the_flag(argv: list[str], flag: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    base = ["run", "--workload", "chat", "--requests", "10", "--semantics", RELEASE]
    assert main(base + argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0]


SCHEDCORE = "v1/core/sched/scheduler.py"
CONNECTOR = "distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py"
# sim/tier_preempt.py's citations of vLLM 0.33.0: (file, line, what the line holds)
PREEMPT_CITATIONS = [
    (SCHEDCORE, 1817, "self._free_request_blocks(request)"),
    (SCHEDCORE, 1822, "request.num_computed_tokens = 0"),
    (SCHEDCORE, 1842, "self.waiting.prepend_request(request)"),
    (SCHEDCORE, 1733, "preempted_req_ids=self.reset_preempted_req_ids"),
    (SCHEDCORE, 1110, "if request.num_computed_tokens == 0:"),
    (SCHEDCORE, 1139, "self.connector.get_num_new_matched_tokens("),
    (SCHEDCORE, 2955, "self.connector.on_new_request(request)"),
    (CONNECTOR, 2137, "for req_id in scheduler_output.preempted_req_ids"),
    (CONNECTOR, 2151, "self._current_batch_jobs_to_flush.update(jobs_to_flush)"),
    (CONNECTOR, 1244, "# Restarting at token 0: offer every chunk again."),
    (CONNECTOR, 1245, "group_state.next_stored_chunk_idx = 0"),
    (CONNECTOR, 1254, "req_status.update_offload_keys()"),
    (CONNECTOR, 862, "max_hit_size_tokens: int = req_status.req.num_tokens"),
    (CONNECTOR, 770, "num = min(num, req_status.req.num_prompt_tokens)"),
    ("distributed/kv_transfer/kv_connector/v1/offloading/worker.py", 244,
     "self.worker.wait(kv_connector_metadata.jobs_to_flush)"),
    ("v1/core/kv_cache_coordinator.py", 369, "request.num_prompt_tokens,"),
]


def test_preemption_citations_hold_their_lines() -> None:
    from sim.crosscheck.envs import source_package

    version = releases.reference("chunked").base_version
    root = source_package(version)
    unpacked = Path(__file__).resolve().parents[2] / "wheels" / f"src-{version}" / "vllm"
    root = root if root is not None else (unpacked if unpacked.is_dir() else None)
    if root is None:
        pytest.skip(f"no vLLM {version} source (python -m sim.crosscheck.envs builds it)")
    wrong = [f"{path}:{line}" for path, line, text in PREEMPT_CITATIONS
             if text not in (root / path).read_text().splitlines()[line - 1]]
    assert not wrong, wrong
