"""vLLM 0.29.0 and 0.28.0 in the model: 0.30.0's chunked lookup without
``max_num_new_tokens``, without load windows, and with the EAGLE extra chunk queried by
sliding-window groups only (0.28.0: 0.29.0's, no step overridden).

The expected hits of the hand-made files are the real schedulers' (``python -m
sim.crosscheck --light --vllm 0.29.0 --scenarios tests/scenarios``; on 0.28.0 the same,
on 0.30.0 the other column).
"""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

import pytest

import releases
from model.evaluate import evaluate
from model.scenario import ScenarioError, load_scenario_file
from releases import vllm_0_28_0, vllm_0_29_0, vllm_0_30_0
from releases.base import ChunkSteps

ROOT = Path(__file__).resolve().parents[1]
V028, V029, V030 = (releases.by_version(v) for v in ("0.28.0", "0.29.0", "0.30.0"))
HERE = ROOT / "tests" / "scenarios" / V029.name


def _changed(old: object, new: object) -> set[str]:
    return {f.name for f in fields(ChunkSteps)
            if getattr(old, f.name) != getattr(new, f.name)}


def test_the_releases_are_deltas() -> None:
    assert (V028, V029, V030) == (vllm_0_28_0.SEMANTICS, vllm_0_29_0.SEMANTICS,
                                  vllm_0_30_0.SEMANTICS)
    assert V029.parent == V030.name and V028.parent == V029.name
    assert _changed(V029.steps, V030.steps) == {"cap_new_tokens", "eagle_query_all",
                                                "load_windows"}
    assert V028.steps == V029.steps  # 0.28.0 overrides nothing the model runs
    assert replace(V028, name=V029.name, base_version=V029.base_version,
                   parent=V029.parent, summary=V029.summary) == V029
    chunked = releases.releases("chunked")
    assert chunked[:3] == (V028.name, V029.name, V030.name)  # oldest first
    # 0.30.0's verdicts but loads-stored-only, which fails (releases/vllm_0_29_0.py)
    assert V028.expect == V029.expect
    assert {k: v for k, v in V029.expect.items() if k != "loads-stored-only"} == {
        k: v for k, v in V030.expect.items() if k != "loads-stored-only"}
    assert V029.expect["loads-stored-only"].holds is False


# (file, the real 0.29.0 and 0.28.0 schedulers' hit, the real 0.30.0 scheduler's hit)
CASES = [
    (HERE / "window-pending-above-a-miss.json", None, 32),
    (HERE / "eagle-attention-no-extra-chunk.json", 32, 48),
    (HERE / "window-first-run-plain.json", 18, 12),
    (HERE / "window-being-loaded-plain.json", 18, None),
]


@pytest.mark.parametrize(("path", "old_hit", "new_hit"), CASES,
                         ids=[p.stem for p, _, _ in CASES])
def test_answers_on_hand_made_scenarios(path: Path, old_hit: int | None,
                                        new_hit: int | None) -> None:
    s = load_scenario_file(path)
    for sem, hit in ((V029, old_hit), (V028, old_hit), (V030, new_hit)):
        o = evaluate(s, sem.name)
        assert o.refused is None and o.hit_tokens == hit, sem.name


def test_the_eagle_query_is_not_widened_for_attention() -> None:
    o = evaluate(load_scenario_file(HERE / "eagle-attention-no-extra-chunk.json"), V029.name)
    attention = [e for g, e in o.lookups if g == 0]
    assert max(attention) == 48  # chunks 0-2 (0.30.0 asks for chunk 3 too)


@pytest.mark.parametrize("release", [V028, V029])
def test_neither_cap_is_a_field(release: releases.Semantics) -> None:
    s = load_scenario_file(HERE / "eagle-attention-no-extra-chunk.json")
    for field, capped in (("max_num_new_tokens", replace(s, max_num_new_tokens=16)),
                          ("max_load_tokens", replace(s, max_load_tokens=16))):
        with pytest.raises(ScenarioError, match=rf"^{field}: "):
            evaluate(capped, release.name)
