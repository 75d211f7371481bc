"""``model.layout.startup_layout`` and ``model.layout_chunked.startup_layout``
(``resolve_layout`` kept per release and start-up fields): its key holds every field
``resolve_layout`` reads, and it answers as ``resolve_layout`` does."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import releases
from model import layout_chunked
from model.layout import (
    STARTUP_FIELDS,
    STARTUP_GROUP_FIELDS,
    Refused,
    resolve_layout,
    startup_layout,
)
from model.real_layouts import load_templates
from model.scenario import Group, Scenario, ScenarioError
from model.semantics import get_semantics
from releases import vllm_0_24_0
from sim.crosscheck.gen import scenarios as crosscheck_scenarios
from tests.test_invariant_properties import scenarios

V024 = vllm_0_24_0.SEMANTICS.name
SEMANTICS = releases.names(family="block")


class _Reads:
    """A read-only view of ``obj`` that records the attribute names read through it."""

    def __init__(self, obj: Any, reads: set[str], groups: set[str] | None = None) -> None:
        self._obj, self._reads, self._groups = obj, reads, groups

    def __getattr__(self, name: str) -> Any:
        self._reads.add(name)
        value = getattr(self._obj, name)
        if name == "groups" and self._groups is not None:
            return tuple(_Reads(g, self._groups) for g in value)
        return value


def _answer(f: Any, s: Any, sem: str) -> object:
    try:
        return f(s, get_semantics(sem))
    except (Refused, ScenarioError) as e:
        return f"{type(e).__name__}: {e}"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SEMANTICS).flatmap(lambda sem: scenarios(sem, same_size=False)),
       st.sampled_from(SEMANTICS))
def test_key_holds_every_field_read_and_the_answer_is_resolve_layouts(
        s: Scenario, sem: str) -> None:
    top: set[str] = set()
    group: set[str] = set()
    direct = _answer(resolve_layout, _Reads(s, top, group), sem)
    assert top <= {*STARTUP_FIELDS, "groups"}, top
    assert group <= set(STARTUP_GROUP_FIELDS), group
    assert _answer(startup_layout, s, sem) == direct
    assert _answer(startup_layout, s, sem) == direct  # kept


def test_real_layouts_read_only_key_fields() -> None:
    for t in load_templates():
        if not t.accepted:
            continue
        for sem in SEMANTICS:
            top: set[str] = set()
            group: set[str] = set()
            prompt = math.lcm(*(g.block_size for g in t.groups)) * (t.blocks_per_chunk or 1)
            s = t.scenario(semantics=sem, prompt_tokens=prompt)
            direct = _answer(resolve_layout, _Reads(s, top, group), sem)
            assert top <= {*STARTUP_FIELDS, "groups"} and group <= set(STARTUP_GROUP_FIELDS)
            assert _answer(startup_layout, s, sem) == direct


def test_a_mutant_of_start_up_is_not_answered_from_the_kept_layouts() -> None:
    # layouts kept before a mutant is applied were resolved by other code
    from proofs.mutants import applied

    s = Scenario(V024, 2, 64, 0, (Group("mamba", 4, mamba_cache_mode="align"),))
    sem = get_semantics(V024)
    assert startup_layout(s, sem).mamba_align_size == 8
    for name, align in (("align-gpu-block-size", 4), (None, 8)):
        with applied(name):
            assert startup_layout(s, sem).mamba_align_size == align
    assert startup_layout(s, sem).mamba_align_size == 8



# --- the chunked family (model.layout_chunked.startup_layout) ----------------------------

CHUNKED = releases.names(family="chunked")


def _answer_chunked(f: Any, s: Any, sem: str) -> object:
    semantics = get_semantics(sem)
    try:
        return f(s, semantics.steps, semantics.base_version)
    except (Refused, ScenarioError) as e:
        return f"{type(e).__name__}: {e}"


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(CHUNKED).flatmap(crosscheck_scenarios), st.sampled_from(CHUNKED))
def test_chunked_key_holds_every_field_read_and_the_answer_is_resolve_layouts(
        s: Scenario, sem: str) -> None:
    top: set[str] = set()
    group: set[str] = set()
    direct = _answer_chunked(layout_chunked.resolve_layout, _Reads(s, top, group), sem)
    assert top <= {*layout_chunked.STARTUP_FIELDS, "groups"}, top
    assert group <= set(layout_chunked.STARTUP_GROUP_FIELDS), group
    assert _answer_chunked(layout_chunked.startup_layout, s, sem) == direct
    assert _answer_chunked(layout_chunked.startup_layout, s, sem) == direct  # kept
