"""The layered proof of 0.33.0's partial-tail phase (``proofs/tail_layers_chunked.py``) closes
for every layout with partial tails on, is not vacuous, needs what it assumes, and its
exact unbounded steps (``proofs/tail_chunked.py``) are pinned to ``model/lookup_chunked.py``.

* Every query is unsatisfiable; its premises are satisfiable (a weakened summary or a
  dropped lemma turns a query red).
* Conformance: the complete-chunk turns and the tail's steps composed agree with the
  model on generated layouts with partial tails on (several groups of each kind, EAGLE,
  pending and RETRY keys, being-loaded chunks, caps, GPU hits), and a copy without the
  EAGLE margin, the EAGLE search block, the bridge miss, a cap on max_boundary (the
  EAGLE hash cap: a key past the request's hashes, where model/ raises) or the
  deferral disagrees on a scenario.
* The real partial-tail layouts (docs/layouts-vllm-0.33.0.md) are instances of the
  proved statement (the start-up premises hold for their sizes).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import z3

from model.evaluate import evaluate
from model.real_layouts import load_templates
from model.scenario import Scenario, parse_scenario
from model.semantics import get_semantics
from proofs import tail_chunked, tail_layers_chunked
from proofs.conformance_tail_chunked import encode_scenario, in_scope
from releases import fix_003_cap_min, vllm_0_33_0
from tests import gen_chunked as gen
from tests.gen_chunked import SEMANTICS
from tests.sabotage import sabotaged_copy
from tests.subset import part

V033 = vllm_0_33_0.SEMANTICS.name
CAP_MIN = fix_003_cap_min.SEMANTICS.name


def _check(q: list[z3.BoolRef]) -> z3.CheckSatResult:
    s = z3.Solver()
    s.set("timeout", 30_000)
    s.add(*q)
    return s.check()


# loads-stored-only: slow below; whole-blocks and maximality share these lemmas and loops,
# their own queries: test_tail_queries_with_preconditions_are_proved
@pytest.mark.parametrize(
    "thm",
    [
        t
        for t in tail_layers_chunked.COVERED
        if t not in ("loads-stored-only", "whole-blocks", "maximality")
    ],
)
def test_tail_queries_are_proved(thm: str) -> None:
    for name, build in tail_layers_chunked.proof_queries(thm):
        assert _check(build()) == z3.unsat, name


def test_tail_premises_hold() -> None:
    """Not vacuous: each lemma's and each step's premises (all but its negated claim)
    hold somewhere."""
    sem = get_semantics(V033)
    for name in tail_layers_chunked.LEMMAS:
        for kind in (tail_chunked.FA, tail_chunked.MAMBA):
            if name == "confirmed-hits" and kind == tail_chunked.MAMBA:
                continue  # only full-attention groups confirm chunks
            q = tail_layers_chunked.lemma_query(name, kind, negated=False, sem=sem)
            assert _check(q) == z3.sat, name
    for name, q in (
        tail_layers_chunked.bridge_obligations(True) + tail_layers_chunked.key_obligations()
    ):
        if "start" not in name:
            assert _check(q[:-1]) == z3.sat, name
    for name, q in tail_layers_chunked.scan_obligations(negated=False):
        assert _check(q) == z3.sat, name


def test_weakened_search_summary_turns_red(monkeypatch: pytest.MonkeyPatch) -> None:
    """A summary that forgets the bound by max_boundary lets a tail end past the last
    prompt token: leaves-last-token's tail query turns sat."""
    assert _check(tail_layers_chunked.final_query("leaves-last-token", "mamba", True)) == z3.unsat

    def weak(pro: Any, mbp: Any, bp: Any, st: Any) -> z3.BoolRef:
        return z3.Implies(st.found, pro.cb < st.chosen)

    monkeypatch.setattr(tail_layers_chunked, "scan_summary", weak)
    assert _check(tail_layers_chunked.final_query("leaves-last-token", "mamba", True)) == z3.sat


def test_dropped_bridge_summary_turns_red(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the bridge loops' summary (a miss only when the bridge is looked at) a miss
    could raise max_boundary past the prompt's last token."""
    monkeypatch.setattr(tail_layers_chunked, "bridge_summary", lambda pro, missed: z3.BoolVal(True))
    assert _check(tail_layers_chunked.final_query("leaves-last-token", "mamba", True)) == z3.sat


def test_every_tail_lemma_is_used() -> None:
    sem = get_semantics(V033)
    names = {n for n, _ in tail_layers_chunked.proof_queries("loads-stored-only", sem)}
    for lemma in tail_layers_chunked.LEMMAS:
        kinds = ("full_attention",) if lemma == "confirmed-hits" else ("full_attention", "mamba")
        assert all(any(n.startswith(f"tail lemma {lemma} ({k}") for n in names) for k in kinds), (
            lemma
        )


@pytest.mark.slow
@pytest.mark.parametrize("semantics", SEMANTICS)
def test_tail_loads_stored_only_is_proved(semantics: str) -> None:
    """loads-stored-only's tail queries (the bridge readiness, the confirmed chunks, the
    chunk cases, the same load without a tail) close on every semantics."""
    sem = get_semantics(semantics)
    for name, build in tail_layers_chunked.proof_queries("loads-stored-only", sem):
        assert _check(build()) == z3.unsat, name


@pytest.mark.slow
def test_dropped_bridge_readiness_turns_red() -> None:
    """Without the bridge loops' readiness a loaded bridge chunk could be a miss: the
    bridge case of loads-stored-only turns sat."""
    q = tail_layers_chunked.stored_only_query("full_attention", "the bridge")
    assert _check(q) == z3.unsat
    ready = [
        c
        for c in q
        if "bridge_pending" in str(c)
        and "unconfirmed" not in str(c)
        and str(c).startswith("Implies(And(Not(bridge_missed), Not(bridge_pending))")
    ]
    assert len(ready) == 1
    assert _check([c for c in q if c is not ready[0]]) == z3.sat


REAL = [t for t in load_templates() if t.accepted and t.supports_partial_tail]


def test_real_partial_tail_layouts_are_instances() -> None:
    """Each real layout with partial tails on (up to 7 Mamba groups, 33-195 hash blocks
    per block) satisfies the tail proof's start-up premises for a whole layout, with its
    own sizes: the proved statement instantiates to it."""
    assert len(REAL) >= 10
    for t in REAL:
        kinds = tuple(g.kind for g in t.groups)
        from proofs.encoding import Enc

        enc = Enc()
        tc = tail_chunked.symbolic_tail_config(kinds)
        block, tph = t.groups[0].block_size, t.hash_block_size
        assert tph is not None
        pin = [tc.block == block, tc.tph == tph, tc.base.prompt == 3 * block, tc.base.computed == 0]
        pin += [e == z3.BoolVal(g.eagle) for e, g in zip(tc.base.eagle, t.groups, strict=True)]
        assert _check(enc.cons + [tail_chunked.startup(enc, tc, True)] + pin) == z3.sat, t.key


# --- conformance of the tail encoding to model/ -------------------------------------------


def scenarios(count: int, seed: int = 0, semantics: Sequence[str] = SEMANTICS
              ) -> list[Scenario]:
    return gen.scenarios(gen.tail_groups_dict, in_scope, count, seed, semantics)


def conforms(s: Scenario, mod: ModuleType = tail_chunked, seen: Counter[str] | None = None) -> None:
    o = evaluate(s)
    assert o.refused is None and o.lookup is not None
    e = encode_scenario(s, o.lookup.passes, mod)
    assert e.startup, "start-up constraints refuse a scenario model/ takes"
    assert e.unique, "the encoding's answer is not unique"
    # model/ raises KeyPastHashes there (0.33.0 cannot get there): the encoding never may
    assert not e.past_hashes, "encoding: a partial-tail key past the request's hashes"
    assert (e.hit, e.boundary) == (o.hit_tokens, o.tail_boundary), (
        f"hit: encoding {e.hit} at {e.boundary} vs model {o.hit_tokens} at {o.tail_boundary}"
    )
    if o.hit_tokens:
        model_loads = {ld.group: (tuple(ld.blocks), ld.state_position) for ld in o.loads}
        assert e.loads == model_loads, f"load: encoding {e.loads} vs model {model_loads}"
    covered = set(tail_chunked.VIOLATIONS) | {"loads-stored-only"}
    assert e.violations == {v.invariant for v in o.violations} & covered, "violations"
    if seen is not None:
        kinds = Counter(g.kind for g in s.groups)
        seen["examples"] += 1
        seen["tail hit"] += o.tail_boundary is not None
        seen["deferred"] += o.hit_tokens is None
        seen["EAGLE margin"] += any(g.eagle and g.kind == "full_attention" for g in s.groups)
        seen["several Mamba groups"] += kinds["mamba"] >= 2


# scenarios, each the witness of a sabotage below (found by the generator, seed 5)
WITNESSES: dict[str, dict[str, Any]] = json.loads(
    (Path(__file__).parent / "tail_sabotages_chunked.json").read_text()
)

SABOTAGES = {
    # scheduler.py:1158: an EAGLE group's key ends one hash block past the boundary
    "eagle-margin-key": (
        "    return z3.If(tc.base.eagle[g], tc.tph, 0)",
        "    return z3.IntVal(0)",
    ),
    # scheduler.py:1083: two search blocks with an EAGLE margin (the release's step,
    # releases/steps.py: the encoding must run it; here one block, the hash cap kept)
    "eagle-search-blocks": (
        "    mb = tc.steps.tail_search(TurnArith(enc), cb, block, c.prompt, hashed, tph, "
        "tc.margin_on)",
        "    mb = zmin(zmin(c.prompt - 1, cb + block - 1), z3.If(tc.margin_on, hashed - tph, "
        "c.prompt))",
    ),
    # scheduler.py:1130: a bridge miss lowers max_boundary below the bridge
    "bridge-miss": ("    return z3.If(missed, pro.bridge_b - tc.tph, pro.mb)", "    return pro.mb"),
    # scheduler.py:1095: max_num_new_tokens caps max_boundary
    "new-tokens-cap": ("    mb = z3.If(c.has_new_cap, zmin(mb, local + c.new_cap), mb)", ""),
    # scheduler.py:1097: max_load_tokens caps max_boundary
    "load-cap": ("    mb = z3.If(c.has_load_cap, zmin(mb, local + c.load_cap), mb)", ""),
    # scheduler.py:1088: the EAGLE proof key needs a hash past the boundary (the step's;
    # here two search blocks without the cap)
    "eagle-hash-cap": (
        "    mb = tc.steps.tail_search(TurnArith(enc), cb, block, c.prompt, hashed, tph, "
        "tc.margin_on)",
        "    mb = zmin(c.prompt - 1, cb + z3.If(tc.margin_on, 2 * block, block) - 1)",
    ),
    # scheduler.py:1150: a pending key defers a request with no complete hit
    "deferral": ("z3.And(z3.Not(tail), st.pending, complete_hit == 0)", "z3.BoolVal(False)"),
    # model/invariants.py whole_blocks: a partial-tail hit ends inside a block by design
    "whole-blocks-tail": (
        "z3.And(active(a), z3.Not(a.tail), a.hit < tc.block)",
        "z3.And(active(a), a.hit < tc.block)",
    ),
}


def sabotaged(name: str) -> ModuleType:
    """A copy of proofs/tail_chunked.py with one step removed, loaded in-process."""
    return sabotaged_copy(tail_chunked, *SABOTAGES[name], f"tail-{name}")


EXAMPLES = 3  # the default suite: about a second
MANY = part(300)  # -m conformance (.ci/run: CONFORMANCE_SHARE, tests/subset.py)


def _run(count: int, least: int, seed: int = 0) -> Counter[str]:
    return gen.tally(
        scenarios(count, seed),
        conforms,
        ("tail hit", "EAGLE margin", "several Mamba groups"),
        least,
    )


def test_tail_v033_conforms_to_model() -> None:
    _run(EXAMPLES, 1)


@pytest.mark.conformance
@pytest.mark.timeout(1200)
def test_tail_v033_conforms_to_model_many() -> None:
    seen = _run(MANY, part(20), seed=1)
    assert seen["deferred"] >= part(5), seen
    print(dict(seen))


# what the conformance check reports for a sabotage (default: a different hit)
MISMATCH = {
    "eagle-hash-cap": "encoding: a partial-tail key past the request's hashes",
    "whole-blocks-tail": "violations",
}

# the default suite runs four (a second); -m slow the others
QUICK = ("bridge-miss", "deferral", "eagle-hash-cap", "new-tokens-cap", "whole-blocks-tail")


@pytest.mark.parametrize(
    "name",
    [n if n in QUICK else pytest.param(n, marks=pytest.mark.slow) for n in sorted(SABOTAGES)],
)
def test_sabotaged_tail_v033_fails_conformance(name: str) -> None:
    s = parse_scenario(WITNESSES[name])
    conforms(s)  # the real encoding agrees with model/ here
    with pytest.raises(AssertionError, match=MISMATCH.get(name, "hit: encoding")):
        conforms(s, sabotaged(name))


@pytest.mark.slow
@pytest.mark.parametrize("semantics", SEMANTICS)
def test_tail_witness(semantics: str) -> None:
    """A partial-tail hit that restores a Mamba state satisfies the tail proof's premises
    and replays through model/ (same hit and boundary)."""
    w = tail_layers_chunked.witness("", get_semantics(semantics))
    assert w.found, w.note
    assert w.scenario is not None and w.hit > 0
    o = evaluate(parse_scenario(w.scenario))
    assert o.tail_boundary is not None and o.hit_tokens == w.hit


def test_weakened_key_lemma_turns_red(monkeypatch: pytest.MonkeyPatch) -> None:
    """key-ready without its HIT conjunct no longer gives the keys' summary (a boundary
    could be accepted with a key that is not a HIT)."""

    def weak(before: Any, after: Any, ok: z3.BoolRef) -> z3.BoolRef:
        return z3.Implies(
            z3.And(z3.Not(after.missed), z3.Not(after.pending)),
            z3.And(z3.Not(before.missed), z3.Not(before.pending)),
        )

    monkeypatch.setitem(
        tail_layers_chunked.LEMMAS,
        "key-ready",
        replace(tail_layers_chunked.LEMMAS["key-ready"], fact=weak),
    )
    q = dict(tail_layers_chunked.key_obligations())
    assert _check(q["keys: a turn of any group keeps it"]) == z3.sat


@pytest.mark.slow
@pytest.mark.parametrize(
    "thm",
    ["no-partial-state", "leaves-last-token", "loads-stored-only", "whole-blocks", "maximality"],
)
def test_check_routes_tails_through_the_layered_proof(thm: str) -> None:
    """``proofs.check`` answers the 0.33.0 rows from both layered proofs: the scope says
    partial tails on or off, and no bounded scope is left."""
    from proofs.check import check

    v = check(thm, V033, timeout_ms=300_000)
    assert v.status == "PROVED", v.note
    assert v.scope is not None and "partial tails on or off" in v.scope
    assert v.tails_bounded is None
    o = evaluate(
        parse_scenario(tail_layers_chunked.witness("", get_semantics(V033)).scenario or {})
    )
    assert o.tail_boundary is not None and not o.violations
    assert "bounded" not in v.note and "tail_layers_chunked" in v.note


def test_model_refuses_a_tail_key_past_the_hashes() -> None:
    """model/ never answers MISS for a partial-tail key past the request's hashes (0.33.0
    would index ``block_hashes`` past its end): on eagle-hash-cap's witness the EAGLE key
    at boundary 6 ends at token 8, past the 3 hashes (6 tokens)."""
    from model import layout_chunked
    from model.lookup_chunked import KeyPastHashes, _lookup_partial_tail, _Manager

    s = parse_scenario(WITNESSES["eagle-hash-cap"])
    layout = layout_chunked.resolve_layout(s)
    assert _lookup_partial_tail(layout, s, _Manager(s, layout), 4, False) == (False, False)
    with pytest.raises(KeyPastHashes, match="token 8 is past the request's hashes"):
        _lookup_partial_tail(layout, s, _Manager(s, layout), 6, False)


def test_confirmed_hits_kept_needs_own_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another group's turn keeps confirmed-hits (premises hold; the claim is proved); a
    composition that wrote every group's lookup_hit_end_chunk_idx on each turn breaks it."""
    sem = get_semantics(V033)
    assert (
        _check(tail_layers_chunked.confirmed_hits_kept_query("full_attention", sem, negated=False))
        == z3.sat
    )
    assert _check(tail_layers_chunked.confirmed_hits_kept_query("full_attention", sem)) == z3.unsat

    def every(c: Any, d: Any, g: int, before: Any, t: Any, ends: Any) -> Any:
        return tuple(tail_chunked.hit_end_after(c, d, g, before, t, e) for e in ends)

    monkeypatch.setattr(tail_chunked, "hit_ends_after", every)
    assert _check(tail_layers_chunked.confirmed_hits_kept_query("full_attention", sem)) == z3.sat


# --- whole-blocks and maximality with partial tails on -----------------------------------

PRE = {
    "whole-blocks": ("full-chunk-within-windowed",),
    "maximality": ("no-eagle", "caps-reach-prompt"),
}


@pytest.mark.parametrize("thm", sorted(PRE))
def test_tail_queries_with_preconditions_are_proved(thm: str) -> None:
    """Their answer queries and the layouts query under the theorem's preconditions (the
    lemmas and loops are the other theorems': ``test_tail_queries_are_proved``)."""
    sem = get_semantics(V033)
    for name, build in tail_layers_chunked.proof_queries(thm, sem, PRE[thm]):
        if name.startswith(("layouts", thm)):
            assert _check(build()) == z3.unsat, name


def test_tail_maximality_premises_hold() -> None:
    for kind in (tail_chunked.FA, tail_chunked.MAMBA):
        for tail in (True, False):
            assert _check(tail_layers_chunked.maximality_query(kind, tail, negated=False)) == z3.sat


def test_tail_maximality_needs_the_loop_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without what the tails-off maximality loop leaves (a deferral or
    max_hit_size_tokens at or above the valid hit) neither answer is maximal."""
    from proofs import maximality_layers_chunked

    monkeypatch.setattr(
        maximality_layers_chunked, "loop_done", lambda halted, defer, m, c: z3.BoolVal(True)
    )
    for tail in (True, False):
        assert _check(tail_layers_chunked.maximality_query("mamba", tail)) == z3.sat, tail


def test_tail_maximality_needs_the_search_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    """A search summary that forgets the boundary is past the complete boundary lets a
    partial-tail hit fall below the complete (so below a valid) hit."""
    assert _check(tail_layers_chunked.maximality_query("full_attention", True)) == z3.unsat

    def weak(pro: Any, mbp: Any, bp: Any, st: Any) -> z3.BoolRef:
        return z3.Implies(st.found, st.chosen <= mbp)

    monkeypatch.setattr(tail_layers_chunked, "scan_summary", weak)
    assert _check(tail_layers_chunked.maximality_query("full_attention", True)) == z3.sat


def test_tail_layouts_take_no_eagle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Layouts with partial tails on may have EAGLE groups: the tails-off maximality proof
    covers them only with no-eagle taken as a premise (a layouts query that claimed every
    such layout keeps it turns red); the preconditions they do keep are shown, not
    taken."""
    pre = PRE["maximality"]
    assert _check(tail_layers_chunked.layouts_query(pre)) == z3.unsat
    monkeypatch.setattr(
        tail_layers_chunked, "TAILS_KEEP", (*tail_layers_chunked.TAILS_KEEP, "no-eagle")
    )
    assert _check(tail_layers_chunked.layouts_query(pre)) == z3.sat


def test_whole_blocks_tail_hit_is_excluded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A partial-tail hit ends inside a block by design: counted as a violation (the
    sabotage), the tail query turns red."""
    q = tail_layers_chunked.final_query("whole-blocks", "mamba", True)
    assert _check(q) == z3.unsat
    monkeypatch.setitem(
        tail_chunked.VIOLATIONS,
        "whole-blocks",
        lambda enc, tc, a: z3.And(tail_chunked.active(a), a.hit < tc.block),
    )
    assert _check(tail_layers_chunked.final_query("whole-blocks", "mamba", True)) == z3.sat


@pytest.mark.slow
@pytest.mark.parametrize("semantics", SEMANTICS)
@pytest.mark.parametrize("thm", sorted(PRE))
def test_tail_witness_with_preconditions(thm: str, semantics: str) -> None:
    """whole-blocks' and maximality's premises with partial tails on admit a partial-tail
    hit that restores a Mamba state (maximality: beside a valid hit, no EAGLE group)."""
    pre = ("no-eagle",) if semantics == CAP_MIN and thm == "maximality" else PRE[thm]
    w = tail_layers_chunked.witness(thm, get_semantics(semantics), pre, 60_000)
    assert w.found, w.note
    assert w.scenario is not None
    s = parse_scenario(w.scenario)
    o = evaluate(s)
    assert o.tail_boundary is not None and o.hit_tokens == w.hit
    if thm == "maximality":
        assert w.valid_hit is not None and 1 <= w.valid_hit <= w.hit
        assert not any(g.eagle for g in s.groups)


def test_light_settings_reach_the_chunk_queries() -> None:
    """``new_solver``'s lighter nonlinear settings name queries the proof asks (a renamed
    query would silently lose them), and only the loads-stored-only chunk cases."""
    sem = get_semantics(V033)
    names = [n for n, _ in tail_layers_chunked.proof_queries("loads-stored-only", sem)]
    light = [n for n in names if n.startswith(tail_layers_chunked.LIGHT_NL_QUERIES)]
    assert len(light) == 4
    assert all("a chunk" in n for n in light)
