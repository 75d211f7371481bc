"""vLLM 0.33.0's CPU tier (``sim.tier``): hand-checked cases of each rule, by the vLLM line
they follow. The event-by-event check against the real manager is
``tests/test_crosscheck_tier.py`` (marked crosscheck)."""

from __future__ import annotations

import pytest

from sim.crosscheck.tier_events import case_from_json, replay
from sim.crosscheck.tier_gen import generate
from sim.tier import Answer, OffloadPolicy, Tier, TierAssertion, TierConfig
from sim.tier_arc import ArcPolicy
from sim.tier_context import Key, ReqContext
from sim.tier_lru import LruPolicy


def keys(*hashes: int, group: int = 0) -> list[Key]:
    return [(h, group) for h in hashes]


def stored(tier: Tier, ctx: ReqContext, ks: list[Key]) -> None:
    out = tier.prepare_store(ks, ctx)
    assert out is not None
    tier.complete_store(list(out.keys_to_store), ctx)


def positioned(rid: str, ks: list[Key], tokens: int = 16) -> ReqContext:
    ctx = ReqContext(rid)
    for i, k in enumerate(ks):
        ctx.set_position(k, (i + 1) * tokens)
    return ctx


def test_store_is_pending_until_complete() -> None:
    # manager.py:198-205 (HIT_PENDING while ref_cnt -1), :384-392
    tier = Tier(TierConfig(4))
    ctx = ReqContext("a")
    assert tier.on_new_request(ctx) is OffloadPolicy.CHUNK_LEVEL
    out = tier.prepare_store(keys(1, 2), ctx)
    assert out is not None and out.keys_to_store == ((1, 0), (2, 0)) and out.chunk_ids == (0, 1)
    assert tier.lookup((1, 0)) is Answer.HIT_PENDING
    assert tier.lookup((3, 0)) is Answer.MISS
    tier.complete_store(keys(1), ctx)
    assert tier.lookup((1, 0)) is Answer.HIT
    assert tier.lookup((2, 0)) is Answer.HIT_PENDING
    tier.complete_store(keys(2), ctx, success=False)  # a failed store frees the slot
    assert tier.lookup((2, 0)) is Answer.MISS
    assert tier.free_list == [1]


def test_lru_evicts_tail_first_within_a_request() -> None:
    # lru.py:116-117: (request rank, -position), so a request's later chunks go first
    tier = Tier(TierConfig(3))
    a = keys(1, 2, 3)
    ctx = positioned("a", a)
    stored(tier, ctx, a)
    out = tier.prepare_store(keys(9), ReqContext("b"))
    assert out is not None and out.evicted == ((3, 0),) and out.chunk_ids == (2,)


def test_lru_finish_makes_the_head_most_recent() -> None:
    # lru.py:154-163: at its end the request's keys get fresh ranks, tail to head
    tier = Tier(TierConfig(3))
    a = keys(1, 2, 3)
    ctx = positioned("a", a)
    stored(tier, ctx, a)
    tier.on_request_finished(ctx)
    assert isinstance(tier.policy, LruPolicy)
    assert tier.policy.eviction_order() == keys(3, 2, 1)


def test_pinned_and_offered_chunks_are_not_evicted() -> None:
    # manager.py:233-237 (a load pins), :325-336 (the offer's own keys are protected)
    tier = Tier(TierConfig(2))
    ctx = ReqContext("a")
    stored(tier, ctx, keys(1, 2))
    assert tier.prepare_load(keys(1), ctx) == (0,)
    assert tier.prepare_store(keys(2, 3), ReqContext("b")) is None  # 2 protected, 1 pinned
    tier.complete_load(keys(1), ctx)
    out = tier.prepare_store(keys(2, 3), ReqContext("b"))
    assert out is not None and out.evicted == ((1, 0),) and out.keys_to_store == ((3, 0),)


def test_load_of_a_missing_or_pending_key_asserts() -> None:
    tier = Tier(TierConfig(2))
    ctx = ReqContext("a")
    with pytest.raises(TierAssertion):
        tier.prepare_load(keys(1), ctx)
    tier.prepare_store(keys(1), ctx)
    with pytest.raises(TierAssertion):
        tier.prepare_load(keys(1), ctx)


def test_arc_reuse_promotes_and_ghost_hits_adapt() -> None:
    # arc.py:116-139 (a reused chunk moves to T2 at the request's end), :78-89, :149-214
    tier = Tier(TierConfig(2, "arc"))
    a = ReqContext("a")
    stored(tier, a, keys(1, 2))
    b = ReqContext("b")
    tier.prepare_load(keys(1), b)
    tier.complete_load(keys(1), b)
    tier.on_request_finished(b)
    pol = tier.policy
    assert isinstance(pol, ArcPolicy)
    assert list(pol.t1) == keys(2) and list(pol.t2) == keys(1)
    c = ReqContext("c")
    out = tier.prepare_store(keys(3), c)  # T1 (1 chunk) >= int(target 0): evict from T1
    assert out is not None and out.evicted == ((2, 0),)
    assert list(pol.b1) == keys(2)
    tier.prepare_store(keys(2), ReqContext("d"))  # a B1 ghost: target grows by 1
    assert pol.target == 1


def test_store_threshold_counts_offers() -> None:
    # manager.py:282-291: a key is stored on its threshold-th offer
    tier = Tier(TierConfig(4, store_threshold=2))
    out = tier.prepare_store(keys(1), ReqContext("a"))
    assert out is not None and out.keys_to_store == ()
    out = tier.prepare_store(keys(1), ReqContext("b"))
    assert out is not None and out.keys_to_store == ((1, 0),)


def test_new_keys_after_finish_assert() -> None:
    tier = Tier(TierConfig(4))
    ctx = ReqContext("a")
    stored(tier, ctx, keys(1))
    tier.on_request_finished(ctx)
    with pytest.raises(TierAssertion):
        tier.prepare_store(keys(2), ctx)


def test_bad_config_names_the_field() -> None:
    with pytest.raises(ValueError, match="policy"):
        TierConfig(4, "fifo")
    with pytest.raises(ValueError, match="num_chunks"):
        TierConfig(-1)


@pytest.mark.parametrize("policy", ["lru", "arc"])
def test_generated_sequences_are_deterministic_and_valid(policy: str) -> None:
    for i in range(40):
        case = generate(7, policy, i)
        assert generate(7, policy, i) == case
        assert case_from_json(case.to_json()) == case
        obs = replay(case)
        # the generator keeps vLLM's contract: the model never asserts
        assert not any(isinstance(o["answer"], dict) and "error" in o["answer"] for o in obs)
        last = obs[-1]["view"]
        assert len(last["held"]) <= case.config.num_chunks


@pytest.mark.parametrize("argv, flag", [
    (["--policy", "fifo"], "--policy"), (["--sequences", "0"], "--sequences"),
    (["--seed", "-1"], "--seed")])
def test_crosscheck_bad_input_names_the_flag(argv: list[str], flag: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from sim.crosscheck.tier import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0]
