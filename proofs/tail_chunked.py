"""vLLM 0.33.0's partial-tail phase (``_lookup`` after the complete chunks,
offloading/scheduler.py:1068-1200 of 0.33.0) with every size and every count symbolic:
the exact unbounded encoding of each step, for the layered tail proof
(``proofs.tail_layers_chunked``).

Partial tails are on (``supports_partial_tail``, scheduler.py:274-292) only for layouts
of full-attention and Mamba align groups of one GPU block size ``B`` (the partial-tail
block size, scheduler.py:597), ``blocks_per_chunk`` 1 and a ``prefix_match_unit``
(``tokens_per_hash``) that divides ``B`` and is finer than it; then every chunk is one
block and the Mamba align size is ``B``. Nothing is bounded here: ``B``, the hash size,
the prompt, the GPU hit, the caps, the number of hash blocks per block and of boundaries
tried are symbolic integers; the store is uninterpreted. Keys are named, as in
``model.lookup_chunked``, by the hash position where they end (``q``: the key ending at token
``q * tokens_per_hash``): a position on a block edge is that chunk's key (the complete-
chunk store ``turn_chunked.Cfg.stores``), any other position answers ``TailCfg.tails[g](q)``
(an answer code, HIT < HIT_PENDING < RETRY < MISS).

Each step is one function that mirrors ``model.lookup_chunked.lookup`` and
``model.load_chunked`` line for line, citing the same 0.33.0 lines: ``prologue`` (the
search bound), ``bridge_scan_turn`` / ``bridge_lookup_turn`` (one group's turn of each
bridge loop), ``after_bridge``, ``key_turn`` (one group's answer at one boundary,
``_lookup_partial_tail``), ``boundary_turn`` (one boundary of the descending search, given
what its keys answered) and ``finish``. ``run_tail`` composes them for concrete runs
(conformance: ``tests/test_proof_tails_chunked.py``; witnesses); the layered proof takes
each turn once, symbolically, and proves the loops around them by induction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import z3

from model.semantics import Semantics
from proofs import turn_chunked
from proofs.arith import TurnArith
from proofs.encoding import NEXT_ALL, NEXT_NONE, Enc, State, select, zmax, zmin
from releases.base import ChunkSteps

FA, MAMBA = turn_chunked.FA, turn_chunked.MAMBA
HIT, HIT_PENDING, RETRY, MISS = 0, 1, 2, 3


@dataclass(frozen=True)
class TailCfg:
    """A 0.33.0 configuration with partial tails on, and what the tail phase reads."""

    base: turn_chunked.Cfg  # the complete-chunk configuration (block sizes all B, bpc 1)
    tph: z3.ArithRef  # tokens_per_hash (prefix_match_unit)
    hpb: z3.ArithRef  # hash blocks per block: B = tph * hpb
    margin_on: z3.BoolRef  # _max_eagle_proof_margin > 0: some full-attention group is EAGLE
    # the answer of group g's key ending at hash position q off a block edge
    tails: tuple[Callable[[z3.ArithRef], z3.ArithRef], ...]
    hit_end: tuple[z3.ArithRef, ...]  # lookup_hit_end_chunk_idx after the complete chunks
    # the release's partial-tail steps (``releases.steps``): the search end
    # (``tail_search``), the bridge (``tail_bridge``), EAGLE groups (``tail_eagle``)
    steps: ChunkSteps = turn_chunked.STOCK

    @property
    def block(self) -> z3.ArithRef:
        return self.base.gpu[0]

    @property
    def kinds(self) -> tuple[str, ...]:
        return self.base.kinds


def symbolic_tail_config(
    kinds: Sequence[str], tag: str = "", steps: ChunkSteps = turn_chunked.STOCK
) -> TailCfg:
    base = turn_chunked.symbolic_config(kinds, tag, steps)
    block = z3.Int(f"block_size{tag}")
    base = replace(
        base, gpu=tuple(block for _ in kinds), bpc=z3.IntVal(1), prefix_caching=z3.BoolVal(True)
    )
    i = z3.IntSort()
    return TailCfg(
        base,
        z3.Int(f"tokens_per_hash{tag}"),
        z3.Int(f"hashes_per_block{tag}"),
        z3.Bool(f"eagle_proof_margin_on{tag}"),
        tuple(z3.Function(f"tail_answer{g}{tag}", i, i) for g in range(len(kinds))),
        tuple(z3.Int(f"lookup_hit_end_chunk{g}{tag}") for g in range(len(kinds))),
        steps,
    )


def startup(enc: Enc, tc: TailCfg, whole: bool) -> z3.BoolRef:
    """0.33.0's start-up with partial tails on (model/layout_chunked.py ``resolve_layout``,
    scheduler.py:274-292) and the request rules (``check_request``), for these groups:
    ``whole``, the whole layout; else a few groups of an unknown one (then the layout's
    EAGLE proof margin is on at least when one of these groups sets it). Without
    ``steps.tail_eagle`` (vLLM 0.28.0-0.32.0, 0.32.0's scheduler.py:313) an EAGLE group
    turns partial tails off: no group is EAGLE, no margin. A Mamba group in mode "all"
    (0.28.0-0.31.0, ``steps.mamba_all``) is no CoW source (0.31.0's scheduler.py:289-292)
    and backs the hash block off to its block (kv_cache_utils.py:785): tails off."""
    base = tc.base
    assert set(base.kinds) <= {FA, MAMBA}
    eagle_fa = [e for e, k in zip(base.eagle, base.kinds, strict=True) if k == FA]
    c = [turn_chunked.startup(enc, base), z3.Not(base.mamba_all), tc.tph >= 1, tc.hpb >= 2,
         tc.block == tc.tph * tc.hpb]
    c += [h >= 0 for h in tc.hit_end]
    if whole:
        assert MAMBA in base.kinds and len(base.kinds) >= 2
        c.append(tc.margin_on == z3.Or([z3.BoolVal(False)] + eagle_fa))
    else:
        c.append(z3.Implies(z3.Or([z3.BoolVal(False)] + eagle_fa), tc.margin_on))
    if not tc.steps.tail_eagle:
        c += [z3.Not(e) for e in base.eagle] + [z3.Not(tc.margin_on)]
    return z3.And(c)


def margin(tc: TailCfg, g: int) -> z3.ArithRef:
    """``eagle_proof_margin`` of group ``g`` (scheduler.py:610, kv_cache_utils.py:804):
    one hash block for an EAGLE full-attention group (a Mamba align group has none)."""
    if tc.kinds[g] == MAMBA:
        return z3.IntVal(0)
    return z3.If(tc.base.eagle[g], tc.tph, 0)


def chunk_answer(tc: TailCfg, g: int, i: z3.ArithRef) -> z3.ArithRef:
    st = tc.base.stores[g]
    return z3.If(
        st.stored(i), z3.If(st.deferred(i), HIT_PENDING, HIT), z3.If(st.deferred(i), RETRY, MISS)
    )


def answer(enc: Enc, tc: TailCfg, g: int, q: z3.ArithRef) -> z3.ArithRef:
    """The store's answer for group ``g``'s key ending at hash position ``q`` (``q >= 1``):
    on a block edge, that chunk's key."""
    blocks = enc.floordiv(q, tc.hpb, f"key_block{g}")
    return z3.If(q == tc.hpb * blocks, chunk_answer(tc, g, blocks - 1), tc.tails[g](q))


# --- before the boundaries (scheduler.py:1077-1133) --------------------------------------


@dataclass(frozen=True)
class Prologue:
    cb: z3.ArithRef  # complete_boundary (:1079)
    mb: z3.ArithRef  # max_boundary after the round-down (:1102)
    go: z3.BoolRef  # max_boundary > complete_boundary (:1103)
    bridge_idx: z3.ArithRef  # bridge_chunk_idx (:1111)
    bridge_b: z3.ArithRef  # bridge_boundary
    check: z3.BoolRef  # the bridge chunk is looked at (:1116)
    hashed: z3.ArithRef  # the tokens the request's block hashes cover (:1092)


def prologue(enc: Enc, tc: TailCfg, complete_hit: z3.ArithRef) -> Prologue:
    c = tc.base
    local, tph, block = c.computed, tc.tph, tc.block
    cb = local + complete_hit  # scheduler.py:1079
    hashed = enc.floordiv(c.prompt, tph, "num_hashes") * tph  # scheduler.py:1092
    # scheduler.py:1083-1093: the search end before the caps, the release's step (0.33.0:
    # two search blocks with a margin, one hash block when on, and a hash past the
    # boundary for the proof key)
    mb = tc.steps.tail_search(TurnArith(enc), cb, block, c.prompt, hashed, tph, tc.margin_on)
    mb = z3.If(c.has_new_cap, zmin(mb, local + c.new_cap), mb)  # scheduler.py:1095
    mb = z3.If(c.has_load_cap, zmin(mb, local + c.load_cap), mb)  # scheduler.py:1097
    mb = enc.floordiv(mb, tph, "max_boundary_hashes") * tph  # scheduler.py:1102
    go = mb > cb  # scheduler.py:1103
    bridge_idx = enc.floordiv(cb, block, "bridge_chunk")  # scheduler.py:1111
    bridge_b = (bridge_idx + 1) * block
    return Prologue(
        cb,
        mb,
        go,
        bridge_idx,
        bridge_b,
        # :1116 (``steps.tail_bridge``: vLLM 0.32.0 looks no bridge chunk up)
        z3.And(go, mb >= bridge_b) if tc.steps.tail_bridge else z3.BoolVal(False),
        hashed,
    )


@dataclass(frozen=True)
class Bridge:
    missed: z3.BoolRef  # a bridge key missed (:1129)
    pending: z3.BoolRef  # a bridge key is not ready yet (:1123, :1132)


NO_BRIDGE = Bridge(z3.BoolVal(False), z3.BoolVal(False))


def unconfirmed(tc: TailCfg, pro: Prologue, g: int) -> z3.BoolRef:
    """scheduler.py:1125: the complete-chunk lookup did not confirm group g's bridge."""
    return tc.hit_end[g] <= pro.bridge_idx


def bridge_scan_turn(tc: TailCfg, pro: Prologue, g: int, st: Bridge) -> Bridge:
    """Group ``g``'s turn of the first bridge loop (scheduler.py:1117-1126)."""
    if tc.kinds[g] == MAMBA:  # scheduler.py:1120: Mamba align reads a CoW copy
        return st
    # scheduler.py:1123: being loaded (tracked with prefix caching, on with tails)
    busy = z3.And(tc.base.prefix_caching, tc.base.stores[g].loading(pro.bridge_idx))
    return Bridge(st.missed, z3.Or(st.pending, z3.And(pro.check, busy)))


def bridge_lookup_turn(tc: TailCfg, pro: Prologue, g: int, st: Bridge) -> Bridge:
    """Group ``g``'s turn of the second bridge loop (scheduler.py:1127-1132): an
    unconfirmed bridge key is looked up; the first miss stops the loop."""
    if tc.kinds[g] == MAMBA:  # never unconfirmed (:1120)
        return st
    act = z3.And(pro.check, unconfirmed(tc, pro, g), z3.Not(st.missed))
    a = chunk_answer(tc, g, pro.bridge_idx)  # scheduler.py:1128
    miss = z3.And(act, a == MISS)  # scheduler.py:1129
    return Bridge(
        z3.Or(st.missed, miss), z3.Or(st.pending, z3.And(act, z3.Not(miss), a != HIT))
    )  # :1132


def after_bridge(tc: TailCfg, pro: Prologue, missed: z3.BoolRef) -> z3.ArithRef:
    """max_boundary after the bridge (scheduler.py:1130): below the bridge on a miss."""
    return z3.If(missed, pro.bridge_b - tc.tph, pro.mb)


# --- one boundary (scheduler.py:1134-1148, 1160-1200) ------------------------------------


@dataclass(frozen=True)
class Keys:
    missed: z3.BoolRef  # a boundary key missed: the rest are not looked up (:1184)
    pending: z3.BoolRef  # a key looked up before that was not ready (:1186)


def key_answer(enc: Enc, tc: TailCfg, g: int, boundary: z3.ArithRef) -> z3.ArithRef:
    """The answer for group ``g``'s partial-tail key at ``boundary``: the key ends at the
    boundary plus the group's proof margin (:1158), keyed by the hash there
    (``_make_boundary_key``, :1063)."""
    return answer(enc, tc, g, enc.floordiv(boundary + margin(tc, g), tc.tph, f"key_hash{g}"))


def key_turn(enc: Enc, tc: TailCfg, g: int, boundary: z3.ArithRef, st: Keys) -> Keys:
    """Group ``g``'s turn at ``boundary`` (``_lookup_partial_tail``, scheduler.py:1179)."""
    a = key_answer(enc, tc, g, boundary)
    act = z3.Not(st.missed)
    miss = z3.And(act, a == MISS)  # scheduler.py:1184
    return Keys(
        z3.Or(st.missed, miss), z3.Or(st.pending, z3.And(act, z3.Not(miss), a != HIT))
    )  # :1186


def key_result(st: Keys) -> tuple[z3.BoolRef, z3.BoolRef]:
    """(hit, pending) of ``_lookup_partial_tail`` after every group's turn (:1184-1194)."""
    return z3.And(z3.Not(st.missed), z3.Not(st.pending)), st.pending


@dataclass(frozen=True)
class Scan:
    cur: z3.ArithRef  # the boundary tried next
    found: z3.BoolRef  # a boundary's keys were all ready (:1139)
    chosen: z3.ArithRef  # that boundary
    pending: z3.BoolRef  # the phase's pending flag


def scan_start(mb: z3.ArithRef, bridge_pending: z3.BoolRef) -> Scan:
    return Scan(mb, z3.BoolVal(False), z3.IntVal(0), bridge_pending)  # :1133-1134


def running(pro: Prologue, st: Scan) -> z3.BoolRef:
    """Another boundary is tried (range(max_boundary, complete_boundary, -tph), :1134)."""
    return z3.And(z3.Not(st.found), st.cur > pro.cb)


def loads_bridge(pro: Prologue, boundary: z3.ArithRef) -> z3.BoolRef:
    return boundary >= pro.bridge_b  # scheduler.py:1135


def boundary_turn(
    tc: TailCfg, pro: Prologue, st: Scan, hit: z3.BoolRef, b_pending: z3.BoolRef
) -> Scan:
    """The try of boundary ``st.cur`` (scheduler.py:1134-1148), given what its keys
    answered (``key_result``: hit, pending)."""
    run = running(pro, st)
    here = z3.And(run, hit)  # scheduler.py:1139: the first boundary every group accepts
    return Scan(
        z3.If(run, st.cur - tc.tph, st.cur),
        z3.Or(st.found, here),
        z3.If(here, st.cur, st.chosen),
        z3.Or(st.pending, z3.And(run, z3.Not(hit), b_pending)),
    )  # :1148


@dataclass(frozen=True)
class Answer:
    deferred: z3.BoolRef  # the connector answers None
    hit: z3.ArithRef
    tail: z3.BoolRef  # a partial-tail hit, ending at ``boundary``
    boundary: z3.ArithRef
    # a partial-tail key was looked up past the request's hashes (unreachable in 0.33.0)
    past_hashes: z3.BoolRef = z3.BoolVal(False)


def finish(
    tc: TailCfg, complete_deferred: z3.BoolRef, complete_hit: z3.ArithRef, st: Scan
) -> Answer:
    """``_lookup``'s answer (scheduler.py:1075, :1146, :1150-1153) and
    ``get_num_new_matched_tokens``' (in flight: None, :1247; skipping the prefix cache:
    0 without a lookup, :1258). ``complete_deferred``: the complete chunks answered
    None (then no tail is looked up, :1075)."""
    c = tc.base
    tail = z3.And(z3.Not(complete_deferred), st.found)
    hit = z3.If(tail, st.chosen - c.computed, complete_hit)  # scheduler.py:1146
    # scheduler.py:1150: a key not ready yet defers a request with no complete hit
    deferred = z3.Or(complete_deferred, z3.And(z3.Not(tail), st.pending, complete_hit == 0))
    deferred = z3.Or(z3.And(deferred, z3.Not(c.skip_reading)), c.in_flight)  # :1247
    tail = z3.And(tail, z3.Not(c.skip_reading), z3.Not(c.in_flight))
    return Answer(deferred, z3.If(c.skip_reading, z3.IntVal(0), hit), tail, st.chosen)


# --- composed, for concrete runs (conformance, witnesses) --------------------------------


def bridge(enc: Enc, tc: TailCfg, pro: Prologue) -> Bridge:
    st = NO_BRIDGE
    for g in range(len(tc.kinds)):
        st = bridge_scan_turn(tc, pro, g, st)
    for g in range(len(tc.kinds)):
        st = bridge_lookup_turn(tc, pro, g, st)
    return st


def try_boundary(
    enc: Enc, tc: TailCfg, pro: Prologue, bridge_pending: z3.BoolRef, st: Scan
) -> tuple[Scan, z3.BoolRef]:
    """The try of boundary ``st.cur``; also whether it looks a key up past the request's
    hashes (``_make_boundary_key`` would index ``block_hashes`` past its end, :1063: a
    state the real code cannot reach while :1088 caps max_boundary)."""
    keys = Keys(z3.BoolVal(False), z3.And(loads_bridge(pro, st.cur), bridge_pending))
    past: list[z3.BoolRef] = []
    for g in range(len(tc.kinds)):  # every group, in index order (:1178)
        past.append(z3.And(z3.Not(keys.missed), st.cur + margin(tc, g) > pro.hashed))
        keys = key_turn(enc, tc, g, st.cur, keys)
    hit, pending = key_result(keys)
    return boundary_turn(tc, pro, st, hit, pending), z3.And(running(pro, st), z3.Or(past))


def run_tail(
    enc: Enc, tc: TailCfg, complete_deferred: z3.BoolRef, complete_hit: z3.ArithRef, boundaries: int
) -> tuple[Answer, z3.BoolRef]:
    """The tail phase with ``boundaries`` boundaries unrolled; also whether the search
    has ended by then."""
    pro = prologue(enc, tc, complete_hit)
    br = bridge(enc, tc, pro)
    st = scan_start(after_bridge(tc, pro, br.missed), br.pending)
    past: z3.BoolRef = z3.BoolVal(False)
    for _ in range(boundaries):
        st, here = try_boundary(enc, tc, pro, br.pending, st)
        past = z3.Or(past, here)
    ans = finish(tc, complete_deferred, complete_hit, st)
    c = tc.base  # no tail is looked up after a deferral, in flight, skipping (:1075)
    looked = z3.And(z3.Not(complete_deferred), z3.Not(c.skip_reading), z3.Not(c.in_flight))
    return replace(ans, past_hashes=z3.And(looked, past)), z3.Not(running(pro, st))


def hit_end_after(
    c: turn_chunked.Cfg,
    d: turn_chunked.D,
    g: int,
    before: State,
    t: turn_chunked.Step,
    old: z3.ArithRef,
) -> z3.ArithRef:
    """A full-attention group's ``lookup_hit_end_chunk_idx`` after its turn (:887, :957):
    start + the chunks its prefix lookup counted (before any EAGLE pop; 0 when deferred)
    if the turn looked up, else as it was."""
    unverified = z3.And(c.eagle[g], z3.Not(before.verified[g]))
    confirmed = z3.If(t.deferred, d.start[g], t.ends[2] + z3.If(unverified, 1, 0))
    looked = z3.And(z3.Not(before.halted), z3.Not(t.too_short))
    return z3.If(looked, confirmed, old)


def hit_ends_after(
    c: turn_chunked.Cfg,
    d: turn_chunked.D,
    g: int,
    before: State,
    t: turn_chunked.Step,
    ends: tuple[z3.ArithRef, ...],
) -> tuple[z3.ArithRef, ...]:
    """Every group's ``lookup_hit_end_chunk_idx`` after group ``g``'s turn: :957 writes
    only the entry of the group looked up, and only for full attention."""
    if c.kinds[g] != FA:
        return ends
    return tuple(hit_end_after(c, d, g, before, t, e) if h == g else e for h, e in enumerate(ends))


def complete_chunks(
    enc: Enc, tc: TailCfg, d: turn_chunked.D, sem: Semantics, passes: int
) -> tuple[turn_chunked.Result, tuple[z3.ArithRef, ...], z3.BoolRef]:
    """``_lookup_complete_chunks`` (scheduler.py:849) composed of ``turn_chunked`` turns, with
    each full-attention group's ``lookup_hit_end_chunk_idx`` (:887, :957): the result
    before the connector's in-flight and skip checks, the hit ends, whether the loop has
    ended within ``passes``."""
    c = replace(tc.base, skip_reading=z3.BoolVal(False), in_flight=z3.BoolVal(False))
    n = len(c.kinds)
    ends: list[z3.ArithRef] = [z3.IntVal(0)] * n

    def run_pass(st: State, groups: Sequence[int]) -> State:
        st = replace(st, looked=z3.BoolVal(False), next=z3.IntVal(NEXT_NONE))
        for g in groups:
            before = st
            st, t = turn_chunked.group_step(enc, c, d, sem, st, g)
            ends[:] = hit_ends_after(c, d, g, before, t, tuple(ends))
        return st

    st = run_pass(turn_chunked.initial_state(enc, c, d, sem.steps), d.order)
    for _ in range(passes - 1):
        done = turn_chunked.finished(st)
        saved = list(ends)
        every = run_pass(st, d.order)
        every_ends = list(ends)
        ends[:] = saved
        windowed = run_pass(st, d.windowed)
        ends[:] = [
            z3.If(done, a, z3.If(st.next == NEXT_ALL, b, w))
            for a, b, w in zip(saved, every_ends, ends, strict=True)
        ]
        st = select(done, st, select(st.next == NEXT_ALL, every, windowed))
    return turn_chunked.result_of(enc, c, d, st), tuple(ends), turn_chunked.finished(st)


def run_lookup(
    enc: Enc,
    tc: TailCfg,
    sem: Semantics,
    passes: int,
    boundaries: int,
    d: turn_chunked.D | None = None,
) -> tuple[Answer, z3.BoolRef]:
    """``get_num_new_matched_tokens`` for a whole layout with partial tails on: the
    complete chunks, then the tail (``tc.hit_end`` is tied to the complete chunks');
    ``d``: ``turn_chunked.derive`` of ``tc.base``, where the caller names its terms too."""
    d = turn_chunked.derive(enc, tc.base) if d is None else d
    r, ends, ended = complete_chunks(enc, tc, d, sem, passes)
    enc.add(*[h == e for h, e in zip(tc.hit_end, ends, strict=True)])
    ans, tail_ended = run_tail(enc, tc, r.deferred, r.hit, boundaries)
    return ans, z3.And(ended, tail_ended)


# --- the load (update_state_after_alloc, scheduler.py:1351; model/load_chunked.py) ----------


@dataclass(frozen=True)
class Load:
    lo: z3.ArithRef  # first loaded chunk
    hi: z3.ArithRef  # one past the last complete chunk loaded
    tail_key: z3.BoolRef  # the partial-tail key is loaded too (ending at ``key_end``)
    key_end: z3.ArithRef
    pending: z3.ArithRef  # GPU blocks to fill
    state: z3.ArithRef  # Mamba groups: the restored state's token position


def load_plan(
    enc: Enc, tc: TailCfg, a: Answer, groups: Sequence[int] | None = None
) -> dict[int, Load]:
    """``model.load_chunked.load_plan`` for a layout with partial tails on (one block per
    chunk, every block ``B``)."""
    c, block = tc.base, tc.block
    end = c.computed + a.hit
    out = {}
    for g, kind in enumerate(tc.kinds):
        if groups is not None and g not in groups:
            continue
        num_gpu_blocks = enc.cdiv(end, block, "gpu_blocks")  # scheduler.py:1393
        first_fresh = enc.cdiv(c.computed, block, "first_fresh")  # scheduler.py:1401
        skipped = end - 1 if kind == MAMBA else z3.IntVal(0)  # every Mamba block but one
        first_real = enc.floordiv(skipped, block, f"first_real{g}")  # scheduler.py:1406
        load_start = zmin(zmax(first_fresh, first_real), num_gpu_blocks)
        pending = num_gpu_blocks - load_start
        num_chunks = num_gpu_blocks  # scheduler.py:1423 (one block per chunk)
        has = z3.And(a.hit > 0, pending > 0)
        end_chunk = z3.If(a.tail, num_chunks - 1, num_chunks)  # scheduler.py:1428
        # scheduler.py:1431: the partial-tail key; a Mamba group restores the CoW copy
        # stored at the boundary (scheduler.py:1626), else the state of its last block
        state = z3.If(a.tail, a.boundary, num_gpu_blocks * block)
        out[g] = Load(
            z3.If(has, load_start, end_chunk),
            end_chunk,
            z3.And(has, a.tail),
            a.boundary + margin(tc, g),
            pending,
            state,
        )
    return out


# --- the invariants (model/invariants.py) -----------------------------------------------


def active(a: Answer) -> z3.BoolRef:
    return z3.And(z3.Not(a.deferred), a.hit > 0)


def engine_choice(local_tail: z3.ArithRef, a: Answer) -> Answer:
    """``turn_chunked.engine_choice`` with partial tails on: a kept local tail loads
    nothing, partial tail included (model/evaluate.py passes no boundary then)."""
    r = turn_chunked.Result(a.deferred, a.hit)
    kept = turn_chunked.keeps_tail(local_tail, r)
    chosen = turn_chunked.engine_choice(local_tail, r)
    return Answer(chosen.deferred, chosen.hit, z3.And(a.tail, z3.Not(kept)), a.boundary,
                  a.past_hashes)


def violates_no_partial_state(
    enc: Enc, tc: TailCfg, a: Answer, groups: Sequence[int] | None = None
) -> z3.BoolRef:
    mamba = [g for g, k in enumerate(tc.kinds) if k == MAMBA and (groups is None or g in groups)]
    loads = load_plan(enc, tc, a, mamba)
    end = tc.base.computed + a.hit
    bad = [z3.And(loads[g].pending > 0, loads[g].state != end) for g in mamba]
    return z3.And(active(a), z3.Or(bad)) if bad else z3.BoolVal(False)


def violates_loads_stored_only(
    enc: Enc, tc: TailCfg, a: Answer, chunk: z3.ArithRef, groups: Sequence[int] | None = None
) -> z3.BoolRef:
    """The hit loads a key the store does not answer HIT: ``chunk`` (any index: the
    proof's symbolic chunk) or the partial-tail key."""
    loads = load_plan(enc, tc, a, groups)
    bad = []
    for g, ld in loads.items():
        bad.append(chunk_not_hit(tc, ld, g, chunk))
        bad.append(key_not_hit(enc, tc, a, ld, g))
    return z3.And(active(a), z3.Or(bad))


def chunk_not_hit(tc: TailCfg, ld: Load, g: int, chunk: z3.ArithRef) -> z3.BoolRef:
    return z3.And(ld.lo <= chunk, chunk < ld.hi, chunk_answer(tc, g, chunk) != HIT)


def key_not_hit(enc: Enc, tc: TailCfg, a: Answer, ld: Load, g: int) -> z3.BoolRef:
    return z3.And(ld.tail_key, key_answer(enc, tc, g, a.boundary) != HIT)


def violates_leaves_last_token(
    enc: Enc, tc: TailCfg, a: Answer, groups: Sequence[int] | None = None
) -> z3.BoolRef:
    # a layout with partial tails has a Mamba group: a windowed one (:876)
    return z3.And(active(a), tc.base.computed + a.hit > tc.base.prompt - 1)


def violates_whole_blocks(
    enc: Enc, tc: TailCfg, a: Answer, groups: Sequence[int] | None = None
) -> z3.BoolRef:
    """A hit below a chunk of some group (every chunk is one block ``B``); a partial-tail
    hit ends inside a block by design (model/invariants.py ``whole_blocks``)."""
    return z3.And(active(a), z3.Not(a.tail), a.hit < tc.block)


VIOLATIONS = {
    "no-partial-state": violates_no_partial_state,
    "leaves-last-token": violates_leaves_last_token,
    "whole-blocks": violates_whole_blocks,
}
