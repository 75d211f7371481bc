"""The tier simulation's ``prepare_store`` calls against the real vLLM 0.33.0 engine's
store logs (``sim/gpu/results/tier-workload/``, H200, finding 001's tiny NemotronH, 240
requests each: shared-prefix on a 10-chunk LRU tier and on a 16-chunk ARC tier, chat on a
32-chunk LRU tier): request by request, every call's keys offered, keys stored and keys
evicted (a refused call repeated by the engine once per step counted once,
``tier_workload.store_calls``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.gpu import tier_workload
from sim.tier_store import retained_boundary

RESULTS = Path(__file__).resolve().parents[1] / "sim/gpu/results/tier-workload"
RUNS = {"shared-prefix-lru10": "vllm-0.33.0-shared-prefix-lru10-storelog.json",
        "shared-prefix-arc16": "vllm-0.33.0-shared-prefix-arc16.json",
        "chat-lru32": "vllm-0.33.0-chat-lru32.json"}


@pytest.mark.parametrize("run", sorted(RUNS))
def test_store_offers_match_the_engine_request_by_request(run: str) -> None:
    diffs = tier_workload.storecheck(str(RESULTS / f"predicted-{run}.json"),
                                     str(RESULTS / RUNS[run]))
    assert diffs == []


@pytest.mark.parametrize("run", sorted(RUNS))
def test_fresh_predictions_match_the_engine(run: str, tmp_path: Path) -> None:
    # the committed predictions, made again by today's simulator, and compared request by
    # request with the engine's results (hit, Mamba state restored, output differs)
    committed = json.loads((RESULTS / f"predicted-{run}.json").read_text())
    fresh = tmp_path / "predicted.json"
    assert tier_workload.main([
        "predict", "--out", str(fresh), "--requests", str(len(committed["requests"])),
        "--seed", str(committed["seed"]), "--workload", committed["workload"],
        "--tier-chunks", str(committed["tier_chunks"]), "--policy", committed["policy"],
        "--semantics", committed["semantics"]]) == 0
    assert json.loads(fresh.read_text()) == committed
    assert tier_workload.compare(str(fresh), str(RESULTS / RUNS[run])) == 0


def test_store_calls_collapse_only_repeated_refusals() -> None:
    offer = {"offered": ["1:32"], "answer": None}
    taken = {"offered": ["1:32"], "answer": {"store": ["1:32"], "evicted": ["0:288"]}}
    calls = tier_workload.store_calls([offer, offer, offer, taken, taken])
    assert calls == [(("1:32",), None), (("1:32",), (("1:32",), ("0:288",)))] + \
        [(("1:32",), (("1:32",), ("0:288",)))]


def test_retained_boundary_on_the_48_96_layout() -> None:
    # the engine's store log: prompts of 259-287 tokens offer no Mamba state (the
    # checkpoint slot ends at 240, the retained block at 192), 290-329 offer 288
    assert [retained_boundary(p, 0, 0, p, 48, 96) for p in (259, 286, 290, 329)] == \
        [None, None, 288, 288]
    # past the checkpoint slot's reach: 337 tokens retain 288, the slot ends at 336
    assert retained_boundary(337, 0, 0, 337, 48, 96) is None
    # a prompt of a multiple of 96: its slot (ending at 240) is cacheable, 192 handed
    # over (the real manager, and the engine's chat run, rid 103)
    assert retained_boundary(288, 0, 0, 288, 48, 96) == 192
    # a load of exactly the retained boundary: its block is handed over again
    assert retained_boundary(337, 288, 288, 337, 48, 96) == 288
    # a load below it: the chunk's checkpoint (the engine's rid 137: 256 of 292)
    assert retained_boundary(292, 256, 256, 292, 48, 96) == 288
    # intermediate chunks: only the one ending at the retained boundary
    assert retained_boundary(400, 0, 0, 384, 48, 96) == 384
    assert retained_boundary(400, 0, 0, 288, 48, 96) is None
    assert retained_boundary(300, 0, 0, 288, 48, 96) == 288
    assert retained_boundary(300, 0, 288, 300, 48, 96) is None  # offered already
