"""Z3 encoding of vLLM 0.33.0's lookup and load, step by step beside ``model/*_chunked.py``.

Exact over a named bounded scope (``Scope``): every token size is symbolic and unbounded
(each group's GPU block size, the sliding window, the prompt, ``num_computed_tokens``,
``max_num_new_tokens``, ``max_load_tokens``), but a request has at most ``chunks``
complete chunks per group, ``blocks_per_chunk`` is at most ``max_bpc``, and the loop is
unrolled ``passes`` times (``proofs.check_chunked`` proves that it has ended by then, so
no run is cut off). With chunk counts bounded every quotient and product of a symbolic
size by a chunk count is a sum of ``If`` terms over the few possible counts, so each
query is linear integer arithmetic and Z3 decides it.

The store answers each chunk of each group with 0.33.0's ``LookupResult`` (``HIT``,
``HIT_PENDING``, ``RETRY``, ``MISS``: ``ans[g][i]``) and says whether it is being
loaded (``loading[g][i]``). Partial tails (``supports_partial_tail``, scheduler.py:274-292)
are on in the templates built with ``tails=True``: full attention and one Mamba group in
mode align of one block size, ``blocks_per_chunk`` 1, ``prefix_match_unit``
(``tokens_per_hash``, symbolic) a ``hashes_per_block``-th of the block (2 to
``Scope.hashes_per_block``); the store answers each partial-tail key, keyed by the hash
at the token position where it ends, with ``tail_ans[g][c][k - 1]`` (the key ending at
``c * block + k * tokens_per_hash``, ``0 < k < hashes_per_block``; one ending on a block
edge is that chunk's key). In the other templates ``prefix_match_unit`` is unset, the
hash block is the gcd of the block sizes and start-up never enables partial tails.

The functions mirror ``model.lookup_chunked`` (complete chunks, then the partial tail:
``partial_tail_phase``, ``partial_tail_lookup``) and ``model.load_chunked`` line for line
and cite the same 0.33.0 lines of offloading/scheduler.py; a conformance test
(``tests/test_conformance_chunked.py``) pins the two together on concrete scenarios.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import z3

from model.semantics import Semantics
from proofs.arith import BoundedArith
from releases.base import ChunkSteps
from releases.steps import eagle_query_end

STOCK = ChunkSteps()  # vLLM 0.33.0's steps (an older release overrides some)

FA, SW, MAMBA = "full_attention", "sliding_window", "mamba"
HIT, HIT_PENDING, RETRY, MISS = 0, 1, 2, 3
ANSWERS = {HIT: "HIT", HIT_PENDING: "HIT_PENDING", RETRY: "RETRY", MISS: "MISS"}
NEXT_NONE, NEXT_ALL, NEXT_SW = 0, 1, 2


@dataclass(frozen=True)
class Scope:
    """The bound of the exact encoding (named in the report next to every verdict)."""

    chunks: int = 3  # complete chunks per group of a request (prompt // tokens_per_chunk)
    max_bpc: int = 2  # blocks_per_chunk
    passes: int = 4  # loop passes unrolled (proved enough: proofs.check_chunked)
    hashes_per_block: int = 4  # partial tails: block size / tokens_per_hash at most this

    @property
    def boundaries(self) -> int:
        """Partial-tail boundaries tried at most: (num_search_blocks *
        partial_tail_block_size) / tokens_per_hash, 2 search blocks with an EAGLE margin
        (scheduler.py:1083; proved enough by ``termination``)."""
        return 2 * self.hashes_per_block

    def words(self) -> str:
        return (f"layouts of up to 3 groups (at most one full-attention, one sliding-window "
                f"and one Mamba group, in either order of the last two; EAGLE on any), "
                f"blocks_per_chunk <= {self.max_bpc}, requests of at most {self.chunks} "
                f"chunks per group; partial tails on for full attention + Mamba align (either "
                f"index order, one block size, blocks_per_chunk 1, prefix_match_unit = "
                f"block size / h for 2 <= h <= {self.hashes_per_block}: at most "
                f"{self.hashes_per_block} boundaries tried, {self.boundaries} with an EAGLE "
                f"margin), off elsewhere (prefix_match_unit unset); {GPU_HIT_WORDS}; "
                f"{UNMODELLED_WORDS}")


SCOPE = Scope()

# What the encodings' GPU hit (``computed``) and layouts cover, in the scope line of every
# 0.33.0 verdict (the bounded one above and the layered proofs'): ``computed`` is the
# connector's num_computed_tokens, which the engine scheduler always rounds down to the
# scheduler block (model/layout_chunked.py ``connector_tokens``)
GPU_HIT_WORDS = (
    "GPU hit: the connector's, a multiple of the scheduler block; a hit at hash-block "
    "granularity (0.33.0 allows them when a Mamba-align block is larger than the hash "
    "block) reaches the connector rounded down to it (v1/core/sched/scheduler.py:1134), "
    "and the engine keeping that hit's sub-block tail instead of a connector hit no "
    "longer than it (:1167-1184, nothing loaded) is not covered by the proof, checked by "
    "the model and the cross-check only"
)
# the layered proofs encode the engine's choice (turn_chunked.engine_choice, pinned to
# model.layout_chunked.keeps_local_tail by tests/test_engine_choice_chunked.py) and prove
# that it keeps each property about the load (layers_chunked.local_tail_query)
LAYERED_GPU_HIT_WORDS = (
    "GPU hit: the connector's, a multiple of the scheduler block; a hit at hash-block "
    "granularity (0.33.0 allows them when a Mamba-align block is larger than the hash "
    "block) reaches the connector rounded down to it (v1/core/sched/scheduler.py:1134), "
    "and the engine keeping that hit's sub-block tail instead of a connector hit no "
    "longer than it (:1167-1184) is proved to load nothing or the connector's answer "
    "(each property about the load holds after it; maximality and termination are "
    "about the connector's answer, which it leaves as it is)"
)
UNMODELLED_WORDS = (
    "not modelled: ChunkedLocalAttention groups, a sliding window's "
    "extra_retained_tokens, hisparse groups and prefix_cache_retention_interval (not "
    "representable in a scenario), decode context parallelism (context_parallel_size "
    "refused in one line)"
)


@dataclass(frozen=True)
class ChunkConfig:
    """A 0.33.0 configuration and request; every field a Z3 term (symbolic or fixed)."""

    kinds: tuple[str, ...]
    gpu: tuple[z3.ArithRef, ...]  # gpu_block_size (tokens_per_block)
    bpc: z3.ArithRef  # blocks_per_chunk
    prompt: z3.ArithRef  # request.num_tokens
    computed: z3.ArithRef  # num_computed_tokens (the GPU prefix hit)
    window: tuple[z3.ArithRef | None, ...]  # sliding_window in tokens (SW groups)
    eagle: tuple[z3.BoolRef, ...]
    prefix_caching: z3.BoolRef  # Mamba runs in mode align (or "all": ``mamba_all``) when on
    skip_reading: z3.BoolRef
    in_flight: z3.BoolRef
    has_new_cap: z3.BoolRef
    new_cap: z3.ArithRef  # max_num_new_tokens
    has_load_cap: z3.BoolRef
    load_cap: z3.ArithRef  # kv_transfer_params["max_load_tokens"]
    ans: tuple[tuple[z3.ArithRef, ...], ...]  # per group, per chunk: the store's answer
    loading: tuple[tuple[z3.BoolRef, ...], ...]  # per group, per chunk: being loaded
    # partial tails on (a template premise; the fields below are used only then)
    tails: bool = False
    tph: z3.ArithRef = z3.IntVal(0)  # tokens_per_hash (= prefix_match_unit)
    hpb: z3.ArithRef = z3.IntVal(0)  # hashes per block: block size / tokens_per_hash
    # per group, per block c (0..chunks), per k (1..hashes_per_block - 1): the store's
    # answer for the partial-tail key ending at c * block + k * tokens_per_hash
    tail_ans: tuple[tuple[tuple[z3.ArithRef, ...], ...], ...] = ()
    # the Mamba groups run cache mode "all" (the engine's one mode, prefix caching on):
    # a mode of vLLM 0.28.0-0.31.0 only (``ChunkSteps.mamba_all``; ``startup``)
    mamba_all: z3.BoolRef = z3.BoolVal(False)


def symbolic_config(kinds: Sequence[str], scope: Scope = SCOPE, tag: str = "",
                    tails: bool = False) -> ChunkConfig:
    n = len(kinds)
    H = scope.hashes_per_block
    return ChunkConfig(
        kinds=tuple(kinds),
        gpu=tuple(z3.Int(f"gpu_block_size{g}{tag}") for g in range(n)),
        bpc=z3.Int(f"blocks_per_chunk{tag}"),
        prompt=z3.Int(f"prompt_tokens{tag}"),
        computed=z3.Int(f"num_computed_tokens{tag}"),
        window=tuple(z3.Int(f"sliding_window{g}{tag}") if k == SW else None
                     for g, k in enumerate(kinds)),
        eagle=tuple(z3.Bool(f"eagle{g}{tag}") for g in range(n)),
        prefix_caching=z3.Bool(f"enable_prefix_caching{tag}"),
        skip_reading=z3.Bool(f"skip_reading_prefix_cache{tag}"),
        in_flight=z3.Bool(f"in_flight_transfers{tag}"),
        has_new_cap=z3.Bool(f"has_max_num_new_tokens{tag}"),
        new_cap=z3.Int(f"max_num_new_tokens{tag}"),
        has_load_cap=z3.Bool(f"has_max_load_tokens{tag}"),
        load_cap=z3.Int(f"max_load_tokens{tag}"),
        ans=tuple(tuple(z3.Int(f"answer{g}_{i}{tag}") for i in range(scope.chunks))
                  for g in range(n)),
        loading=tuple(tuple(z3.Bool(f"being_loaded{g}_{i}{tag}") for i in range(scope.chunks))
                      for g in range(n)),
        tails=tails,
        tph=z3.Int(f"tokens_per_hash{tag}") if tails else z3.IntVal(0),
        hpb=z3.Int(f"hashes_per_block{tag}") if tails else z3.IntVal(0),
        tail_ans=tuple(tuple(tuple(z3.Int(f"tail_answer{g}_{c}_{k}{tag}")
                                   for k in range(1, H)) for c in range(scope.chunks + 1))
                       for g in range(n)) if tails else (),
        mamba_all=z3.Bool(f"mamba_mode_all{tag}"),
    )


# --- bounded arithmetic: quotients and products by small counts are sums of Ifs --------


@dataclass
class ChunkEnc:
    """Names intermediate terms (a fresh constant per term keeps the formula small) and
    collects their definitions. With every input fixed the terms simplify to values and
    no constant is made (``proofs.conformance_chunked``)."""

    scope: Scope = SCOPE
    cons: list[z3.BoolRef] = field(default_factory=list)
    counter: itertools.count[int] = field(default_factory=itertools.count)

    def name(self, e: z3.ExprRef, what: str) -> z3.ExprRef:
        e = z3.simplify(e)
        if z3.is_int_value(e) or z3.is_true(e) or z3.is_false(e) or z3.is_const(e):
            return e
        v = z3.Const(f"{what}!{next(self.counter)}", e.sort())
        self.cons.append(v == e)
        return v

    def floordiv(self, x: z3.ArithRef, d: z3.ArithRef, hi: int, lo: int = -1) -> z3.ArithRef:
        """``x // d`` for ``d >= 1`` and ``lo*d <= x < (hi+1)*d`` (clamped to [lo, hi])."""
        return z3.IntVal(lo) + z3.Sum([z3.If(x >= q * d, 1, 0) for q in range(lo + 1, hi + 1)])

    def cdiv(self, x: z3.ArithRef, d: z3.ArithRef, hi: int, lo: int = 0) -> z3.ArithRef:
        """``cdiv(x, d)`` (vllm/utils/math_utils.py) for ``d >= 1``, clamped to [lo, hi]."""
        return z3.IntVal(lo) + z3.Sum([z3.If(x > q * d, 1, 0) for q in range(lo, hi)])

    def round_down(self, x: z3.ArithRef, d: z3.ArithRef, hi: int) -> z3.ArithRef:
        """``round_down(x, d)`` for ``d >= 1`` and ``-d <= x < (hi+1)*d``."""
        return -d + z3.Sum([z3.If(x >= q * d, d, 0) for q in range(0, hi + 1)])

    def times(self, k: z3.ArithRef, x: z3.ArithRef, hi: int) -> z3.ArithRef:
        """``k * x`` for ``0 <= k <= hi``."""
        return z3.Sum([z3.If(k >= q, x, 0) for q in range(1, hi + 1)])


def arith(enc: ChunkEnc) -> BoundedArith:
    """The steps' arithmetic (``releases.steps``) on this encoding: a round-down's
    quotient at most the scope's chunk count plus one, as the turn's own round-downs."""
    return BoundedArith(enc, enc.scope.chunks + 1)


def zmin(a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
    return z3.If(a <= b, a, b)


def zmax(a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
    return z3.If(a >= b, a, b)


# --- start-up (model/layout_chunked.py) ------------------------------------------------


@dataclass(frozen=True)
class ChunkDerived:
    """What start-up fixes and the request derives, per group (``ChunkGroup``)."""

    tpc: tuple[z3.ArithRef, ...]  # tokens_per_chunk (scheduler.py:256)
    keys: tuple[z3.ArithRef, ...]  # len(offload_keys) = num_tokens // tokens_per_chunk
    win: tuple[z3.ArithRef | None, ...]  # sliding_window_size_in_chunks (clamped above)
    start: tuple[z3.ArithRef, ...]  # num_computed_tokens // tokens_per_chunk
    align_on: z3.BoolRef  # a Mamba align group exists (mamba_align_size is not None)
    align: z3.ArithRef  # mamba_align_size (scheduler.py:154)
    windowed_any: bool  # _sliding_window_groups is not empty
    order: tuple[int, ...]  # _lookup_groups (scheduler.py:593)
    windowed: tuple[int, ...]  # _sliding_window_groups, largest window first (:588)
    order_holds: z3.BoolRef  # the sizes give this order (a premise of the query)
    tails: bool = False  # supports_partial_tail (a premise of the template)
    # _eagle_proof_margins (scheduler.py:610): an EAGLE group that is not Mamba align keys
    # its partial tail one hash block past the boundary (eagle_proof_margin,
    # kv_cache_utils.py:804: the alignment is tokens_per_hash here, finer than the block),
    # in hash units
    margin: tuple[z3.ArithRef, ...] = ()


def lookup_order(kinds: Sequence[str], sw_first: bool = True) -> tuple[int, ...]:
    """_lookup_groups for ``kinds`` (scheduler.py:588-593): full attention, then the
    windowed groups by window, largest first, in index order on equal windows. A Mamba
    window is 1 chunk, so with one sliding-window group listed after a Mamba group the
    order turns on whether the sliding window spans more than 1 chunk (``sw_first``)."""
    full = [g for g, k in enumerate(kinds) if k == FA]
    windowed = [g for g, k in enumerate(kinds) if k != FA]
    if sum(k == SW for k in kinds) > 1 or sum(k == MAMBA for k in kinds) > 1:
        raise ValueError("the chunked encoding takes at most one sliding-window and one Mamba "
                         "group")
    if len(windowed) == 2 and kinds[windowed[0]] == MAMBA and sw_first:
        windowed.reverse()
    return tuple(full + windowed)


def derive(enc: ChunkEnc, cfg: ChunkConfig, order: tuple[int, ...] | None = None) -> ChunkDerived:
    """Derived quantities; ``order`` (default: index order) is the lookup order the
    query assumes, and ``order_holds`` says when the sizes give it."""
    n, N, B = len(cfg.kinds), enc.scope.chunks, enc.scope.max_bpc
    tpc = tuple(enc.name(enc.times(cfg.bpc, cfg.gpu[g], B), f"tpc{g}") for g in range(n))
    keys = tuple(enc.name(enc.floordiv(cfg.prompt, tpc[g], N + 1, 0), f"keys{g}")
                 for g in range(n))
    win: list[z3.ArithRef | None] = []
    for g, k in enumerate(cfg.kinds):
        if k == SW:  # config.py:64: cdiv(sliding_window, tokens_per_chunk), clamped at
            w = cfg.window[g]  # N + 2: a window longer than the request acts the same
            assert w is not None
            win.append(enc.name(enc.cdiv(w, tpc[g], N + 2), f"win{g}"))
        elif k == MAMBA:
            win.append(z3.IntVal(1))  # config.py:81: a single state
        else:
            win.append(None)
    start = tuple(enc.name(enc.floordiv(cfg.computed, tpc[g], N + 1, 0), f"start{g}")
                  for g in range(n))
    mamba = [g for g, k in enumerate(cfg.kinds) if k == MAMBA]
    # scheduler.py:151: the Mamba groups in mode align join the align size (0.31.0's
    # scheduler.py:167-170: those in mode "all" too)
    align_mode = z3.And(cfg.prefix_caching, z3.Not(cfg.mamba_all))
    align_on = z3.And(z3.Or(align_mode, cfg.mamba_all), z3.BoolVal(bool(mamba)))
    align = tpc[mamba[-1]] if mamba else z3.IntVal(1)  # scheduler.py:154
    if order is None:
        order = lookup_order(cfg.kinds, sw_first=False)
    holds: z3.BoolRef = z3.BoolVal(True)
    sw = [g for g, k in enumerate(cfg.kinds) if k == SW]
    if mamba and sw and mamba[0] < sw[0]:
        w = cfg.window[sw[0]]
        assert w is not None
        longer = w > tpc[sw[0]]  # cdiv(w, tokens_per_chunk) > 1
        holds = longer if order == lookup_order(cfg.kinds, True) else z3.Not(longer)
    windowed = tuple(g for g in order if cfg.kinds[g] != FA)
    margin = tuple(z3.If(cfg.eagle[g], 1, 0) if cfg.tails and k != MAMBA
                   else z3.IntVal(0) for g, k in enumerate(cfg.kinds))
    return ChunkDerived(tpc, keys, tuple(win), start, align_on, align, bool(windowed),
                     order, windowed, holds, cfg.tails, margin)


def startup(enc: ChunkEnc, cfg: ChunkConfig, steps: ChunkSteps = STOCK) -> z3.BoolRef:
    """0.33.0's start-up checks (model/layout_chunked.py) and the engine's request rules
    (``check_request``), for the encoded layouts (``prefix_match_unit`` unset); ``steps``:
    the release's (``tail_eagle``: whether an EAGLE group keeps partial tails on;
    ``mamba_all``: whether the Mamba groups may run mode "all"; ``cap_new_tokens``,
    ``cap_load_tokens``: which request caps exist)."""
    n, N, B = len(cfg.kinds), enc.scope.chunks, enc.scope.max_bpc
    c: list[z3.BoolRef] = [x >= 1 for x in cfg.gpu]
    c += [1 <= cfg.bpc, cfg.bpc <= B, cfg.prompt >= 1, cfg.computed >= 0,
          cfg.new_cap >= 0, cfg.load_cap >= 0]
    c += [w >= 1 for w in cfg.window if w is not None]
    c += [z3.And(0 <= a, a <= 3) for row in cfg.ans for a in row]
    # mode "all" (0.31.0's config/cache.py:62) is kept with prefix caching on and becomes
    # "none" with it off (0.31.0's models/config.py:649-657, :669); 0.32.0 on has no such
    # mode (``steps.mamba_all``)
    c.append(z3.Implies(cfg.mamba_all, cfg.prefix_caching))
    if not steps.mamba_all or MAMBA not in cfg.kinds:
        c.append(z3.Not(cfg.mamba_all))
    # the request caps a release has (``steps.cap_new_tokens``: max_num_new_tokens from
    # 0.30.0, scheduler.py:863; ``steps.cap_load_tokens``: max_load_tokens from 0.31.0,
    # :867): without one the request never carries it
    if not steps.cap_new_tokens:
        c.append(z3.Not(cfg.has_new_cap))
    if not steps.cap_load_tokens:
        c.append(z3.Not(cfg.has_load_cap))
    if MAMBA in cfg.kinds and n > 1:
        # kv_cache_utils.py:878: a Mamba group outside align mode (prefix caching off,
        # or mode "all": 0.31.0's kv_cache_utils.py:785) backs the hash block off to the
        # lcm, which must divide every block size (:892; 0.31.0's offloading/config.py:91)
        c.append(z3.Implies(z3.Or(z3.Not(cfg.prefix_caching), cfg.mamba_all),
                            z3.And([x == cfg.gpu[0] for x in cfg.gpu])))
    # the GPU hit as the connector gets it: a multiple of the scheduler block (the lcm of
    # the block sizes; a hash-block hit is rounded down first, layout_chunked.
    # connector_tokens), none without prefix caching, and leaves the last prompt token
    hi = (N + 1) * B
    for x in cfg.gpu:
        c.append(z3.Or([cfg.computed == k * x for k in range(hi + 1)]))
    c += [z3.Implies(z3.Or(z3.Not(cfg.prefix_caching), cfg.skip_reading), cfg.computed == 0),
          cfg.computed < cfg.prompt]
    # the scope: at most N chunks per group (tokens_per_chunk >= 1, keys clamped at N+1)
    d = derive(enc, cfg)
    c += [k <= N for k in d.keys]
    if cfg.tails:
        c.append(partial_tails_on(enc, cfg, steps))
    return z3.And(c)


def partial_tails_on(enc: ChunkEnc, cfg: ChunkConfig, steps: ChunkSteps = STOCK) -> z3.BoolRef:
    """The layouts where start-up enables partial tails (model/layout_chunked.py,
    scheduler.py:274-292), as the tails templates have them: full attention and Mamba
    groups only, Mamba in mode align (prefix caching on: kv_cache_utils.py:878 would
    otherwise back the hash block off to the lcm), ``blocks_per_chunk`` 1, one block size
    (scheduler.py:597: the partial-tail block size), ``prefix_match_unit`` dividing it
    (kv_cache_utils.py:892) and finer than the Mamba block (scheduler.py:276);
    ``hashes_per_block`` is bounded by the scope. Without ``steps.tail_eagle`` (vLLM
    0.28.0-0.32.0: 0.32.0's scheduler.py:313) no group is EAGLE. A Mamba group in mode
    "all" (0.28.0-0.31.0) is no CoW source (0.31.0's scheduler.py:289-292) and backs the
    hash block off to its block (kv_cache_utils.py:785): partial tails off."""
    H = enc.scope.hashes_per_block
    assert set(cfg.kinds) <= {FA, MAMBA} and MAMBA in cfg.kinds and len(cfg.kinds) > 1
    block = cfg.gpu[0]
    c = [cfg.prefix_caching, z3.Not(cfg.mamba_all), cfg.bpc == 1, cfg.tph >= 1,
         2 <= cfg.hpb, cfg.hpb <= H, block == enc.times(cfg.hpb, cfg.tph, H)]
    c += [x == block for x in cfg.gpu]
    c += [z3.And(0 <= a, a <= 3) for grp in cfg.tail_ans for row in grp for a in row]
    if not steps.tail_eagle:  # an EAGLE group turns partial tails off
        c += [z3.Not(e) for e in cfg.eagle]
    return z3.And(c)


# --- one group's lookup (scheduler.py:773, 805) --------------------------------------


def prefix_lookup(enc: ChunkEnc, ans: Sequence[z3.ArithRef], start: z3.ArithRef,
                  stop: z3.ArithRef) -> tuple[z3.ArithRef, z3.BoolRef]:
    """``_maximal_prefix_lookup`` over chunks [start, stop): (hit count, deferred)."""
    count: z3.ArithRef = z3.IntVal(0)
    defer: z3.BoolRef = z3.BoolVal(False)
    stopped: z3.BoolRef = z3.BoolVal(False)
    for i, a in enumerate(ans):
        act = z3.And(z3.Not(stopped), start <= i, i < stop)
        hit = z3.Or(a == HIT, a == HIT_PENDING)  # scheduler.py:788
        count = z3.If(z3.And(act, hit), count + 1, count)
        defer = z3.Or(defer, z3.And(act, z3.Or(a == HIT_PENDING, a == RETRY)))  # :797
        stopped = z3.Or(stopped, z3.And(act, a == MISS))  # scheduler.py:801
    return count, defer  # scheduler.py:803 (None when deferred)


def window_lookup(enc: ChunkEnc, ans: Sequence[z3.ArithRef], start: z3.ArithRef,
                  stop: z3.ArithRef, window: z3.ArithRef, initial: z3.ArithRef,
                  pending_anywhere: bool = False) -> tuple[z3.ArithRef, z3.BoolRef]:
    """``_sliding_window_lookup`` over chunks [start, stop) from the end: (end of the
    last run of ``window`` hits, the first run needing ``initial``, relative to
    ``start``; deferred). ``pending_anywhere`` (without ``ChunkSteps.load_windows``,
    0.29.0's scheduler.py:648-652): any HIT_PENDING scanned defers, not only one in the
    run that decides."""
    done: z3.BoolRef = z3.BoolVal(False)
    out: z3.ArithRef = z3.IntVal(0)
    out_defer: z3.BoolRef = z3.BoolVal(False)
    defer: z3.BoolRef = z3.BoolVal(False)
    pending: z3.BoolRef = z3.BoolVal(False)
    hits: z3.ArithRef = z3.IntVal(0)
    required: z3.ArithRef = initial  # scheduler.py:819
    for i in reversed(range(len(ans))):
        a = ans[i]
        act = z3.And(z3.Not(done), start <= i, i < stop)
        counts = z3.Or(a == HIT, a == HIT_PENDING)  # scheduler.py:822, 824
        n_hits = z3.If(counts, hits + 1, 0)
        n_pending = (z3.Or(pending, a == HIT_PENDING) if pending_anywhere
                     else z3.If(a == HIT_PENDING, True, z3.And(counts, pending)))
        n_defer = z3.Or(defer, a == RETRY)  # scheduler.py:830 (RETRY), :838 (MISS)
        n_required = z3.If(counts, required, window)
        fire = z3.And(act, n_hits == n_required)  # scheduler.py:843
        out = z3.If(fire, i - start + n_required, out)
        out_defer = z3.If(fire, z3.Or(n_defer, n_pending), out_defer)
        hits = enc.name(z3.If(act, n_hits, hits), "consecutive_hits")
        pending = enc.name(z3.If(act, n_pending, pending), "pending_in_window")
        defer = enc.name(z3.If(act, n_defer, defer), "defer_lookup")
        required = enc.name(z3.If(act, n_required, required), "required_window")
        done = z3.Or(done, fire)
        out = enc.name(out, "window_end")
        out_defer = enc.name(out_defer, "window_deferred")
        done = enc.name(done, "window_found")
    result = z3.If(done, out, hits)  # scheduler.py:847
    deferred = z3.If(done, out_defer, z3.Or(defer, pending))
    return result, deferred


def load_window(enc: ChunkEnc, cfg: ChunkConfig, d: ChunkDerived, g: int,
                num_tokens: z3.ArithRef) -> z3.ArithRef | None:
    """``load_window_size_in_chunks`` (scheduler.py:117): a sliding window may need one
    more chunk when ``num_tokens`` is not chunk-aligned."""
    win = d.win[g]
    if cfg.kinds[g] != SW or win is None:
        return win
    w = cfg.window[g]
    assert w is not None
    tpc, N = d.tpc[g], enc.scope.chunks
    right_padding = enc.round_down(num_tokens + tpc - 1, tpc, N + 1) - num_tokens  # :123
    more = enc.cdiv(w - 1 + right_padding, tpc, N + 2)
    return zmax(win, more)


# --- the convergence loop (scheduler.py:893) -----------------------------------------


@dataclass(frozen=True)
class ChunkState:
    m: z3.ArithRef  # max_hit_size_tokens
    num_hit: z3.ArithRef
    defer: z3.BoolRef  # defer_lookup
    looked: z3.BoolRef  # looked_up_sliding_window (this pass)
    verified: tuple[z3.BoolRef, ...]  # eagle_verified
    next: z3.ArithRef  # lookup_groups for the next pass
    halted: z3.BoolRef  # returned 0
    # partial tails on: lookup_hit_end_chunk_idx per group (scheduler.py:887, 957)
    hit_end: tuple[z3.ArithRef, ...] = ()


def select(c: z3.BoolRef, a: ChunkState, b: ChunkState) -> ChunkState:
    return ChunkState(z3.If(c, a.m, b.m), z3.If(c, a.num_hit, b.num_hit),
                   z3.If(c, a.defer, b.defer), z3.If(c, a.looked, b.looked),
                   tuple(z3.If(c, x, y) for x, y in zip(a.verified, b.verified, strict=True)),
                   z3.If(c, a.next, b.next), z3.If(c, a.halted, b.halted),
                   tuple(z3.If(c, x, y) for x, y in zip(a.hit_end, b.hit_end, strict=True)))


def named(enc: ChunkEnc, st: ChunkState) -> ChunkState:
    return ChunkState(enc.name(st.m, "max_hit"), enc.name(st.num_hit, "num_hit"),
                   enc.name(st.defer, "defer"), enc.name(st.looked, "looked"),
                   tuple(enc.name(v, "verified") for v in st.verified),
                   enc.name(st.next, "next"), enc.name(st.halted, "halted"),
                   tuple(enc.name(v, "hit_end") for v in st.hit_end))


def initial_state(enc: ChunkEnc, cfg: ChunkConfig, d: ChunkDerived, sem: Semantics) -> ChunkState:
    """max_hit_size_tokens before the loop (scheduler.py:862-881)."""
    nc = cfg.computed
    m: z3.ArithRef = cfg.prompt  # scheduler.py:862
    m = z3.If(cfg.has_new_cap, zmin(m, nc + cfg.new_cap), m)  # scheduler.py:863
    m = z3.If(cfg.has_load_cap, zmin(m, nc + cfg.load_cap), m)  # scheduler.py:867
    if d.windowed_any:
        # scheduler.py:876: the last prompt token is recomputed (the step a fix changes)
        m = sem.steps.last_token(arith(enc), m, cfg.prompt)
        m = z3.If(d.align_on, enc.round_down(m, d.align, enc.scope.chunks + 1), m)  # :877
    n = len(cfg.kinds)
    return ChunkState(enc.name(m, "max_hit"), z3.IntVal(0), z3.BoolVal(False),
                   z3.BoolVal(False), tuple(z3.BoolVal(False) for _ in range(n)),
                   z3.IntVal(NEXT_NONE), z3.BoolVal(False),
                   tuple(z3.IntVal(0) for _ in range(n)) if d.tails else ())  # :887


def group_step(enc: ChunkEnc, cfg: ChunkConfig, d: ChunkDerived, sem: Semantics, st: ChunkState,
               g: int) -> ChunkState:
    """One group's turn (scheduler.py:898-1011), as ``model.lookup_chunked`` takes it."""
    N = enc.scope.chunks
    tpc, keys, window = d.tpc[g], d.keys[g], d.win[g]
    nc = cfg.computed
    cap_tokens = enc.times(keys, tpc, N)

    def after_cut(x: z3.ArithRef, label: str) -> z3.ArithRef:  # finding 001's fix
        return sem.steps.after_cut(arith(enc), x, d.align_on, d.align, f"{label}{g}")

    unverified = z3.And(cfg.eagle[g], z3.Not(st.verified[g]))
    m = zmin(st.m, cap_tokens)  # scheduler.py:914: no further than the last keyed chunk
    m = after_cut(m, "rerounded_cap")  # the fix (none in 0.33.0)
    m = z3.If(cfg.has_load_cap, enc.round_down(m, tpc, N + 1), m)  # :917: chunk-aligns
    m = enc.name(m, "max_hit")
    too_short = m - nc < tpc  # scheduler.py:921
    # scheduler.py:936: an unverified EAGLE group queries one more chunk (every group,
    # ``steps.eagle_query_all``; 0.29.0: sliding-window groups only, its :762)
    query_max = eagle_query_end(
        arith(enc), m, tpc, cap_tokens, unverified,
        sem.steps.eagle_query_all or window is not None)
    num_chunks = enc.name(zmin(enc.cdiv(query_max, tpc, N + 1), keys), "num_chunks")  # :942
    start = d.start[g]  # scheduler.py:943
    stop = zmax(start, num_chunks)
    if window is None:
        r, deferred = prefix_lookup(enc, cfg.ans[g], start, stop)
    else:
        eagle_more = z3.If(unverified, 1, 0)
        required = window + eagle_more  # scheduler.py:961
        if sem.steps.load_windows:  # the first run needs the load window (from 0.30.0)
            candidate_end = zmin(m, enc.times(num_chunks - eagle_more, tpc, N))  # :964
            initial = load_window(enc, cfg, d, g, candidate_end)  # scheduler.py:968
            assert initial is not None
            initial = initial + eagle_more
        else:  # 0.29.0's scheduler.py:633-664: every run needs the window
            initial = required
        r, deferred = window_lookup(enc, cfg.ans[g], start, stop, required,  # :972
                                    initial, not sem.steps.load_windows)
    r = enc.name(r, "num_hit_chunks")
    deferred = enc.name(deferred, "deferred")
    hit_end = list(st.hit_end)
    if d.tails and window is None:  # scheduler.py:957: the chunks confirmed as ready
        hit_end[g] = enc.name(z3.If(too_short, st.hit_end[g],
                                    start + z3.If(deferred, 0, r)), "hit_end")
    no_hit = z3.And(z3.Not(deferred), r == 0)  # scheduler.py:978
    popped = z3.If(unverified, r - 1, r)  # scheduler.py:984: pop the volatile chunk
    verified = list(st.verified)
    verified[g] = z3.Or(st.verified[g], z3.And(z3.Not(deferred), unverified))
    confirmed = zmin(m, enc.times(start + popped, tpc, N))  # scheduler.py:988
    cut = after_cut(confirmed, "rerounded_cut")
    m2 = enc.name(z3.If(deferred, m, cut), "max_hit")
    nxt = st.next
    if sem.reround_rerun and window is not None:
        # the completed fix: a confirmed window the round-down cut is looked up again
        rerun = z3.And(z3.Not(deferred), m2 < confirmed, nxt == NEXT_NONE)
        nxt = z3.If(rerun, z3.IntVal(NEXT_SW), nxt)
    defer = z3.Or(st.defer, deferred)  # scheduler.py:982
    new_hit = m2 - nc  # scheduler.py:993
    shrank = new_hit < tpc  # scheduler.py:994
    tightened = new_hit < st.num_hit  # scheduler.py:998
    clear = z3.And(tightened, z3.Not(cfg.eagle[g]))  # scheduler.py:1000
    verified = [z3.And(v, z3.Not(clear)) for v in verified]
    next_all = z3.And(tightened, defer)  # scheduler.py:1001
    next_sw = z3.And(tightened, z3.Not(defer), st.looked, nxt == NEXT_NONE)  # :1009
    after = ChunkState(
        m=m2, num_hit=new_hit,
        defer=z3.If(next_all, z3.BoolVal(False), defer),
        looked=z3.Or(st.looked, z3.BoolVal(window is not None)),  # scheduler.py:1011
        verified=tuple(verified),
        next=z3.If(next_all, z3.IntVal(NEXT_ALL), z3.If(next_sw, z3.IntVal(NEXT_SW), nxt)),
        halted=z3.BoolVal(False), hit_end=tuple(hit_end),
    )
    stop_st = replace(st, m=m, halted=z3.BoolVal(True), hit_end=tuple(hit_end))
    res = select(z3.Or(too_short, no_hit, z3.And(z3.Not(deferred), shrank)), stop_st, after)
    return named(enc, select(st.halted, st, res))


def run_pass(enc: ChunkEnc, cfg: ChunkConfig, d: ChunkDerived, sem: Semantics, st: ChunkState,
             only_windowed: z3.BoolRef) -> ChunkState:
    """One pass of ``while lookup_groups`` (scheduler.py:893-897): every group in
    ``d.order``, or (``only_windowed``) the sliding-window groups alone."""
    st = replace(st, looked=z3.BoolVal(False), next=z3.IntVal(NEXT_NONE))
    for g in d.order:
        after = group_step(enc, cfg, d, sem, st, g)
        st = after if cfg.kinds[g] != FA else named(enc, select(only_windowed, st, after))
    return st


def finished(st: ChunkState) -> z3.BoolRef:
    return z3.Or(st.halted, st.next == NEXT_NONE)


def run_loop(enc: ChunkEnc, cfg: ChunkConfig, d: ChunkDerived, sem: Semantics,
             passes: int) -> ChunkState:
    """``passes`` passes of the loop (a finished loop stays as it is)."""
    st = run_pass(enc, cfg, d, sem, initial_state(enc, cfg, d, sem), z3.BoolVal(False))
    for _ in range(passes - 1):
        nxt = run_pass(enc, cfg, d, sem, st, st.next == NEXT_SW)
        st = named(enc, select(finished(st), st, nxt))
    return st


# --- after the loop (scheduler.py:1014-1040, 1247, 1258) ------------------------------


@dataclass(frozen=True)
class ChunkResult:
    deferred: z3.BoolRef  # the connector answers None
    hit: z3.ArithRef  # num_hit_tokens when not deferred
    tail: z3.BoolRef = z3.BoolVal(False)  # a partial-tail hit (ends at its boundary)
    # partial tails: a boundary is left past the scope's unrolled ones (termination)
    tail_left: z3.BoolRef = z3.BoolVal(False)
    tail_q: z3.ArithRef = z3.IntVal(0)  # the partial-tail boundary in hash units


def result_of(enc: ChunkEnc, cfg: ChunkConfig, d: ChunkDerived, st: ChunkState,
              steps: ChunkSteps = STOCK) -> ChunkResult:
    """The connector's answer after the loop ends in ``st``; ``steps``: the release's
    partial-tail steps (``partial_tail_phase``)."""
    N = enc.scope.chunks
    hit = enc.name(z3.If(st.halted, 0, st.num_hit), "hit")
    end = cfg.computed + hit
    busy = []
    for g in range(len(cfg.kinds)):  # scheduler.py:1022: a hit chunk is being loaded
        tpc = d.tpc[g]
        # scheduler.py:1027: the load window (0.29.0, :847-849: the plain window)
        window = load_window(enc, cfg, d, g, end) if steps.load_windows else d.win[g]
        hi = zmin(enc.cdiv(end, tpc, N + 1), d.keys[g])  # scheduler.py:1035
        lo = d.start[g] if window is None else zmax(d.start[g], hi - window)
        busy.append(z3.Or([z3.And(lo <= i, i < hi, b) for i, b in enumerate(cfg.loading[g])]))
    converged = z3.Not(st.halted)
    deferred = z3.And(converged, z3.Or(st.defer, z3.And(cfg.prefix_caching, z3.Or(busy))))
    tail: z3.BoolRef = z3.BoolVal(False)
    left: z3.BoolRef = z3.BoolVal(False)
    tail_q: z3.ArithRef = z3.IntVal(0)
    if d.tails:  # scheduler.py:1075: the partial-tail phase runs unless deferred
        pt = partial_tail_phase(enc, cfg, d, st, hit, steps)
        run = z3.Not(deferred)
        tail = enc.name(z3.And(run, pt.found), "tail_hit")
        left = z3.And(run, pt.left)
        tail_q = pt.boundary
        boundary = enc.times(pt.boundary, cfg.tph, (enc.scope.chunks + 1)
                             * enc.scope.hashes_per_block)
        hit = enc.name(z3.If(tail, boundary - cfg.computed, hit), "hit")  # :1146
        # scheduler.py:1150: a key not ready yet defers a request with no complete hit
        deferred = z3.Or(deferred, z3.And(run, z3.Not(pt.found), pt.pending, hit == 0))
    hit = z3.If(cfg.skip_reading, 0, hit)  # scheduler.py:1258
    deferred = z3.Or(z3.And(deferred, z3.Not(cfg.skip_reading)), cfg.in_flight)  # :1247
    tail = z3.And(tail, z3.Not(cfg.skip_reading))
    left = z3.And(left, z3.Not(cfg.skip_reading), z3.Not(cfg.in_flight))
    return ChunkResult(enc.name(deferred, "deferred_result"), enc.name(hit, "hit_result"),
                    enc.name(tail, "tail_result"), left, tail_q)


# --- the partial tail (scheduler.py:1068-1200; model.lookup_chunked.lookup) --------------


def key_answer(enc: ChunkEnc, cfg: ChunkConfig, g: int, q: z3.ArithRef) -> z3.ArithRef:
    """The store's answer for group ``g``'s key ending at token ``q * tokens_per_hash``
    (``0 < q``, at most the prompt's hashes): ``make_offload_key`` of the hash there
    (scheduler.py:1063), so a position on a block edge is that chunk's key. In hash units
    (``q``) the block edges are multiples of ``hashes_per_block``: linear."""
    N, H = enc.scope.chunks, enc.scope.hashes_per_block
    out: z3.ArithRef = z3.IntVal(MISS)
    for c in range(N + 1):
        for k in range(H):
            if k == 0:
                if c == 0:
                    continue
                a, at = cfg.ans[g][c - 1], q == c * cfg.hpb
            else:
                a, at = cfg.tail_ans[g][c][k - 1], z3.And(q == c * cfg.hpb + k, k < cfg.hpb)
            out = z3.If(at, a, out)
    return enc.name(out, f"key_answer{g}")


def _pick(row: Sequence[z3.ExprRef], i: z3.ArithRef, default: z3.ExprRef) -> z3.ExprRef:
    out = default
    for k, x in enumerate(row):
        out = z3.If(i == k, x, out)
    return out


def partial_tail_lookup(enc: ChunkEnc, cfg: ChunkConfig, d: ChunkDerived, boundary: z3.ArithRef,
                        bridge_pending: z3.BoolRef) -> tuple[z3.BoolRef, z3.BoolRef]:
    """``_lookup_partial_tail`` (scheduler.py:1160) at ``boundary`` (in hash units):
    every group's boundary key, in index order; a miss stops at once. Returns (hit,
    pending)."""
    pending = bridge_pending
    missed: z3.BoolRef = z3.BoolVal(False)
    for g in range(len(cfg.kinds)):
        a = key_answer(enc, cfg, g, boundary + d.margin[g])  # scheduler.py:1158
        act = z3.Not(missed)
        miss = z3.And(act, a == MISS)  # scheduler.py:1184
        pending = z3.Or(pending, z3.And(act, z3.Not(miss), a != HIT))  # scheduler.py:1186
        missed = z3.Or(missed, miss)
    pending = enc.name(pending, "tail_pending")
    return enc.name(z3.And(z3.Not(missed), z3.Not(pending)), "tail_ready"), pending  # :1189


@dataclass(frozen=True)
class Tail33:
    found: z3.BoolRef  # a boundary's keys were all ready
    boundary: z3.ArithRef  # the boundary chosen (when found), in hash units
    pending: z3.BoolRef  # some key looked up was not ready yet
    left: z3.BoolRef  # a boundary past the unrolled ones was left untried


def partial_tail_phase(enc: ChunkEnc, cfg: ChunkConfig, d: ChunkDerived, st: ChunkState,
                       complete_hit: z3.ArithRef, steps: ChunkSteps = STOCK) -> Tail33:
    """``_lookup`` after the complete chunks (scheduler.py:1077-1153), as
    ``model.lookup_chunked.lookup`` takes it; ``complete_hit`` is not a deferral. Every
    boundary is a multiple of tokens_per_hash: the search runs in hash units (``_q``: a
    token count divided by tokens_per_hash, rounded down), so a boundary ``b`` is
    ``b_q * tokens_per_hash`` and ``b > x`` is ``b_q > x_q``. ``steps``: the release's
    search end (``tail_search``, ``releases.steps``) and whether it looks the bridge
    chunk up (``tail_bridge``; vLLM 0.32.0 does not)."""
    N, H = enc.scope.chunks, enc.scope.hashes_per_block
    tph, ptbs = cfg.tph, cfg.gpu[0]  # scheduler.py:597: one block per chunk, one size
    hi = (N + 1) * H  # prompt < (N + 1) * block: every position below hi hash blocks
    local = cfg.computed
    complete_boundary = enc.name(local + complete_hit, "complete_boundary")  # :1079
    complete_q = enc.name(enc.floordiv(complete_boundary, tph, hi, 0), "complete_q")
    margin_on = z3.Or([z3.BoolVal(False)] + [m > 0 for m in d.margin])
    margin = z3.If(margin_on, tph, 0)  # _max_eagle_proof_margin (one hash block)
    # scheduler.py:1083-1093: the search end before the caps, the release's step (0.33.0:
    # two search blocks with a margin, and a hash past the boundary for the proof key)
    hashed = enc.round_down(cfg.prompt, tph, hi)
    mb = steps.tail_search(arith(enc), complete_boundary, ptbs, cfg.prompt, hashed, margin,
                           margin_on)
    mb = z3.If(cfg.has_new_cap, zmin(mb, local + cfg.new_cap), mb)  # scheduler.py:1095
    mb = z3.If(cfg.has_load_cap, zmin(mb, local + cfg.load_cap), mb)  # scheduler.py:1097
    mb_q = enc.name(enc.floordiv(mb, tph, hi, -1), "max_boundary_q")  # scheduler.py:1102
    go = mb_q > complete_q  # scheduler.py:1103
    # scheduler.py:1111: the bridge chunk (block) and its end, in hash units
    bridge_idx = enc.name(enc.floordiv(complete_q, cfg.hpb, N, 0), "bridge_chunk")
    bridge_q = enc.name(enc.times(bridge_idx + 1, cfg.hpb, N + 1), "bridge_boundary_q")
    pending: z3.BoolRef = z3.BoolVal(False)
    missed: z3.BoolRef = z3.BoolVal(False)
    # scheduler.py:1116: loads the bridge too (``steps.tail_bridge``: 0.32.0 has no bridge)
    check = z3.And(go, mb_q >= bridge_q) if steps.tail_bridge else z3.BoolVal(False)
    for g, kind in enumerate(cfg.kinds):
        if kind == MAMBA:  # scheduler.py:1120: Mamba align reads a CoW copy
            continue
        busy = _pick(cfg.loading[g], bridge_idx, z3.BoolVal(False))  # scheduler.py:1123
        pending = z3.Or(pending, z3.And(check, cfg.prefix_caching, busy))
        unconfirmed = z3.And(check, st.hit_end[g] <= bridge_idx)  # scheduler.py:1125
        a = _pick(cfg.ans[g], bridge_idx, z3.IntVal(MISS))  # scheduler.py:1128
        act = z3.And(unconfirmed, z3.Not(missed))
        miss = z3.And(act, a == MISS)  # scheduler.py:1129
        pending = z3.Or(pending, z3.And(act, z3.Not(miss), a != HIT))  # scheduler.py:1132
        missed = z3.Or(missed, miss)
    mb_q = enc.name(z3.If(missed, bridge_q - 1, mb_q), "max_boundary_q")
    bridge_pending = enc.name(pending, "bridge_pending")
    pending = bridge_pending
    found: z3.BoolRef = z3.BoolVal(False)
    boundary: z3.ArithRef = z3.IntVal(0)
    for j in range(enc.scope.boundaries):  # scheduler.py:1134: down by tokens_per_hash
        b = mb_q - j
        act = z3.And(go, z3.Not(found), b > complete_q)
        loads_bridge = b >= bridge_q
        hit, b_pending = partial_tail_lookup(enc, cfg, d, b,
                                             z3.And(loads_bridge, bridge_pending))
        here = z3.And(act, hit)  # scheduler.py:1139
        boundary = enc.name(z3.If(here, b, boundary), "tail_boundary_q")
        pending = enc.name(z3.Or(pending, z3.And(act, b_pending)), "pending")
        found = enc.name(z3.Or(found, here), "tail_found")
    left = z3.And(go, z3.Not(found), mb_q - enc.scope.boundaries > complete_q)
    return Tail33(found, boundary, pending, left)


# --- the load (update_state_after_alloc, scheduler.py:1351; model/load_chunked.py) --------


@dataclass(frozen=True)
class ChunkLoad:
    lo: z3.ArithRef  # first loaded chunk
    hi: z3.ArithRef  # one past the last
    pending: z3.ArithRef  # GPU blocks to fill
    state: z3.ArithRef  # Mamba groups: the restored state's token position
    tail_key: z3.BoolRef = z3.BoolVal(False)  # the partial-tail key is loaded too
    tail_q: z3.ArithRef = z3.IntVal(0)  # where that key ends, in hash units


def load_plan(enc: ChunkEnc, cfg: ChunkConfig, d: ChunkDerived, hit: z3.ArithRef,
              tail: z3.BoolRef | None = None, tail_q: z3.ArithRef | None = None
              ) -> dict[int, ChunkLoad]:
    """``tail``: the hit is a partial-tail hit, ending at its boundary ``tail_q`` (in hash
    units; scheduler.py:1377 asserts it is where the hit ends)."""
    tail = z3.BoolVal(False) if tail is None else tail
    tail_q = z3.IntVal(0) if tail_q is None else tail_q
    N, B = enc.scope.chunks, enc.scope.max_bpc
    end = cfg.computed + hit
    out = {}
    for g, kind in enumerate(cfg.kinds):
        tpb = cfg.gpu[g]
        hi_blocks = (N + 2) * B
        num_gpu_blocks = enc.cdiv(end, tpb, hi_blocks)  # scheduler.py:1393
        first_fresh = enc.cdiv(cfg.computed, tpb, hi_blocks)  # scheduler.py:1401
        if kind == SW:  # single_type_kv_cache_manager.py: tokens outside the window
            w = cfg.window[g]
            assert w is not None
            skipped = zmax(z3.IntVal(0), end - w + 1)
        elif kind == MAMBA:
            skipped = end - 1  # every Mamba block but the running one
        else:
            skipped = z3.IntVal(0)
        first_real = enc.floordiv(skipped, tpb, hi_blocks)  # scheduler.py:1406
        load_start = enc.name(zmin(zmax(first_fresh, first_real), num_gpu_blocks),
                              "load_start")
        pending = num_gpu_blocks - load_start
        start_chunk = z3.Sum([z3.If(cfg.bpc == b, enc.floordiv(load_start, z3.IntVal(b),
                                                               hi_blocks), 0)
                              for b in range(1, B + 1)])  # scheduler.py:1425
        num_chunks = enc.cdiv(end, d.tpc[g], N + 2)  # scheduler.py:1423
        has = z3.And(hit > 0, pending > 0)
        if not d.tails:
            out[g] = ChunkLoad(enc.name(z3.If(has, start_chunk, num_chunks), "load_lo"),
                            enc.name(num_chunks, "load_hi"), enc.name(pending, "pending"),
                            enc.name(enc.times(num_gpu_blocks, tpb, hi_blocks), "state"))
            continue
        end_chunk = z3.If(tail, num_chunks - 1, num_chunks)  # scheduler.py:1428
        # scheduler.py:1431: the partial-tail key; a Mamba group restores the CoW copy
        # stored at the boundary (scheduler.py:1626), else the state of its last block
        state = z3.If(tail, end, enc.times(num_gpu_blocks, tpb, hi_blocks))
        out[g] = ChunkLoad(enc.name(z3.If(has, start_chunk, end_chunk), "load_lo"),
                        enc.name(end_chunk, "load_hi"), enc.name(pending, "pending"),
                        enc.name(state, "state"), enc.name(z3.And(has, tail), "tail_key"),
                        enc.name(tail_q + d.margin[g], "tail_q"))
    return out


def is_hit(cfg: ChunkConfig, g: int, i: z3.ArithRef) -> z3.BoolRef:
    """The store answers HIT for chunk ``i`` of group ``g`` (a chunk past the scope's
    bound is never one the request has)."""
    return z3.Or([z3.And(i == k, a == HIT) for k, a in enumerate(cfg.ans[g])])


# --- the four invariants (model/invariants.py) ---------------------------------------


def active(r: ChunkResult) -> z3.BoolRef:
    return z3.And(z3.Not(r.deferred), r.hit > 0)


def violates_no_partial_state(enc: ChunkEnc, cfg: ChunkConfig, d: ChunkDerived, r: ChunkResult
                              ) -> z3.BoolRef:
    loads = load_plan(enc, cfg, d, r.hit, r.tail, r.tail_q)
    end = cfg.computed + r.hit
    bad = [z3.And(cfg.prefix_caching,  # mode align or all: the hit restores a saved state
                  loads[g].pending > 0, loads[g].state != end)
           for g, k in enumerate(cfg.kinds) if k == MAMBA]
    return z3.And(active(r), z3.Or(bad)) if bad else z3.BoolVal(False)


def violates_loads_stored_only(enc: ChunkEnc, cfg: ChunkConfig, d: ChunkDerived, r: ChunkResult
                               ) -> z3.BoolRef:
    loads = load_plan(enc, cfg, d, r.hit, r.tail, r.tail_q)
    bad = []
    for g, ld in loads.items():
        for i in range(enc.scope.chunks + 1):
            bad.append(z3.And(ld.lo <= i, i < ld.hi, z3.Not(is_hit(cfg, g, z3.IntVal(i)))))
        if d.tails:  # the partial-tail key: ready means HIT, like a chunk
            bad.append(z3.And(ld.tail_key, key_answer(enc, cfg, g, ld.tail_q) != HIT))
    return z3.And(active(r), z3.Or(bad))


def violates_leaves_last_token(enc: ChunkEnc, cfg: ChunkConfig, d: ChunkDerived, r: ChunkResult
                               ) -> z3.BoolRef:
    if not d.windowed_any:
        return z3.BoolVal(False)
    return z3.And(active(r), cfg.computed + r.hit > cfg.prompt - 1)


def violates_whole_blocks(enc: ChunkEnc, cfg: ChunkConfig, d: ChunkDerived, r: ChunkResult
                          ) -> z3.BoolRef:
    # a partial-tail hit ends inside a block by design (model/invariants.py)
    return z3.And(active(r), z3.Not(r.tail), z3.Or([r.hit < t for t in d.tpc]))


VIOLATIONS = {
    "no-partial-state": violates_no_partial_state,
    "loads-stored-only": violates_loads_stored_only,
    "leaves-last-token": violates_leaves_last_token,
    "whole-blocks": violates_whole_blocks,
}


# --- maximality: the valid hits (model/maximality_chunked.py) ---------------------------


def multiple(x: z3.ArithRef, d: z3.ArithRef, most: int) -> z3.BoolRef:
    """``x`` is ``k * d`` for some ``0 <= k <= most`` (linear: ``k`` is a number)."""
    return z3.Or([x == k * d for k in range(most + 1)])


def valid_hit(enc: ChunkEnc, cfg: ChunkConfig, d: ChunkDerived, h: z3.ArithRef) -> z3.BoolRef:
    """``model.maximality_chunked.is_valid_hit`` in Z3, rule for rule (each a line, in the
    model's order; scheduler.py lines there)."""
    N = enc.scope.chunks
    y = cfg.computed + h
    c: list[z3.BoolRef] = []
    c.append(z3.Not(cfg.in_flight))  # not-in-flight
    c.append(z3.Not(cfg.skip_reading))  # reads-prefix-cache
    c.append(z3.Implies(cfg.has_new_cap, h <= cfg.new_cap))  # new-tokens-cap
    c.append(z3.Implies(cfg.has_load_cap, h <= cfg.load_cap))  # load-cap
    if d.windowed_any:
        c.append(y <= cfg.prompt - 1)  # last-token
    c.append(z3.Implies(d.align_on, multiple(y, d.align, N + 1)))  # mamba-align
    for g in range(len(cfg.kinds)):
        tpc = d.tpc[g]
        c.append(z3.Implies(cfg.has_load_cap, multiple(y, tpc, N + 1)))  # load-cap-chunks
        c.append(y <= enc.times(d.keys[g], tpc, N))  # keyed
        c.append(h >= tpc)  # whole-chunk
        stop = enc.cdiv(y, tpc, N + 1)  # the chunks the group needs
        window = load_window(enc, cfg, d, g, y)
        first = d.start[g] if window is None else zmax(d.start[g], stop - window)
        for i, (a, busy) in enumerate(zip(cfg.ans[g], cfg.loading[g], strict=True)):
            needed = z3.And(first <= i, i < stop)
            c.append(z3.Implies(needed, a == HIT))  # ready-hit
            idle = z3.Not(z3.And(cfg.prefix_caching, busy))
            c.append(z3.Implies(needed, idle))  # not-being-loaded
    return z3.And(c)
