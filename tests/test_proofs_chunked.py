"""The vLLM 0.33.0 checks (``proofs/check_chunked.py``): counterexamples are deterministic,
replay through ``model/`` with their violation and are requests 0.33.0 accepts; a PROVED
result has a witness; the scope is stated with every verdict."""

from __future__ import annotations

import pytest

from model.evaluate import evaluate
from model.scenario import parse_scenario
from model.semantics import get_semantics
from proofs import check_chunked
from proofs.encoding_chunked import SCOPE
from releases import vllm_0_24_0, vllm_0_33_0

V024 = vllm_0_24_0.SEMANTICS.name
V033 = vllm_0_33_0.SEMANTICS.name


def test_scope_is_named_in_every_verdict() -> None:
    v = check_chunked.check("whole-blocks", V033, ("same-block-size",),
                         tails_only=True)  # the bounded verdict the report has left
    assert v.status == "PROVED" and SCOPE.words() in v.note and "termination" in v.note


@pytest.mark.slow
def test_counterexample_is_deterministic_and_replays() -> None:
    sem = get_semantics(V033)
    a, b = (check_chunked.counterexample("no-partial-state", sem, (), 600_000)
            for _ in range(2))
    assert a.status == "COUNTEREXAMPLE" and a.counterexample == b.counterexample
    assert a.counterexample is not None
    o = evaluate(parse_scenario(a.counterexample))
    assert o.refused is None and "no-partial-state" in {v.invariant for v in o.violations}


@pytest.mark.slow
def test_witness_of_a_proof_replays() -> None:
    w = check_chunked.witness("no-partial-state", V033, ("align-divides-blocks",))
    assert w.found and w.hit > 0, w.note


@pytest.mark.slow
@pytest.mark.parametrize("kept", [("no-eagle",), ("caps-reach-prompt",)])
def test_maximality_counterexample_carries_the_larger_valid_hit(kept: tuple[str, ...]) -> None:
    """Maximality on 0.33.0 with one precondition dropped: a deterministic counterexample
    whose file names the larger valid hit, and the model says so on replay."""
    sem = get_semantics(V033)
    a, b = (check_chunked.counterexample("maximality", sem, kept, 600_000) for _ in range(2))
    assert a.status == "COUNTEREXAMPLE" and a.counterexample == b.counterexample, a.note
    assert a.counterexample is not None
    o = evaluate(parse_scenario(a.counterexample))
    larger = a.counterexample["valid_hit"]
    assert o.hit_tokens is not None and larger > o.hit_tokens
    assert [v.message for v in o.violations] == [
        f"not maximal: hit {o.hit_tokens}, a valid hit of {larger} exists"]


@pytest.mark.slow
def test_maximality_witness_has_a_valid_hit_restoring_a_mamba_state() -> None:
    w = check_chunked.witness("maximality", V033, ("no-eagle", "caps-reach-prompt"))
    assert w.found and w.valid_hit is not None and w.valid_hit > 0, w.note


@pytest.mark.slow
def test_vacuous_valid_hit_leaves_maximality_without_a_witness(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Sabotage: a valid_hit no hit satisfies proves maximality vacuously; the witness
    query then finds nothing, so the report cannot count the proof."""
    import z3

    from proofs import encoding_chunked

    monkeypatch.setattr(encoding_chunked, "valid_hit", lambda enc, cfg, d, h: z3.BoolVal(False))
    assert check_chunked.check("maximality", V033, ("no-eagle", "caps-reach-prompt"),
                            ).status == "PROVED"
    w = check_chunked.witness("maximality", V033, ("no-eagle", "caps-reach-prompt"))
    assert not w.found and "vacuous" in w.note


@pytest.mark.slow
def test_partial_tail_templates_admit_a_partial_tail_hit() -> None:
    """The templates with partial tails on are not vacuous: a partial-tail hit that
    restores the Mamba state at its boundary, replayed through model/."""
    w = check_chunked.witness("no-partial-state", V033, (), tail=True)
    assert w.found and w.hit > 0 and w.scenario is not None, w.note
    assert w.scenario["hash_block_size"] < w.scenario["groups"][0]["gpu_block_size"]


@pytest.mark.parametrize("tails_only", [True, False])
def test_bounded_proof_needs_the_pass_bound_over_its_templates(
        monkeypatch: pytest.MonkeyPatch, tails_only: bool) -> None:
    """A bounded PROVED verdict rests on the pass bound: check_chunked.check asks
    ``termination`` over exactly its own templates, and without that bound proved it says
    UNKNOWN, never PROVED (sabotage: the termination search answers a counterexample)."""
    asked: list[tuple[str, bool]] = []

    def fake(thm: str, sem: object, assumed: object, timeout_ms: int, scope: object,
             tails: bool) -> check_chunked.ChunkVerdict:
        asked.append((thm, tails))
        return check_chunked.ChunkVerdict("COUNTEREXAMPLE" if thm == "termination" else "PROVED",
                                    0.0, {"semantics": V033} if thm == "termination"
                                    else None)

    monkeypatch.setattr(check_chunked, "counterexample", fake)
    monkeypatch.setattr(check_chunked, "_PASS_BOUND", {})
    v = check_chunked.check("whole-blocks", V033, (), tails_only=tails_only)
    assert v.status == "UNKNOWN" and v.counterexample is None, v
    assert "pass bound" in v.note and asked == [("whole-blocks", tails_only),
                                                ("termination", tails_only)]
    # a counterexample stands without it (replayed through model/): no termination query
    asked.clear()
    monkeypatch.setattr(check_chunked, "counterexample", lambda *a: (
        asked.append((a[0], a[5])), check_chunked.ChunkVerdict("COUNTEREXAMPLE", 0.0, {}))[1])
    assert check_chunked.check("whole-blocks", V033, ()).status == "COUNTEREXAMPLE"
    assert asked == [("whole-blocks", False)]


def test_every_bounded_proof_in_the_report_names_its_pass_bound() -> None:
    """Every bounded PROVED verdict of docs/report.json (bounded, or bounded with partial
    tails on) says termination was proved over its own layouts (check_chunked.check)."""
    import json
    from pathlib import Path

    rows = json.loads((Path(__file__).resolve().parent.parent / "docs" / "report.json")
                      .read_text())["results"]
    bounded = [r for r in rows if r["status"] == "PROVED"
               and (r["bounded"] or r["tails_bounded"])]
    for r in bounded:
        assert "(termination over the same layouts: every run ends within them)" in \
            r["note"], (r["theorem"], r["semantics"])


def test_a_bounded_proof_does_not_match_holds() -> None:
    """``holds`` asks for every layout the release accepts: a 0.33.0 PROVED from the
    bounded encoding (no layered scope) or with its partial-tail layouts bounded does
    not match it (e.g. a layered query out of time on a loaded machine falls back to the
    bounded check), while the layered verdict and an older release's proof do."""
    from proofs.check import Verdict
    from proofs.results import Row
    from proofs.witness import Witness

    found = Witness(True, 0.0)
    every = Verdict("PROVED", 0.0, scope="every layout 0.33.0 accepts")
    assert Row("termination", V033, every, "holds", (), found).matches
    assert Row("termination", V024, Verdict("PROVED", 0.0), "holds", (),
               found).matches
    for weaker in (Verdict("PROVED", 0.0),
                   Verdict("PROVED", 0.0, scope="every layout; tails bounded",
                           tails_bounded="up to 3 groups")):
        row = Row("termination", V033, weaker, "holds", (), found)
        assert not row.matches
