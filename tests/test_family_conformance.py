"""Every registered semantics (``releases.names()``, plugins too) through its family's one
conformance entry (``tests/family_conformance.py``): its encodings agree with ``model/`` on
scenarios of that semantics alone. A new release or fix module is checked here with no
other edit; one the encodings do not model (no theorem expectations) is refused by the
entry, and the test says so.

The default suite runs a few seeded examples per semantics and check; ``-m conformance``
(``.ci/run``) more. The per-family suites (``tests/test_conformance.py``,
``test_conformance_chunked.py``, ``test_proof_layers_chunked.py``,
``test_proof_tails_chunked.py``) keep their larger mixed runs, coverage counts and
sabotages.
"""

from __future__ import annotations

import pytest

import releases
from tests.family_conformance import CHECKS, NotEncoded, run_family_conformance

EXAMPLES = 2  # per semantics and check: the default suite
MANY = 25  # -m conformance


def _run(semantics: str, count: int, seed_: int) -> None:
    family = releases.get(semantics).family
    try:
        seen = run_family_conformance(semantics, count, seed_)
    except NotEncoded as e:
        assert semantics not in releases.proved()
        pytest.skip(str(e))
    assert set(seen) == {c.what for c in CHECKS[family]()}
    for what, counts in seen.items():
        # the block family's Hypothesis run drops drawn scenarios the start-up refuses
        assert counts["examples"] >= (count + 1) // 2, f"{what}: {dict(counts)}"


@pytest.mark.parametrize("semantics", releases.names())
def test_family_conformance(semantics: str) -> None:
    _run(semantics, EXAMPLES, 0)


@pytest.mark.conformance
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("semantics", releases.names())
def test_family_conformance_many(semantics: str) -> None:
    _run(semantics, MANY, 1)


def test_every_proved_semantics_has_its_family_checks() -> None:
    """The entry covers every family the registry's proved semantics belong to."""
    assert {releases.get(n).family for n in releases.proved()} <= set(CHECKS)
