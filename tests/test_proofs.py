"""The Z3 encoding agrees with model/, and the seed's counterexample is found."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from model.evaluate import evaluate
from model.scenario import Group, Scenario
from model.semantics import SEMANTICS, get_semantics
from proofs.check import counterexample
from proofs.conformance import encode_scenario
from proofs.theorems import THEOREMS


@st.composite
def template_scenarios(draw: st.DrawFn) -> Scenario:
    """Scenarios of the proofs' shape: full attention*, sliding window?, Mamba*."""
    kinds = (["full_attention"] * draw(st.integers(0, 2))
             + ["sliding_window"] * draw(st.integers(0, 1))
             + ["mamba"] * draw(st.integers(0, 2)))
    if not kinds:
        kinds = ["mamba"]
    factor = draw(st.sampled_from([1, 1, 2, 3]))
    base = draw(st.integers(1, 4))
    sizes = [base if factor > 1 or draw(st.booleans()) else draw(st.integers(1, 6))
             for _ in kinds]
    prompt = draw(st.integers(1, 40))
    lcm = math.lcm(*sizes)
    computed = draw(st.sampled_from([0, lcm, 2 * lcm]))
    if computed >= prompt:
        computed = 0

    def blocks(n: int) -> frozenset[int]:
        return frozenset(draw(st.lists(st.integers(0, n), max_size=n + 1)))

    groups = []
    for k, b in zip(kinds, sizes, strict=True):
        n = prompt // (b * factor)
        stored = None if draw(st.booleans()) else blocks(n)
        groups.append(Group(
            kind=k, gpu_block_size=b, stored=stored,
            sliding_window=draw(st.integers(1, 24)) if k == "sliding_window" else None,
            mamba_cache_mode=draw(st.sampled_from(["align", "align", "all", "none"]))
            if k == "mamba" else None,
            eagle=draw(st.booleans()) and draw(st.booleans()),
            deferred=blocks(n) if draw(st.integers(0, 5)) == 0 else frozenset(),
            being_loaded=blocks(n) if draw(st.integers(0, 5)) == 0 else frozenset(),
        ))
    return Scenario(
        semantics=draw(st.sampled_from(list(SEMANTICS))),
        block_size_factor=factor, prompt_tokens=prompt, num_computed_tokens=computed,
        groups=tuple(groups),
        enable_prefix_caching=draw(st.booleans()) or True,
        skip_reading_prefix_cache=draw(st.integers(0, 7)) == 0,
        in_flight_transfers=draw(st.integers(0, 7)) == 0,
        mamba_block_size=draw(st.integers(1, 24)),
    )


def _conforms(s: Scenario) -> None:
    o = evaluate(s, enforce=False)
    if o.refused:
        return
    # the encoding runs the loop even where the connector answers before it (skip
    # reading, in-flight transfers): unroll as many passes as the loop itself takes
    plain = replace(s, skip_reading_prefix_cache=False, in_flight_transfers=False)
    loop = evaluate(plain, enforce=False).lookup
    assert loop is not None
    e = encode_scenario(s, passes=max(1, loop.passes))
    assert e.unique, "the encoding leaves the hit open"
    assert e.hit == o.hit_tokens
    model_loads = {ld.group: (tuple(ld.blocks), ld.state_position) for ld in o.loads}
    if o.hit_tokens:
        assert e.loads == model_loads


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(template_scenarios())
def test_encoding_conforms_to_model(s: Scenario) -> None:
    _conforms(s)


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(template_scenarios())
def test_encoding_conforms_to_model_many(s: Scenario) -> None:
    _conforms(s)


def test_seed_counterexample_block_16() -> None:
    """With the seed's layout (every block 16), 0.23.0's smallest break is the seed's:
    a 32-token prompt and a 31-token hit."""
    v = counterexample(THEOREMS["no-partial-state"], get_semantics("vllm-0.23.0"),
                       THEOREMS["no-partial-state"].preconditions, 120_000,
                       sizes=[((16, 16, 16), 1)])
    assert v.status == "COUNTEREXAMPLE" and v.counterexample is not None
    assert v.counterexample["prompt_tokens"] == 32
    from model.scenario import parse_scenario
    o = evaluate(parse_scenario(v.counterexample))
    assert o.hit_tokens == 31


@pytest.mark.parametrize("semantics", ["vllm-0.24.0"])
def test_main_theorem_proved(semantics: str) -> None:
    from proofs.check import check
    assert check("no-partial-state", semantics, 60_000).status == "PROVED"
