"""GPU prefix hits at hash-block granularity (issue 23, item 5).

0.32.0 and 0.33.0 let the KV-cache coordinator end a GPU prefix hit on the hash block
when a Mamba align block is larger than the hash block (``cache_hit_alignment_tokens``,
kv_cache_utils.py:921; the coordinator's alignment, kv_cache_coordinator.py:709). The
engine scheduler hands the connector that hit rounded down to the scheduler block
(v1/core/sched/scheduler.py:1134) and keeps the hit's sub-block tail, loading nothing,
unless the connector's hit is longer than it (:1167, :1179). The real side of these
rules is the cross-check (``python -m sim.crosscheck --vllm 0.33.0``); here the model's
rules are pinned on hand-made layouts.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

import releases
from model import layout_chunked
from model.evaluate import evaluate
from model.layout import Refused
from model.scenario import parse_scenario
from sim.crosscheck.compare import ModelView, compare, model_view

REF = releases.reference("chunked")  # the chunked family's newest release (0.33.0)


def _scenario(computed: int, groups: list[dict[str, Any]], **kw: Any) -> Any:
    raw = {"semantics": REF.name, "block_size_factor": 1, "prompt_tokens": 100,
           "num_computed_tokens": computed, "groups": groups}
    raw.update(kw)
    return parse_scenario(raw)


def _fa_mamba(fa: int, mamba: int, stored: Any = "all") -> list[dict[str, Any]]:
    return [{"kind": "full_attention", "gpu_block_size": fa, "stored": stored},
            {"kind": "mamba", "gpu_block_size": mamba, "mamba_cache_mode": "align",
             "stored": stored}]


def test_a_hash_block_hit_is_accepted_when_a_mamba_block_is_larger() -> None:
    """Full attention 16 + Mamba 32, prefix_match_unit unset: hash 16, scheduler block 32;
    a 16-token GPU hit is real, an 8-token one is not."""
    out = evaluate(_scenario(16, _fa_mamba(16, 32)))
    assert out.refused is None
    assert out.layout is not None and out.layout.cache_hit_alignment_tokens == 16
    bad = evaluate(_scenario(8, _fa_mamba(16, 32)))
    assert bad.refused is not None and "num_computed_tokens 8" in bad.refused
    assert "kv_cache_coordinator.py" in bad.refused


def test_the_connector_sees_the_hit_rounded_down_and_the_longer_hit_wins() -> None:
    """Everything stored: the connector, asked from token 0, hits 96 > the 16-token tail,
    so the engine drops the tail and loads from token 0 (the same as a GPU hit of 0)."""
    fine = evaluate(_scenario(16, _fa_mamba(16, 32)))
    none = evaluate(_scenario(0, _fa_mamba(16, 32)))
    assert fine.hit_tokens == none.hit_tokens == 96
    assert not fine.local_tail_kept and fine.loads == none.loads
    assert fine.lookups == none.lookups


def test_a_connector_hit_no_longer_than_the_tail_keeps_it_and_loads_nothing() -> None:
    """Stores up to token 48: asked from 32 (the GPU hit 48 rounded down) the connector
    hits 0; full attention storing only chunk 0: asked from 0 (the GPU hit 16 rounded
    down) it hits 16, no longer than the 16-token tail. Both keep the tail, load nothing."""
    out = evaluate(_scenario(48, _fa_mamba(16, 32, stored=[0, 1, 2])))
    assert out.refused is None
    assert out.hit_tokens == 0 and out.local_tail_kept and out.loads == ()
    tail16 = evaluate(_scenario(16, [
        {"kind": "full_attention", "gpu_block_size": 16, "stored": [0]},
        {"kind": "mamba", "gpu_block_size": 32, "mamba_cache_mode": "align",
         "stored": "all"}]))
    assert tail16.refused is None and tail16.local_tail_kept and tail16.loads == ()
    mv = model_view(_scenario(16, [
        {"kind": "full_attention", "gpu_block_size": 16, "stored": [0]},
        {"kind": "mamba", "gpu_block_size": 32, "mamba_cache_mode": "align",
         "stored": "all"}]), REF.name)
    assert mv.local_tail_kept and mv.loads is None


@pytest.mark.parametrize(("groups", "why"), [
    (_fa_mamba(32, 16), "no Mamba block larger than the hash block"),
    ([{"kind": "sliding_window", "gpu_block_size": 32, "sliding_window": 8,
       "stored": "all"}, *_fa_mamba(16, 32)[1:],
      {"kind": "full_attention", "gpu_block_size": 16, "stored": "all"}],
     "a sliding-window group whose block is not the hash block"),
])
def test_no_fine_hits_without_the_conditions(groups: list[dict[str, Any]], why: str) -> None:
    out = evaluate(_scenario(16, groups))
    assert out.refused is not None, why
    assert "GPU hit alignment 32" in out.refused


def test_without_prefix_caching_no_gpu_hit() -> None:
    groups = [{"kind": "full_attention", "gpu_block_size": 32, "stored": "all"},
              {"kind": "mamba", "gpu_block_size": 32, "mamba_cache_mode": "none",
               "stored": "all"}]
    out = evaluate(_scenario(32, groups, enable_prefix_caching=False))
    assert out.refused is not None and "prefix caching off" in out.refused


def test_a_release_without_fine_hits_overrides_one_step() -> None:
    """``fine_gpu_hits=False`` (releases before 0.32.0, C11 of
    docs/releases-overrides.md): GPU hits are scheduler-block multiples only."""
    steps = replace(REF.steps, fine_gpu_hits=False)
    s = _scenario(16, _fa_mamba(16, 32))
    layout = layout_chunked.resolve_layout(s, steps, REF.base_version)
    assert layout.cache_hit_alignment_tokens == layout.scheduler_block_size == 32
    with pytest.raises(Refused, match="GPU hit alignment 32"):
        layout_chunked.check_request(s, layout, REF.base_version)


def test_keeps_local_tail_rule() -> None:
    keep = layout_chunked.keeps_local_tail
    assert keep(48, 32, 16) and keep(48, 32, 0)  # no longer than the 16-token tail
    assert not keep(48, 32, 17)  # longer: the load wins
    assert not keep(48, 32, None)  # deferred: the request waits either way
    assert not keep(32, 32, 0)  # no tail


def test_compare_flags_a_gpu_hit_shape_the_real_engine_disagrees_on() -> None:
    """The harness reports whether vLLM's own resolve_cache_hit_alignment_tokens allows
    the GPU hit; the model's acceptance must match, and so must the tail choice."""
    accepted = ModelView(None, 0, (), None, None)
    real = {"refused": None, "hit": 0, "lookups": [], "keys_ok": True, "loads": None,
            "unknown_load_keys": 0, "gpu_hit_real": True, "local_tail_kept": False}
    assert compare(accepted, real).agree
    v = compare(accepted, dict(real, gpu_hit_real=False))
    assert not v.agree and v.diffs[0].startswith("GPU hit shape")
    refused = ModelView(None, 0, (), None, None, precondition="refused by ...")
    assert not compare(refused, real).agree
    assert compare(refused, dict(real, gpu_hit_real=False)).agree
    v = compare(accepted, dict(real, local_tail_kept=True))
    assert not v.agree and v.diffs[0].startswith("local GPU tail kept")


def test_the_fine_hit_corpus_draws_only_hash_block_hits_the_model_accepts() -> None:
    import random

    from sim.crosscheck.fine_hits import fine_variant

    rng = random.Random(0)
    hits = {fine_variant(_scenario(0, _fa_mamba(16, 32)), rng) for _ in range(20)}
    assert {s.num_computed_tokens for s in hits if s is not None} == {16, 48, 80}
    assert fine_variant(_scenario(0, _fa_mamba(32, 16)), rng) is None  # no fine hits
