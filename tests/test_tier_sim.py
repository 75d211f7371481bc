"""The 0.33.0 store path (``sim.tier_store``) and the tier simulation (``sim.tier_sim``,
``python -m sim run`` with chunked semantics): finding 001 reproduced through the modelled
tier, the layouts against vLLM's own start-up output, a small run end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import releases
from sim.cli import main
from sim.tier import OffloadPolicy, TierConfig
from sim.tier_layouts import LAYOUTS
from sim.tier_sim import TierSim, TierSimConfig
from sim.tier_store import StoreGroup, after_load, after_offer, chunk_offer, storable_chunks
from sim.workload import Request, TokenSeq

ROOT = Path(__file__).resolve().parents[1]
# the release and finding 001's completed fix, from the registry (no new name literals)
RELEASE = releases.reference("chunked").name
FIX = next(n for n in releases.fixes(finding="001") if releases.get(n).reround_rerun)
BLOCK = releases.names(family="block")[0]
TINY = LAYOUTS["nemotronh-swa-tiny-flashinfer"]


def test_layouts_are_vllms() -> None:
    rows = json.loads((ROOT / "docs/findings/evidence/swa-layouts-v033.json").read_text())
    by = {(r["model"], r["backend"]): r for r in rows["rows"]}
    for lay in LAYOUTS.values():
        row = by[(lay.evidence_model, lay.backend)]
        assert row["hash_block_size"] == lay.hash_block
        assert row["scheduler_block_size"] == lay.scheduler_block
        assert row["mamba_block_size"] == lay.mamba_block
        assert row["sliding_window_block_size"] == lay.window_block
        assert set(row["offload_tokens_per_chunk"]) == set(lay.tokens_per_chunk())


def test_store_offers_and_next_stored() -> None:
    groups = (StoreGroup(48, cow_source=True), StoreGroup(32))
    # scheduler.py:442-473: computed, allocated and keyed chunks
    assert storable_chunks(groups[1], 200, 200, 10, 6, False) == 6
    assert storable_chunks(StoreGroup(32, eagle=True), 230, 200, 10, 10, False) == 6
    # the Mamba align group is stored only through retained boundaries (:1904-1905)
    assert chunk_offer(groups, (0, 2), (4, 6), lambda g, c: c != 3) == [(1, 2), (1, 4), (1, 5)]
    assert after_offer((0, 2), (4, 6), None) == (0, 2)  # refused: offered again
    assert after_offer((0, 2), (4, 6), True) == (4, 6)
    # a load of 160 tokens: CHUNK_LEVEL skips the loaded chunks, REQUEST_LEVEL does not
    assert after_load(OffloadPolicy.CHUNK_LEVEL, (0, 0), groups, 160) == (4, 5)
    assert after_load(OffloadPolicy.REQUEST_LEVEL, (0, 0), groups, 160) == (0, 0)


def _request(rid: int, tokens: np.ndarray, n: int) -> Request:
    return Request(rid, rid, TokenSeq(tokens, TINY.hash_block), n, 8)


@pytest.mark.parametrize("semantics", [RELEASE, FIX])
def test_finding_001_through_the_tier(semantics: str) -> None:
    # docs/findings/001: test_engine_core_sliding_window_block_below_mamba_block and the
    # H200 run: A (200 tokens) fills a 7-chunk LRU tier (window chunks ending 32..192,
    # the Mamba chunk ending 192), B (40 tokens) stores one chunk and the LRU evicts A's
    # window chunk ending at 192; A again: 0.33.0 hits 160 and restores the state of 192
    rng = np.random.default_rng(1)
    a = rng.integers(0, 255, size=200, dtype=np.uint8)
    b = rng.integers(0, 255, size=40, dtype=np.uint8)
    sim = TierSim(TierSimConfig(TINY, TierConfig(7, "lru")), semantics)
    first = sim.run_request(_request(0, a, 200))
    assert first.hit_tokens == 0
    assert len(sim.tier.held()) == 7
    sim.run_request(_request(1, b, 40))
    again = sim.run_request(_request(2, a, 200))
    if semantics == RELEASE:
        assert (again.hit_tokens, again.state_from, again.wrong_state) == (160, 192, True)
    else:
        assert not again.wrong_state and not again.missing_load


def test_sim_run_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["run", "--workload", "chat", "--requests", "300", "--semantics",
               f"{RELEASE},{FIX}", "--tier-chunks", "32,128", "--no-progress",
               "--fail-on-corruption", FIX, "--report", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "verdict: PASS" in out and FIX in out
    report = json.loads(next(tmp_path.glob("tier-*.json")).read_text())
    assert len(report["cells"]) == 2 * 2 * 2
    assert next(tmp_path.glob("tier-*.png")).stat().st_size > 0


@pytest.mark.parametrize("argv, flag", [
    (["--layout", "nope"], "--layout"),
    (["--tier-chunks", "0"], "--tier-chunks"),
    (["--tier-policy", "fifo"], "--tier-policy"),
    (["--semantics", f"{RELEASE},{BLOCK}"], "--semantics"),
])
def test_bad_input_names_the_flag(argv: list[str], flag: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    base = ["run", "--workload", "chat", "--requests", "10", "--semantics", RELEASE]
    assert main(base + argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0]


def test_gpu_workload_predictions_and_comparison(tmp_path: Path) -> None:
    # sim/gpu/tier_workload.py's CPU side (issue 25 item 4, prepared): predictions, then a
    # "real" result equal to them compares clean and one changed request does not
    from sim.gpu import tier_workload

    pred = tmp_path / "p.json"
    assert tier_workload.main(["predict", "--out", str(pred), "--requests", "240"]) == 0
    rows = json.loads(pred.read_text())["requests"]
    assert len(rows) == 240 and any(r["predicted"]["differs"] for r in rows)
    real = {"requests": [
        {"rid": r["rid"], "hit": r["predicted"]["hit"],
         "mamba_loads": ([{"serves": [0, r["predicted"]["hit"]],
                           "state_at": r["predicted"]["state_from"]}]
                         if r["predicted"]["state_from"] is not None else []),
         "equal_to_cold": not r["predicted"]["differs"]} for r in rows]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(real))
    assert tier_workload.main(["compare", "--predicted", str(pred), "--real", str(path)]) == 0
    real["requests"][0]["equal_to_cold"] = not real["requests"][0]["equal_to_cold"]
    path.write_text(json.dumps(real))
    assert tier_workload.main(["compare", "--predicted", str(pred), "--real", str(path)]) == 1


@pytest.mark.parametrize("workload", ["rag", "agent"])
def test_new_workloads_are_deterministic_and_share_prefixes(workload: str) -> None:
    from sim.workload import make_trace

    a = make_trace(workload, 200, 3, 16)
    b = make_trace(workload, 200, 3, 16)
    assert [(r.arrival, r.prompt_len, r.reply_len) for r in a] == \
        [(r.arrival, r.prompt_len, r.reply_len) for r in b]
    assert all(np.array_equal(x.seq.tokens, y.seq.tokens) for x, y in zip(a, b, strict=True))
    # every request opens with the workload's shared prompt (its first hash block)
    firsts = {r.seq.hashes_upto(1)[0] for r in a}
    assert len(firsts) == 1


CAP_FIX = releases.fix_for("003").name


@pytest.mark.parametrize(("semantics", "cap", "hit"),
                         [(RELEASE, None, 288), (RELEASE, 288, 0), (CAP_FIX, 288, 288),
                          (CAP_FIX, None, 288)])
def test_load_cap_through_the_tier(semantics: str, cap: int | None, hit: int) -> None:
    # finding 003 on the tier: a 289-token prompt stores the Mamba state at 288 and every
    # window chunk below; resent with max_load_tokens 288 (a multiple of L = 96 below the
    # last prompt token) 0.33.0 takes one token off after the cap (287, Mamba chunk 240,
    # no state there: no hit); the fix keeps 288
    rng = np.random.default_rng(2)
    a = rng.integers(0, 255, size=289, dtype=np.uint8)
    sim = TierSim(TierSimConfig(TINY, TierConfig(64, "lru")), semantics,
                  load_cap=lambda req: cap if req.rid else None)
    assert sim.run_request(_request(0, a, 289)).hit_tokens == 0
    again = sim.run_request(_request(1, a, 289))
    assert (again.hit_tokens, again.wrong_state, again.missing_load) == (hit, False, False)
