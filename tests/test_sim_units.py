"""Unit tests of the simulator's pure pieces: chunking, recurrence, stores, GPU hit."""

from __future__ import annotations

import numpy as np
import pytest

from model.scenario import Group, Scenario
from releases import vllm_0_24_0
from sim import ssm
from sim.chunking import chunk_ends
from sim.cpu_store import CpuStore
from sim.gpu_cache import GpuPrefixCache, longest_hit
from sim.oracle import oracle_hit
from sim.ssm import VOCAB, ColdStates, Recurrence
from sim.states import StateRecord
from sim.workload import TokenSeq, make_trace

V024 = vllm_0_24_0.SEMANTICS.name


@pytest.mark.parametrize(
    ("num_tokens", "start", "kwargs", "expected"),
    [
        (32, 0, {}, [32]),  # ends on a boundary: one chunk, only the state at 32 saved
        (48, 0, {}, [48]),
        (40, 0, {}, [32, 40]),  # cut at the last boundary ("force to cache the last chunk")
        (20, 0, {}, [16, 20]),
        (15, 0, {}, [15]),  # shorter than a block: the state is simply not cached
        (33, 31, {}, [32, 33]),  # after a 31-token hit: the 1-token chunk ends at 32
        (32, 31, {}, [32]),
        (5000, 0, {}, [2048, 4096, 4992, 5000]),  # the token budget
        (100, 0, {"long_prefill_threshold": 40}, [32, 64, 96, 100]),
        (100, 0, {"budget": 50}, [48, 96, 100]),
        (200, 16, {"uncached_common_prefix": 100}, [112, 192, 200]),  # 0.24.0 Marconi split
        (200, 16, {"uncached_common_prefix": 8}, [192, 200]),  # below a block: no effect
    ],
)
def test_chunk_ends(num_tokens: int, start: int, kwargs: dict[str, int],
                    expected: list[int]) -> None:
    assert chunk_ends(num_tokens, start, 16, **kwargs) == expected


def test_chunk_budget_below_block_is_refused() -> None:
    with pytest.raises(ValueError, match="budget"):
        chunk_ends(40, 0, 16, budget=8)


def _seq(n: int, seed: int = 0) -> TokenSeq:
    rng = np.random.default_rng(seed)
    return TokenSeq(rng.integers(0, VOCAB, size=n, dtype=np.uint8), 16)


def test_recurrence_is_deterministic_and_boundary_exact() -> None:
    rec = Recurrence.make()
    # one shared, read-only object per seed, the same weights as a fresh build
    fresh = ssm._make.__wrapped__(20240612)
    assert Recurrence.make() is rec and not rec.decay.flags.writeable
    assert all(np.array_equal(getattr(rec, k), getattr(fresh, k))
               for k in ("decay", "drive", "readout"))
    seq = _seq(100)
    hashes = seq.hashes_upto(6)
    cold = ColdStates(rec, 16)
    full = cold.at(seq.tokens, hashes, 96)
    # from any earlier boundary state the same floats come out
    for k in range(6):
        h = ColdStates(rec, 16).at(seq.tokens, hashes, 16 * k)
        assert np.array_equal(rec.advance(h, seq.tokens, 16 * k, 96, 16), full)
    # the PR #44599 case: the state saved at 32 loaded as the state at 31, token 31
    # recomputed on top of it -- not the cold state at 32, and the output differs
    at32 = cold.at(seq.tokens, hashes, 32)
    wrong = rec.advance(at32, seq.tokens, 31, 32, 16)
    assert not np.array_equal(wrong, at32)
    assert rec.greedy(wrong, 32) != rec.greedy(at32, 32)


def test_surely_same_greedy_is_never_wrong() -> None:
    # states near a cold one at every scale, from float noise to far off: the bound's
    # "same tokens" must hold whenever it is given (a bound 30,000x too small gives
    # dozens of wrong answers here), it must be given for most near states (else it
    # saves nothing), and greedy_margin/greedy_differs agree with greedy
    rec = Recurrence.make()
    rng = np.random.default_rng(1)
    shown = 0
    for _ in range(300):
        toks = rng.integers(0, VOCAB, size=int(rng.integers(1, 300)), dtype=np.uint8)
        c = rec.advance(rec.zero(), toks, 0, len(toks), 16)
        h = c + rng.normal(size=c.shape) * 10.0 ** rng.uniform(-17, 0) * np.abs(c)
        tokens, margin = rec.greedy_margin(c, 64)
        assert tokens == rec.greedy(c, 64)
        differs = rec.greedy(h, 64) != tokens
        assert rec.greedy_differs(h, tokens) == differs
        if rec.surely_same_greedy(h, c, margin):
            shown += 1
            assert not differs
    assert shown > 150


def test_kept_greedy_margin_is_the_computed_one() -> None:
    # greedy_margin is kept per (state bits, n): a kept answer equals a fresh recurrence's
    rec, fresh = Recurrence.make(), ssm._make.__wrapped__(20240612)
    rng = np.random.default_rng(2)
    for _ in range(20):
        toks = rng.integers(0, VOCAB, size=int(rng.integers(1, 100)), dtype=np.uint8)
        c = rec.advance(rec.zero(), toks, 0, len(toks), 16)
        for n in (8, 32, 8):
            assert rec.greedy_margin(c, n) == fresh.greedy_margin(c.copy(), n)


def test_cold_cache_bound_does_not_change_results() -> None:
    rec = Recurrence.make()
    seq = _seq(400, 3)
    hashes = seq.hashes_upto(25)
    small = ColdStates(rec, 16, capacity=2)
    big = ColdStates(rec, 16)
    for pos in (399, 17, 256, 399, 64):
        assert np.array_equal(small.at(seq.tokens, hashes, pos), big.at(seq.tokens, hashes, pos))


def test_block_hashes_name_prefixes() -> None:
    a, b = _seq(64, 1), _seq(64, 1)
    b.tokens[40] = (int(b.tokens[40]) + 1) % VOCAB
    ha, hb = a.hashes_upto(4), b.hashes_upto(4)
    assert ha[:2] == hb[:2] and ha[2] != hb[2] and ha[3] != hb[3]


def test_cpu_store_async_and_eviction() -> None:
    cpu = CpuStore(capacity=2)
    assert cpu.prepare_store([((0, 1), None), ((0, 2), None)], now=0, ready_step=3)
    assert cpu.answer((0, 1), 2) is None  # write in flight: the lookup is deferred
    assert cpu.answer((0, 1), 3) is True
    assert cpu.answer((0, 9), 3) is False
    # nothing is evictable before the stores complete
    assert not cpu.prepare_store([((0, 3), None)], now=1, ready_step=4)
    assert cpu.failed_stores == 1
    cpu.touch([(0, 1)])  # (0, 2) is now the least recently used
    assert cpu.prepare_store([((0, 3), None)], now=3, ready_step=4)
    assert set(cpu.entries) == {(0, 1), (0, 3)} and cpu.evictions == 1
    cpu.start_load([(0, 1)], until=10)  # pinned while loading
    assert not cpu.prepare_store([((0, 4), None)], now=3, ready_step=6)


def test_gpu_longest_hit_pure_mamba_and_hybrid() -> None:
    seq = _seq(80)
    h = seq.hashes_upto(5)
    gpu = GpuPrefixCache(100)
    gpu.insert((0, h[1]), StateRecord(32))
    gpu.insert((0, h[3]), StateRecord(64))
    # the hit is capped at prompt - 1: a 64-token prompt cannot use the state at 64
    assert longest_hit(gpu, h, 64, 16, 0).tokens == 32
    assert longest_hit(gpu, h, 65, 16, 0).tokens == 64
    hy = GpuPrefixCache(100)
    for b in range(3):
        hy.insert((0, h[b]), None)
    hy.insert((1, h[0]), StateRecord(16))
    hit = longest_hit(hy, h, 80, 16, 1)
    assert (hit.tokens, hit.uncached_common_prefix) == (16, 32)
    # first-inserted block wins (block_pool.py keeps and hands out the first)
    hy.insert((1, h[0]), StateRecord(16, clean=False))
    assert longest_hit(hy, h, 80, 16, 1).state == StateRecord(16)


def test_workloads_are_reproducible() -> None:
    for name in ("chat", "shared-prefix", "random"):
        a, b = make_trace(name, 300, 7), make_trace(name, 300, 7)
        assert len(a) == 300
        assert [(r.arrival, r.prompt_len, r.reply_len) for r in a] == \
            [(r.arrival, r.prompt_len, r.reply_len) for r in b]
        assert all(np.array_equal(x.tokens[:x.prompt_len], y.tokens[:y.prompt_len])
                   for x, y in zip(a, b, strict=True))
        assert [r.arrival for r in a] == sorted(r.arrival for r in a)
    with pytest.raises(ValueError, match="workload"):
        make_trace("nope", 3, 0)


def test_oracle_hit() -> None:
    def mamba(stored: set[int], deferred: frozenset[int] = frozenset()) -> Group:
        return Group("mamba", 16, frozenset(stored), mamba_cache_mode="align",
                     deferred=deferred)

    def sc(prompt: int, gpu: int, *groups: Group) -> Scenario:
        return Scenario(V024, 1, prompt, gpu, groups, mamba_block_size=16)

    assert oracle_hit(sc(32, 0, mamba({1}))) == 0  # the state at 32 leaves no token
    assert oracle_hit(sc(33, 0, mamba({1}))) == 32
    assert oracle_hit(sc(64, 0, mamba({0, 3}))) == 16
    assert oracle_hit(sc(64, 16, mamba({0, 2}))) == 32
    assert oracle_hit(sc(64, 0, mamba({0, 2}, frozenset({2})))) == 16  # in flight
    attn = Group("full_attention", 16, frozenset({0, 1}))
    assert oracle_hit(sc(80, 0, attn, mamba({1, 3}))) == 32  # attention stops at 32
