"""vLLM 0.33.0's lookup: ``_lookup_complete_chunks``, ``_lookup`` with partial tails, and
``get_num_new_matched_tokens`` (offloading/scheduler.py of 0.33.0; lines in comments).

Keys: 0.33.0 keys every offloaded unit by the request's block hash at the token position
where it ends (``make_offload_key``, plus the group): chunk ``i`` of a group ends at
``(i + 1) * tokens_per_chunk``; a partial-tail key ends at its boundary (plus an EAGLE
group's proof margin). The model names a key ``(group, end token)``; the store answers
with 0.33.0's ``LookupResult``: HIT, HIT_PENDING (stored, not readable yet), RETRY
(location unknown yet) or MISS. ``LookupResult.lookups`` lists ``(group, end token)``.
"""

from __future__ import annotations

from model.answers_chunked import ChunkAnswers, chunk_answers, meets
from model.layout import cdiv, round_down
from model.layout_chunked import ChunkLayout
from model.lookup import LookupResult, Segment, StepRow
from model.scenario import Group, Scenario
from model.semantics import Semantics
from releases.arith import INT
from releases.steps import eagle_query_end, keep_after_cut

HIT, HIT_PENDING, RETRY, MISS = "HIT", "HIT_PENDING", "RETRY", "MISS"


class KeyPastHashes(AssertionError):
    """A partial-tail key past the request's block hashes: ``_make_boundary_key``
    (scheduler.py:1063) would index ``block_hashes`` past its end. 0.33.0 cannot get
    here (scheduler.py:1088 caps max_boundary by the hashes less the EAGLE margin); the
    model stops rather than answer MISS, so that a lookup without that cap is caught."""


def answer(g: Group, end: int, tokens_per_chunk: int) -> str:
    """What the stand-in manager answers for the group's key ending at token ``end``."""
    chunk = end // tokens_per_chunk - 1 if end % tokens_per_chunk == 0 else None
    if (chunk is not None and chunk in g.deferred) or end in g.deferred_tails:
        return RETRY
    if (chunk is not None and chunk in g.pending) or end in g.pending_tails:
        return HIT_PENDING
    if (chunk is not None and g.holds(chunk)) or end in g.stored_tails:
        return HIT
    return MISS


class _Manager:
    """Answers from the scenario and records every key looked up, in order, as segments
    ``(group, first end, stop, step)`` of key end tokens (``LookupResult.segments``): a
    scan of a run of chunks is one segment, whatever its length; and keeps the
    per-request scratch the complete-chunk lookup leaves for the partial tail. (A plain
    class: the one mutable piece, made once per lookup.)"""

    __slots__ = ("s", "tpcs", "segments", "hit_end_chunk", "steps", "passes")

    def __init__(self, s: Scenario, layout: ChunkLayout) -> None:
        self.s = s
        self.tpcs = layout.chunk_tokens  # each group's chunk, in tokens
        self.segments: list[Segment] = []
        self.hit_end_chunk: dict[int, int] = {}  # lookup_hit_end_chunk_idx (absent: 0)
        self.steps: list[StepRow] = []  # each group's turn (``LookupResult.steps``)
        self.passes = 0

    def lookup(self, group: int, end: int) -> str:
        self.segments.append((group, end, end + 1, 1))
        return answer(self.s.groups[group], end, self.tpcs[group])

    def chunk(self, group: int, idx: int) -> str:
        return self.lookup(group, (idx + 1) * self.tpcs[group])

    def answers(self, group: int) -> ChunkAnswers:
        """The group's answers by runs (``chunk_answers``: kept per store)."""
        return chunk_answers(self.s.groups[group], self.tpcs[group])

    def scanned(self, group: int, first: int, last: int) -> None:
        """Record the chunk keys ``first``, ``first ± 1``, ..., ``last`` (in that order)."""
        tpc = self.tpcs[group]
        if last >= first:
            self.segments.append((group, (first + 1) * tpc, (last + 2) * tpc, tpc))
        else:
            self.segments.append((group, (first + 1) * tpc, last * tpc, -tpc))


def _maximal_prefix_lookup(mgr: _Manager, group: int, chunks: range) -> int | None:
    # scheduler.py:773: consecutive hits from the start; HIT_PENDING counts and defers,
    # RETRY defers without counting and the scan goes on (the manager starts async
    # lookups); the first MISS stops it (scheduler.py:801). By runs: the scan looks up
    # the chunks up to the first MISS, and counts them all unless one defers, when the
    # count is not used (scheduler.py:803)
    lo, hi = chunks.start, chunks.stop
    if hi <= lo:
        return 0
    ans = mgr.answers(group)
    miss = ans.first_miss(lo, hi)
    mgr.scanned(group, lo, min(miss, hi - 1))
    return None if ans.waits(lo, miss) else miss - lo


def _sliding_window_lookup(mgr: _Manager, group: int, chunks: range, window: int,
                           initial_window: int | None, pending_anywhere: bool = False
                           ) -> int | None:
    # scheduler.py:805: from the end, the last run of `window` hits; the first run may
    # need `initial_window` (a partial right edge); returns its end index in `chunks`.
    # A HIT or HIT_PENDING extends a run (:822, :824); a RETRY (:830) or MISS (:838)
    # ends it (RETRY defers) and resets the required window; HIT_PENDING in the run
    # that decides defers (``pending_anywhere``, 0.29.0: any scanned HIT_PENDING defers).
    # By runs: from one break to the next below it.
    lo, hi = chunks.start, chunks.stop
    ans = mgr.answers(group)
    required_window = initial_window or window  # scheduler.py:819
    defer_lookup = False
    top = hi  # the current run is [brk + 1, top)
    while True:
        # the run's last break, looked for no deeper than the window (the scan stops there)
        brk = ans.last_break(top - 1, max(lo, top - required_window))
        if top - 1 - brk >= required_window:  # scheduler.py:843
            idx = top - required_window
            mgr.scanned(group, hi - 1, idx)
            pending_in_window = bool(ans.pending) and meets(
                ans.pending, idx, hi if pending_anywhere else top)
            return None if defer_lookup or pending_in_window else idx - lo + required_window
        if brk < lo:  # scheduler.py:847: the scan reached the start
            if hi > lo:
                mgr.scanned(group, hi - 1, lo)
            pending_in_window = bool(ans.pending) and meets(
                ans.pending, lo, hi if pending_anywhere else top)
            return None if defer_lookup or pending_in_window else top - lo
        defer_lookup |= brk in ans.retry
        required_window = window
        top = brk


def lookup_complete_chunks(layout: ChunkLayout, s: Scenario, mgr: _Manager,
                           sem: Semantics) -> tuple[int | None, str]:
    """scheduler.py:849: tokens beyond the GPU hit that whole chunks can give.

    ``sem.steps``: the steps a fix overrides (``releases.steps``, run on integers; the
    encodings run the same functions on Z3 terms): the last-prompt-token rule (:876;
    finding 003's fix takes a minimum with ``num_tokens - 1``) and the bound after each
    group's cut (:914, :988; finding 001's fix rounds it down to the Mamba align size
    again). ``sem.reround_rerun`` (finding 001's completed fix): when that round-down
    cuts a sliding-window group's confirmed window, the sliding-window groups are looked
    up again at the lowered bound."""
    align = layout.mamba_align_size
    steps = sem.steps
    # the step a fix overrides (called only where it is not 0.33.0's identity); a layout
    # without a Mamba align group never rounds (the unit 1 is not used)
    after_cut = steps.after_cut
    fixed_after_cut = after_cut is not keep_after_cut
    align_on, align_unit = align is not None, align or 1

    max_num_new_tokens, max_load_tokens = s.max_num_new_tokens, s.max_load_tokens
    num_computed_tokens = s.num_computed_tokens
    prompt_tokens = s.prompt_tokens  # a group's keys: prompt_tokens // its chunk tokens
    max_hit_size_tokens = prompt_tokens  # scheduler.py:862
    if max_num_new_tokens is not None:  # scheduler.py:863
        max_hit_size_tokens = min(max_hit_size_tokens, num_computed_tokens + max_num_new_tokens)
    if max_load_tokens is not None:  # scheduler.py:867
        max_hit_size_tokens = min(max_hit_size_tokens, num_computed_tokens + max_load_tokens)
    if layout.sliding_window_groups:
        # scheduler.py:876: recompute the last prompt token (the step a fix changes)
        max_hit_size_tokens = steps.last_token(INT, max_hit_size_tokens, s.prompt_tokens)
        if layout.mamba_align_size is not None:  # scheduler.py:877: PR #44599's rounding
            max_hit_size_tokens = round_down(max_hit_size_tokens, layout.mamba_align_size)
    num_hit_tokens = 0
    defer_lookup = False
    lookup_groups = layout.lookup_groups
    groups = layout.groups
    rows = mgr.steps
    mgr.hit_end_chunk = {}  # scheduler.py:887: every group's starts at 0
    eagle_verified: set[int] = set()  # scheduler.py:892
    while lookup_groups:  # scheduler.py:893
        mgr.passes += 1
        looked_up_sliding_window = False
        groups_iter = lookup_groups
        lookup_groups = ()
        for group_idx in groups_iter:
            cfg = groups[group_idx]
            tpc = cfg.tokens_per_chunk
            num_keys = prompt_tokens // tpc
            before = max_hit_size_tokens
            is_eagle_unverified = cfg.is_eagle_group and group_idx not in eagle_verified
            # scheduler.py:914: no further than this group's last keyed chunk
            max_hit_size_tokens = min(max_hit_size_tokens, num_keys * tpc)
            if fixed_after_cut:  # the fix (none in 0.33.0)
                max_hit_size_tokens = after_cut(INT, max_hit_size_tokens, align_on,
                                                align_unit, "")
            if max_load_tokens is not None:  # scheduler.py:917: a load cap chunk-aligns
                max_hit_size_tokens = round_down(max_hit_size_tokens, tpc)
            if max_hit_size_tokens - num_computed_tokens < tpc:  # scheduler.py:921
                rows.append((mgr.passes, group_idx, before, (0, 0), None,
                                 max_hit_size_tokens, "less than one chunk left"))
                return 0, f"group {group_idx}: less than one chunk ({tpc} tokens) left"
            window = cfg.sliding_window_size_in_chunks
            # scheduler.py:936: every EAGLE group queries one more (0.29.0: windows only)
            query_max = eagle_query_end(INT, max_hit_size_tokens, tpc, num_keys * tpc,
                                        is_eagle_unverified,
                                        steps.eagle_query_all or window is not None)
            num_chunks = min(cdiv(query_max, tpc), num_keys)  # scheduler.py:942
            start_chunk_idx = num_computed_tokens // tpc  # scheduler.py:943
            chunks = range(start_chunk_idx, max(start_chunk_idx, num_chunks))
            num_hit_chunks: int | None
            if window is None:
                num_hit_chunks = _maximal_prefix_lookup(mgr, group_idx, chunks)
                # scheduler.py:957: the chunks confirmed as ready (before any EAGLE pop)
                mgr.hit_end_chunk[group_idx] = start_chunk_idx + (num_hit_chunks or 0)
            else:
                required_window = window + 1 if is_eagle_unverified else window  # :961
                candidate_end = min(  # scheduler.py:964
                    max_hit_size_tokens, (num_chunks - int(is_eagle_unverified)) * tpc)
                initial_window = cfg.load_window_size_in_chunks(candidate_end)  # :968
                assert initial_window is not None
                num_hit_chunks = _sliding_window_lookup(  # scheduler.py:972
                    mgr, group_idx, chunks, required_window,
                    initial_window + int(is_eagle_unverified) if steps.load_windows
                    else None, pending_anywhere=not steps.load_windows)
            queried = (chunks.start, chunks.stop)
            if num_hit_chunks == 0:  # scheduler.py:978
                rows.append((mgr.passes, group_idx, before, queried, 0,
                                 max_hit_size_tokens, "no hit"))
                return 0, f"group {group_idx}: no hit in chunks [{queried[0]}, {queried[1]})"
            note = ""
            if num_hit_chunks is None:
                defer_lookup = True  # scheduler.py:982
                note = "deferred"
            else:
                if is_eagle_unverified:  # scheduler.py:984: pop the volatile EAGLE chunk
                    num_hit_chunks -= 1
                    eagle_verified.add(group_idx)
                    note = "EAGLE chunk popped"
                max_hit_size_tokens = min(  # scheduler.py:988
                    max_hit_size_tokens, tpc * (start_chunk_idx + num_hit_chunks))
                confirmed = max_hit_size_tokens
                if fixed_after_cut:  # the fix (none in 0.33.0)
                    max_hit_size_tokens = after_cut(
                        INT, max_hit_size_tokens, align_on, align_unit, "")
                if (sem.reround_rerun and window is not None and max_hit_size_tokens < confirmed
                        and not lookup_groups):
                    # the completed fix: this window was confirmed ending at `confirmed`,
                    # not at the lowered bound; look the sliding-window groups up again
                    lookup_groups = layout.sliding_window_groups
            rows.append((mgr.passes, group_idx, before, queried, num_hit_chunks,
                             max_hit_size_tokens, note))
            new_num_hit_tokens = max_hit_size_tokens - num_computed_tokens  # :993
            if new_num_hit_tokens < tpc:  # scheduler.py:994
                return 0, f"group {group_idx}: hit shrank below one chunk ({tpc} tokens)"
            if new_num_hit_tokens < num_hit_tokens:  # scheduler.py:998
                if not cfg.is_eagle_group:
                    eagle_verified.clear()  # scheduler.py:1000
                if defer_lookup:  # scheduler.py:1001: look again at every group
                    defer_lookup = False
                    lookup_groups = layout.lookup_groups
                elif looked_up_sliding_window and not lookup_groups:
                    lookup_groups = layout.sliding_window_groups  # scheduler.py:1009
            looked_up_sliding_window |= window is not None  # scheduler.py:1011
            num_hit_tokens = new_num_hit_tokens
    if defer_lookup:  # scheduler.py:1014
        return None, "the store deferred a lookup (HIT_PENDING or RETRY)"
    if s.enable_prefix_caching and any(g.being_loaded for g in s.groups):
        # scheduler.py:1022: delay if a hit chunk (within a group's load window) is
        # already being loaded (tracked only with prefix caching on, scheduler.py:641)
        end = num_computed_tokens + num_hit_tokens
        for cfg, g in zip(layout.groups, s.groups, strict=True):
            tpc = cfg.tokens_per_chunk
            window = (cfg.load_window_size_in_chunks(end)  # scheduler.py:1027
                      if steps.load_windows else cfg.sliding_window_size_in_chunks)
            # offload_keys[start:num_chunks] (scheduler.py:1035): the slice stops at the
            # last key the request has
            hit_chunks = range(num_computed_tokens // tpc,
                               min(cdiv(end, tpc), prompt_tokens // tpc))
            if window is not None:
                hit_chunks = hit_chunks[-window:]
            if any(c in hit_chunks for c in g.being_loaded):  # a range: no list
                return None, f"group {cfg.group_idx}: a hit chunk is being loaded"
    return num_hit_tokens, "converged"


def _lookup_partial_tail(layout: ChunkLayout, s: Scenario, mgr: _Manager, boundary: int,
                         bridge_pending: bool) -> tuple[bool, bool]:
    # scheduler.py:1160: every group's boundary key must be ready; a miss stops at once
    pending = bridge_pending
    hashed = (s.prompt_tokens // layout.tokens_per_hash) * layout.tokens_per_hash
    for cfg in layout.groups:
        key = layout.partial_tail_key_tokens(cfg.group_idx, boundary)  # scheduler.py:1158
        if key > hashed:
            raise KeyPastHashes(f"group {cfg.group_idx}: partial-tail key at token {key} is "
                                f"past the request's hashes ({hashed} tokens)")
        result = mgr.lookup(cfg.group_idx, key)
        if result == MISS:  # scheduler.py:1184
            return False, pending
        pending |= result != HIT  # scheduler.py:1186
    if pending:  # scheduler.py:1189
        return False, True
    return True, False


def _tail_stops(layout: ChunkLayout, s: Scenario, complete_boundary: int,
                max_boundary: int) -> list[int]:
    """The boundaries of the partial-tail search (``max_boundary`` down to past
    ``complete_boundary``, one hash block apart), last first, at which the first group's
    key may answer other than MISS (``answer``): a key that ends a chunk, or one in the
    group's tail sets. Work: the tail sets and the chunk ends in the range."""
    tph = layout.tokens_per_hash
    cfg, g = layout.groups[0], s.groups[0]
    margin = layout.eagle_proof_margins.get(cfg.group_idx, 0)  # scheduler.py:1158
    tpc = cfg.tokens_per_chunk

    def searched(boundary: int) -> bool:
        return (complete_boundary < boundary <= max_boundary
                and (max_boundary - boundary) % tph == 0)

    stops = {end - margin for tails in (g.stored_tails, g.pending_tails, g.deferred_tails)
             for end in tails if searched(end - margin)}
    end = (max_boundary + margin) // tpc * tpc  # the last chunk end a key can reach
    while end - margin > complete_boundary:
        if searched(end - margin):
            stops.add(end - margin)
        end -= tpc
    return sorted(stops, reverse=True)


def _first_group_misses(layout: ChunkLayout, s: Scenario, mgr: _Manager, top: int,
                        stop: int) -> None:
    """The boundaries ``top``, ``top - tph``, ... down to past ``stop``, where the first
    group's key answers MISS (``_tail_stops``): only that key is looked up (scheduler.py:
    1184 stops the boundary there). Its first key is checked as ``_lookup_partial_tail``
    checks every key (the later ones end before it)."""
    if top <= stop:
        return
    tph = layout.tokens_per_hash
    group = layout.groups[0].group_idx
    key = layout.partial_tail_key_tokens(group, top)  # scheduler.py:1158
    hashed = (s.prompt_tokens // tph) * tph
    if key > hashed:
        raise KeyPastHashes(f"group {group}: partial-tail key at token {key} is "
                            f"past the request's hashes ({hashed} tokens)")
    mgr.segments.append((group, key, key - top + stop, -tph))


def _done(mgr: _Manager, hit: int | None, reason: str, boundary: int | None = None
          ) -> tuple[LookupResult, int | None]:
    return LookupResult(hit, tuple(mgr.steps), tuple(mgr.segments), mgr.passes,
                        reason), boundary


def lookup(layout: ChunkLayout, s: Scenario, sem: Semantics
           ) -> tuple[LookupResult, int | None]:
    """``_lookup`` (scheduler.py:1068): complete chunks, then a partial tail past them.

    Returns the lookup result and the partial-tail boundary (None: none chosen).
    ``sem``: the semantics whose steps it runs (``lookup_complete_chunks``; the partial
    tail's ``tail_search`` and ``tail_bridge``: vLLM 0.32.0 searches one block, no bridge)."""
    mgr = _Manager(s, layout)
    complete_hit, reason = lookup_complete_chunks(layout, s, mgr, sem)  # scheduler.py:1073
    if complete_hit is None or not layout.supports_partial_tail:  # scheduler.py:1075
        return _done(mgr, complete_hit, reason)
    max_num_new_tokens, max_load_tokens = s.max_num_new_tokens, s.max_load_tokens
    local_tokens = s.num_computed_tokens
    complete_boundary = local_tokens + complete_hit  # scheduler.py:1079
    tph = layout.tokens_per_hash
    ptbs = layout.partial_tail_block_size
    margin = layout.max_eagle_proof_margin
    # scheduler.py:1083-1093: one or two search blocks (an EAGLE proof margin), and the
    # proof key's hash past the boundary (0.32.0: one block, steps.tail_search_one_block)
    max_boundary = sem.steps.tail_search(INT, complete_boundary, ptbs, s.prompt_tokens,
                                         (s.prompt_tokens // tph) * tph, margin, margin > 0)
    if max_num_new_tokens is not None:  # scheduler.py:1095
        max_boundary = min(max_boundary, local_tokens + max_num_new_tokens)
    if max_load_tokens is not None:  # scheduler.py:1097
        max_boundary = min(max_boundary, local_tokens + max_load_tokens)
    max_boundary = round_down(max_boundary, tph)  # scheduler.py:1102
    if max_boundary <= complete_boundary:  # scheduler.py:1103
        return _done(mgr, complete_hit, reason)
    bridge_chunk_idx = complete_boundary // ptbs  # scheduler.py:1111
    bridge_boundary = (bridge_chunk_idx + 1) * ptbs
    unconfirmed: list[int] = []
    pending = False
    # scheduler.py:1116: the hit would load the bridge chunk too (0.32.0 has no bridge:
    # its one search block ends before the next block's key, steps.tail_bridge)
    if sem.steps.tail_bridge and max_boundary >= bridge_boundary:
        for cfg, g in zip(layout.groups, s.groups, strict=True):
            if cfg.requires_cow_source:  # scheduler.py:1120
                continue
            # scheduler.py:1123 (being-loaded keys tracked only with prefix caching)
            pending |= s.enable_prefix_caching and bridge_chunk_idx in g.being_loaded
            if mgr.hit_end_chunk.get(cfg.group_idx, 0) <= bridge_chunk_idx:  # :1125
                unconfirmed.append(cfg.group_idx)
        for group_idx in unconfirmed:
            result = mgr.chunk(group_idx, bridge_chunk_idx)  # scheduler.py:1128
            if result == MISS:  # scheduler.py:1129
                max_boundary = bridge_boundary - tph
                break
            pending |= result != HIT  # scheduler.py:1132
    bridge_pending = pending
    # scheduler.py:1134: every boundary from max_boundary down, one hash block apart. By
    # runs: only at a boundary where the first group's key may answer (``_tail_stops``)
    # are the groups looked up one by one; at the others its key is a MISS, which ends
    # that boundary at once (scheduler.py:1184), so a run of them is one segment
    top = max_boundary
    for boundary in _tail_stops(layout, s, complete_boundary, max_boundary):
        _first_group_misses(layout, s, mgr, top, boundary)
        loads_bridge = boundary >= bridge_boundary
        hit, boundary_pending = _lookup_partial_tail(
            layout, s, mgr, boundary, loads_bridge and bridge_pending)
        if hit:  # scheduler.py:1139
            return _done(mgr, boundary - local_tokens, f"partial tail at token {boundary}",
                         boundary)
        pending |= boundary_pending
        top = boundary - tph
    _first_group_misses(layout, s, mgr, top, complete_boundary)
    # (a boundary where the first group misses adds the bridge's pending, already counted)
    if pending and complete_hit == 0:  # scheduler.py:1150
        return _done(mgr, None, "a partial-tail key is not ready yet (pending)")
    return _done(mgr, complete_hit, reason)


def get_num_new_matched_tokens(layout: ChunkLayout, s: Scenario, sem: Semantics
                               ) -> tuple[LookupResult, int | None]:
    """scheduler.py:1210: the connector's answer for a new request under ``sem`` (vLLM
    0.33.0 or a fix of it: ``lookup_complete_chunks``)."""
    if s.in_flight_transfers:  # scheduler.py:1247: in-flight transfers make it wait
        return LookupResult(None, (), (), 0, "the request has in-flight transfers"), None
    if s.skip_reading_prefix_cache:  # scheduler.py:1258
        return LookupResult(0, (), (), 0, "the request skips reading the prefix cache"), None
    return lookup(layout, s, sem)
