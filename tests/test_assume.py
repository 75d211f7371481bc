"""Issue 23: facts enter the abstract loops only through ``proofs.assume`` (the audit
names any other), and the per-group environment and start-up are pinned to layouts
model/ accepts (``proofs.pinned_chunked``), and the property step's violation to the
committed counterexamples (``proofs.pinned_violation_chunked``)."""

from __future__ import annotations

import itertools

import pytest
import z3

import releases
from proofs import (
    abstract,
    abstract_chunked,
    assume,
    lemmas,
    lemmas_chunked,
    maximality_layers_chunked,
    pinned_chunked,
    pinned_violation_chunked,
    turn_chunked,
)
from proofs.encoding import Enc

ALL_CHUNKED = {lemmas_chunked.WHERE: tuple(lemmas_chunked.LEMMAS)}


@pytest.mark.parametrize("flags", list(itertools.product((False, True), repeat=5)))
def test_chunked_loop_passes_the_audit(flags: tuple[bool, ...]) -> None:
    reround, rerun, aligned, stored, whole = flags
    loop = abstract_chunked.obligations(reround, rerun, aligned, stored, whole)
    names = lemmas_chunked.assumed(reround, rerun, aligned, stored)
    only = {(lemmas_chunked.WHERE, "down"): abstract_chunked.full_attention}
    assert assume.check(loop, {lemmas_chunked.WHERE: names}, only) is None


@pytest.mark.parametrize("maximal,quiet", list(itertools.product((False, True), repeat=2)))
def test_older_loop_passes_the_audit(maximal: bool, quiet: bool) -> None:
    loop = abstract.obligations(maximal, quiet)
    only = {(lemmas.WHERE, "down"): abstract.full_attention}
    assert assume.check(loop, {lemmas.WHERE: tuple(lemmas.LEMMAS)}, only) is None


def test_maximality_loop_passes_the_audit() -> None:
    loop = maximality_layers_chunked.obligations(False, False)
    proved = dict(ALL_CHUNKED)
    proved[maximality_layers_chunked.WHERE] = tuple(maximality_layers_chunked.LEMMAS)
    assert assume.check(loop, proved) is None


def test_a_bare_term_is_named() -> None:
    """Issue 23's example: post's conclusion without its guard, appended directly."""
    lp = abstract_chunked.loop(False, False, False, True)
    s = abstract_chunked.fresh("s")
    after, uses, _ = abstract_chunked.turn(lp, s, "t")
    q = assume.shape(s.k < lp.n) + assume.assume(uses) + [lp.ok(s.k, after.m)]
    why = assume.audit(q, ALL_CHUNKED)
    assert why is not None and why.startswith("a fact not made from a lemma")


def test_a_lemma_not_proved_is_named() -> None:
    lp = abstract_chunked.loop(False, False, False, True)
    s = abstract_chunked.fresh("s")
    _, uses, _ = abstract_chunked.turn(lp, s, "t")
    q = assume.assume(uses)
    why = assume.audit(q, {lemmas_chunked.WHERE: ("pre-below", "cut-below")})
    assert why is not None and "no query of this proof proves" in why


def test_contradictory_premises_are_named() -> None:
    lp = abstract_chunked.loop(False, False, False, False)
    loop = [(n, q[:-1] + assume.shape(lp.n < 0) + q[-1:]) for n, q in
            abstract_chunked.obligations(False, False, False, False)]
    why = assume.check(loop, ALL_CHUNKED)
    assert why is not None and "not satisfiable" in why


def test_pinned_layouts_hold() -> None:
    assert pinned_chunked.check(releases.newest().name) is None


def test_tightened_startup_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """startup without its prefix-caching guard (every block size equal whenever a Mamba
    group is there): a pinned layout with different block sizes is excluded."""
    orig = turn_chunked.startup

    def tight(enc: Enc, cfg: turn_chunked.Cfg) -> z3.BoolRef:
        return z3.And(orig(enc, cfg), z3.And([x == cfg.gpu[0] for x in cfg.gpu]))

    monkeypatch.setattr(turn_chunked, "startup", tight)
    monkeypatch.setattr(pinned_chunked, "_DONE", {})
    why = pinned_chunked.check(releases.newest().name)
    assert why is not None and "start-up" in why


def test_tightened_environment_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """derive with every group's block the Mamba block: excluded."""
    orig = turn_chunked.derive

    def tight(enc: Enc, cfg: turn_chunked.Cfg,
              env: turn_chunked.Env | None = None) -> turn_chunked.D:
        d = orig(enc, cfg, env)
        if env is not None:
            enc.add(*[z3.Implies(env.has_mamba, x == env.mamba_gpu) for x in cfg.gpu])
        return d

    monkeypatch.setattr(turn_chunked, "derive", tight)
    monkeypatch.setattr(pinned_chunked, "_DONE", {})
    why = pinned_chunked.check(releases.newest().name)
    assert why is not None and "environment" in why


def test_down_beyond_full_attention_is_named() -> None:
    """down is proved for full-attention groups only: assumed of a group its hypothesis
    does not restrict to them, the audit names it."""
    lp = abstract_chunked.loop(False, False, False, True)
    g, a, b = z3.Int("g"), z3.Int("a"), z3.Int("b")
    only = {(lemmas_chunked.WHERE, "down"): abstract_chunked.full_attention}
    ok = assume.assume([lemmas_chunked.use("down", a, b, lp.ok(g, a), lp.ok(g, b),
                                           when=abstract_chunked.full_attention(g), group=g)])
    assert assume.audit(ok, ALL_CHUNKED, only) is None
    for when in (None, z3.And(0 <= g, g < lp.n)):
        bad = assume.assume([lemmas_chunked.use("down", a, b, lp.ok(g, a), lp.ok(g, b),
                                                when=when, group=g)])
        why = assume.audit(bad, ALL_CHUNKED, only)
        assert why is not None and "not proved for" in why


@pytest.mark.parametrize("thm", pinned_violation_chunked.PINNED)
def test_pinned_violations_hold(thm: str) -> None:
    assert pinned_violation_chunked.cases(thm), thm
    assert pinned_violation_chunked.check(thm) is None


@pytest.mark.parametrize("thm", ["no-partial-state", "loads-stored-only"])
def test_vacuous_property_step_is_caught(thm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The violation dropped (proofs/sabotage.py's vacuous property step) or weakened
    to one the counterexamples do not meet (the hit beyond the prompt): caught."""
    orig = turn_chunked.VIOLATIONS[thm]

    def beyond(enc: Enc, cfg: turn_chunked.Cfg, d: turn_chunked.D,
               r: turn_chunked.Result) -> z3.BoolRef:
        return z3.And(cfg.computed + r.hit > cfg.prompt, orig(enc, cfg, d, r))

    for weak in (lambda *a: z3.BoolVal(False), beyond):
        monkeypatch.setitem(turn_chunked.VIOLATIONS, thm, weak)
        monkeypatch.setattr(pinned_violation_chunked, "_DONE", {})
        why = pinned_violation_chunked.check(thm)
        assert why is not None and "false there" in why, why


@pytest.mark.parametrize("thm", pinned_violation_chunked.PINNED)
def test_inactive_property_step_is_caught(thm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every step's violation asks for an active answer; never active: caught (whole-blocks'
    violation is written in layers_chunked.whole_terms, not in VIOLATIONS)."""
    monkeypatch.setattr(turn_chunked, "active", lambda r: z3.BoolVal(False))
    monkeypatch.setattr(pinned_violation_chunked, "_DONE", {})
    why = pinned_violation_chunked.check(thm)
    assert why is not None and "false there" in why, why


def test_pinned_violations_are_asked() -> None:
    """The layered proof asks the pin first among its own queries (after the layouts')."""
    from model.semantics import get_semantics
    from proofs import layers_chunked

    sem = get_semantics(releases.newest().name)
    for thm in pinned_violation_chunked.PINNED:
        names = [n for n, _ in layers_chunked.proof_queries(thm, sem, ())]
        assert names[1] == pinned_violation_chunked.name(thm), names[:3]
