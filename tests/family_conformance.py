"""``run_family_conformance``: the one conformance run every registered semantics goes
through, as Hypothesis's ``run_conformance_test`` is for any ``PrimitiveProvider``.

A lookup family's encodings (``proofs/``) are pinned to ``model/`` by differential
checks on concrete scenarios, each written once in its own test module: a generator
(``scenarios(count, seed, semantics)``, or the block family's Hypothesis strategy) and a
check (``conforms(s, seen=...)``) that raises ``AssertionError`` where the encoding and the
model differ. ``CHECKS`` lists them per family; ``run_family_conformance(name)`` runs
every check of ``name``'s family on scenarios of ``name`` alone. ``tests/
test_family_conformance.py`` calls it for each name in ``releases.names()``, so a new
release or fix module (and an ``OLC_SEMANTICS`` plugin) is checked with no other edit.

A semantics with no theorem expectations (``releases.proved`` leaves it out: the
encodings do not model the steps it overrides, e.g. vllm-0.32.0's simple partial tail)
has nothing to conform; ``run_family_conformance`` refuses it (``NotEncoded``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from hypothesis import HealthCheck, Phase, given, seed, settings

import releases
from model.scenario import Scenario

# (semantics, count, seed, seen): raises AssertionError where encoding and model differ
Run = Callable[[str, int, int, Counter[str]], None]


@dataclass(frozen=True)
class Check:
    """One differential check of a family: what it pins and how to run it."""

    what: str
    run: Run


class NotEncoded(ValueError):
    """The semantics has no theorem expectations: no encoding models it."""


def drawn(scenarios: Callable[..., list[Scenario]],
          conforms: Callable[..., None]) -> Run:
    """A check over ``scenarios(count, seed, semantics)`` (a seeded generator)."""
    def run(semantics: str, count: int, seed_: int, seen: Counter[str]) -> None:
        for s in scenarios(count, seed_, (semantics,)):
            conforms(s, seen=seen)
    return run


def _block_encoding(semantics: str, count: int, seed_: int, seen: Counter[str]) -> None:
    from tests.conformance_gen import conformance_scenarios
    from tests.test_conformance import _conforms

    @seed(seed_)
    @settings(max_examples=count, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    @given(conformance_scenarios(semantics))
    def run(s: Scenario) -> None:
        _conforms(s, seen=seen)

    run()


def _chunked_checks() -> tuple[Check, ...]:
    from tests import test_conformance_chunked as encoding
    from tests import test_proof_layers_chunked as layers
    from tests import test_proof_tails_chunked as tails

    return (Check("encoding", drawn(encoding.scenarios, encoding.conforms)),
            Check("encoding, partial tails", drawn(encoding.tail_scenarios,
                                                   encoding.conforms)),
            Check("turn", drawn(layers.scenarios, layers.conforms)),
            Check("tail", drawn(tails.scenarios, tails.conforms)))


# family -> its checks (built on first use: they import the encodings and z3)
CHECKS: dict[str, Callable[[], tuple[Check, ...]]] = {
    "block": lambda: (Check("encoding", _block_encoding),),
    "chunked": _chunked_checks,
}


def run_family_conformance(semantics: str, count: int, seed_: int = 0
                           ) -> dict[str, Counter[str]]:
    """Every check of ``semantics``' family on ``count`` scenarios of it (``seed_``:
    each check's first seed); what each check reached (``examples`` and its own
    counts). Raises ``AssertionError`` at the first difference, ``NotEncoded`` for a
    semantics the encodings do not model."""
    sem = releases.get(semantics)
    if semantics not in releases.proved(sem.family):
        raise NotEncoded(f"semantics: {semantics!r} has no theorem expectations; the "
                         f"{sem.family} family's encodings do not model its steps")
    out: dict[str, Counter[str]] = {}
    for check in CHECKS[sem.family]():
        seen: Counter[str] = Counter()
        check.run(semantics, count, seed_, seen)
        out[check.what] = seen
    return out
