"""Differential tests: the Z3 encoding (``proofs/``) against ``model/`` on concrete
scenarios — the hit and load plan, the violation formulas, ``valid_hit``, the
precondition formulas and the start-up constraints — and sabotaged copies of the
encoding that these tests must catch.

The default suite runs a few derandomized examples; ``-m conformance -n 2`` (in
``.ci/run``) runs 2,000 in two seeded shards of 1,000 and checks that each covered
non-zero hits, EAGLE hits, loops of three or more passes and prefix caching off.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings

from model.evaluate import evaluate
from model.layout import Refused, resolve_layout
from model.maximality import is_valid_hit
from model.scenario import Scenario, parse_scenario
from model.semantics import get_semantics
from proofs import encoding
from proofs.conformance import encode_scenario, preconditions_holding, startup_holds
from proofs.theorems import PRECONDITIONS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conformance_gen import conformance_scenarios  # noqa: E402
from sabotage import sabotaged_copy  # noqa: E402

from releases import vllm_0_24_0  # noqa: E402
from tests.subset import part  # noqa: E402

V024 = vllm_0_24_0.SEMANTICS.name

MANY = part(2000)  # CONFORMANCE_SHARE: CI's seeded subset (tests/subset.py)


def _obs(s: Scenario, g: int) -> int:
    chunk = s.blocks_per_chunk or s.block_size_factor  # GPU blocks per offloaded block
    return s.groups[g].gpu_block_size * s.context_parallel_size * chunk


def _precondition_in_model(name: str, s: Scenario) -> bool:
    """Each precondition, written over the scenario in plain Python."""
    sem = get_semantics(s.semantics)
    sizes = [g.gpu_block_size * s.context_parallel_size for g in s.groups]
    obs = [_obs(s, g) for g in range(len(s.groups))]
    windows = [(g, x.sliding_window) for g, x in enumerate(s.groups)
               if x.sliding_window is not None]
    if name == "gpu-hit-aligned":
        return s.num_computed_tokens % math.lcm(*sizes) == 0
    if name == "gpu-hit-leaves-last-token":
        return s.num_computed_tokens < s.num_tokens
    if name == "gpu-hit-needs-prefix-caching":
        return s.num_computed_tokens == 0 or (
            s.enable_prefix_caching and not s.skip_reading_prefix_cache)
    if name == "mamba-mode-not-all":
        return all(g.mamba_cache_mode != "all" for g in s.groups)
    if name == "align-divides-blocks":
        align = resolve_layout(s, sem).mamba_align_size
        return align is None or all(o % align == 0 for o in obs)
    if name == "same-block-size":
        return len(set(sizes)) == 1
    if name == "full-chunk-within-windowed":
        windowed = [obs[g] for g, x in enumerate(s.groups) if x.kind != "full_attention"]
        full = [obs[g] for g, x in enumerate(s.groups) if x.kind == "full_attention"]
        if not windowed:  # full attention alone: one offloaded block
            return len(set(full)) <= 1
        return all(f <= max(windowed) for f in full)
    if name == "window-whole-blocks":
        return all(w % obs[g] == 0 for g, w in windows)
    if name == "window-not-one-past-blocks":
        return all((w - 1) % obs[g] != 0 for g, w in windows)
    if name == "window-within-one-block":
        return all(w <= obs[g] for g, w in windows)
    if name == "factor-one":
        return s.block_size_factor == 1
    if name == "no-eagle":
        return not (sem.eagle and any(g.eagle for g in s.groups))
    if name == "caps-reach-prompt":  # older releases have no caps (0.33.0: check_chunked)
        return True
    if name == "nothing-deferred-or-loading":
        return all(b > s.num_tokens // obs[g] for g, x in enumerate(s.groups)
                   for b in x.deferred | x.being_loaded)
    raise AssertionError(f"precondition {name!r} has no model-side definition here")


def _conforms(s: Scenario, mod: ModuleType = encoding, seen: Counter[str] | None = None,
              formulas: bool = True) -> None:
    sem = get_semantics(s.semantics)
    try:
        resolve_layout(s, sem)
        accepted = True
    except Refused:
        accepted = False
    assert startup_holds(s, mod) == accepted, "start-up constraints differ from layout.py"
    if not accepted:
        return
    o = evaluate(s)
    if o.refused:  # a request no engine produces: the generator avoids these
        return
    assert o.layout is not None and o.lookup is not None or o.hit_tokens is not None
    # the encoding runs the loop even where the connector answers before it (skip
    # reading, in-flight transfers): unroll as many passes as the loop itself takes
    plain = replace(s, skip_reading_prefix_cache=False, in_flight_transfers=False)
    loop = evaluate(plain).lookup
    assert loop is not None
    windowed = bool(o.layout and o.layout.sliding_window_groups)
    e = encode_scenario(s, passes=max(1, loop.passes), mod=mod, formulas=formulas and windowed)
    assert e.unique, "the encoding leaves the hit open"
    assert e.hit == o.hit_tokens, f"hit: encoding {e.hit} vs model {o.hit_tokens}"
    if o.hit_tokens:
        assert e.loads == {ld.group: (tuple(ld.blocks), ld.state_position) for ld in o.loads}
    if formulas and windowed:
        # the theorems' template always has windowed groups (valid_hit and the
        # leaves-last-token violation assume the last token is recomputed)
        model_violated = {v.invariant for v in o.violations}
        assert e.violations == model_violated, "violation formulas differ from invariants.py"
        assert o.layout is not None
        top = s.num_tokens - s.num_computed_tokens
        model_valid = {h for h in range(1, top + 1) if is_valid_hit(s, o.layout, sem, h)}
        assert e.valid_hits == model_valid, "valid_hit differs from maximality.py"
        holding = preconditions_holding(s, list(PRECONDITIONS))
        for name in PRECONDITIONS:
            assert holding[name] == _precondition_in_model(name, s), name
    if seen is not None:
        seen["examples"] += 1
        seen["nonzero hit"] += bool(o.hit_tokens)
        seen["EAGLE hit"] += bool(o.hit_tokens) and any("EAGLE" in st.note
                                                        for st in loop.steps)
        seen["3+ passes"] += loop.passes >= 3
        seen["prefix caching off"] += not s.enable_prefix_caching
        seen["formulas"] += windowed


@settings(max_examples=10, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(conformance_scenarios())
def test_encoding_conforms_to_model(s: Scenario) -> None:
    _conforms(s)


SHARDS = 2  # independent halves of the many-example run: `pytest -n 2` runs them at once


@pytest.mark.conformance
@pytest.mark.timeout(1200)  # 1,000 examples: 4.2 min per shard, both at once, at load 2
@pytest.mark.parametrize("shard", range(SHARDS))
def test_encoding_conforms_to_model_many(shard: int) -> None:
    seen: Counter[str] = Counter()

    @seed(shard)  # each shard draws its own examples, the same on every run
    @settings(max_examples=MANY // SHARDS, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(conformance_scenarios())
    def run(s: Scenario) -> None:
        _conforms(s, seen=seen)

    run()
    print(dict(seen))
    assert seen["examples"] >= MANY // SHARDS * 9 // 10, seen
    for what in ("nonzero hit", "EAGLE hit", "3+ passes", "prefix caching off", "formulas"):
        assert seen[what] >= part(10), f"{what}: only {seen[what]} of {seen['examples']}"


# --- sabotages: each must now make conformance fail -----------------------------------

SABOTAGES = {
    # scheduler.py:552: an unverified EAGLE group gives its volatile block back
    "eagle-pop": ("popped = z3.If(unverified, r - 1, r)", "popped = r"),
    # scheduler.py:568: a non-EAGLE group that tightens the hit clears eagle_verified
    "eagle-verified-clear": ("verified = [z3.And(v, z3.Not(clear)) for v in verified]",
                             "verified = list(verified)"),
    # scheduler.py:574: tightening after a sliding-window group re-runs those groups
    "sliding-window-rerun": (
        "next_sw = z3.And(tightened, z3.Not(defer), st.looked, st.next == NEXT_NONE)",
        "next_sw = z3.BoolVal(False)"),
}


def sabotaged(name: str) -> ModuleType:
    """A copy of proofs/encoding.py with one step removed, loaded in-process."""
    return sabotaged_copy(encoding, *SABOTAGES[name], name)


# one scenario per sabotage on which the removed step changes the hit (model/ agrees
# with the real encoding there)
WITNESSES = {
    "eagle-pop": {  # the EAGLE window group's run of 3 ends at block 7: popped, 6 left
        "semantics": V024, "block_size_factor": 1, "prompt_tokens": 10,
        "num_computed_tokens": 0,
        "groups": [{"kind": "sliding_window", "gpu_block_size": 1, "sliding_window": 2,
                    "stored": [0, 1, 2, 3, 4, 5, 6], "eagle": True}]},
    "eagle-verified-clear": {  # the Mamba cut to 6 clears the pop; pass 2 pops again
        "semantics": V024, "block_size_factor": 1, "prompt_tokens": 12,
        "num_computed_tokens": 0,
        "groups": [{"kind": "sliding_window", "gpu_block_size": 1, "sliding_window": 1,
                    "stored": [0, 1, 2, 3, 5, 10, 11], "eagle": True},
                   {"kind": "mamba", "gpu_block_size": 1, "mamba_cache_mode": "none",
                    "stored": [0, 1, 2, 3, 4, 5]}]},
    "sliding-window-rerun": {  # later Mamba cuts must be re-confirmed by the window
        "semantics": V024, "block_size_factor": 1, "prompt_tokens": 19,
        "num_computed_tokens": 0,
        "groups": [{"kind": "sliding_window", "gpu_block_size": 1, "sliding_window": 2,
                    "stored": [0, 1, 2, 5, 7, 9, 10, 12, 14, 16, 17, 18, 19], "eagle": True},
                   {"kind": "mamba", "gpu_block_size": 1, "mamba_cache_mode": "none",
                    "stored": [0, 2, 3, 5, 7, 8, 13, 14, 15, 16, 19]},
                   {"kind": "mamba", "gpu_block_size": 1, "mamba_cache_mode": "none",
                    "stored": [1, 2, 5, 13, 14, 17, 19]}]},
}


@pytest.mark.parametrize("name", sorted(SABOTAGES))
def test_sabotaged_encoding_fails_conformance(name: str) -> None:
    s = parse_scenario(WITNESSES[name])
    _conforms(s, formulas=False)  # the real encoding agrees with model/ here
    with pytest.raises(AssertionError, match="hit: encoding"):
        _conforms(s, sabotaged(name), formulas=False)


def _first_disagreement(mod: ModuleType, examples: int) -> int | None:
    """The example at which conformance first fails on ``mod`` (generation only)."""
    count = [0]

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    @given(conformance_scenarios())
    def run(s: Scenario) -> None:
        count[0] += 1
        _conforms(s, mod, formulas=False)

    try:
        run()
    except AssertionError:
        return count[0]
    return None


@pytest.mark.conformance
@pytest.mark.parametrize("name", ["eagle-pop"])  # the others: WITNESSES only (see above)
def test_generator_catches_sabotage(name: str) -> None:
    assert _first_disagreement(sabotaged(name), 600) is not None
