"""Hypothesis over random configurations mixing the group kinds: where each semantics
keeps and breaks each invariant (the classes the proofs' preconditions name)."""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from model.evaluate import evaluate
from model.scenario import Group, Scenario
from releases import vllm_0_23_0, vllm_0_24_0
from tests.replay import remember

V023 = vllm_0_23_0.SEMANTICS.name
V024 = vllm_0_24_0.SEMANTICS.name

KINDS = ("full_attention", "sliding_window", "mamba")


@st.composite
def scenarios(draw: st.DrawFn, semantics: str, same_size: bool, mode: str | None = None,
              eagle: bool = True, kinds: tuple[str, ...] | None = None) -> Scenario:
    kinds = kinds or tuple(draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=4)))
    factor = draw(st.sampled_from([1, 1, 2]))
    base = draw(st.integers(1, 8))
    sizes = [base if same_size or factor > 1 else draw(st.integers(1, 8)) for _ in kinds]
    prompt = draw(st.integers(1, 80))

    def blocks(b: int) -> frozenset[int] | None:
        n = prompt // (b * factor) + 1
        if draw(st.booleans()):
            return None
        return frozenset(draw(st.lists(st.integers(0, n), max_size=n)))

    groups = tuple(
        Group(kind=k, gpu_block_size=b, stored=blocks(b),
              sliding_window=draw(st.integers(1, 40)) if k == "sliding_window" else None,
              mamba_cache_mode=(mode or draw(st.sampled_from(["align", "all", "none"])))
              if k == "mamba" else None,
              eagle=eagle and draw(st.booleans()))
        for k, b in zip(kinds, sizes, strict=True))
    return Scenario(semantics, factor, prompt, 0, groups)


def violated(s: Scenario, invariant: str) -> bool:
    o = evaluate(s)
    return o.refused is None and any(v.invariant == invariant for v in o.violations)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(V024, same_size=True, mode="align"))
def test_0_24_0_keeps_all_four_with_one_block_size_in_align_mode(s: Scenario) -> None:
    remember(s)
    o = evaluate(s)
    assert o.refused or not o.violations, o.violations


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(V023, same_size=True, mode="align"))
def test_0_23_0_keeps_the_other_three(s: Scenario) -> None:
    remember(s)
    o = evaluate(s)
    assert o.refused or {v.invariant for v in o.violations} <= {"no-partial-state"}


def _find(semantics: str, invariant: str, same_size: bool, mode: str | None = None,
          kinds: tuple[str, ...] | None = None) -> Scenario:
    # the first violating example drawn, not shrunk: each assertion below holds for any
    # violating example, and shrinking cost 1.3-5x the search (the same seeded search)
    return find(scenarios(semantics, same_size, mode, kinds=kinds),
                lambda s: violated(s, invariant),
                settings=settings(max_examples=20_000, database=None, derandomize=True,
                                  phases=[Phase.generate]))


def test_0_23_0_breaks_no_partial_state() -> None:
    s = _find(V023, "no-partial-state", True, "align")
    assert s.prompt_tokens >= 2


def test_0_24_0_breaks_no_partial_state_in_all_mode() -> None:
    s = _find(V024, "no-partial-state", True, "all")
    assert any(g.mamba_cache_mode == "all" for g in s.groups)


def test_0_24_0_breaks_whole_blocks_with_mixed_block_sizes() -> None:
    s = _find(V024, "whole-blocks", False, "align")
    assert len({g.gpu_block_size for g in s.groups}) > 1


def test_0_24_0_breaks_loads_stored_only_with_mixed_block_sizes() -> None:
    s = _find(V024, "loads-stored-only", False, "align", KINDS)
    assert len({g.gpu_block_size for g in s.groups}) > 1
