"""The layered maximality proof for vLLM 0.33.0 (``proofs/maximality_layers_chunked.py``).

* Its per-group restatement of the valid hits (``GLOBAL_RULES`` + ``GROUP_RULES`` for
  every group) says what ``model/maximality_chunked.py`` says on generated scenarios (every
  hit 0 .. prompt, several groups of each kind); dropping any rule, or strengthening the
  restatement, makes them disagree.
* The loop obligations pinned to pure Mamba, full attention + Mamba, two Mamba groups and
  several attention groups stay proved with satisfiable premises; model runs on such
  layouts under the preconditions never answer below a valid hit.
* Every maximality fact the loop assumes has its lemma for every kind; dropping a lemma's
  guard or a loop assumption turns a query red; without caps-reach-prompt the lemma
  valid-below-m0 fails, without no-eagle the lemma keeps fails.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest
import z3

from model.evaluate import evaluate
from model.layout_chunked import ChunkLayout
from model.maximality_chunked import RULES, is_valid_hit
from model.scenario import Scenario
from model.semantics import get_semantics
from proofs import abstract_chunked as abstract
from proofs import maximality_layers_chunked, turn_chunked
from proofs.conformance_chunked import valid_hits
from proofs.conformance_turn_chunked import concrete_config, in_scope
from proofs.encoding import Enc
from proofs.lemmas_chunked import Lemma
from releases import fix_003_cap_min, vllm_0_33_0
from tests.test_maximality_chunked import GENERATED
from tests.test_proof_layers_chunked import LAYOUTS, SEMANTICS, _layout_scenarios

V033 = vllm_0_33_0.SEMANTICS.name
CAP_MIN = fix_003_cap_min.SEMANTICS.name

PRE = ("no-eagle", "caps-reach-prompt")


def _check(q: list[z3.BoolRef], timeout_ms: int = 60_000) -> z3.CheckSatResult:
    s = z3.Solver()
    s.set("timeout", timeout_ms)
    s.add(*q)
    return s.check()


# --- the per-group valid hits against the model ---------------------------------------


def split_hits(s: Scenario) -> frozenset[int]:
    """The hits ``h`` (0 .. num_tokens) the per-group restatement calls valid on ``s``."""
    cfg, bound = concrete_config(s)
    enc = Enc(bound=bound)
    d = turn_chunked.derive(enc, cfg)
    h = z3.Int("hit")
    formula = maximality_layers_chunked.valid_hit(enc, cfg, d, h)
    solver = z3.Solver()
    solver.add(*enc.cons)
    return frozenset(
        x for x in range(0, s.num_tokens + 1) if solver.check(z3.And(formula, h == x)) == z3.sat
    )


def model_hits(s: Scenario) -> frozenset[int]:
    layout = evaluate(s).layout
    assert isinstance(layout, ChunkLayout)
    return frozenset(h for h in range(0, s.num_tokens + 1) if is_valid_hit(s, layout, h))


def _multi(count: int, seed: int) -> list[Scenario]:
    """Layouts of several groups of each kind (tests/test_proof_layers_chunked.py's draw)."""
    rng = random.Random(seed)
    out: list[Scenario] = []
    for kinds in LAYOUTS.values():
        for semantics in SEMANTICS:
            out += _layout_scenarios(kinds, semantics, rng, count)
    return out


SCENARIOS = [s for s in GENERATED if in_scope(s)][:30] + _multi(1, 3)


def _agree(items: list[Scenario]) -> int:
    with_hit = 0
    for s in items:
        model, split = model_hits(s), split_hits(s)
        assert model == split, f"valid hits: model {sorted(model)} vs split {sorted(split)} on {s}"
        with_hit += bool(model)
    return with_hit


def test_split_valid_hit_conforms_to_model() -> None:
    assert _agree(SCENARIOS) >= 8


def test_split_valid_hit_equals_the_encodings_valid_hit() -> None:
    """Directly against ``proofs.encoding_chunked.valid_hit`` (the bounded encoding's twin
    of the model) on the scenarios in that encoding's scope."""
    items = [s for s in GENERATED if in_scope(s)][:12]
    assert sum(bool(valid_hits(s)) for s in items) >= 3
    for s in items:
        assert split_hits(s) == valid_hits(s), s


@pytest.mark.slow
def test_split_valid_hit_conforms_to_model_many() -> None:
    assert _agree([s for s in GENERATED if in_scope(s)] + _multi(15, 4)) >= 60


def test_rules_are_the_model_rules() -> None:
    assert not set(maximality_layers_chunked.GLOBAL_RULES) & set(
        maximality_layers_chunked.GROUP_RULES
    )
    assert set(maximality_layers_chunked.GLOBAL_RULES) | set(
        maximality_layers_chunked.GROUP_RULES
    ) == set(RULES)


def _depends_on(rule: str) -> Scenario:
    """A scenario whose valid hits change when ``rule`` is dropped (the model's view)."""
    rest = [r for k, r in RULES.items() if k != rule]
    for s in [*SCENARIOS, *(s for s in GENERATED if in_scope(s))]:
        layout = evaluate(s).layout
        assert isinstance(layout, ChunkLayout)
        y0 = s.num_computed_tokens
        if any(
            is_valid_hit(s, layout, h) != all(r(s, layout, h, y0 + h) for r in rest)
            for h in range(0, s.num_tokens + 1)
        ):
            return s
    raise AssertionError(f"no scenario depends on rule {rule!r}")


@pytest.mark.parametrize("rule", list(RULES))
def test_dropping_a_rule_is_caught(rule: str, monkeypatch: pytest.MonkeyPatch) -> None:
    s = _depends_on(rule)
    _agree([s])
    table = (
        maximality_layers_chunked.GLOBAL_RULES
        if rule in maximality_layers_chunked.GLOBAL_RULES
        else maximality_layers_chunked.GROUP_RULES
    )
    monkeypatch.setattr(
        maximality_layers_chunked,
        "GLOBAL_RULES" if table is maximality_layers_chunked.GLOBAL_RULES else "GROUP_RULES",
        {k: v for k, v in table.items() if k != rule},
    )
    with pytest.raises(AssertionError, match="valid hits: model"):
        _agree([s])


STRONGER: dict[str, Any] = {
    # the bug the precondition excludes, made part of "valid": a proof would then hold
    # without it
    "caps-reach-prompt": lambda enc, cfg, d, h, y: maximality_layers_chunked.precondition(
        "caps-reach-prompt", enc, cfg, d
    ),
    "no windowed group": lambda enc, cfg, d, h, y: z3.Not(d.any_windowed),
    "at most one chunk": lambda enc, cfg, d, h, y: h <= d.tpc[0],
}


@pytest.mark.parametrize("name", list(STRONGER))
def test_strengthened_valid_hit_is_caught(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(maximality_layers_chunked.GLOBAL_RULES, name, STRONGER[name])
    with pytest.raises(AssertionError, match="valid hits: model"):
        _agree(SCENARIOS)


# --- the loop, instantiated ----------------------------------------------------------


@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parametrize("flags", [(False, False), (True, False), (True, True)])
def test_maximality_loop_instantiates_to_layout(name: str, flags: tuple[bool, bool]) -> None:
    kinds = LAYOUTS[name]
    lp = abstract.loop(*flags, False)
    pin = [lp.n == len(kinds), lp.f == kinds.count("full_attention")]
    obligations = dict(maximality_layers_chunked.obligations(*flags))
    for oname, q in obligations.items():
        assert _check(q + pin) == z3.unsat, oname
    step = obligations["maximality loop: a turn of any group keeps the invariant and goes on"]
    assert _check(step[:-1] + pin) == z3.sat  # not vacuous there


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_model_runs_answer_at_least_every_valid_hit(name: str) -> None:
    """The theorem, instantiated on the model: under no-eagle and caps-reach-prompt no
    converged lookup on these layouts answers below a valid hit."""
    rng = random.Random(17)
    hits = 0
    for semantics in SEMANTICS:
        for s in _layout_scenarios(LAYOUTS[name], semantics, rng, 12):
            s = replace(s, groups=tuple(replace(g, eagle=False) for g in s.groups))
            if not _caps_reach(s):  # the caps go
                s = replace(s, max_num_new_tokens=None, max_load_tokens=None)
            o = evaluate(s)
            if o.refused or o.hit_tokens is None:
                continue
            valid = model_hits(s)
            hits += bool(valid)
            assert all(h <= o.hit_tokens for h in valid), (s, o.hit_tokens, valid)
    assert hits >= 3, hits


def _caps_reach(s: Scenario) -> bool:
    if all(g.kind == "full_attention" for g in s.groups):
        return True
    return all(
        c is None or s.num_computed_tokens + c >= s.num_tokens
        for c in (s.max_num_new_tokens, s.max_load_tokens)
    )


# --- the lemmas: each assumption proved, sabotages red ---------------------------------


def test_every_maximality_assumption_has_its_lemma() -> None:
    for semantics in SEMANTICS:
        names = {
            n for n, _ in maximality_layers_chunked.proof_queries(get_semantics(semantics), PRE)
        }
        for a in maximality_layers_chunked.assumed():
            for k in turn_chunked.KINDS:
                cases = (
                    {f"lemma {a} ({k}; Mamba align {c})" for c in ("on", "off")}
                    if (a, k) == ("keeps", "mamba")
                    else {f"lemma {a} ({k})"}
                )
                assert cases <= names, (a, k)
        assert "lemma monotone: x <= y and b >= 1 give x * b <= y * b" in names


def test_covers() -> None:
    assert maximality_layers_chunked.covers("maximality", PRE)
    assert not maximality_layers_chunked.covers(
        "maximality", ("caps-reach-prompt",)
    )  # EAGLE: bounded check
    assert not maximality_layers_chunked.covers("no-partial-state", PRE)


def _small(cfg: turn_chunked.Cfg, st: Any, t: Any) -> list[z3.BoolRef]:
    return [cfg.gpu[0] == 1, cfg.bpc == 1, cfg.prompt <= 4]  # a quick sat


def test_sabotage_unguarded_keeps_turns_red(monkeypatch: pytest.MonkeyPatch) -> None:
    """keeps without its guard (a bound at or above the valid hit) is false."""
    sem = get_semantics(V033)
    assert (
        _check(maximality_layers_chunked.lemma_query(sem, PRE, "keeps", "full_attention"))
        == z3.unsat
    )

    def unguarded(t: Any, c: z3.ArithRef) -> z3.BoolRef:
        return z3.And(t.m1 >= c, t.m2 >= c, z3.Not(t.no_hit))

    monkeypatch.setitem(maximality_layers_chunked.LEMMAS, "keeps", Lemma("keeps", "", unguarded))
    assert (
        _check(maximality_layers_chunked.lemma_query(sem, PRE, "keeps", "full_attention", _small))
        == z3.sat
    )


@pytest.mark.parametrize("dropped", ["keeps", "valid-covers-chunk", "valid-below-m0"])
def test_sabotage_dropped_assumption_turns_red(
    dropped: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop needs each maximality fact: without it an obligation is satisfiable."""
    assert all(
        _check(q) == z3.unsat for _, q in maximality_layers_chunked.obligations(False, False)
    )
    orig = maximality_layers_chunked.fact
    monkeypatch.setattr(
        maximality_layers_chunked,
        "fact",
        lambda name, *a: z3.BoolVal(True) if name == dropped else orig(name, *a),
    )
    assert any(_check(q) == z3.sat for _, q in maximality_layers_chunked.obligations(False, False))


def test_caps_reach_prompt_needed() -> None:
    """Without caps-reach-prompt a valid hit may end past the initial bound (a cap below
    the prompt still loses the last-token margin): lemma valid-below-m0 fails."""
    sem = get_semantics(V033)
    assert (
        _check(
            maximality_layers_chunked.lemma_query(
                sem,
                ("no-eagle",),
                "valid-below-m0",
                "sliding_window",
            )
        )
        == z3.sat
    )


def test_no_eagle_needed() -> None:
    """Without no-eagle an EAGLE group's pop cuts the bound below a valid hit: lemma
    keeps fails."""
    sem = get_semantics(V033)
    assert (
        _check(
            maximality_layers_chunked.lemma_query(
                sem, ("caps-reach-prompt",), "keeps", "full_attention", _small
            )
        )
        == z3.sat
    )


@pytest.mark.parametrize("semantics", SEMANTICS)
def test_witness(semantics: str) -> None:
    w = maximality_layers_chunked.witness(get_semantics(semantics), PRE)
    assert w.found and w.hit > 0 and w.valid_hit, w.note


@pytest.mark.slow
def test_strengthened_to_no_hit_has_no_witness(monkeypatch: pytest.MonkeyPatch) -> None:
    """A valid_hit strengthened until nothing is valid makes the proof vacuous: the
    witness query says so."""
    monkeypatch.setitem(
        maximality_layers_chunked.GLOBAL_RULES, "nothing", lambda enc, cfg, d, h, y: h <= 0
    )
    w = maximality_layers_chunked.witness(get_semantics(V033), PRE, 20_000)
    assert not w.found and "vacuous" in w.note


def test_caps_reach_prompt_formula_conforms() -> None:
    """The turn encoding's caps-reach-prompt says what the plain predicate says; both
    values occur."""
    seen = set()
    for s in [*SCENARIOS, *(s for s in GENERATED if in_scope(s))]:
        cfg, _ = concrete_config(s)
        enc = Enc()
        d = turn_chunked.derive(enc, cfg)
        got = z3.simplify(maximality_layers_chunked.precondition("caps-reach-prompt", enc, cfg, d))
        assert z3.is_true(got) == _caps_reach(s), s
        seen.add(z3.is_true(got))
    assert seen == {True, False}


@pytest.mark.slow
def test_layered_maximality_proves_and_needs_caps() -> None:
    for semantics in SEMANTICS:
        assert (
            maximality_layers_chunked.prove(get_semantics(semantics), PRE, 300_000)[0] == "PROVED"
        ), semantics
    # finding 003's fix keeps the last-token margin below a cap: no-eagle alone
    assert (
        maximality_layers_chunked.prove(get_semantics(CAP_MIN), ("no-eagle",), 300_000)[
            0
        ]
        == "PROVED"
    )
    status, where, _ = maximality_layers_chunked.prove(
        get_semantics(V033), ("no-eagle",), 300_000
    )
    assert status == "FAILED" and "valid-below-m0" in where, (status, where)
