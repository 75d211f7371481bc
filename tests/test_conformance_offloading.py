"""vLLM 0.26.0 and 0.27.0 in the block family's encoding: each override they make of 0.25.0
(releases/vllm_0_26_0.py, vllm_0_27_0.py) is read by the encoding (``proofs/``) and by
``model/``, and dropping it from either makes the conformance check
(``tests/test_conformance.py``'s ``_conforms``) fail on a witness scenario.

The overrides: ``blocks_per_chunk`` (``releases.steps.chunk_blocks``: the chunk is that many
GPU blocks of each group), its refusal beside a token ``block_size``, the engine's one
Mamba mode from prefix caching, and 0.27.0's load slack (``releases.steps.
load_window_limit``: one more pending GPU block in a sliding-window group, which makes a
hit valid for maximality that 0.26.0's load assertion refuses).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import model.layout
import model.load_plan
import proofs.theorems
from model.scenario import Scenario, load_scenario_file, parse_scenario
from proofs import encoding
from releases import vllm_0_26_0, vllm_0_27_0

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sabotage import sabotaged_copy  # noqa: E402

from tests.test_conformance import _conforms  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
V026, V027 = vllm_0_26_0.SEMANTICS.name, vllm_0_27_0.SEMANTICS.name


def _raw(**top: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "semantics": V026, "block_size_factor": 1, "blocks_per_chunk": 2,
        "prompt_tokens": 20, "num_computed_tokens": 0,
        "groups": [{"kind": "full_attention", "gpu_block_size": 2, "stored": "all"},
                   {"kind": "sliding_window", "gpu_block_size": 4, "sliding_window": 8,
                    "stored": "all"}]}
    raw.update(top)
    return raw


def _slack() -> Scenario:
    # hit 16: its window group has 2 pending GPU blocks against a window of 1 block;
    # 0.27.0 loads it, 0.26.0's assertion refuses it (so it is a valid hit on 0.27.0 only)
    return load_scenario_file(ROOT / "tests/scenarios/vllm-0.27.0/window-load-slack.json")


# name -> (module, the text read, the text without the read, the witness, what fails)
ENCODING: dict[str, tuple[ModuleType, str, str, Scenario, str]] = {
    # blocks_per_chunk 2 with block sizes 2 and 4: chunks of 4 and 8 tokens, hit 16; read
    # as block_size_factor 1 the chunks are 2 and 4 tokens, hit 19
    "blocks-per-chunk": (
        encoding,
        "return steps.chunk_blocks(TurnArith(enc), cfg.factor, cfg.bpc, cfg.bpc_set)",
        "return cfg.factor", parse_scenario(_raw()), "hit: encoding"),
    # blocks_per_chunk beside a token block_size is refused (offloading/config.py:64)
    "chunk-both": (
        encoding,
        "c = [z3.Implies(cfg.bpc_set, z3.And(cfg.bpc >= 1, cfg.factor == 1))]",
        "c = []", parse_scenario(_raw(block_size_factor=2, groups=[
            {"kind": "full_attention", "gpu_block_size": 2, "stored": "all"}])),
        "start-up constraints differ"),
    # prefix caching on: the engine runs Mamba in mode "all", never "none"
    "engine-mamba-mode": (
        encoding,
        "c += [z3.If(cfg.prefix_caching, m != MODE_NONE, m == MODE_NONE) for m in modes]",
        "c += []", parse_scenario(_raw(groups=[
            {"kind": "full_attention", "gpu_block_size": 2, "stored": "all"},
            {"kind": "mamba", "gpu_block_size": 2, "mamba_cache_mode": "none",
             "stored": "all"}])),
        "start-up constraints differ"),
    # 0.27.0's slack: the valid hits (maximality's) differ at 16
    "load-window-slack": (
        proofs.theorems,
        "steps.load_window_limit(win, d.factor,\n"
        "                                                           sem.load_window_slack)",
        "steps.load_window_limit(win, d.factor, 0)", _slack(), "valid_hit differs"),
}

MODEL: dict[str, tuple[ModuleType, str, str, str, Scenario, str]] = {
    "blocks-per-chunk": (
        model.layout, "_chunk_factor",
        "s.blocks_per_chunk or 0,\n                                     has_bpc)",
        "s.blocks_per_chunk or 0,\n                                     False)",
        parse_scenario(_raw()), "hit: encoding"),
    "chunk-both": (
        model.layout, "_chunk_factor",
        "if has_bpc and s.block_size_factor != 1:", "if False:",
        ENCODING["chunk-both"][3], "start-up constraints differ"),
    "engine-mamba-mode": (
        model.layout, "check_mamba_modes",
        'if s.enable_prefix_caching and g.mamba_cache_mode == "none":', "if False:",
        ENCODING["engine-mamba-mode"][3], "start-up constraints differ"),
    "load-window-slack": (
        model.load_plan, "_group_load",
        "steps.load_window_limit(window, factor, slack)",
        "steps.load_window_limit(window, factor, 0)", _slack(), "valid_hit differs"),
}


@pytest.fixture(autouse=True)
def _no_kept_layouts() -> Iterator[None]:
    """``model.layout.startup_layout`` keeps layouts: one a sabotaged model built must not
    outlive its test, nor one built before it hide the sabotage."""
    model.layout._LAYOUTS.clear()
    yield
    model.layout._LAYOUTS.clear()


@pytest.mark.parametrize("name", sorted(ENCODING))
def test_the_encoding_without_the_override_fails_conformance(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    module, old, new, s, failure = ENCODING[name]
    _conforms(s)  # the encoding as it is agrees with model/
    copy = sabotaged_copy(module, old, new, name)
    if module is encoding:
        with pytest.raises(AssertionError, match=failure):
            _conforms(s, copy)
    else:  # proofs.theorems.valid_hit, which proofs.conformance reads at call time
        monkeypatch.setattr(proofs.theorems, "valid_hit", copy.valid_hit)
        with pytest.raises(AssertionError, match=failure):
            _conforms(s)


@pytest.mark.parametrize("name", sorted(MODEL))
def test_the_model_without_the_override_fails_conformance(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    module, function, old, new, s, failure = MODEL[name]
    _conforms(s)
    copy = sabotaged_copy(module, old, new, f"model-{name}")
    # the copy's function, run with the module's own names (its Refused, its helpers)
    sabotaged = getattr(copy, function)
    monkeypatch.setattr(module, function, type(sabotaged)(
        sabotaged.__code__, vars(module), function, sabotaged.__defaults__))
    model.layout._LAYOUTS.clear()  # the layout the run above kept
    with pytest.raises(AssertionError, match=failure):
        _conforms(s)


def test_the_witnesses_are_accepted_or_refused_as_said() -> None:
    """The blocks_per_chunk witness needs blocks_per_chunk (per-group block sizes with
    chunks of 2 blocks) and 0.26.0's start-up; the slack witness is 0.27.0's."""
    from model.evaluate import evaluate

    o = evaluate(parse_scenario(_raw()))
    assert o.refused is None and o.hit_tokens == 16
    assert evaluate(ENCODING["chunk-both"][3]).refused is not None
    assert evaluate(ENCODING["engine-mamba-mode"][3]).refused is not None
    s = _slack()
    assert s.semantics == V027 and evaluate(s).assertion is None
    assert evaluate(s, V026).assertion is not None
