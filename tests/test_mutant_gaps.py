"""Cases that close the gaps surviving mutants of the vllm-0.24.0 lookup showed
(``python -m publish --mutants``): each pins a step no other test or theorem pinned."""

from __future__ import annotations

from typing import Any

from model.citations import cite
from model.evaluate import evaluate
from model.scenario import parse_scenario
from releases import vllm_0_24_0

V024 = vllm_0_24_0.SEMANTICS.name


def scenario(prompt: int, computed: int, groups: list[dict[str, Any]], factor: int = 2,
             semantics: str = V024) -> Any:
    return parse_scenario({"semantics": semantics, "block_size_factor": factor,
                           "prompt_tokens": prompt, "num_computed_tokens": computed,
                           "groups": groups})


def test_key_clamp_gives_zero_not_deferral() -> None:
    # scheduler.py:504: max_hit_size_tokens = min(.., num_keys * obs) = 32, then 32 - 16 is
    # less than one 32-token offloaded block: 0 at once, the deferred block never asked
    s = scenario(50, 16, [{"kind": "full_attention", "gpu_block_size": 16, "stored": "all",
                           "deferred": [0]}])
    o = evaluate(s)
    assert o.hit_tokens == 0 and o.lookups == ()


def test_start_block_rounds_down() -> None:
    # scheduler.py:527: start_block_idx = 16 // 32 = 0, so block 0 (missing) is looked up
    # and the hit is 0; rounding up would skip it, hit 80 tokens and load block 0 unstored
    s = scenario(100, 16, [{"kind": "full_attention", "gpu_block_size": 16,
                            "stored": [1, 2]}])
    o = evaluate(s)
    assert o.lookups == ((0, 0),) and o.hit_tokens == 0 and not o.violations


def test_factor_needs_one_gpu_block_size() -> None:
    # base.py:507 alone refuses this layout: the hash block size (gcd 16) divides both
    groups = [{"kind": "full_attention", "gpu_block_size": 16, "stored": "all"},
              {"kind": "full_attention", "gpu_block_size": 32, "stored": "all"}]
    o = evaluate(scenario(128, 0, groups))
    assert o.refused is not None and cite("0.24.0", "same_block_size") in o.refused
    assert evaluate(scenario(128, 0, groups, factor=1)).refused is None


def test_hit_shrunk_below_one_block_is_zero() -> None:
    # scheduler.py:562: block 0 (32 tokens) is the only hit; 32 - 16 computed = 16 tokens
    # is less than one offloaded block, so the answer is 0, not a 16-token hit
    s = scenario(100, 16, [{"kind": "full_attention", "gpu_block_size": 16, "stored": [0]}])
    o = evaluate(s)
    assert o.hit_tokens == 0 and o.lookup is not None
    assert "shrank below one offloaded block" in o.lookup.reason


def test_shrink_after_deferral_looks_at_every_group_again() -> None:
    # scheduler.py:569: full attention defers (block 0); the Mamba group then shrinks the
    # hit to 32, so every group is looked up again: full attention defers again -> None
    s = scenario(64, 0, [{"kind": "full_attention", "gpu_block_size": 16, "stored": "all",
                          "deferred": [0]},
                         {"kind": "mamba", "gpu_block_size": 16, "mamba_cache_mode": "align",
                          "stored": [1]}], factor=1)
    o = evaluate(s)
    assert o.hit_tokens is None and o.lookup is not None and o.lookup.passes == 2


def test_shrink_by_a_plain_group_re_verifies_eagle() -> None:
    # scheduler.py:568: the Mamba group (not EAGLE) shrinks the hit to 13 blocks, which
    # clears eagle_verified: in pass 2 the EAGLE window group again queries one block
    # more ([0, 14)) and pops it; the hit is the same, the lookups are not
    s = scenario(289, 0, [
        {"kind": "mamba", "gpu_block_size": 16, "mamba_cache_mode": "none",
         "stored": list(range(13))},
        {"kind": "sliding_window", "gpu_block_size": 16, "sliding_window": 52,
         "stored": "all", "eagle": True},
        {"kind": "sliding_window", "gpu_block_size": 16, "sliding_window": 4,
         "stored": "all", "eagle": True}], factor=1)
    o = evaluate(s)
    assert o.hit_tokens == 208 and o.lookup is not None
    second = [(st.group, st.queried, st.note) for st in o.lookup.steps if st.pass_no == 2]
    assert second[0] == (1, (0, 14), "EAGLE block popped")


def test_no_window_rerun_before_a_window_is_looked_up() -> None:
    # scheduler.py:574: full-attention group 1 shrinks the hit before any sliding-window
    # group was looked up in this pass, so no pass of window groups is scheduled: the
    # window group comes later in the same pass (mutmut survivor: the flag set to True)
    s = scenario(64, 0, [{"kind": "full_attention", "gpu_block_size": 16, "stored": "all"},
                         {"kind": "full_attention", "gpu_block_size": 16, "stored": [0, 1]},
                         {"kind": "sliding_window", "gpu_block_size": 16, "sliding_window": 16,
                          "stored": "all"}], factor=1)
    o = evaluate(s)
    assert o.hit_tokens == 32 and o.lookup is not None and o.lookup.passes == 1


def test_early_zero_is_recorded_in_the_trace() -> None:
    # the explanation (python -m model lookup --explain) shows the step that returned 0
    # (mutmut survivors: every field of this Step record could be dropped unnoticed)
    s = scenario(50, 16, [{"kind": "full_attention", "gpu_block_size": 16, "stored": "all"}])
    o = evaluate(s)
    assert o.lookup is not None and o.hit_tokens == 0
    st = o.lookup.steps[-1]
    assert (st.pass_no, st.group, st.max_hit_before, st.queried, st.num_hit_blocks,
            st.max_hit_after, st.note) == (1, 0, 50, (0, 0), None, 32,
                                           "less than one block left")


def test_a_rerun_after_a_deferral_clears_the_deferral() -> None:
    # scheduler.py:569-571: full attention defers (block 3), the Mamba group shrinks the
    # hit to 32, every group is looked up again and the deferral is forgotten: pass 2
    # asks only blocks [0, 2), none deferred, so the answer is 32, not None. The real
    # 0.24.0 scheduler answers 32 with these lookups (sim.crosscheck harness)
    # (mutmut survivor: the flag set to True instead of False)
    s = scenario(80, 0, [{"kind": "full_attention", "gpu_block_size": 16, "stored": "all",
                          "deferred": [3]},
                         {"kind": "mamba", "gpu_block_size": 16, "mamba_cache_mode": "none",
                          "stored": [1]}], factor=1)
    o = evaluate(s)
    assert o.hit_tokens == 32 and o.lookups == (
        (0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (1, 4), (1, 3), (1, 2), (1, 1),
        (0, 0), (0, 1), (1, 1))


def test_a_verified_eagle_group_is_not_popped_again() -> None:
    # scheduler.py:553: the first EAGLE group is verified in pass 1; the second (also
    # EAGLE) shrinks the hit, which keeps eagle_verified (scheduler.py:567), so in the
    # re-run the first queries only [0, 1) with its plain window. The real 0.24.0
    # scheduler answers 16 with these lookups (mutmut survivor: group never verified)
    s = scenario(97, 0, [
        {"kind": "sliding_window", "gpu_block_size": 16, "sliding_window": 16, "eagle": True,
         "stored": [0, 1, 2]},
        {"kind": "sliding_window", "gpu_block_size": 16, "sliding_window": 16, "eagle": True,
         "stored": [0, 1, 5]}], factor=1)
    o = evaluate(s)
    assert o.hit_tokens == 16 and o.lookups == (
        (0, 5), (0, 4), (0, 3), (0, 2), (0, 1), (1, 2), (1, 1), (1, 0), (0, 0), (1, 0))
