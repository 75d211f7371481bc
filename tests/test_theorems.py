"""Every theorem against every semantics, as pytest items (add them to any CI run).

Each item checks that the result matches the theorem's declared expectation: PROVED
where it holds, a counterexample (replayed through model/) where it fails. Run them with
``python -m pytest -m theorems`` (CI runs the same checks through ``python -m proofs``).
"""

from __future__ import annotations

import pytest

from model.semantics import MODEL_SEMANTICS
from proofs.check import check
from proofs.theorems import THEOREMS

PAIRS = [(t, s) for t in THEOREMS for s in MODEL_SEMANTICS if THEOREMS[t].covers(s)]


@pytest.mark.theorems
@pytest.mark.parametrize(("theorem", "semantics"), PAIRS)
def test_theorem(theorem: str, semantics: str) -> None:
    v = check(theorem, semantics, timeout_ms=300_000)
    expected = "PROVED" if THEOREMS[theorem].expected[semantics] else "COUNTEREXAMPLE"
    assert v.status == expected, v.note
