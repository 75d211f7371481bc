"""vLLM 0.32.0 in the model: 0.33.0's chunked lookup with the simple partial tail.

The release is ``releases.by_version("0.32.0")`` (module ``releases/vllm_0_32_0.py``), a
delta of 0.33.0: one search block keyed at the boundary, no bridge chunk lookup, and no
partial tails when a group is EAGLE. The expected answers below are the real 0.32.0
scheduler's (``sim/crosscheck`` with ``adapters/harness_chunked.py`` in the vllm-0.32.0
environment); the scenario files are replayed by ``python -m sim.crosscheck --vllm 0.32.0
--scenarios tests/scenarios``.
"""

from __future__ import annotations

import re
from dataclasses import fields, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

import releases
from model.citations import cited_lines
from model.cli import main as model_main
from model.evaluate import evaluate
from model.layout_chunked import resolve_layout
from model.scenario import Scenario, load_scenario_file, parse_scenario
from releases import steps, vllm_0_32_0, vllm_0_33_0
from releases.arith import INT
from releases.base import ChunkSteps
from sim.crosscheck.gen import scenarios

ROOT = Path(__file__).resolve().parents[1]
OLD = releases.by_version("0.32.0")
NEW = releases.by_version("0.33.0")
HERE = ROOT / "tests" / "scenarios" / OLD.name
THERE = ROOT / "tests" / "scenarios" / NEW.name


def test_the_release_is_a_delta_of_0_33_0() -> None:
    assert OLD is vllm_0_32_0.SEMANTICS and NEW is vllm_0_33_0.SEMANTICS
    assert OLD.parent == NEW.name and OLD.kind == "release" and OLD.family == "chunked"
    assert releases.reference("chunked") is NEW  # the family's model follows 0.33.0
    assert releases.releases("chunked")[-2:] == (OLD.name, NEW.name)  # oldest first
    assert releases.newest("chunked") is NEW
    # only the partial tail's steps differ from the parent's
    changed = {f.name for f in fields(ChunkSteps)
               if getattr(OLD.steps, f.name) != getattr(NEW.steps, f.name)}
    assert changed == {"tail_search", "tail_bridge", "tail_eagle"}
    assert replace(OLD, name=NEW.name, base_version=NEW.base_version, parent=NEW.parent,
                   summary=NEW.summary, steps=NEW.steps, expect=NEW.expect) == NEW


def test_the_theorems_are_claimed_as_for_0_33_0() -> None:
    """The encodings read the overridden steps (tests/test_conformance_chunked_releases.py):
    0.32.0 inherits 0.33.0's expectations, each verdict checked (its module doc)."""
    assert dict(OLD.expect) == dict(NEW.expect) and OLD.expect


def test_the_tail_search_steps() -> None:
    # no proof margin: 0.33.0 searches one block too, so the two agree
    for complete, block, prompt in ((16, 16, 40), (0, 2, 2), (32, 16, 40)):
        hashed = prompt // 4 * 4
        assert (steps.tail_search_one_block(INT, complete, block, prompt, hashed, 0, False)
                == steps.tail_search_with_proofs(INT, complete, block, prompt, hashed, 0, False))
    # a margin: 0.33.0 reaches into the second block, capped by the hashes
    assert steps.tail_search_with_proofs(INT, 16, 16, 40, 40, 4, True) == 36
    assert steps.tail_search_one_block(INT, 16, 16, 40, 40, 4, True) == 31


def test_an_eagle_group_turns_tails_off() -> None:
    s = load_scenario_file(HERE / "eagle-turns-tails-off.json")
    old = resolve_layout(s, OLD.steps, OLD.base_version)
    new = resolve_layout(s, NEW.steps, NEW.base_version)
    assert not old.supports_partial_tail and old.eagle_proof_margins == {}
    assert old.partial_tail_block_size == 0
    assert new.supports_partial_tail and new.eagle_proof_margins == {0: 4}


# (file, the real 0.32.0 scheduler's hit, the 0.33.0 model's hit)
CASES = [
    (HERE / "eagle-turns-tails-off.json", 16, 32),
    (HERE / "eagle-tail-not-searched.json", 0, 24),
    (HERE / "one-block-tail-hit.json", 28, 28),
    (THERE / "tail-eagle-margin.json", 0, 1),
    (THERE / "tail-pending-defer.json", 0, None),
    (THERE / "partial-tail-hit.json", 36, 36),
    (THERE / "partial-tail-pending-retry.json", None, None),
    (THERE / "new-token-cap-inside-chunk.json", 40, 40),
]


@pytest.mark.parametrize(("path", "real_hit", "new_hit"), CASES,
                         ids=[p.stem for p, _, _ in CASES])
def test_answers_on_hand_made_scenarios(path: Path, real_hit: int | None,
                                        new_hit: int | None) -> None:
    s = load_scenario_file(path)
    old, new = evaluate(s, OLD.name), evaluate(s, NEW.name)
    assert old.refused is None and new.refused is None
    assert (old.hit_tokens, new.hit_tokens) == (real_hit, new_hit)
    eagle = any(g.eagle for g in s.groups)
    if eagle:  # 0.32.0 looks no tail key up at all
        assert all(e % 16 == 0 or e == 2 for _, e in old.lookups), old.lookups
    assert (old.hit_tokens != new.hit_tokens) <= eagle


def test_tail_hit_keys_are_the_boundary() -> None:
    o = evaluate(load_scenario_file(HERE / "one-block-tail-hit.json"), OLD.name)
    assert o.tail_boundary == 28
    # attention chunks 0-1 (1 misses), Mamba chunk 0, then boundary 28 in both groups,
    # keyed at the boundary itself: no bridge, no second block (the real 0.32.0's keys)
    assert o.lookups == ((0, 16), (0, 32), (1, 16), (0, 28), (1, 28))


def test_the_cli_answers_for_the_release(capsys: pytest.CaptureFixture[str]) -> None:
    assert model_main(["lookup", "--semantics", OLD.name, str(HERE)]) == 0
    out = capsys.readouterr().out
    assert out.count(f": {OLD.name}: hit ") == 3, out


def _differs(s: Scenario) -> bool:
    """Whether the two answer differently (a refusal cites each release's own line, so
    only whether it refuses is compared)."""
    old, new = evaluate(s, OLD.name), evaluate(s, NEW.name)
    return ((old.refused is None, old.hit_tokens, old.lookups, old.tail_boundary)
            != (new.refused is None, new.hit_tokens, new.lookups, new.tail_boundary))


@settings(max_examples=100, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(scenarios(NEW.name))
def test_answers_differ_only_with_an_eagle_group_and_tails(s: Scenario) -> None:
    """Where 0.32.0 and 0.33.0 answer differently (hit, keys asked, tail), the layout
    supports partial tails under 0.33.0 and has an EAGLE group: the override's scope."""
    if not _differs(s):
        return
    new = resolve_layout(s, NEW.steps, NEW.base_version)
    assert new.supports_partial_tail and any(c.is_eagle_group for c in new.groups)


def test_without_eagle_the_answers_match() -> None:
    s = load_scenario_file(HERE / "eagle-turns-tails-off.json")
    plain = parse_scenario({
        "semantics": OLD.name, "block_size_factor": 1, "prompt_tokens": s.prompt_tokens,
        "num_computed_tokens": 0, "hash_block_size": s.hash_block_size,
        "groups": [{"kind": g.kind, "gpu_block_size": g.gpu_block_size,
                    **({"mamba_cache_mode": g.mamba_cache_mode} if g.mamba_cache_mode else {}),
                    "stored": sorted(g.stored or ()), "stored_tails": sorted(g.stored_tails)}
                   for g in s.groups]})
    assert not _differs(plain)
    assert evaluate(plain, OLD.name).hit_tokens == 32


def test_its_refusals_cite_its_own_lines() -> None:
    """Every start-up step the chunked model cites has a 0.32.0 line (``_cite`` falls back
    to 0.33.0's only where a release lacks the step)."""
    src = (ROOT / "model" / "layout_chunked.py").read_text()
    keys = set(re.findall(r'_cite\(version, "(\w+)"\)', src))
    assert len(keys) >= 10
    assert keys <= set(cited_lines(OLD.base_version)), keys - set(cited_lines(OLD.base_version))
