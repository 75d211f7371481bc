"""The 0.33.0 scans by runs (``model.answers_chunked``, ``model.lookup_chunked``) give the
answers, and look up the keys in the order, that a call per key gives: the per-key scans
below are scheduler.py:773 and :805 as written (what ``model/lookup_chunked.py`` did
before it scanned by runs)."""

from __future__ import annotations

import random

from model.answers_chunked import ChunkAnswers, meets
from model.lookup_chunked import HIT, HIT_PENDING, MISS, RETRY, _Manager, answer
from model.lookup_chunked import _maximal_prefix_lookup as prefix_by_runs
from model.lookup_chunked import _sliding_window_lookup as window_by_runs
from model.scenario import Group


def _prefix_per_key(ask: list[str], chunks: range) -> tuple[int | None, list[int]]:
    # scheduler.py:773
    seen, hit_count, defer_lookup = [], 0, False
    for idx in chunks:
        seen.append(idx)
        result = ask[idx]
        if result in (HIT, HIT_PENDING):  # scheduler.py:788
            hit_count += 1
            defer_lookup |= result == HIT_PENDING
        elif result == RETRY:  # scheduler.py:797
            defer_lookup = True
        else:  # scheduler.py:801
            break
    return (None if defer_lookup else hit_count), seen


def _window_per_key(ask: list[str], chunks: range, window: int,
                    initial_window: int | None) -> tuple[int | None, list[int]]:
    # scheduler.py:805
    seen: list[int] = []
    defer_lookup = pending_in_window = False
    consecutive_hits = 0
    required_window = initial_window or window
    for idx in range(len(chunks) - 1, -1, -1):
        seen.append(chunks[idx])
        result = ask[chunks[idx]]
        if result == HIT:
            consecutive_hits += 1
        elif result == HIT_PENDING:
            pending_in_window = True
            consecutive_hits += 1
        else:
            defer_lookup |= result == RETRY
            consecutive_hits = 0
            pending_in_window = False
            required_window = window
        if consecutive_hits == required_window:
            return (None if defer_lookup or pending_in_window else idx + required_window), seen
    return (None if defer_lookup or pending_in_window else consecutive_hits), seen


class _Layout:  # what the manager reads (chunk_tokens) and a group's chunk
    def __init__(self, tpc: int) -> None:
        self.groups = [self]
        self.tokens_per_chunk = tpc
        self.chunk_tokens = (tpc,)


class _Scenario:
    def __init__(self, g: Group) -> None:
        self.groups = (g,)


def _some(rng: random.Random, n: int, p: float) -> frozenset[int]:
    return frozenset(i for i in range(n) if rng.random() < p)


def _group(rng: random.Random, n: int, tpc: int) -> Group:
    p = rng.choice((0.0, 0.05, 0.2, 0.5))
    stored = None if rng.random() < 0.3 else _some(rng, n, rng.choice((0.5, 0.8, 0.95)))
    ends = range(1, (n + 1) * tpc + 1)
    return Group(
        kind="full_attention", gpu_block_size=tpc, stored=stored,
        deferred=_some(rng, n, p / 2), pending=_some(rng, n, p),
        stored_tails=frozenset(e for e in ends if rng.random() < p / 4),
        pending_tails=frozenset(e for e in ends if rng.random() < p / 8),
        deferred_tails=frozenset(e for e in ends if rng.random() < p / 8))


def test_runs_answer_as_each_key() -> None:
    rng = random.Random(27)
    for _ in range(3000):
        n, tpc = rng.randint(0, 40), rng.choice((1, 2, 3))
        g = _group(rng, n, tpc)
        ask = [answer(g, (i + 1) * tpc, tpc) for i in range(n + 2)]
        ans = ChunkAnswers.of(g, tpc)
        lo = rng.randint(0, n)
        hi = rng.randint(lo, n)
        miss = next((i for i in range(lo, hi) if ask[i] == MISS), hi)
        assert ans.first_miss(lo, hi) == miss
        brk = next((i for i in range(hi - 1, lo - 1, -1) if ask[i] in (RETRY, MISS)), lo - 1)
        assert ans.last_break(hi - 1, lo) == brk
        assert ans.waits(lo, hi) == any(ask[i] in (RETRY, HIT_PENDING) for i in range(lo, hi))
        ready = next((i for i in range(hi - 1, lo - 1, -1) if ask[i] in (HIT, HIT_PENDING)),
                     lo - 1)
        assert ans.last_ready(hi - 1, lo) == ready
        mgr = _Manager(_Scenario(g), _Layout(tpc))  # type: ignore[arg-type]
        got = prefix_by_runs(mgr, 0, range(lo, hi))
        want, seen = _prefix_per_key(ask, range(lo, hi))
        assert (got, _keys(mgr)) == (want, [(0, (i + 1) * tpc) for i in seen])
        window = rng.randint(1, 5)
        initial = rng.choice((None, 0, window, window + 1, rng.randint(1, 8)))
        mgr = _Manager(_Scenario(g), _Layout(tpc))  # type: ignore[arg-type]
        got = window_by_runs(mgr, 0, range(lo, hi), window, initial)
        want, seen = _window_per_key(ask, range(lo, hi), window, initial)
        assert (got, _keys(mgr)) == (want, [(0, (i + 1) * tpc) for i in seen])


def _keys(mgr: _Manager) -> list[tuple[int, int]]:
    return [(g, e) for g, first, stop, step in mgr.segments for e in range(first, stop, step)]


def test_meets() -> None:
    for items in (frozenset(), frozenset({3}), frozenset(range(0, 50, 7))):
        for lo in range(-1, 12):
            for hi in range(-1, 12):
                assert meets(items, lo, hi) == any(lo <= b < hi for b in items)


def test_block_answers_answer_as_each_block() -> None:
    """``ChunkAnswers.of_blocks`` (the block lookup of 0.23.0-0.27.0, one key per block, no
    tail keys) answers per block as ``Group.answer`` does: a pending block extends a
    window's run from 0.25.0 on (``pending_hits``), before it breaks the run as a deferred
    one; either way it is no miss and it defers the result."""
    rng = random.Random(28)
    for _ in range(3000):
        n = rng.randint(0, 40)
        g = _group(rng, n, 1)  # with tail keys, which the block lookup has not
        pending_hits = rng.random() < 0.5
        ans = ChunkAnswers.of_blocks(g, pending_hits)

        # per block: whether it extends a window's run, whether it waits (RETRY/PENDING)
        extends = [b not in g.deferred and (pending_hits if b in g.pending else g.holds(b))
                   for b in range(n)]
        waits = [b in g.deferred or b in g.pending for b in range(n)]
        lo = rng.randint(0, n)
        hi = rng.randint(lo, n)
        assert ans.first_miss(lo, hi) == next(
            (b for b in range(lo, hi) if not (g.holds(b) or waits[b])), hi)
        down = range(hi - 1, lo - 1, -1)
        assert ans.last_break(hi - 1, lo) == next((b for b in down if not extends[b]), lo - 1)
        assert ans.last_ready(hi - 1, lo) == next((b for b in down if extends[b]), lo - 1)
        assert ans.waits(lo, hi) == any(waits[b] for b in range(lo, hi))
