"""``model/`` against the recorded answers of the real schedulers of every block-lookup
release, 0.23.0 to 0.27.0 (``tests/golden/``, written by ``python -m
sim.crosscheck.golden``; 0.25.0 on from the light environments, ``--light``): 300 generated
scenarios per release, compared as ``python -m sim.crosscheck`` compares them (hit, lookups
in order, load plan, worker copies, load assertion), offline and in well under a second, so
a change to the lookup that changes a real answer fails the default suite."""

from __future__ import annotations

import pytest

from sim.crosscheck.compare import compare, model_view
from sim.crosscheck.golden import VERSIONS, load


@pytest.mark.parametrize("version", VERSIONS[::-1])  # 0.24.0 first: the catalogue's
def test_model_gives_the_real_schedulers_recorded_answers(version: str) -> None:
    records = load(version)
    assert len(records) == 300
    bad = []
    for s, real in records:
        v = compare(model_view(s, s.semantics), real)
        if not v.agree:
            bad.append(f"{s.prompt_tokens}-token prompt, {len(s.groups)} groups: "
                       + "; ".join(v.diffs))
    assert not bad, f"{len(bad)} of {len(records)} disagree, e.g. {bad[:3]}"


@pytest.mark.crosscheck
@pytest.mark.xdist_group("releases")  # with test_crosscheck.py: the same harnesses' servers
@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_answers_are_the_real_schedulers(version: str) -> None:
    from sim.crosscheck.client import RealScheduler
    from sim.crosscheck.golden import record

    real = RealScheduler(version)
    stale = [s.prompt_tokens for s, answer in load(version)
             if record(real, s)["real"] != answer]
    assert not stale, f"tests/golden/vllm-{version}.json: {len(stale)} answers changed " \
                      "(regenerate with python -m sim.crosscheck.golden)"
