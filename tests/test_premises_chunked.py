"""Premise satisfiability of the layered 0.33.0 lemma queries (``proofs/premises_chunked.py``,
issue 23 item 3): the complete-chunk, maximality and partial-tail lemma queries each hold
on the pinned request (different block sizes, a GPU hit), replayed through model/ with a
Mamba load; a premise that excludes different block sizes or a GPU hit in one query, and
a pinned request model/ refuses or answers without a Mamba load, each turn the check red.
"""

from __future__ import annotations

from typing import Any

import pytest
import z3

from model.semantics import get_semantics
from proofs import (
    layers_chunked,
    maximality_layers_chunked,
    premises_chunked,
    tail_layers_chunked,
    turn_chunked,
)
from releases import vllm_0_33_0

V033 = vllm_0_33_0.SEMANTICS.name
MAX_PRE = ("no-eagle", "caps-reach-prompt")


def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget the answers kept in this process (a test changes what they are about)."""
    monkeypatch.setattr(premises_chunked, "_HELD", {})
    monkeypatch.setattr(premises_chunked, "_REPLAYED", {})


def test_every_lemma_query_has_pinned_premises() -> None:
    sem = get_semantics(V033)
    assert maximality_layers_chunked.premises_query(sem, MAX_PRE) == [z3.BoolVal(False)]
    for stored in (False, True):
        assert tail_layers_chunked.premises_query(sem, stored) == [z3.BoolVal(False)]
    names = ("chunk-positive", "post", "down")
    assert layers_chunked.premises_query(sem, (), names) == [z3.BoolVal(False)]


def test_the_pinned_request_has_different_block_sizes_a_hit_and_a_mamba_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scenario the check replays is the request it claims."""
    _fresh(monkeypatch)
    seen: list[dict[str, Any]] = []
    replay = premises_chunked.replay

    def spy(scen: dict[str, Any], valid: int | None, caching: bool,
            assumed: Any = ()) -> str | None:
        seen.append(scen)
        return replay(scen, valid, caching, assumed)

    monkeypatch.setattr(premises_chunked, "replay", spy)
    sem = get_semantics(V033)
    assert maximality_layers_chunked.lemma_premises(
        sem, MAX_PRE, "keeps", turn_chunked.FA) is None
    assert tail_layers_chunked.lemma_premises("key-ready", turn_chunked.MAMBA, sem) is None
    tails_off, tails_on = seen
    assert tails_off["num_computed_tokens"] == premises_chunked.COMPUTED
    assert sorted(g["gpu_block_size"] for g in tails_off["groups"]) == [16, 32]
    assert tails_on["hash_block_size"] < tails_on["groups"][0]["gpu_block_size"]
    assert tails_on["num_computed_tokens"] == premises_chunked.COMPUTED


def test_premise_excluding_different_block_sizes_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A maximality lemma query whose premises make every chunk the Mamba chunk: the
    proof stays unsatisfiable (more premises), the witness (one block size) is found;
    the pinned request catches it."""
    _fresh(monkeypatch)
    sem = get_semantics(V033)
    real = maximality_layers_chunked.monotone_instances

    def tightened(enc: Any, extra: Any = (), unit: Any = None) -> list[z3.BoolRef]:
        out = real(enc, extra, unit)
        if unit is not None:  # the lemma queries' call: unit is the group's chunk
            out.append(unit == z3.Int("blocks_per_chunk") * z3.Int("mamba_gpu_block_size"))
        return out

    monkeypatch.setattr(maximality_layers_chunked, "monotone_instances", tightened)
    why = maximality_layers_chunked.lemma_premises(sem, MAX_PRE, "keeps", turn_chunked.FA)
    assert why is not None and "not satisfiable" in why
    assert maximality_layers_chunked.premises_query(sem, MAX_PRE) == [z3.BoolVal(True)]


def test_premise_excluding_a_gpu_hit_in_one_tail_query_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fresh(monkeypatch)
    sem = get_semantics(V033)
    real = tail_layers_chunked.lemma_query

    def no_hit(name: str, kind: str, negated: bool = True, sem: Any = None
               ) -> list[z3.BoolRef]:
        q = real(name, kind, negated, sem)
        return q + [z3.Int("num_computed_tokens") == 0] if name == "key-ready" else q

    monkeypatch.setattr(tail_layers_chunked, "lemma_query", no_hit)
    assert tail_layers_chunked.lemma_premises("bridge-ready", turn_chunked.FA, sem) is None
    assert tail_layers_chunked.lemma_premises("key-ready", turn_chunked.FA, sem) is not None
    assert tail_layers_chunked.premises_query(sem, False) == [z3.BoolVal(True)]


def test_replay_names_what_model_refuses_or_misses(monkeypatch: pytest.MonkeyPatch) -> None:
    _fresh(monkeypatch)
    scen: dict[str, Any] = {
        "semantics": V033, "block_size_factor": 1, "prompt_tokens": 200,
        "num_computed_tokens": 64,
        "groups": [{"kind": "full_attention", "gpu_block_size": 32, "stored": "all"},
                   {"kind": "mamba", "gpu_block_size": 16, "stored": "all",
                    "mamba_cache_mode": "align"}],
    }
    assert premises_chunked.replay(scen, 64, True) is None
    # a single group whose hash block is not its block: refused (kv_cache_utils.py:853)
    single = {**scen, "hash_block_size": 16, "groups": [
        {"kind": "mamba", "gpu_block_size": 32, "stored": "all", "mamba_cache_mode": "align"}]}
    assert "refuses" in (premises_chunked.replay(single, None, True) or "")
    nothing = {**scen, "groups": [{**g, "stored": []} for g in scen["groups"]]}
    assert "hit" in (premises_chunked.replay(nothing, None, True) or "")
    assert "not valid" in (premises_chunked.replay(scen, 150, True) or "")


def test_replay_meets_the_theorems_preconditions() -> None:
    """The pinned block sizes follow the preconditions (full attention 8 beside Mamba 16
    under full-chunk-within-windowed, 32 under align-divides-blocks), and a layout that
    breaks one is named."""
    sem = get_semantics(V033)
    for pre in (("full-chunk-within-windowed",), ("align-divides-blocks",)):
        assert layers_chunked.lemma_premises(sem, pre, "post", turn_chunked.FA) is None
    scen: dict[str, Any] = {
        "semantics": V033, "block_size_factor": 1, "prompt_tokens": 200,
        "num_computed_tokens": 64,
        "groups": [{"kind": "full_attention", "gpu_block_size": 32, "stored": "all"},
                   {"kind": "mamba", "gpu_block_size": 16, "stored": "all",
                    "mamba_cache_mode": "align"}],
    }
    assert premises_chunked.meets(scen, ("align-divides-blocks",))
    assert not premises_chunked.meets(scen, ("full-chunk-within-windowed",))
    assert "does not meet" in (premises_chunked.replay(
        scen, None, True, ("full-chunk-within-windowed",)) or "")
