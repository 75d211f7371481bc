"""One group's answers to its chunk keys as sets and runs (vLLM 0.33.0's lookup scans).

``model.lookup_chunked.answer`` answers one key. The two scans of 0.33.0
(``_maximal_prefix_lookup``, scheduler.py:773; ``_sliding_window_lookup``,
scheduler.py:805) ask it key after key; what decides them is only where the runs of
answers break: the first MISS (a prefix stops there), the last RETRY or MISS below a
chunk (a window's run ends there), and whether a RETRY or HIT_PENDING lies in a run.
``ChunkAnswers`` answers those questions from the group's stored, pending and deferred
sets (and the partial-tail keys that end on a chunk boundary, the same keys), with work
bounded by the sets and the runs the scan looks up, never a Python call per chunk. Per
chunk it gives what ``answer`` gives (tests/test_answers_chunked.py).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Collection
from dataclasses import dataclass
from functools import cached_property
from itertools import filterfalse

from model.scenario import Group


def _chunks_of(ends: frozenset[int], tokens_per_chunk: int) -> frozenset[int]:
    """The chunks whose key ends at one of ``ends`` (a partial-tail key on a chunk
    boundary is that chunk's key: ``make_offload_key`` of the same block hash)."""
    if not ends:
        return frozenset()
    return frozenset(e // tokens_per_chunk - 1 for e in ends
                     if e % tokens_per_chunk == 0 and e >= tokens_per_chunk)


def _union(first: frozenset[int], *more: frozenset[int]) -> frozenset[int]:
    """``first | more...``, copying no set when the others are empty (the usual case)."""
    out = first
    for m in more:
        if m:
            out = out | m
    return out


def meets(items: Collection[int], lo: int, hi: int) -> bool:
    """Whether a member of ``items`` lies in [lo, hi) (work: the smaller of the two)."""
    if hi <= lo or not items:
        return False
    if len(items) <= hi - lo:
        return any(lo <= b < hi for b in items)
    return any(b in items for b in range(lo, hi))


@dataclass(frozen=True)
class ChunkAnswers:
    """What the stand-in manager answers for each chunk key of one group.

    RETRY for ``retry``; else HIT_PENDING for ``pending``; else HIT for ``answered``
    (None: every chunk, ``stored == "all"``); else MISS: ``answer``'s order."""

    retry: frozenset[int]
    pending: frozenset[int]
    answered: frozenset[int] | None  # not MISS (None: every chunk)
    ready: frozenset[int] | None  # HIT or HIT_PENDING (None: every chunk not in retry)
    retry_sorted: tuple[int, ...]

    @staticmethod
    def of(g: Group, tokens_per_chunk: int) -> ChunkAnswers:
        if g.stored is None and not (g.deferred or g.pending or g.deferred_tails
                                     or g.pending_tails):
            return EVERY_HIT  # stored "all", nothing waits: the usual benchmark store
        retry = _union(g.deferred, _chunks_of(g.deferred_tails, tokens_per_chunk))
        pending = _union(g.pending, _chunks_of(g.pending_tails, tokens_per_chunk))
        answered = ready = None
        if g.stored is not None:
            answered = _union(g.stored, _chunks_of(g.stored_tails, tokens_per_chunk),
                              pending, retry)
            ready = answered - retry if retry else answered
        return ChunkAnswers(retry, pending, answered, ready,
                            tuple(sorted(retry)) if retry else ())

    @staticmethod
    def of_blocks(g: Group, pending_hits: bool) -> ChunkAnswers:
        """The block lookup's answers (vLLM 0.23.0-0.27.0: one key per offloaded block, no
        partial-tail keys; ``Group.answer``): a pending block answers HIT_PENDING from
        0.25.0 on (``pending_hits``: it extends a window's run), before that as a deferred
        one (RETRY: it breaks the run); either way it defers the result."""
        if g.stored is None and not (g.deferred or g.pending):
            return EVERY_HIT
        retry, pending = (g.deferred, g.pending) if pending_hits else (
            _union(g.deferred, g.pending), frozenset())
        answered = ready = None
        if g.stored is not None:
            answered = _union(g.stored, pending, retry)
            ready = answered - retry if retry else answered
        return ChunkAnswers(retry, pending, answered, ready,
                            tuple(sorted(retry)) if retry else ())

    def first_miss(self, lo: int, hi: int) -> int:
        """The first chunk in [lo, hi) answered MISS; ``hi`` if none."""
        if self.answered is None:
            return hi
        return next(filterfalse(self.answered.__contains__, range(lo, hi)), hi)

    def last_break(self, top: int, lo: int) -> int:
        """The last chunk in [lo, top] answered RETRY or MISS; ``lo - 1`` if none."""
        if top < lo:
            return lo - 1
        if self.ready is None:
            i = bisect_right(self.retry_sorted, top)
            return self.retry_sorted[i - 1] if i and self.retry_sorted[i - 1] >= lo else lo - 1
        return next(filterfalse(self.ready.__contains__, range(top, lo - 1, -1)), lo - 1)

    def last_ready(self, top: int, lo: int) -> int:
        """The last chunk in [lo, top] answered HIT or HIT_PENDING; ``lo - 1`` if none
        (work: the retry set, or a bisection of the ready chunks)."""
        if top < lo:
            return lo - 1
        if self.ready is None:
            return next(filterfalse(self.retry.__contains__, range(top, lo - 1, -1)), lo - 1)
        i = bisect_right(self.ready_sorted, top)
        return self.ready_sorted[i - 1] if i and self.ready_sorted[i - 1] >= lo else lo - 1

    @cached_property
    def ready_sorted(self) -> tuple[int, ...]:
        return tuple(sorted(self.ready or ()))

    def waits(self, lo: int, hi: int) -> bool:
        """Whether a chunk in [lo, hi) is answered RETRY or HIT_PENDING."""
        if not (self.retry or self.pending):  # the usual store: nothing waits
            return False
        return meets(self.retry, lo, hi) or meets(self.pending, lo, hi)


EVERY_HIT = ChunkAnswers(frozenset(), frozenset(), None, None, ())


# ``ChunkAnswers.of`` per store object: a group's answers are part of the scenario (as the
# real harness fills its manager's answers before the lookup it times), so a lookup on a
# store seen before starts from its sets. Keyed by the ``Group``'s identity, kept with it
# so that its id is not reused while kept (hashing a frozen ``Group`` hashes every field,
# which cost more than most scans). Bounded: cleared when full.
# (The key's second field: the chunk's tokens; for the block lookup's answers, 0 with
# pending blocks as hits, -1 with pending blocks as deferred.)
_KEPT: dict[tuple[int, int], tuple[Group, ChunkAnswers]] = {}


def _keep(g: Group, key: tuple[int, int], answers: ChunkAnswers) -> ChunkAnswers:
    if len(_KEPT) >= 1024:
        _KEPT.clear()
    _KEPT[key] = (g, answers)
    return answers


def chunk_answers(g: Group, tokens_per_chunk: int) -> ChunkAnswers:
    """``ChunkAnswers.of``, kept per store object."""
    if g.stored is None and not (g.deferred or g.pending or g.deferred_tails
                                 or g.pending_tails):
        return EVERY_HIT  # stored "all", nothing waits (``ChunkAnswers.of``'s first case)
    key = (id(g), tokens_per_chunk)
    kept = _KEPT.get(key)
    if kept is not None and kept[0] is g:
        return kept[1]
    return _keep(g, key, ChunkAnswers.of(g, tokens_per_chunk))


def block_answers(g: Group, pending_hits: bool) -> ChunkAnswers:
    """``ChunkAnswers.of_blocks``, kept per store object."""
    if g.stored is None and not (g.deferred or g.pending):
        return EVERY_HIT
    key = (id(g), 0 if pending_hits else -1)
    kept = _KEPT.get(key)
    if kept is not None and kept[0] is g:
        return kept[1]
    return _keep(g, key, ChunkAnswers.of_blocks(g, pending_hits))
