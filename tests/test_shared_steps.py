"""A step a fix changes is written once (``releases/steps.py``): sabotaging it turns the
model's check AND the proofs' checks red.

Each sabotage removes one fix's step from a copy of ``releases/steps.py`` and runs every
registered semantics that uses the step on the copy. Conformance cannot see it (the
model and both encodings run the same broken function and still agree), so each side is
checked against what the fix is for:

* the model (``model.evaluate``): the fix's witness gets its unfixed answer back;
* the bounded exact encoding (``proofs.encoding_chunked``, through
  ``proofs.conformance_chunked.encode_scenario``): the same, on the same witness;
* the layered proof (``proofs.turn_chunked``): a lemma the fix's theorem rests on gets a
  counterexample.

The sabotages of the encodings' wiring (an encoding that skips the step) are in
``tests/test_conformance_chunked.py`` and ``tests/test_proof_layers_chunked.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

import pytest
import z3

import releases
from model.evaluate import evaluate
from model.scenario import Scenario, parse_scenario
from proofs import layers_chunked, maximality_layers_chunked, turn_chunked
from proofs.conformance_chunked import encode_scenario
from releases import steps
from releases.base import Semantics
from tests.sabotage import sabotaged_copy
from tests.test_conformance_chunked import WITNESSES


@dataclass(frozen=True)
class Sabotage:
    field: str  # the ChunkSteps field the step fills
    step: Callable[..., Any]  # the step (releases/steps.py)
    old: str  # its text
    new: str  # the text without the fix
    witness: str  # a scenario of tests/test_conformance_chunked.WITNESSES
    # the witness under the fix: (hit, violations) with the step, and without it
    fixed: tuple[int | None, frozenset[str]]
    unfixed: tuple[int | None, frozenset[str]]
    # a query of the layered proof that the fix makes unsatisfiable
    query: Callable[[Semantics], list[z3.BoolRef]]


def _cap_min_query(sem: Semantics) -> list[z3.BoolRef]:
    # maximality (pre: no-eagle only): a valid hit ends within the initial bound
    return maximality_layers_chunked.lemma_query(sem, ("no-eagle",), "valid-below-m0",
                                                 turn_chunked.MAMBA)


def _reround_query(sem: Semantics) -> list[z3.BoolRef]:
    # no-partial-state (nothing assumed): a turn leaves the bound on the Mamba align size
    return layers_chunked.lemma_turn(sem, (), "align-after", turn_chunked.FA)


SABOTAGES = {
    # finding 003's fix: a cap below the prompt end keeps its value (0.33.0: one token off)
    "cap-min": Sabotage("last_token", steps.last_token_min,
                        "return a.min(max_hit, num_tokens - 1)", "return max_hit - 1",
                        "cap-min", (2, frozenset()), (0, frozenset()), _cap_min_query),
    # finding 001's fix: the bound rounded to the Mamba align size after each cut (the
    # witness: 0.33.0 hits 3 tokens with the Mamba state at 4; the fix rounds 3 to 2, less
    # than the full-attention chunk: no hit)
    "reround": Sabotage("after_cut", steps.reround_after_cut,
                        "return a.ite(align_on, a.round_down(max_hit, align, label), max_hit)",
                        "return max_hit", "finding-001",
                        (0, frozenset()), (3, frozenset({"no-partial-state"})),
                        _reround_query),
}


def _users(sab: Sabotage) -> list[Semantics]:
    """Every registered semantics whose steps include ``sab.step``."""
    out = [s for s in releases.all_semantics().values()
           if getattr(s.steps, sab.field) is sab.step]
    assert out, f"no registered semantics uses {sab.step.__name__}"
    return out


def _sabotaged(sab: Sabotage, sem: Semantics, label: str) -> Semantics:
    mod: ModuleType = sabotaged_copy(steps, sab.old, sab.new, f"steps-{label}")
    return replace(sem, steps=replace(sem.steps, **{sab.field: getattr(mod, sab.step.__name__)}))


def _answers(s: Scenario) -> tuple[tuple[int | None, frozenset[str]], int | None]:
    o = evaluate(s)
    return (o.hit_tokens, frozenset(v.invariant for v in o.violations)), encode_scenario(s).hit


def _check(q: list[z3.BoolRef]) -> z3.CheckSatResult:
    solver = z3.Solver()
    solver.set("timeout", 60_000)
    solver.add(*q)
    return solver.check()


@pytest.mark.parametrize("label", sorted(SABOTAGES))
def test_sabotaged_shared_step_goes_red_in_model_and_proofs(
        label: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sab = SABOTAGES[label]
    for sem in _users(sab):
        s = parse_scenario(WITNESSES[sab.witness] | {"semantics": sem.name})
        # with the step: the fix's answer on both sides, its lemma proved
        model, encoding = _answers(s)
        assert model == sab.fixed and encoding == sab.fixed[0], (sem.name, model, encoding)
        assert _check(sab.query(sem)) == z3.unsat, sem.name
        # without it (the registry hands every consumer the sabotaged semantics)
        broken = _sabotaged(sab, sem, label)
        monkeypatch.setitem(releases._REGISTRY, sem.name, broken)
        model, encoding = _answers(s)
        assert model == sab.unfixed, (sem.name, "model", model)
        assert encoding == sab.unfixed[0], (sem.name, "bounded encoding", encoding)
        assert _check(sab.query(broken)) == z3.sat, (sem.name, "layered proof")
        monkeypatch.undo()
