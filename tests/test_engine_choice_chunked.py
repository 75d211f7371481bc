"""The engine's local-tail choice in the 0.33.0 encodings (``proofs.turn_chunked.engine_choice``,
``proofs.tail_chunked.engine_choice``; v1/core/sched/scheduler.py:1167, :1179): pinned to
``model.layout_chunked.keeps_local_tail`` on every small case and on the model's own runs
with fine GPU hits, and its layered queries (``local_tail_query``) are proved, not vacuous,
and turn red when the choice loads the connector's answer over a kept tail.
"""

from __future__ import annotations

import itertools

import pytest
import z3

from model import layout_chunked
from model.evaluate import evaluate
from model.scenario import parse_scenario
from proofs import layers_chunked, tail_chunked, tail_layers_chunked, turn_chunked
from releases import vllm_0_33_0

V033 = vllm_0_33_0.SEMANTICS.name


def _solve(q: list[z3.BoolRef]) -> z3.CheckSatResult:
    s = z3.Solver()
    s.set("timeout", 30_000)
    s.add(*q)
    return s.check()


def _encoded(tail: int, hit: int | None) -> tuple[bool, int | None]:
    r = turn_chunked.Result(z3.BoolVal(hit is None), z3.IntVal(hit or 0))
    kept = z3.is_true(z3.simplify(turn_chunked.keeps_tail(z3.IntVal(tail), r)))
    chosen = turn_chunked.engine_choice(z3.IntVal(tail), r)
    loaded = None if hit is None else z3.simplify(chosen.hit).as_long()
    return kept, loaded


def test_choice_conforms_to_model_on_small_cases() -> None:
    for local, tail, hit in itertools.product((0, 16, 32), range(0, 33, 8),
                                              (None, *range(0, 65, 8))):
        kept = layout_chunked.keeps_local_tail(local + tail, local, hit)
        assert _encoded(tail, hit) == (kept, None if hit is None else 0 if kept else hit), (
            local, tail, hit)


def test_tail_choice_conforms_to_model() -> None:
    """With partial tails on a kept local tail drops the partial-tail hit too."""
    for tail, hit, is_tail in itertools.product(range(0, 33, 8), range(0, 49, 8), (False, True)):
        a = tail_chunked.Answer(z3.BoolVal(False), z3.IntVal(hit), z3.BoolVal(is_tail),
                                z3.IntVal(hit))
        c = tail_chunked.engine_choice(z3.IntVal(tail), a)
        kept = layout_chunked.keeps_local_tail(64 + tail, 64, hit)
        assert z3.simplify(c.hit).as_long() == (0 if kept else hit)
        assert z3.is_true(z3.simplify(c.tail)) == (is_tail and not kept)


def test_choice_conforms_to_model_runs() -> None:
    """On model runs with fine GPU hits (FA 16 + Mamba 32: hash-block hits of 8), the
    encoded choice gives what model/ loads: a kept tail and a longer connector hit."""
    seen_kept = set()
    for computed, stored in itertools.product((64, 72, 80, 88), ("all", [4, 5], [])):
        scen = {
            "semantics": V033, "block_size_factor": 1, "hash_block_size": 8,
            "prompt_tokens": 200, "num_computed_tokens": computed,
            "groups": [{"kind": "full_attention", "gpu_block_size": 16, "stored": stored},
                       {"kind": "mamba", "gpu_block_size": 32, "stored": stored,
                        "mamba_cache_mode": "align"}],
        }
        o = evaluate(parse_scenario(scen))
        assert o.refused is None, o.refused
        seen = layout_chunked.connector_tokens(o.layout, computed)  # type: ignore[arg-type]
        kept, loaded = _encoded(computed - seen, o.hit_tokens)
        assert kept == o.local_tail_kept
        assert (not o.loads) == (not loaded) or o.hit_tokens is None
        seen_kept.add(kept)
    assert seen_kept == {True, False}


def test_local_tail_queries_are_proved_and_not_vacuous() -> None:
    for thm in turn_chunked.VIOLATIONS:
        for kind in turn_chunked.KINDS:
            q = layers_chunked.local_tail_query(thm, kind)
            assert _solve(q) == z3.unsat, (thm, kind)
            # not vacuous: a kept tail beside a GPU hit under start-up
            assert _solve(layers_chunked.local_tail_query(thm, kind, False)) == z3.sat
    assert _solve(layers_chunked.local_tail_rest_query()) == z3.unsat
    for thm in ("no-partial-state", "leaves-last-token", "whole-blocks", "loads-stored-only"):
        for kind in (tail_chunked.FA, tail_chunked.MAMBA):
            assert _solve(tail_layers_chunked.local_tail_query(thm, kind)) == z3.unsat


def test_choice_loading_over_a_kept_tail_turns_red(monkeypatch: pytest.MonkeyPatch) -> None:
    """A choice that loads the connector's answer although the engine keeps its tail:
    no-partial-state's kept-tail query turns sat (its answer alone can violate it)."""
    monkeypatch.setattr(turn_chunked, "engine_choice", lambda tail, r: r)
    assert _solve(layers_chunked.local_tail_query("no-partial-state", turn_chunked.MAMBA)) == z3.sat
