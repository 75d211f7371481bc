"""Conformance of the chunked encodings to ``model/`` over the older chunked releases the
proofs encode (``releases.proved("chunked")`` beside vLLM 0.33.0), through the steps they
override (``releases.base.ChunkSteps``).

vLLM 0.32.0 overrides the partial tail (``releases/vllm_0_32_0.py``): ``tail_eagle``
(an EAGLE group turns partial tails off, scheduler.py:313 of 0.32.0), ``tail_search``
(one search block) and ``tail_bridge`` (no bridge chunk). Both encodings read all three
(``proofs.encoding_chunked``: ``partial_tails_on``, ``partial_tail_phase``;
``proofs.tail_chunked``: ``startup``, ``prologue``). Only ``tail_eagle`` can change an
answer of 0.32.0: without an EAGLE group there is no proof margin, and then 0.33.0's
search is one block too and its bridge lies past it (a complete boundary is on a block),
which ``tests/test_release_simple_tail.py`` checks on the model side
(``test_answers_differ_only_with_an_eagle_group_and_tails``). So the start-up's EAGLE
rule is what these tests pin, from either side: the encodings' start-up against the
release's on every scenario of the partial-tail templates' shape, and a copy of either
side without the rule must fail. The whole lookups run over 0.32.0 in the generated
suites of ``tests/test_conformance_chunked.py`` and ``tests/test_proof_tails_chunked.py``
(their generators draw every proved chunked semantics in turn), and on its files here.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import releases
from model import layout_chunked
from model.scenario import Scenario, load_scenario_file, parse_scenario
from proofs import encoding_chunked, tail_chunked
from proofs.conformance_chunked import in_scope, tails_gate, tails_shape
from proofs.conformance_tail_chunked import in_scope as tail_in_scope
from proofs.conformance_tail_chunked import startup_on
from tests import gen_chunked as gen
from tests import test_conformance_chunked as bounded
from tests import test_proof_tails_chunked as layered
from tests.sabotage import sabotaged_copy
from tests.subset import part

ROOT = Path(__file__).resolve().parents[1]
V032 = releases.by_version("0.32.0")
V033 = releases.by_version("0.33.0")
FILES = sorted((ROOT / "tests" / "scenarios" / V032.name).glob("*.json"))
EAGLE_OFF = ROOT / "tests" / "scenarios" / V032.name / "eagle-turns-tails-off.json"

# the encodings' start-up without the EAGLE rule (the override dropped on their side)
BOUNDED_NO_RULE = ("    if not steps.tail_eagle:  # an EAGLE group turns partial tails off\n"
                   "        c += [z3.Not(e) for e in cfg.eagle]\n", "")
LAYERED_NO_RULE = ("    if not tc.steps.tail_eagle:\n"
                   "        c += [z3.Not(e) for e in base.eagle] + [z3.Not(tc.margin_on)]\n", "")


def _gates(s: Scenario, bounded_mod: Any = encoding_chunked,
           layered_mod: Any = tail_chunked) -> tuple[bool, bool, bool]:
    """(bounded encoding's start-up, layered tail's start-up, the release's) on ``s``:
    partial tails on."""
    enc_on, model_on = tails_gate(s, bounded_mod)
    return enc_on, startup_on(s, layered_mod), model_on


def _agree(s: Scenario, bounded_mod: Any = encoding_chunked,
           layered_mod: Any = tail_chunked) -> None:
    enc_on, tail_on, model_on = _gates(s, bounded_mod, layered_mod)
    assert enc_on == model_on, f"partial tails: bounded encoding {enc_on} vs model {model_on}"
    assert tail_on == model_on, f"partial tails: layered tail {tail_on} vs model {model_on}"


def test_the_release_is_proved_and_drawn() -> None:
    assert V032.name in releases.proved("chunked") and V032.name in gen.SEMANTICS
    assert V032.expect == V033.expect  # its verdicts are 0.33.0's (the module doc)


def test_the_release_files_are_in_both_encodings_or_gated() -> None:
    """Each 0.32.0 file: in the partial-tail shape, both encodings' start-up agree with
    the release's; a file with partial tails on runs through both encodings' lookup."""
    seen: Counter[str] = Counter()
    for path in FILES:
        s = load_scenario_file(path)
        assert tails_shape(s), path.name
        _agree(s)
        if in_scope(s):
            bounded.conforms(s)
            seen["bounded"] += 1
        if tail_in_scope(s):
            layered.conforms(s)
            seen["layered"] += 1
        seen["tails off by EAGLE"] += not tails_gate(s)[1]
    assert seen == Counter({"bounded": 1, "layered": 1, "tails off by EAGLE": 2}), seen


def _shaped(count: int, seed: int) -> list[Scenario]:
    """Generated scenarios of the partial-tail shape, EAGLE on often, every proved
    chunked semantics in turn."""
    rng = random.Random(seed)
    out: list[Scenario] = []
    names = gen.SEMANTICS
    while len(out) < count:
        s = parse_scenario(gen.tail_pair_dict(rng, names[len(out) % len(names)]))
        if tails_shape(s):
            out.append(s)
    return out


def test_the_tail_gate_conforms() -> None:
    for s in _shaped(12, 0):
        _agree(s)


@pytest.mark.conformance
@pytest.mark.timeout(1200)
def test_the_tail_gate_conforms_many() -> None:
    seen: Counter[str] = Counter()
    for s in _shaped(part(400), 1):  # CONFORMANCE_SHARE (tests/subset.py)
        _agree(s)
        on = tails_gate(s)[1]
        seen[f"{s.semantics}: tails {'on' if on else 'off'}"] += 1
    assert (seen[f"{V032.name}: tails off"] >= part(10)
            and seen[f"{V032.name}: tails on"] >= part(10)), seen
    print(dict(seen))


@pytest.mark.parametrize(("which", "text"), [("bounded", BOUNDED_NO_RULE),
                                             ("layered", LAYERED_NO_RULE)])
def test_the_encodings_without_the_rule_fail(which: str, text: tuple[str, str]) -> None:
    s = load_scenario_file(EAGLE_OFF)
    _agree(s)
    if which == "bounded":
        mods = (sabotaged_copy(encoding_chunked, *text, "v032-tail-eagle"), tail_chunked)
    else:
        mods = (encoding_chunked, sabotaged_copy(tail_chunked, *text, "v032-tail-eagle"))
    with pytest.raises(AssertionError, match=f"partial tails: {which}"):
        _agree(s, *mods)


def test_the_model_without_the_rule_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model's start-up keeping partial tails with an EAGLE group (0.33.0's rule) on
    0.32.0: the encodings' start-up refuses what it builds."""
    s = load_scenario_file(EAGLE_OFF)
    _agree(s)
    real = layout_chunked.resolve_layout

    def eagle_tails(sc: Scenario, steps: Any = None, version: str = layout_chunked.V) -> Any:
        return real(sc, replace(steps or V033.steps, tail_eagle=True), version)

    monkeypatch.setattr(layout_chunked, "_LAYOUTS", {})
    monkeypatch.setattr(layout_chunked, "resolve_layout", eagle_tails)
    with pytest.raises(AssertionError, match="partial tails: bounded"):
        _agree(s)
    with pytest.raises(AssertionError, match="start-up constraints refuse"):
        bounded.conforms(s)
