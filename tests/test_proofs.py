"""The Z3 encoding agrees with model/, and the seed's counterexample is found."""

from __future__ import annotations

from typing import Any

import pytest

from model.evaluate import evaluate
from model.semantics import get_semantics
from proofs.check import counterexample
from proofs.theorems import THEOREMS
from releases import vllm_0_23_0, vllm_0_24_0

V023 = vllm_0_23_0.SEMANTICS.name
V024 = vllm_0_24_0.SEMANTICS.name

# conformance of the encoding to model/: tests/test_conformance.py


def test_seed_counterexample_block_16() -> None:
    """With the seed's layout (every block 16), 0.23.0's smallest break is the seed's:
    a 32-token prompt and a 31-token hit."""
    v = counterexample(THEOREMS["no-partial-state"], get_semantics(V023),
                       THEOREMS["no-partial-state"].preconditions, 120_000,
                       sizes=[((16, 16, 16), 1)])
    assert v.status == "COUNTEREXAMPLE" and v.counterexample is not None
    assert v.counterexample["prompt_tokens"] == 32
    from model.scenario import parse_scenario
    o = evaluate(parse_scenario(v.counterexample))
    assert o.hit_tokens == 31


@pytest.mark.parametrize("semantics", [V024])
def test_main_theorem_proved(semantics: str) -> None:
    from proofs.check import check
    assert check("no-partial-state", semantics, timeout_ms=60_000).status == "PROVED"


@pytest.mark.slow
def test_counterexamples_are_deterministic() -> None:
    """Two searches write the same file: every field is pinned in a total order."""
    thm = THEOREMS["maximality"]
    assumed = [p for p in thm.preconditions if p != "no-eagle"]
    runs = [counterexample(thm, get_semantics(V024), assumed, 300_000,
                           sizes=[((1, 1, 1), 1), ((2, 2, 2), 1)]) for _ in range(2)]
    assert runs[0].status == "COUNTEREXAMPLE" and runs[0].counterexample is not None
    assert runs[0].counterexample == runs[1].counterexample
    assert runs[0].counterexample["valid_hit"] > 0


def test_joint_layout_search_is_the_one_by_one_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """check._least asks the layouts after the first with a counterexample together
    (_least_joint); one by one (its fallback) it finds the same least counterexample."""
    import time

    from proofs import check
    from proofs.theorems import RUNTIME, TEMPLATE

    sem = get_semantics(V024)
    thm = THEOREMS["whole-blocks"]
    assumed = tuple(dict.fromkeys((*RUNTIME, *(p for p in thm.pre(sem.name)
                                                      if p != "same-block-size"))))
    # largest first: the first layout with a counterexample is not the least, so the
    # joint queries find a smaller prompt and then the first layout with it
    layouts = list(reversed(check.size_space()))
    args = (thm, sem, assumed, 1, TEMPLATE, layouts, time.monotonic() + 120)
    asked: list[object] = []
    least_joint = check._least_joint

    def spy(*a: Any) -> Any:
        asked.append(least_joint(*a))
        return asked[-1]

    monkeypatch.setattr(check, "_least_joint", spy)
    joint = check._least(*args)
    assert asked and asked[0] is not None  # the joint search found the least

    def undecided(*a: object) -> None:
        raise check._Fallback

    monkeypatch.setattr(check, "_least_joint", undecided)
    assert check._least(*args) == joint == ((3, 17), False)


def test_witness_shared_by_premises_not_by_theorem() -> None:
    """A found witness is kept for theorems with the same premises (the query reads no
    theorem but maximality's), and a mutant's code does not find it."""
    from dataclasses import replace

    from proofs import mutants, witness

    sem = get_semantics(V023)
    first = witness.witness("termination", sem, [])
    again = witness.witness("leaves-last-token", sem, [])
    assert first.found and again.seconds == 0.0
    assert again == replace(first, seconds=0.0)
    key = next(k for k in witness._FOUND if k[0] == sem and not k[2])
    mutants._forget_proofs()
    assert key not in witness._FOUND
