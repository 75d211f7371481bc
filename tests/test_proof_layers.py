"""The layered proof covers every layout, and cannot be fooled by an unproved assumption.

* The loop obligations (``proofs.abstract``) are proved for any number of groups: pinned
  to pure Mamba, full attention + Mamba and two Mamba groups they stay proved, their
  premises are satisfiable there (not vacuous), and every concrete run of the model on
  such layouts ends where the proved summary says.
* Every fact the abstract loop assumes is a ``proofs.lemmas`` definition that
  ``proofs.layers`` proves for every kind; weakening the lemma (the sabotage "drop the
  not-deferred guard of post") turns the lemma's query satisfiable (red).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace

import pytest
import z3

import proofs.check as check_mod
import proofs.layers as layers
import proofs.lemmas as lemmas
import proofs.theorems as theorems
from model.evaluate import evaluate
from model.layout import cdiv
from model.scenario import Group, Scenario
from model.semantics import get_semantics
from proofs import abstract
from proofs.check import Verdict, proof_queries
from proofs.encoding import (
    FA,
    Enc,
    derive,
    fresh_state,
    group_step,
    startup,
    symbolic_config,
    symbolic_env,
)
from proofs.layers import KINDS, lemma_turn
from proofs.results import Row
from proofs.theorems import THEOREMS, Context
from proofs.witness import Witness
from proofs.witness import _query as witness_query
from releases import alt_round_num_hit, vllm_0_24_0

V024 = vllm_0_24_0.SEMANTICS.name
ROUND_NUM_HIT = alt_round_num_hit.SEMANTICS.name

LAYOUTS = {
    "pure Mamba": ("mamba",),
    "full attention + Mamba": ("full_attention", "mamba"),
    "two Mamba groups": ("mamba", "mamba"),
}


def _check(q: list[z3.BoolRef]) -> z3.CheckSatResult:
    s = z3.Solver()
    s.set("timeout", 30_000)
    s.add(*q)
    return s.check()


@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parametrize("maximal", [False, True])
def test_loop_proof_instantiates_to_layout(name: str, maximal: bool) -> None:
    kinds = LAYOUTS[name]
    lp = abstract.loop(maximal, False)
    pin = [lp.n == len(kinds), lp.f == kinds.count(FA)]
    for oname, q in abstract.obligations(maximal, False):
        assert _check(q + pin) == z3.unsat, oname
    # not vacuous: the step's premises (all but the negated goal) hold for this layout
    step = dict(abstract.obligations(maximal, False))["loop: a turn of any group keeps the "
                                                       "invariant"]
    assert _check(step[:-1] + pin) == z3.sat
    assert set(kinds) <= set(KINDS)  # every group's kind has its lemmas and final step


def _scenarios(kinds: tuple[str, ...]) -> list[Scenario]:
    out = []
    for bs, prompt, computed_blocks, factor in itertools.product(
            (1, 2, 3), (5, 8, 13), (0, 1), (1, 2)):
        for stored_mask in range(8):
            groups = tuple(
                Group(k, bs, stored=frozenset(i for i in range(8)
                                              if (stored_mask >> ((i + g) % 3)) & 1 or i > 3),
                      mamba_cache_mode="align" if k == "mamba" else None)
                for g, k in enumerate(kinds))
            out.append(Scenario(V024, factor, prompt, computed_blocks * bs, groups))
    return out


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_model_runs_end_where_the_summary_says(name: str) -> None:
    """The proved summary, instantiated: for a converged non-zero hit ending at y, every
    group's store confirms its blocks for y, y is within every group's keys, and y is
    the initial max hit or a multiple of some group's offloaded block."""
    kinds = LAYOUTS[name]
    hits = 0
    for s in _scenarios(kinds):
        o = evaluate(s)
        if o.refused or not o.hit_tokens or o.layout is None:
            continue
        hits += 1
        y = s.num_computed_tokens + o.hit_tokens
        blocks = []
        for cfg, g in zip(o.layout.groups, s.groups, strict=True):
            obs = cfg.offloaded_block_size
            assert y <= s.prompt_tokens // obs * obs
            hi = cdiv(y, obs)
            lo = s.num_computed_tokens // obs
            if cfg.sliding_window_size_in_blocks is not None:
                lo = max(lo, hi - cfg.sliding_window_size_in_blocks)
            assert all(g.answer(b) for b in range(lo, hi)), (s, y)
            blocks.append(obs)
        m0 = s.prompt_tokens - (1 if any(k != FA for k in kinds) else 0)
        if o.layout.mamba_align_size:
            m0 = m0 // o.layout.mamba_align_size * o.layout.mamba_align_size
        assert y == m0 or any(y % b == 0 for b in blocks)
    assert hits >= 20  # the check is not vacuous


def test_every_assumption_has_its_lemma() -> None:
    sem = get_semantics(V024)
    names = {n for n, _ in proof_queries(THEOREMS["maximality"], sem, ())}
    for a in lemmas.ASSUMED:
        if a in ("post", "no-hit-not-deferred", "cut-on-block", "cap-on-block", "keeps",
                 "block-positive"):
            assert all(f"lemma {a} ({k})" in names for k in KINDS), a
        elif a == "valid-bounds":
            assert all(f"lemma {a} ({k})" in names for k in KINDS)
        else:
            assert any(n.startswith(f"lemma {a}") for n in names), a


def test_sabotage_unguarded_post_turns_red(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dropping the not-deferred guard of post (an assumption the lookup does not
    justify: a deferred lookup confirms nothing) makes lemma post fail."""
    sem = get_semantics(V024)
    assert _check(lemma_turn(sem, (), "post", "full_attention")) == z3.unsat

    def unguarded(t: lemmas.Turn, ok_m2: z3.BoolRef) -> z3.BoolRef:
        return z3.Implies(z3.And(z3.Not(t.too_short), z3.Not(t.no_hit)), ok_m2)

    monkeypatch.setitem(lemmas.LEMMAS, "post", replace(lemmas.LEMMAS["post"], fact=unguarded))
    assert _check(lemma_turn(sem, (), "post", "full_attention")) == z3.sat


def _strengthened(orig: Callable[[Context, z3.ArithRef], z3.BoolRef]
                  ) -> Callable[[Context, z3.ArithRef], z3.BoolRef]:
    def valid(ctx: Context, h: z3.ArithRef) -> z3.BoolRef:
        return z3.And(orig(ctx, h), h > ctx.cfg.prompt)
    return valid


def test_sabotage_vacuous_valid_hit_turns_red(monkeypatch: pytest.MonkeyPatch) -> None:
    """A valid_hit no hit satisfies proves maximality vacuously: the witness query
    (here at block size 2, one pass) finds no valid hit any more, and a
    PROVED row without a witness does not match its expectation."""
    sem = get_semantics(V024)
    pre = THEOREMS["maximality"].preconditions
    solver, *_ = witness_query(sem, pre, True, 2, 1, 1)
    assert solver.check() == z3.sat
    proved = Verdict("PROVED", 0.0)
    found = Witness(True, 0.0, valid_hit=1)
    assert Row("maximality", sem.name, proved, "holds", (), found).matches
    monkeypatch.setattr(theorems, "valid_hit", _strengthened(theorems.valid_hit))
    solver, *_ = witness_query(sem, pre, True, 2, 1, 1)
    assert solver.check() == z3.unsat
    assert not Row("maximality", sem.name, proved, "holds", (), Witness(False, 0.0)).matches


@pytest.mark.theorems
def test_sabotage_strengthened_valid_hit_turns_red(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same sabotage on a semantics where maximality fails: the counterexample the
    expectations declare is gone (maximality comes out PROVED), so the row is red."""
    strong = _strengthened(theorems.valid_hit)
    for mod in (theorems, layers, check_mod):
        monkeypatch.setattr(mod, "valid_hit", strong)
    assert not THEOREMS["maximality"].expected[ROUND_NUM_HIT]
    v = check_mod.check("maximality", ROUND_NUM_HIT, timeout_ms=120_000)
    assert v.status == "PROVED"  # against the declared "fails": red


@pytest.mark.parametrize("kind", KINDS)
def test_abstract_turn_is_the_exact_turn(kind: str) -> None:
    """The abstract loop's turn (proofs.abstract.turn) restates group_step's control
    flow over per-group symbols: with its lookup bound to the exact lookup's outcome,
    it computes the same next state (pinned by an unsatisfiable query)."""
    sem = get_semantics(V024)
    enc = Enc()
    cfg = symbolic_config((kind,))
    d = derive(enc, cfg, sem, symbolic_env())
    st = fresh_state(enc, 1, "pre")
    exact, info = group_step(enc, cfg, d, st, 0)
    lp = abstract.loop(False, False)
    s = abstract.fresh("s")
    after, _ = abstract.turn(lp, s, "t")
    out = info.outcome
    bind = [lp.obs(s.k) == d.obs[0], lp.cap(s.k) == d.cap[0], s.k == 0,
            lp.f == (1 if kind == FA else 0), lp.nc == cfg.computed, s.m == st.m,
            s.num_hit == st.num_hit,
            s.defer == st.defer, s.looked == st.looked, s.next == st.next,
            z3.Bool("t_deferred") == out.deferred, z3.Bool("t_no_hit") == out.no_hit,
            z3.Int("t_cut") == out.cut, startup(cfg, sem)]
    same = z3.And(after.halted == exact.halted, z3.Implies(z3.Not(exact.halted), z3.And(
        after.m == exact.m, after.num_hit == exact.num_hit, after.defer == exact.defer,
        after.looked == exact.looked, after.next == exact.next)))
    assert _check(enc.cons + bind + [z3.Not(same)]) == z3.unsat


def test_turn_lemmas_together_fail_as_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The turn lemmas asked in one query (layers.lemma_turns) prove nothing a lemma's
    own query does not: with post sabotaged the joint query is sat, and the proof still
    fails at lemma post, named as before."""
    sem = get_semantics(V024)
    assert _check(layers.lemma_turns(sem, (), layers.TURN_FACTS, "full_attention")) == z3.unsat

    def unguarded(t: lemmas.Turn, ok_m2: z3.BoolRef) -> z3.BoolRef:
        return z3.Implies(z3.And(z3.Not(t.too_short), z3.Not(t.no_hit)), ok_m2)

    monkeypatch.setitem(lemmas.LEMMAS, "post", replace(lemmas.LEMMAS["post"], fact=unguarded))
    assert _check(layers.lemma_turns(sem, (), layers.TURN_FACTS, "full_attention")) == z3.sat
    assumed = tuple(dict.fromkeys((*theorems.RUNTIME, *THEOREMS["whole-blocks"].pre(sem.name))))
    assert check_mod.prove(THEOREMS["whole-blocks"], sem, assumed, 60_000) == (
        "FAILED", "lemma post (full_attention)")
