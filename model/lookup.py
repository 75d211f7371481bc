"""``OffloadingConnectorScheduler._lookup`` and ``get_num_new_matched_tokens``.

Each step names the line of vLLM 0.24.0's scheduler.py it models (0.23.0's line in
parentheses where the step exists there too); ``model.citations`` holds both tables.
The store is the scenario's: ``Group.answer`` is what ``OffloadingManager.lookup``
returns (True: stored, None: deferred, False: missing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from model.answers_chunked import block_answers
from model.layout import GroupConfig, Layout, cdiv, round_down
from model.scenario import Group, Scenario
from model.semantics import Semantics


@dataclass(frozen=True)
class Step:
    """One group's turn in the convergence loop."""

    pass_no: int
    group: int
    max_hit_before: int
    queried: tuple[int, int]  # offloaded block indices [start, end) handed to the manager
    num_hit_blocks: int | None  # None: a lookup was deferred
    max_hit_after: int
    note: str = ""


Segment = tuple[int, int, int, int]  # (group, first block, stop, step): blocks looked up
# one group's turn as ``Step``'s fields in order: the lookup keeps plain rows and builds
# the records only when they are read (a frozen record costs more than most turns)
StepRow = tuple[int, int, int, tuple[int, int], int | None, int, str]


@dataclass(frozen=True)
class LookupResult:
    num_hit_tokens: int | None  # None: the request is deferred
    rows: tuple[StepRow, ...]  # each group's turn (as records: ``steps``)
    segments: tuple[Segment, ...]
    passes: int
    reason: str  # why the result is what it is, in words

    @property
    def steps(self) -> tuple[Step, ...]:
        """Each group's turn in the convergence loop, in order."""
        return tuple(Step(*row) for row in self.rows)

    @property
    def lookups(self) -> tuple[tuple[int, int], ...]:
        """(group, block) in the order the manager saw them."""
        return tuple((g, b) for g, first, stop, step in self.segments
                     for b in range(first, stop, step))


@dataclass
class _Manager:
    """Answers lookups from the scenario and records them (the only mutable piece).

    The blocks looked up are kept as ranges (segments), and each scan works on the runs
    of hits between the listed blocks (``model.answers_chunked.ChunkAnswers``, one block
    a chunk): the same answers and order as a call per block, with work bounded by the
    runs the scan looks up, not the prompt length.
    """

    groups: Sequence[Group]
    segments: list[Segment] = field(default_factory=list)


def _maximal_prefix_lookup(mgr: _Manager, group: int, blocks: range) -> int | None:
    # scheduler.py:388 (323): consecutive hits from the start; a deferred answer counts
    # as a hit so that the manager can start async lookups, but the result is None
    # (0.25.0 on: a pending block answers HIT_PENDING, counted, a deferred one RETRY, not
    # counted, and the scan goes on: the same blocks looked up and, deferred, None). By
    # runs (``ChunkAnswers``, kept per store): the hits, then the first miss (if any),
    # are looked up; pending and deferred blocks are not misses either way
    lo, hi = blocks.start, blocks.stop
    ans = block_answers(mgr.groups[group], pending_hits=False)
    hit_count = ans.first_miss(lo, hi) - lo
    if hi > lo:  # the hits, then the first miss (if any) are looked up
        mgr.segments.append((group, lo, lo + min(hit_count + 1, hi - lo), 1))
    defer_lookup = ans.waits(lo, lo + hit_count)
    return None if defer_lookup else hit_count


def _sliding_window_lookup(mgr: _Manager, group: int, blocks: range, window: int,
                           pending_hits: bool) -> int | None:
    # scheduler.py:407 (342): scan from the end for the last run of `window` hits and
    # return its end index within `blocks`; a run that reaches the start counts as is;
    # a deferred answer breaks a run (and defers the result). ``pending_hits`` (0.25.0
    # on, its scheduler.py:427, 433): a pending block (HIT_PENDING) extends the run
    # instead, a deferred one (RETRY) still breaks it; both defer the result. By runs:
    # from the top, each run of hits down to the break below it (``last_break``)
    lo, hi = blocks.start, blocks.stop
    ans = block_answers(mgr.groups[group], pending_hits)
    top = hi  # the current run is [brk + 1, top)
    while True:
        # the run's last break, looked for no deeper than the window (the scan stops there)
        brk = ans.last_break(top - 1, max(lo, top - window))
        if top - 1 - brk >= window:
            idx = top - window  # the scan stops here, having looked up [idx, hi)
            mgr.segments.append((group, hi - 1, idx - 1, -1))
            return None if ans.waits(idx, hi) else top - lo
        if brk < lo:  # the scan reached the start: the first run counts as is
            if hi > lo:
                mgr.segments.append((group, hi - 1, lo - 1, -1))
            return None if ans.waits(lo, hi) else top - lo
        top = ans.last_ready(brk - 1, lo) + 1  # the next run ends below these breaks


def _num_offload_keys(cfg: GroupConfig, num_tokens: int) -> int:
    # RequestOffloadState.update_offload_keys (scheduler.py:268): one key per full
    # offloaded block, taken from every hash_block_size_factor-th request block hash
    return num_tokens // cfg.offloaded_block_size


def lookup(layout: Layout, s: Scenario, sem: Semantics) -> LookupResult:
    """``_lookup`` (scheduler.py:452 (387)) on the scenario's request and store."""
    mgr = _Manager(s.groups)
    steps: list[StepRow] = []
    num_tokens = s.num_tokens  # request.num_tokens: prompt plus output (scheduler.py:462)
    num_computed_tokens = s.num_computed_tokens
    max_hit_size_tokens = num_tokens
    if layout.sliding_window_groups:
        # scheduler.py:467 (402): the last prompt token is recomputed for its logits
        max_hit_size_tokens -= 1
        if sem.align_at == "max_hit" and layout.mamba_align_size is not None:
            # scheduler.py:470 (PR #44599): end the hit window on a Mamba block boundary
            max_hit_size_tokens = round_down(max_hit_size_tokens, layout.mamba_align_size)

    def result(hit: int | None, reason: str, passes: int) -> LookupResult:
        return LookupResult(hit, tuple(steps), tuple(mgr.segments), passes, reason)

    num_hit_tokens = 0
    defer_lookup = False
    lookup_groups: tuple[int, ...] = layout.lookup_groups
    eagle_verified: set[int] = set()  # scheduler.py:481
    passes = 0
    while lookup_groups:  # scheduler.py:482 (406): until num_hit_tokens converges
        passes += 1
        looked_up_sliding_window = False
        groups_iter = lookup_groups
        lookup_groups = ()
        for group_idx in groups_iter:
            cfg = layout.groups[group_idx]
            obs = cfg.offloaded_block_size
            num_keys = _num_offload_keys(cfg, num_tokens)
            before = max_hit_size_tokens
            is_eagle_unverified = cfg.is_eagle_group and group_idx not in eagle_verified
            # scheduler.py:504 (424): no further than this group's last full block
            max_hit_size_tokens = min(max_hit_size_tokens, num_keys * obs)
            if max_hit_size_tokens - num_computed_tokens < obs:  # scheduler.py:507 (427)
                steps.append((passes, group_idx, before, (0, 0), None,
                              max_hit_size_tokens, "less than one block left"))
                return result(0, f"group {group_idx}: less than one offloaded block "
                              f"({obs} tokens) left beyond the GPU hit", passes)
            window = cfg.sliding_window_size_in_blocks
            query_max = max_hit_size_tokens
            if is_eagle_unverified and window is not None:
                # scheduler.py:518: an EAGLE window group also queries the next block
                query_max = min(max_hit_size_tokens + obs, num_keys * obs)
            num_blocks = min(cdiv(query_max, obs), num_keys)  # scheduler.py:524 (431)
            start_block_idx = num_computed_tokens // obs  # scheduler.py:527 (434)
            blocks = range(start_block_idx, max(start_block_idx, num_blocks))
            num_hit_blocks: int | None
            if window is None:
                num_hit_blocks = _maximal_prefix_lookup(mgr, group_idx, blocks)
            else:
                required_window = window + 1 if is_eagle_unverified else window  # :540
                num_hit_blocks = _sliding_window_lookup(mgr, group_idx, blocks, required_window,
                                                        sem.window_pending_hits)
            queried = (blocks.start, blocks.stop)
            if num_hit_blocks == 0:  # scheduler.py:546 (453)
                steps.append((passes, group_idx, before, queried, 0,
                              max_hit_size_tokens, "no hit"))
                return result(0, f"group {group_idx}: no hit in blocks "
                              f"[{queried[0]}, {queried[1]})", passes)
            note = ""
            if num_hit_blocks is None:
                defer_lookup = True  # scheduler.py:550 (457)
                note = "deferred"
            else:
                if is_eagle_unverified:  # scheduler.py:552: pop the volatile EAGLE block
                    num_hit_blocks -= 1
                    eagle_verified.add(group_idx)
                    note = "EAGLE block popped"
                max_hit_size_tokens = min(  # scheduler.py:556 (459)
                    max_hit_size_tokens, obs * (start_block_idx + num_hit_blocks)
                )
            steps.append((passes, group_idx, before, queried, num_hit_blocks,
                          max_hit_size_tokens, note))
            new_num_hit_tokens = max_hit_size_tokens - num_computed_tokens  # :561 (464)
            if new_num_hit_tokens < obs:  # scheduler.py:562 (465)
                return result(0, f"group {group_idx}: hit shrank below one offloaded "
                              f"block ({obs} tokens)", passes)
            if new_num_hit_tokens < num_hit_tokens:  # scheduler.py:566 (469)
                if not cfg.is_eagle_group:
                    eagle_verified.clear()  # scheduler.py:568
                if defer_lookup:  # scheduler.py:569 (470): look again at every group
                    defer_lookup = False
                    lookup_groups = layout.lookup_groups
                elif looked_up_sliding_window and not lookup_groups:
                    # scheduler.py:574 (475): re-confirm earlier sliding windows
                    lookup_groups = layout.sliding_window_groups
            looked_up_sliding_window |= window is not None  # scheduler.py:579 (480)
            num_hit_tokens = new_num_hit_tokens

    if sem.align_at == "num_hit" and layout.mamba_align_size is not None:
        # alt-round-num-hit: round the tokens beyond the GPU hit instead
        num_hit_tokens = round_down(num_hit_tokens, layout.mamba_align_size)

    if defer_lookup:  # scheduler.py:582 (483)
        return result(None, "the store deferred a lookup", passes)

    if s.enable_prefix_caching and any(g.being_loaded for g in s.groups):
        # scheduler.py:590 (491): delay if a hit block is already being loaded
        # (vLLM tracks these only with prefix caching on, scheduler.py:356)
        for cfg, g in zip(layout.groups, s.groups, strict=True):
            obs = cfg.offloaded_block_size
            num_blocks = cdiv(num_computed_tokens + num_hit_tokens, obs)
            start_block_idx = num_computed_tokens // obs
            hit_blocks = range(start_block_idx, num_blocks)
            if cfg.sliding_window_size_in_blocks is not None:
                hit_blocks = hit_blocks[-cfg.sliding_window_size_in_blocks:]
            if any(b in hit_blocks for b in g.being_loaded):
                return result(None, f"group {cfg.group_idx}: a hit block is being loaded",
                              passes)

    return result(num_hit_tokens, "converged", passes)


def get_num_new_matched_tokens(layout: Layout, s: Scenario, sem: Semantics) -> LookupResult:
    """scheduler.py:636 (537): the connector's answer for a new request."""
    if sem.in_flight_check and s.in_flight_transfers:
        # scheduler.py:662: a request with in-flight transfers waits
        return LookupResult(None, (), (), 0, "the request has in-flight transfers")
    if sem.skip_reading_check and s.skip_reading_prefix_cache:
        # scheduler.py:673 (PR #44592): the request must not read cached blocks
        return LookupResult(0, (), (), 0, "the request skips reading the prefix cache")
    return lookup(layout, s, sem)
