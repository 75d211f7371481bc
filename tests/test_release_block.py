"""vLLM 0.25.0, 0.26.0 and 0.27.0 (releases/vllm_0_25_0.py, vllm_0_26_0.py, vllm_0_27_0.py):
each is built on its predecessor and changes what its module says it changes, and no more.
The cross-check against the real schedulers is ``python -m sim.crosscheck --vllm 0.2X.0``;
these tests need no vLLM environment (the alias check: the wheels, when present)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import releases
from model.evaluate import evaluate
from model.scenario import ScenarioError, load_scenario_file, parse_scenario
from releases import vllm_0_24_0, vllm_0_25_0, vllm_0_26_0, vllm_0_27_0
from sim.crosscheck.gen import distinct

ROOT = Path(__file__).resolve().parent.parent
V024, V025, V026, V027 = (m.SEMANTICS.name for m in (vllm_0_24_0, vllm_0_25_0, vllm_0_26_0,
                                                      vllm_0_27_0))


def test_each_is_a_child_of_its_predecessor() -> None:
    assert [releases.get(n).parent for n in (V025, V026, V027)] == [V024, V025, V026]
    assert releases.releases("block")[-4:] == (V024, V025, V026, V027)
    for n in (V025, V026, V027):
        assert releases.by_version(releases.get(n).base_version).name == n
    # 0.25.0, 0.26.0 and 0.27.0 inherit 0.24.0's theorem expectations (Z3 gives each the
    # same verdicts: their modules' "Proofs:" paragraphs)
    for n in (V025, V026, V027):
        assert releases.get(n).expect == releases.get(V024).expect


def test_0_25_0_answers_and_loads_as_0_24_0_and_looks_up_otherwise() -> None:
    """HIT_PENDING extends a window run in 0.25.0: the scan may stop sooner, but a waiting
    block in the scan defers either way, so the hit and the load are 0.24.0's."""
    for s in distinct(V025, 300, seed=3):
        a, b = evaluate(s, V024), evaluate(s, V025)
        # (a refusal cites each release's own line)
        assert (a.refused is None, a.hit_tokens, a.loads, a.assertion, a.violations) == (
            b.refused is None, b.hit_tokens, b.loads, b.assertion, b.violations)
    s = load_scenario_file(ROOT / "tests/scenarios/vllm-0.25.0/pending-extends-window.json")
    assert evaluate(s, V024).lookups == ((0, 3), (0, 2), (0, 1))
    assert evaluate(s, V025).lookups == ((0, 3), (0, 2))


def _raw(**top: object) -> dict[str, object]:
    raw: dict[str, object] = {
        "semantics": V026, "block_size_factor": 1, "prompt_tokens": 50,
        "num_computed_tokens": 0,
        "groups": [{"kind": "full_attention", "gpu_block_size": 4, "stored": "all"},
                   {"kind": "sliding_window", "gpu_block_size": 4, "sliding_window": 9,
                    "stored": "all"}]}
    raw.update(top)
    return raw


def test_blocks_per_chunk_from_0_26_0() -> None:
    with pytest.raises(ScenarioError, match="^blocks_per_chunk: not modelled for"):
        evaluate(parse_scenario(_raw(blocks_per_chunk=2)), V025)
    by_chunk = evaluate(parse_scenario(_raw(blocks_per_chunk=2)), V026)
    by_size = evaluate(parse_scenario(_raw(block_size_factor=2)), V026)
    assert by_chunk.refused is None and by_chunk.hit_tokens == 48
    assert (by_chunk.hit_tokens, by_chunk.loads) == (by_size.hit_tokens, by_size.loads)
    both = evaluate(parse_scenario(_raw(blocks_per_chunk=2, block_size_factor=2)), V026)
    assert both.refused and "offloading/config.py:64" in both.refused
    # per-group block sizes: blocks_per_chunk has no one-block-size check (block_size has)
    mixed = _raw(blocks_per_chunk=2)
    mixed["groups"][1]["gpu_block_size"] = 8  # type: ignore[index]
    assert evaluate(parse_scenario(mixed), V026).refused is None
    mixed.pop("blocks_per_chunk")
    mixed["block_size_factor"] = 2
    assert "offloading/config.py:80" in (evaluate(parse_scenario(mixed), V026).refused or "")


@pytest.mark.parametrize("field,value", [("output_tokens", 3), ("context_parallel_size", 2)])
def test_0_26_0_models_new_requests_without_cp(field: str, value: int) -> None:
    raw = _raw(**{field: value})
    raw["groups"] = raw["groups"][:1]  # type: ignore[index]
    assert evaluate(parse_scenario(raw), V025).refused is None
    with pytest.raises(ScenarioError, match=f"^{field}: not modelled for"):
        evaluate(parse_scenario(raw), V026)


def test_0_26_0_takes_the_engines_mamba_mode() -> None:
    def mamba(mode: str, caching: bool = True, second: str | None = None) -> object:
        groups = [{"kind": "mamba", "gpu_block_size": 4, "mamba_cache_mode": mode,
                   "stored": "all"}]
        if second:
            groups.append({**groups[0], "mamba_cache_mode": second})
        return parse_scenario(_raw(groups=groups, enable_prefix_caching=caching))

    for s, refused in ((mamba("align"), False), (mamba("all"), False), (mamba("none"), True),
                       (mamba("none", caching=False), False),
                       (mamba("align", caching=False), True),
                       (mamba("align", second="all"), True)):
        assert (evaluate(s, V026).refused is not None) is refused, s
        assert evaluate(s, V025).refused is None


def test_0_27_0_load_accepts_one_more_pending_block() -> None:
    s = load_scenario_file(ROOT / "tests/scenarios/vllm-0.27.0/window-load-slack.json")
    for name in (V024, V025, V026):
        out = evaluate(s, name)
        assert out.hit_tokens == 16 and out.assertion and "exceed the window of 1" in \
            out.assertion
    out = evaluate(s, V027)
    assert out.hit_tokens == 16 and out.assertion is None
    assert [tuple(gl.blocks) for gl in out.loads] == [(0, 1, 2, 3), (1, 2)]
    # otherwise 0.27.0 is 0.26.0
    assert dataclasses.replace(releases.get(V027), name=V026, base_version="0.26.0",
                               summary=releases.get(V026).summary, parent=V025,
                               load_window_slack=0) == releases.get(V026)


def test_aliases_share_the_scheduler_source() -> None:
    from sim.crosscheck import envs

    for alias in ("0.25.1", "0.27.1"):
        try:
            a, target, sha = envs.alias_evidence(alias)
        except ValueError as e:
            if "no vllm-" in str(e):
                pytest.skip(str(e))
            raise
        assert (a, target) == (alias, envs.ALIASES[alias]) and len(sha) == 64
