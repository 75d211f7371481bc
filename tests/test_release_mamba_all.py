"""vLLM 0.31.0 in the model: 0.32.0's chunked lookup with Mamba cache mode "all", GPU hits
on the scheduler block only, and a single group's ``prefix_match_unit`` ignored.

The release is ``releases.by_version("0.31.0")`` (``releases/vllm_0_31_0.py``), a delta of
0.32.0. The expected hits of the hand-made files are the real 0.31.0 scheduler's
(``python -m sim.crosscheck --light --vllm 0.31.0 --scenarios tests/scenarios``).
"""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

import pytest

import releases
from model.evaluate import evaluate
from model.layout_chunked import resolve_layout
from model.scenario import ScenarioError, load_scenario_file, parse_scenario
from releases import vllm_0_31_0, vllm_0_32_0
from releases.base import ChunkSteps

ROOT = Path(__file__).resolve().parents[1]
OLD = releases.by_version("0.31.0")
NEW = releases.by_version("0.32.0")
HERE = ROOT / "tests" / "scenarios" / OLD.name


def test_the_release_is_a_delta_of_0_32_0() -> None:
    assert OLD is vllm_0_31_0.SEMANTICS and NEW is vllm_0_32_0.SEMANTICS
    assert OLD.parent == NEW.name and OLD.kind == "release" and OLD.family == "chunked"
    chunked = releases.releases("chunked")  # oldest first
    assert chunked[chunked.index(OLD.name) + 1] == NEW.name
    changed = {f.name for f in fields(ChunkSteps)
               if getattr(OLD.steps, f.name) != getattr(NEW.steps, f.name)}
    assert changed == {"mamba_all", "fine_gpu_hits", "single_group_hash_check"}
    # the defaults are 0.33.0's behaviour
    assert ChunkSteps().mamba_all is False and ChunkSteps().fine_gpu_hits
    assert replace(OLD, name=NEW.name, base_version=NEW.base_version, parent=NEW.parent,
                   summary=NEW.summary, steps=NEW.steps, expect=NEW.expect) == NEW
    assert OLD.expect == NEW.expect and NEW.expect  # 0.32.0's verdicts (its module doc)


def _mamba(mode: str, block: int = 16) -> dict[str, object]:
    return {"kind": "mamba", "gpu_block_size": block, "mamba_cache_mode": mode,
            "stored": "all"}


def _scenario(*groups: dict[str, object], on: bool = True, **top: object
              ) -> dict[str, object]:
    return {"semantics": OLD.name, "block_size_factor": 1, "prompt_tokens": 48,
            "num_computed_tokens": 0, "enable_prefix_caching": on, "groups": list(groups),
            **top}


FULL = {"kind": "full_attention", "gpu_block_size": 16, "stored": "all"}


def test_mode_all_joins_the_align_size() -> None:
    s = parse_scenario(_scenario(FULL, _mamba("all")))
    lay = resolve_layout(s, OLD.steps, OLD.base_version)
    assert lay.mamba_align_size == 16 and not lay.supports_partial_tail
    assert not any(c.requires_cow_source for c in lay.groups)  # CoW: "align" only
    assert lay.tokens_per_hash == lay.scheduler_block_size == 16  # backs off (lcm)
    assert evaluate(s).hit_tokens == 32  # 47 rounded to the Mamba chunk
    assert "not a mode" in (evaluate(s, NEW.name).refused or "")


@pytest.mark.parametrize(("modes", "on", "field"), [
    (("all", "align"), True, "groups[*].mamba_cache_mode"),
    (("none",), True, "groups[1].mamba_cache_mode"),
    (("all",), False, "groups[1].mamba_cache_mode"),
])
def test_mode_refusals(modes: tuple[str, ...], on: bool, field: str) -> None:
    s = parse_scenario(_scenario(FULL, *(_mamba(m) for m in modes), on=on))
    refused = evaluate(s).refused
    assert refused is not None and field in refused, refused


def test_a_single_group_ignores_the_match_unit() -> None:
    s = load_scenario_file(HERE / "single-group-match-unit-ignored.json")
    o = evaluate(s)
    assert o.refused is None and o.hit_tokens == 32
    assert o.layout is not None and o.layout.tokens_per_hash == 16  # type: ignore[union-attr]
    assert "prefix_match_unit" in (evaluate(s, NEW.name).refused or "")


def test_gpu_hits_land_on_the_scheduler_block() -> None:
    # a partial-tail layout: 0.32.0 lets GPU hits land on the hash size, 0.31.0 cannot
    tail = {"kind": "mamba", "gpu_block_size": 16, "mamba_cache_mode": "align",
            "stored": "all"}
    raw = _scenario({**FULL, "gpu_block_size": 16}, tail, hash_block_size=4)
    old = resolve_layout(parse_scenario(raw), OLD.steps, OLD.base_version)
    new = resolve_layout(parse_scenario({**raw, "semantics": NEW.name}), NEW.steps,
                         NEW.base_version)
    assert old.supports_partial_tail and new.supports_partial_tail
    assert (old.cache_hit_alignment_tokens, new.cache_hit_alignment_tokens) == (16, 4)


# (file, the real 0.31.0 scheduler's hit)
CASES = [
    (HERE / "mamba-all-rounds-attention.json", 32),
    (HERE / "single-group-match-unit-ignored.json", 32),
    (ROOT / "tests" / "scenarios" / "vllm-0.24.0-breaks" / "mamba-all-mode-boundary.json", 16),
]


@pytest.mark.parametrize(("path", "real_hit"), CASES, ids=[p.stem for p, _ in CASES])
def test_answers_on_hand_made_scenarios(path: Path, real_hit: int) -> None:
    o = evaluate(load_scenario_file(path), OLD.name)
    assert o.refused is None and o.hit_tokens == real_hit


@pytest.mark.parametrize("version", ["0.30.0", "0.31.0", "0.32.0", "0.33.0"])
def test_caps_only_where_the_release_has_them(version: str) -> None:
    """A cap the release's scheduler lacks is refused in one line naming the field
    (``max_load_tokens`` from 0.31.0 on; ``max_num_new_tokens`` from 0.30.0 on)."""
    sem = releases.by_version(version)
    for field, has in (("max_num_new_tokens", sem.steps.cap_new_tokens),
                       ("max_load_tokens", sem.steps.cap_load_tokens)):
        raw = _scenario(FULL)
        raw.update({"semantics": sem.name, field: 32})
        s = parse_scenario(raw)
        if has:
            assert evaluate(s).hit_tokens == 32
        else:
            with pytest.raises(ScenarioError, match=rf"^{field}: ") as e:
                evaluate(s)
            assert "\n" not in str(e.value)
    assert sem.steps.cap_load_tokens == (version != "0.30.0")
