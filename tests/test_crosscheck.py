"""The model against the real vLLM schedulers (0.23.0 and 0.24.0), in their own venvs.

Marked ``crosscheck``: deselected by default, run by ``.ci/run`` with ``-m crosscheck``.
Makes (or reuses) ``.venvs/vllm-X`` (``$CROSSCHECK_VENVS`` overrides the folder).
``CROSSCHECK_EXAMPLES`` sets the generated scenarios per version (default 2,000).
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from model.scenario import (
    Scenario,
    iter_scenario_paths,
    load_scenario_file,
    parse_scenario,
    scenario_to_json,
)
from releases import vllm_0_23_0, vllm_0_24_0
from sim.crosscheck.cli import SEED, SEED_HIT, Tally, check_one, replay, run_hypothesis
from sim.crosscheck.client import RealScheduler
from sim.crosscheck.compare import compare, model_view
from sim.crosscheck.envs import ci_versions
from sim.crosscheck.gen import scenarios
from sim.crosscheck.mapping import semantics_for, to_case
from tests.replay import remember

V023 = vllm_0_23_0.SEMANTICS.name
V024 = vllm_0_24_0.SEMANTICS.name

# one xdist worker runs the files driving the older releases (one fork server each:
# sim/crosscheck/forkserver.py), another the newest release's (--dist loadgroup)
pytestmark = [pytest.mark.crosscheck, pytest.mark.xdist_group("releases")]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = int(os.environ.get("CROSSCHECK_EXAMPLES", "2000"))


# the releases the property tests below drive: their harnesses, once started, serve
# both the fixture's tests and the properties (one start-up each, not two)
PROPERTY_VERSIONS = ("0.23.0", "0.24.0")
_REAL: dict[str, RealScheduler] = {}


def _running(version: str) -> RealScheduler:
    """The harness of ``version`` for this module, started on first use, stopped at exit."""
    if version not in _REAL:
        r = RealScheduler(version)
        _REAL[version] = r.__enter__()
        atexit.register(r.__exit__, None, None, None)
    return _REAL[version]


# the pinned releases and the release of the day (CROSSCHECK_VERSIONS=all: every release)
@pytest.fixture(scope="module", params=ci_versions())
def real(request: pytest.FixtureRequest) -> Iterator[RealScheduler]:
    if request.param in PROPERTY_VERSIONS:
        yield _running(request.param)
        return
    with RealScheduler(request.param) as r:
        yield r


def test_seed_boundary_case_reproduces(real: RealScheduler) -> None:
    result = real.run(to_case(parse_scenario(SEED)))
    assert result["refused"] is None and result["keys_ok"]
    assert result["hit"] == SEED_HIT[real.version]
    tally = Tally(real.version)
    assert check_one(real, parse_scenario(SEED), tally).agree


def test_start_up_refusal_is_reported(real: RealScheduler) -> None:
    # an offloaded block size needs one GPU block size for all groups (base.py:507)
    raw = dict(SEED, block_size_factor=2, groups=[
        {"kind": "full_attention", "gpu_block_size": 16, "stored": "all"},
        {"kind": "full_attention", "gpu_block_size": 32, "stored": "all"}])
    result = real.run(to_case(parse_scenario(raw)))
    assert result["refused"] and result["refused"].startswith("AssertionError")


def test_every_scenario_file_agrees(real: RealScheduler) -> None:
    dirs = [ROOT / "tests" / "scenarios", ROOT / "report" / "counterexamples"]
    paths = iter_scenario_paths([d for d in dirs if d.is_dir()])
    tally = Tally(real.version)
    bad = replay(real, paths, tally, check_lookups=True)
    assert not bad, "\n".join(f"{p}: {'; '.join(v.diffs)}" for p, v in bad)
    # a file is skipped only for a field outside this release's model (valid_hit is read
    # by the 0.23.0/0.24.0 models alone), never one written for this release
    assert tally.agreed > len(tally.out_of_model), tally.line("files")
    own = [p for p in tally.out_of_model if load_scenario_file(p).semantics == real.semantics]
    assert not own, own


def test_generated_scenarios_agree(real: RealScheduler) -> None:
    tally = Tally(real.version)
    found = run_hypothesis(real, EXAMPLES, None, tally, check_lookups=True)
    assert not found, "\n".join(
        f"{sig}: {verdict.diffs} on {scenario_to_json(small)}" for sig, small, verdict in found)
    assert tally.agreed >= EXAMPLES, tally.line("generated")


# ---- properties: the same comparison as plain Hypothesis tests (no fixtures), so that
# pytest-xdist and HypoFuzz can run them, sharing the example database ------------------

PROPERTY_EXAMPLES = int(os.environ.get("CROSSCHECK_PROPERTY_EXAMPLES", "100"))


def _agrees(version: str, s: Scenario) -> None:
    remember(s)
    sem = semantics_for(version)
    verdict = compare(model_view(s, sem), _running(version).run(to_case(s)))
    assert verdict.agree, "; ".join(verdict.diffs)


@settings(max_examples=PROPERTY_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(V023))
def test_property_model_agrees_with_real_0_23_0(s: Scenario) -> None:
    _agrees("0.23.0", s)


@settings(max_examples=PROPERTY_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(V024))
def test_property_model_agrees_with_real_0_24_0(s: Scenario) -> None:
    _agrees("0.24.0", s)
