"""proofs.layers_v033.shared: a lemma query is reused across semantics only where its
building read the same fields, and never after the code or lemma table that writes it
changed (a sabotage or mutant must be asked anew)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import z3

from model.semantics import get_semantics
from proofs import layers_v033 as L
from proofs import lemmas_v033 as lemmas
from proofs import turn_v033 as T


def _post(name: str) -> list[z3.BoolRef]:
    return L.shared_lemma(get_semantics(name), (), "post", T.MAMBA)


def test_reused_where_the_fields_read_agree() -> None:
    q = _post("vllm-0.33.0")
    assert _post("alt-v033-cap-min") is q  # the turn does not read cap_min
    assert _post("alt-v033-reround-mamba") is not q  # it reads reround_mamba
    assert [x.sexpr() for x in q] == [x.sexpr() for x in L.lemma_turn(
        get_semantics("alt-v033-cap-min"), (), "post", T.MAMBA)]


def test_a_replaced_lemma_or_function_misses(monkeypatch: pytest.MonkeyPatch) -> None:
    q = _post("vllm-0.33.0")
    monkeypatch.setitem(lemmas.LEMMAS, "post", replace(lemmas.LEMMAS["post"],
                                                       fact=lambda *a: z3.BoolVal(True)))
    sabotaged = _post("vllm-0.33.0")
    assert sabotaged is not q
    monkeypatch.undo()
    monkeypatch.setattr(T, "chunks_ok", lambda *a: z3.BoolVal(True))
    assert _post("vllm-0.33.0") not in (q, sabotaged)
