"""vLLM 0.33.0's complete-chunk lookup with every size *and* every chunk count symbolic:
the exact unbounded encoding of one group's turn, for the layered proof
(``proofs.layers_chunked``).

``proofs.encoding_chunked`` is exact too, but bounded (at most a few chunks per group); here
nothing is bounded. Every token size is a symbolic integer (each group's GPU block size,
``blocks_per_chunk``, the window, the prompt, ``num_computed_tokens``, both caps), and
the store is three uninterpreted predicates per group over chunk indices, as in
``proofs.encoding`` (whose ``Enc`` renders the facts over index ranges, by grounding in
proofs and by a bound for concrete runs): ``stored(i)`` says the manager counts chunk
``i`` as a hit (``HIT`` or ``HIT_PENDING``), ``deferred(i)`` that its answer defers the
lookup (``HIT_PENDING`` or ``RETRY``), ``loading(i)`` that it is being loaded. The four
answers are the four combinations (``RETRY``: deferred, not stored; ``MISS``: neither).

``group_step`` mirrors ``model.lookup_chunked.lookup_complete_chunks`` line for line and
cites the same lines of 0.33.0's offloading/scheduler.py; ``tests/
test_proof_layers_chunked.py`` pins it (composed into the whole loop by ``run_loop``) to the
model on concrete scenarios. A group's eagle_verified flag is an input of the turn, so a
fact proved of one symbolic turn holds in every state of the loop.

Scope: partial tails off (``prefix_match_unit`` unset: the hash block is the gcd of the
block sizes and 0.33.0's start-up never enables them), a new request.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial

import z3

from model.semantics import Semantics
from proofs.arith import TurnArith
from proofs.encoding import (
    NEXT_ALL,
    NEXT_NONE,
    NEXT_SW,
    Enc,
    State,
    Store,
    prefix_lookup,
    select,
    zmax,
    zmin,
)
from releases.base import ChunkSteps
from releases.steps import eagle_query_end

FA, SW, MAMBA = "full_attention", "sliding_window", "mamba"
STOCK = ChunkSteps()  # vLLM 0.33.0's steps (a fix overrides some: releases.steps)
KINDS = (FA, SW, MAMBA)

@dataclass(frozen=True)
class Cfg:
    """A 0.33.0 configuration and request (kinds fixed, the rest Z3 terms)."""

    kinds: tuple[str, ...]
    gpu: tuple[z3.ArithRef, ...]  # tokens_per_block
    bpc: z3.ArithRef  # blocks_per_chunk
    prompt: z3.ArithRef  # request.num_tokens
    computed: z3.ArithRef  # num_computed_tokens
    window: tuple[z3.ArithRef | None, ...]  # sliding_window in tokens (SW groups)
    eagle: tuple[z3.BoolRef, ...]
    prefix_caching: z3.BoolRef  # Mamba runs in mode align (or "all": ``mamba_all``) when on
    skip_reading: z3.BoolRef
    in_flight: z3.BoolRef
    has_new_cap: z3.BoolRef
    new_cap: z3.ArithRef  # max_num_new_tokens
    has_load_cap: z3.BoolRef
    load_cap: z3.ArithRef  # max_load_tokens
    stores: tuple[Store, ...]
    # the Mamba groups run cache mode "all" (the engine's one mode, prefix caching on): a
    # mode of vLLM 0.28.0-0.31.0 only (``ChunkSteps.mamba_all``: ``symbolic_config``)
    mamba_all: z3.BoolRef = z3.BoolVal(False)
    # the release's lookup switches (``ChunkSteps``; 0.33.0's by default): every
    # unverified EAGLE group queries one more chunk (0.29.0: sliding-window groups only),
    # and sliding windows use the load window (0.29.0: the plain window everywhere, any
    # scanned HIT_PENDING defers)
    eagle_query_all: bool = True
    load_windows: bool = True


def symbolic_config(kinds: Sequence[str], tag: str = "", steps: ChunkSteps = STOCK) -> Cfg:
    """``steps``: the release's; with ``mamba_all`` (0.28.0-0.31.0) the Mamba groups may
    run mode "all", a symbol; else mode "all" is no mode (False). A request cap the
    release lacks (``cap_new_tokens``, ``cap_load_tokens``) is never set (False); the
    lookup switches ``eagle_query_all`` and ``load_windows`` are the release's."""
    n = len(kinds)
    i, b = z3.IntSort(), z3.BoolSort()
    return Cfg(
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
        # the request caps the release has (scheduler.py:863, :867; ``steps.cap_new_tokens``
        # from 0.30.0, ``steps.cap_load_tokens`` from 0.31.0): without one, never set
        has_new_cap=(z3.Bool(f"has_max_num_new_tokens{tag}") if steps.cap_new_tokens
                     else z3.BoolVal(False)),
        new_cap=z3.Int(f"max_num_new_tokens{tag}"),
        has_load_cap=(z3.Bool(f"has_max_load_tokens{tag}") if steps.cap_load_tokens
                      else z3.BoolVal(False)),
        load_cap=z3.Int(f"max_load_tokens{tag}"),
        stores=tuple(Store(z3.Function(f"stored{g}{tag}", i, b),
                           z3.Function(f"deferred{g}{tag}", i, b),
                           z3.Function(f"loading{g}{tag}", i, b)) for g in range(n)),
        mamba_all=z3.Bool(f"mamba_mode_all{tag}") if steps.mamba_all else z3.BoolVal(False),
        eagle_query_all=steps.eagle_query_all, load_windows=steps.load_windows,
    )


@dataclass(frozen=True)
class Env:
    """What the rest of an unknown layout contributes to a query about a few of its
    groups: whether it has a windowed (sliding-window or Mamba) group, whether it has a
    Mamba group, and that group's GPU block size (scheduler.py:153 makes every Mamba
    align group's chunk the same; with one ``blocks_per_chunk`` so is its block)."""

    has_windowed: z3.BoolRef
    has_mamba: z3.BoolRef
    mamba_gpu: z3.ArithRef


def symbolic_env(tag: str = "") -> Env:
    return Env(z3.Bool(f"layout_has_windowed{tag}"), z3.Bool(f"layout_has_mamba{tag}"),
               z3.Int(f"mamba_gpu_block_size{tag}"))


@dataclass(frozen=True)
class D:
    """Per-group quantities start-up fixes and the request derives (``ChunkGroup``)."""

    tpc: tuple[z3.ArithRef, ...]  # tokens_per_chunk (scheduler.py:256)
    keys: tuple[z3.ArithRef, ...]  # len(offload_keys) = num_tokens // tokens_per_chunk
    cap: tuple[z3.ArithRef, ...]  # len(offload_keys) * tokens_per_chunk (:914)
    win: tuple[z3.ArithRef | None, ...]  # sliding_window_size_in_chunks (None: prefix)
    start: tuple[z3.ArithRef, ...]  # num_computed_tokens // tokens_per_chunk (:943)
    align_on: z3.BoolRef  # mamba_align_size is not None
    align: z3.ArithRef  # mamba_align_size (scheduler.py:154)
    any_windowed: z3.BoolRef  # _sliding_window_groups is not empty
    order: tuple[int, ...]  # _lookup_groups (whole layouts only; () with an Env)
    windowed: tuple[int, ...]  # _sliding_window_groups (whole layouts only)


def _window_value(cfg: Cfg, tpc: tuple[z3.ArithRef, ...], g: int) -> int:
    """A windowed group's window in chunks, for a whole layout's lookup order (which
    therefore needs concrete sizes)."""
    if cfg.kinds[g] == MAMBA:
        return 1
    w, t = z3.simplify(cfg.window[g]), z3.simplify(tpc[g])
    if not (z3.is_int_value(w) and z3.is_int_value(t)):
        raise ValueError("a whole layout's lookup order needs concrete windows")
    return int(-(-w.as_long() // t.as_long()))


def derive(enc: Enc, cfg: Cfg, env: Env | None = None) -> D:
    """The derived quantities of ``cfg``'s groups: a whole layout (``env`` None: its
    lookup order needs concrete windows), or a few groups of an unknown layout."""
    n = len(cfg.kinds)
    tpc = tuple(cfg.bpc * cfg.gpu[g] for g in range(n))  # scheduler.py:256
    if env is not None:  # one symbol per chunk size: the solver's products stay short
        named = tuple(z3.Int(f"tokens_per_chunk{g}") for g in range(n))
        enc.add(*(a == b for a, b in zip(named, tpc, strict=True)))
        tpc = named
    keys = tuple(enc.floordiv(cfg.prompt, tpc[g], f"keys{g}") for g in range(n))
    cap = tuple(keys[g] * tpc[g] for g in range(n))
    win: list[z3.ArithRef | None] = []
    for g, k in enumerate(cfg.kinds):
        w = cfg.window[g]
        if k == SW and w is not None:
            win.append(enc.cdiv(w, tpc[g], f"win{g}"))  # config.py:64
        elif k == MAMBA:
            win.append(z3.IntVal(1))  # config.py:81
        else:
            win.append(None)
    start = tuple(enc.floordiv(cfg.computed, tpc[g], f"start{g}") for g in range(n))
    mamba = [g for g, k in enumerate(cfg.kinds) if k == MAMBA]
    windowed = [g for g, k in enumerate(cfg.kinds) if k != FA]
    # scheduler.py:151: the Mamba groups in mode align join the align size (0.31.0's
    # scheduler.py:167-170: those in mode "all" too)
    align_mode = z3.And(cfg.prefix_caching, z3.Not(cfg.mamba_all))
    joins = z3.Or(align_mode, cfg.mamba_all)
    if env is None:
        align_on = z3.And(joins, z3.BoolVal(bool(mamba)))
        align = tpc[mamba[-1]] if mamba else z3.IntVal(1)  # scheduler.py:154
        any_windowed: z3.BoolRef = z3.BoolVal(bool(windowed))
        sizes = {g: _window_value(cfg, tpc, g) for g in windowed}
        # scheduler.py:588: windowed groups by window, largest first (stable)
        windowed.sort(key=lambda g: sizes[g], reverse=True)
        order = tuple(g for g, k in enumerate(cfg.kinds) if k == FA) + tuple(windowed)
        return D(tpc, keys, cap, tuple(win), start, align_on, align, any_windowed, order,
                 tuple(windowed))
    # a few groups of an unknown layout: the rest enters through the Env, tied to these
    # groups as the start-up checks tie them
    enc.add(env.mamba_gpu >= 1, z3.Implies(env.has_mamba, env.has_windowed))
    if mamba:
        enc.add(env.has_mamba)
    if windowed:
        enc.add(env.has_windowed)
    # the connector's num_computed_tokens is a multiple of the lcm of the block sizes
    # (check_request; a hash-block GPU hit is rounded down first, connector_tokens)
    enc.add(z3.Implies(env.has_mamba, cfg.computed == env.mamba_gpu * enc.floordiv(
        cfg.computed, env.mamba_gpu, "computed_in_mamba_blocks")))
    for g, k in enumerate(cfg.kinds):
        # kv_cache_utils.py:878/:892: a Mamba group outside align mode (prefix caching
        # off, or mode "all": 0.31.0's kv_cache_utils.py:785) makes every block size the
        # lcm: all equal
        enc.add(z3.Implies(z3.And(env.has_mamba, z3.Or(z3.Not(cfg.prefix_caching),
                                                       cfg.mamba_all)),
                           cfg.gpu[g] == env.mamba_gpu))
        if k == MAMBA:  # scheduler.py:153: the align groups agree on the chunk
            enc.add(z3.Implies(joins, cfg.gpu[g] == env.mamba_gpu))
    align_on = z3.And(joins, env.has_mamba)
    return D(tpc, keys, cap, tuple(win), start, align_on, cfg.bpc * env.mamba_gpu,
             env.has_windowed, (), ())


def startup(enc: Enc, cfg: Cfg) -> z3.BoolRef:
    """0.33.0's start-up checks (model/layout_chunked.py) and the engine's request rules
    (``check_request``) for these groups, partial tails off."""
    n = len(cfg.kinds)
    c: list[z3.BoolRef] = [x >= 1 for x in cfg.gpu]
    c += [cfg.bpc >= 1, cfg.prompt >= 1, cfg.computed >= 0, cfg.computed < cfg.prompt,
          cfg.new_cap >= 0, cfg.load_cap >= 0]
    c += [w >= 1 for w in cfg.window if w is not None]
    # mode "all" (0.31.0's config/cache.py:62) is kept with prefix caching on and becomes
    # "none" with it off (0.31.0's models/config.py:649-657, :669)
    c.append(z3.Implies(cfg.mamba_all, cfg.prefix_caching))
    if MAMBA in cfg.kinds and n > 1:  # kv_cache_utils.py:878 (0.31.0's :785), :892
        c.append(z3.Implies(z3.Or(z3.Not(cfg.prefix_caching), cfg.mamba_all),
                            z3.And([x == cfg.gpu[0] for x in cfg.gpu])))
    mamba = [g for g, k in enumerate(cfg.kinds) if k == MAMBA]
    for a, b in itertools.combinations(mamba, 2):  # scheduler.py:153
        c.append(z3.Implies(cfg.prefix_caching, cfg.gpu[a] == cfg.gpu[b]))
    # the connector's GPU hit (check_request, connector_tokens) is a multiple of every
    # block size, none without prefix
    # caching (or when skipping the prefix cache), and leaves the last prompt token
    for g, x in enumerate(cfg.gpu):
        c.append(cfg.computed == x * enc.floordiv(cfg.computed, x, f"computed_blocks{g}"))
    c.append(z3.Implies(z3.Or(z3.Not(cfg.prefix_caching), cfg.skip_reading),
                        cfg.computed == 0))
    return z3.And(c)


def precondition(name: str, enc: Enc, cfg: Cfg, d: D) -> z3.BoolRef:
    """The preconditions the layered proof takes (words: ``proofs.theorems``); others
    raise (the bounded encoding checks those)."""
    if name == "align-divides-blocks":
        return z3.Or(z3.Not(d.align_on), z3.And([
            t == d.align * z3.Int(f"chunks_per_align{g}") for g, t in enumerate(d.tpc)]))
    if name == "no-eagle":
        return z3.And([z3.Not(e) for e in cfg.eagle])
    if name == "same-block-size":
        if d.order:  # a whole layout
            return z3.And([x == cfg.gpu[0] for x in cfg.gpu])
        # a few groups of an unknown layout: what it gives them (one GPU block size, one
        # blocks_per_chunk): each chunk is the Mamba align group's
        return z3.Implies(d.align_on, z3.And([t == d.align for t in d.tpc]))
    if name == "full-chunk-within-windowed":  # finding 002
        windowed = [t for t, k in zip(d.tpc, cfg.kinds, strict=True) if k != FA]
        full = [t for t, k in zip(d.tpc, cfg.kinds, strict=True) if k == FA]
        # a few groups of an unknown layout: the windowed group it names for a full
        # attention group is one of them (proofs.layers_chunked picks the cases); in a
        # layout without windowed groups its full-attention groups share one chunk size
        same = z3.Implies(z3.Not(d.any_windowed), z3.And([t == full[0] for t in full[1:]]))
        return z3.And([same] + [z3.Or([t <= w for w in windowed])
                                for t in full if windowed])
    if name == "mamba-mode-not-all":
        return z3.Not(cfg.mamba_all)  # 0.32.0 on has no mode "all" (False there)
    raise ValueError(f"precondition {name!r}: not in the layered 0.33.0 proof")


# --- one group's lookup (scheduler.py:773, 805) ------------------------------------------


def _retry(st: Store, i: z3.ArithRef) -> z3.BoolRef:
    return z3.And(z3.Not(st.stored(i)), st.deferred(i))


def _no_run(enc: Enc, st: Store, lo: z3.ArithRef, e: z3.ArithRef, v: z3.ArithRef
            ) -> z3.BoolRef:
    """No ``v`` consecutive counting chunks start in [lo, e - v]."""
    gap = z3.Function(f"gap!{next(enc.counter)}", z3.IntSort(), z3.IntSort())
    return enc.forall(lo, e - v + 1, lambda p: enc.exists_gap(p, v, st.stored, gap))


def _defers(st: Store, run_hi: z3.ArithRef, i: z3.ArithRef,
            pending_anywhere: bool = False) -> z3.BoolRef:
    """Chunk ``i`` defers the scan: a RETRY anywhere scanned (scheduler.py:830), or a
    HIT_PENDING inside the run that fires (pending_in_window, :824; a gap resets it);
    ``pending_anywhere`` (without ``load_windows``, 0.29.0's scheduler.py:648-652): a
    HIT_PENDING anywhere scanned."""
    if pending_anywhere:
        return st.deferred(i)
    return z3.And(st.deferred(i), z3.Or(i < run_hi, z3.Not(st.stored(i))))


def window_lookup(enc: Enc, st: Store, s: z3.ArithRef, e: z3.ArithRef, v: z3.ArithRef,
                  u: z3.ArithRef, pending_anywhere: bool = False
                  ) -> tuple[z3.ArithRef, z3.BoolRef]:
    """``_sliding_window_lookup`` over chunks [s, e) (e >= s), scanning down from e - 1:
    the first run needs ``u`` counting chunks (initial_window, :819), any run after a
    gap ``v`` (u >= v). Returns (the end of the run that fires, relative to s, or the
    run of counting chunks at s when none fires; deferred). ``pending_anywhere``:
    ``_defers``'s."""
    top = enc.fresh_bool("window_top")  # the first run fires at e
    gapless = enc.fresh_bool("window_gapless")  # no gap and no room for the first run
    p = enc.fresh_int("window_gap")  # else: the highest gap (it is at or above e - u)
    found = enc.fresh_bool("window_found")
    j = enc.fresh_int("window_end")
    h = enc.fresh_int("window_start_run")
    deferred = enc.fresh_bool("window_deferred")
    wit = enc.fresh_int("window_deferred_at")
    below = z3.And(z3.Not(top), z3.Not(gapless))
    run_lo = z3.If(found, z3.If(top, e - u, j - v), s)
    run_hi = z3.If(found, j, s + h)
    enc.add(
        z3.Implies(top, z3.And(z3.Not(gapless), e - s >= u, enc.forall(e - u, e, st.stored),
                               found, j == e)),
        z3.Implies(gapless, z3.And(e - s < u, enc.forall(s, e, st.stored), z3.Not(found),
                                   h == e - s)),
        z3.Implies(below, z3.And(s <= p, p < e, p >= e - u, z3.Not(st.stored(p)),
                                 enc.forall(p + 1, e, st.stored))),
        z3.Implies(z3.And(below, found), z3.And(
            s + v <= j, j <= p, enc.forall(j - v, j, st.stored),
            z3.Or(j == p, z3.Not(st.stored(j))), _no_run(enc, st, j + 1, p, v))),
        z3.Implies(z3.And(below, z3.Not(found)), z3.And(
            h >= 0, s + h <= p, enc.forall(s, s + h, st.stored),
            z3.Or(s + h == p, z3.Not(st.stored(s + h))), _no_run(enc, st, s, p, v))),
        z3.Implies(deferred, z3.And(run_lo <= wit, wit < e,
                                    _defers(st, run_hi, wit, pending_anywhere))),
        z3.Implies(z3.Not(deferred), enc.forall(
            run_lo, e, lambda i: z3.Not(_defers(st, run_hi, i, pending_anywhere)))),
    )
    return z3.If(found, j - s, h), deferred  # scheduler.py:843, :847


def load_window(enc: Enc, cfg: Cfg, d: D, g: int, num_tokens: z3.ArithRef
                ) -> z3.ArithRef | None:
    """``load_window_size_in_chunks`` (scheduler.py:117): a sliding window may need one
    more chunk when ``num_tokens`` is not chunk-aligned."""
    win, w = d.win[g], cfg.window[g]
    if cfg.kinds[g] != SW or win is None or w is None:
        return win
    tpc = d.tpc[g]
    right_padding = tpc * enc.cdiv(num_tokens, tpc, f"padded{g}") - num_tokens  # :123
    return zmax(win, enc.cdiv(w - 1 + right_padding, tpc, f"load_window{g}"))


# --- the convergence loop (scheduler.py:893) ---------------------------------------------


def initial_max_hit(enc: Enc, cfg: Cfg, d: D, steps: ChunkSteps = STOCK) -> z3.ArithRef:
    """max_hit_size_tokens before the loop (scheduler.py:862-881); ``steps``: the
    semantics' steps (``releases.steps``; the last-token rule is the one a fix changes)."""
    nc = cfg.computed
    m: z3.ArithRef = cfg.prompt  # scheduler.py:862
    m = z3.If(cfg.has_new_cap, zmin(m, nc + cfg.new_cap), m)  # scheduler.py:863
    m = z3.If(cfg.has_load_cap, zmin(m, nc + cfg.load_cap), m)  # scheduler.py:867
    last = steps.last_token(TurnArith(enc), m, cfg.prompt)  # scheduler.py:876
    rounded = d.align * enc.floordiv(last, d.align, "initial_rounded")  # :877
    return z3.If(d.any_windowed, z3.If(d.align_on, rounded, last), m)


def initial_state(enc: Enc, cfg: Cfg, d: D, steps: ChunkSteps = STOCK) -> State:
    n = len(cfg.kinds)
    return State(initial_max_hit(enc, cfg, d, steps), z3.IntVal(0), z3.BoolVal(False),
                 z3.BoolVal(False), tuple(z3.BoolVal(False) for _ in range(n)),
                 z3.IntVal(NEXT_NONE), z3.BoolVal(False))


@dataclass(frozen=True)
class Step:
    """One turn's values, as the abstract loop (``proofs.abstract_chunked``) sees them."""

    m: z3.ArithRef  # max_hit_size_tokens before the turn
    m1: z3.ArithRef  # after the cap to the group's keys, the fix's round-down, :917
    too_short: z3.BoolRef  # less than one chunk left (:921): return 0
    deferred: z3.BoolRef  # the lookup returned None
    no_hit: z3.BoolRef  # it returned 0 (:978): return 0
    m2: z3.ArithRef  # max_hit_size_tokens after the turn
    lowered: z3.BoolRef  # the fix's round-down cut a confirmed window (rerun semantics)
    cleared: z3.BoolRef  # the turn clears eagle_verified (:1000)
    # chunk counts k for which a cap or cut may set the bound to k * tokens_per_chunk
    # (the exact turn's; the abstract loop has none)
    ends: tuple[z3.ArithRef, ...] = ()


def group_step(enc: Enc, cfg: Cfg, d: D, sem: Semantics, st: State, g: int
               ) -> tuple[State, Step]:
    """One group's turn (scheduler.py:898-1011), as ``model.lookup_chunked`` takes it."""
    tpc, keys, cap, window = d.tpc[g], d.keys[g], d.cap[g], d.win[g]
    nc = cfg.computed

    def after_cut(x: z3.ArithRef, what: str) -> z3.ArithRef:  # finding 001's fix
        return sem.steps.after_cut(arith, x, d.align_on, d.align, f"{what}{g}")

    arith = TurnArith(enc)
    unverified = z3.And(cfg.eagle[g], z3.Not(st.verified[g]))
    m = zmin(st.m, cap)  # scheduler.py:914: no further than the last keyed chunk
    m = after_cut(m, "rerounded_cap")  # the fix (none in 0.33.0)
    aligned = enc.floordiv(m, tpc, f"chunk_aligned{g}")
    m = z3.If(cfg.has_load_cap, tpc * aligned, m)  # scheduler.py:917: chunk-aligns
    too_short = m - nc < tpc  # scheduler.py:921
    # scheduler.py:936: an unverified EAGLE group queries one more chunk (every group,
    # ``eagle_query_all``; 0.29.0: sliding-window groups only, its :762)
    query_max = eagle_query_end(arith, m, tpc, cap, unverified,
                                cfg.eagle_query_all or window is not None)
    num_chunks = zmin(enc.cdiv(query_max, tpc, f"query_end{g}"), keys)  # :942
    start = d.start[g]  # scheduler.py:943
    stop = zmax(start, num_chunks)
    if window is None:
        r, deferred = prefix_lookup(enc, cfg.stores[g], start, stop)
    else:
        more = z3.If(unverified, 1, 0)
        if cfg.load_windows:  # the first run needs the load window (from 0.30.0)
            candidate_end = zmin(m, (num_chunks - more) * tpc)  # scheduler.py:964
            initial = load_window(enc, cfg, d, g, candidate_end)  # scheduler.py:968
            assert initial is not None
        else:  # 0.29.0's scheduler.py:633-664: every run needs the window
            initial = window
        # without load windows any scanned HIT_PENDING defers (0.29.0's :648-652)
        scan = partial(window_lookup, pending_anywhere=not cfg.load_windows)
        r, deferred = scan(enc, cfg.stores[g], start, stop, window + more,  # :961
                           initial + more)  # scheduler.py:972
    no_hit = z3.And(z3.Not(deferred), r == 0)  # scheduler.py:978
    popped = z3.If(unverified, r - 1, r)  # scheduler.py:984: pop the volatile chunk
    verified = list(st.verified)
    verified[g] = z3.Or(st.verified[g], z3.And(z3.Not(deferred), unverified))
    confirmed = zmin(m, tpc * (start + popped))  # scheduler.py:988
    m2 = z3.If(deferred, m, after_cut(confirmed, "rerounded_cut"))
    nxt = st.next
    lowered: z3.BoolRef = z3.BoolVal(False)
    if sem.reround_rerun and window is not None:
        # the completed fix: a window confirmed above the round-down is looked up again
        lowered = z3.And(z3.Not(deferred), m2 < confirmed)
        nxt = z3.If(z3.And(lowered, nxt == NEXT_NONE), z3.IntVal(NEXT_SW), nxt)
    defer = z3.Or(st.defer, deferred)  # scheduler.py:982
    new_hit = m2 - nc  # scheduler.py:993
    shrank = new_hit < tpc  # scheduler.py:994
    tightened = new_hit < st.num_hit  # scheduler.py:998
    cleared = z3.And(tightened, z3.Not(cfg.eagle[g]))  # scheduler.py:1000
    verified = [z3.And(v, z3.Not(cleared)) for v in verified]
    next_all = z3.And(tightened, defer)  # scheduler.py:1001
    next_sw = z3.And(tightened, z3.Not(defer), st.looked, nxt == NEXT_NONE)  # :1009
    after = State(
        m=m2, num_hit=new_hit,
        defer=z3.If(next_all, z3.BoolVal(False), defer),
        looked=z3.Or(st.looked, z3.BoolVal(window is not None)),  # scheduler.py:1011
        verified=tuple(verified),
        next=z3.If(next_all, z3.IntVal(NEXT_ALL), z3.If(next_sw, z3.IntVal(NEXT_SW), nxt)),
        halted=z3.BoolVal(False),
    )
    stop_st = replace(st, m=m, halted=z3.BoolVal(True))
    res = select(z3.Or(too_short, no_hit, shrank), stop_st, after)
    return (select(st.halted, st, res),
            Step(st.m, m, too_short, deferred, no_hit, m2, lowered, cleared,
                 (keys, aligned, start + popped)))


def run_pass(enc: Enc, cfg: Cfg, d: D, sem: Semantics, st: State, groups: Sequence[int]
             ) -> State:
    """One pass of ``while lookup_groups`` (scheduler.py:893-897) over ``groups``."""
    st = replace(st, looked=z3.BoolVal(False), next=z3.IntVal(NEXT_NONE))
    for g in groups:
        st, _ = group_step(enc, cfg, d, sem, st, g)
    return st


def finished(st: State) -> z3.BoolRef:
    return z3.Or(st.halted, st.next == NEXT_NONE)


def run_loop(enc: Enc, cfg: Cfg, d: D, sem: Semantics, passes: int) -> State:
    """``passes`` passes of the loop composed of ``group_step`` (a finished loop stays
    as it is): for concrete runs (conformance, witnesses)."""
    st = run_pass(enc, cfg, d, sem, initial_state(enc, cfg, d, sem.steps), d.order)
    for _ in range(passes - 1):
        every = run_pass(enc, cfg, d, sem, st, d.order)
        windowed = run_pass(enc, cfg, d, sem, st, d.windowed)
        st = select(finished(st), st, select(st.next == NEXT_ALL, every, windowed))
    return st


# --- after the loop (scheduler.py:1014-1040, 1247, 1258) ---------------------------------


@dataclass(frozen=True)
class Result:
    deferred: z3.BoolRef  # the connector answers None
    hit: z3.ArithRef  # num_hit_tokens when not deferred


def _negated(pred: z3.FuncDeclRef, i: z3.ArithRef) -> z3.BoolRef:
    return z3.Not(pred(i))


def result_of(enc: Enc, cfg: Cfg, d: D, st: State,
              groups: Sequence[int] | None = None) -> Result:
    """The answer after the loop; the being-loaded delay (scheduler.py:1022) over
    ``groups`` (None: every group; a query about some groups of an unknown layout may
    leave the others' delay out: it only ever adds a deferral)."""
    hit = z3.If(st.halted, z3.IntVal(0), st.num_hit)
    end = cfg.computed + hit
    busy = []
    for g in range(len(cfg.kinds)) if groups is None else groups:
        tpc = d.tpc[g]
        # scheduler.py:1027: the load window (0.29.0, :847-849: the plain window)
        window = load_window(enc, cfg, d, g, end) if cfg.load_windows else d.win[g]
        hi = zmin(enc.cdiv(end, tpc, f"busy_end{g}"), d.keys[g])  # scheduler.py:1035
        lo = d.start[g] if window is None else zmax(d.start[g], hi - window)
        flag = enc.fresh_bool(f"busy{g}")
        wit = enc.fresh_int(f"busy_at{g}")
        loading = cfg.stores[g].loading
        enc.add(z3.Implies(flag, z3.And(lo <= wit, wit < hi, loading(wit))),
                z3.Implies(z3.Not(flag), enc.forall(lo, hi, partial(_negated, loading))))
        busy.append(flag)
    converged = z3.Not(st.halted)
    deferred = z3.And(converged, z3.Or(st.defer, z3.And(cfg.prefix_caching, z3.Or(busy))))
    hit = z3.If(cfg.skip_reading, z3.IntVal(0), hit)  # scheduler.py:1258
    deferred = z3.Or(z3.And(deferred, z3.Not(cfg.skip_reading)), cfg.in_flight)  # :1247
    return Result(deferred, hit)


def engine_choice(tail: z3.ArithRef, r: Result) -> Result:
    """What the engine takes of the connector's answer ``r`` when its own GPU hit is the
    connector's num_computed_tokens plus a sub-block ``tail`` (a hash-block hit rounded
    down to the scheduler block, v1/core/sched/scheduler.py:1134 of 0.33.0): it keeps the
    local tail and loads nothing unless the connector's hit is longer (:1167, :1179); a
    deferral defers either way (``model.layout_chunked.keeps_local_tail``)."""
    return Result(r.deferred, z3.If(keeps_tail(tail, r), z3.IntVal(0), r.hit))


def keeps_tail(tail: z3.ArithRef, r: Result) -> z3.BoolRef:
    """The engine keeps its local ``tail`` (``engine_choice``)."""
    return z3.And(tail > 0, z3.Not(r.deferred), r.hit <= tail)


# --- the load (update_state_after_alloc, scheduler.py:1351; model/load_chunked.py) ----------


@dataclass(frozen=True)
class Load:
    lo: z3.ArithRef  # first loaded chunk
    hi: z3.ArithRef  # one past the last
    pending: z3.ArithRef  # GPU blocks to fill
    state: z3.ArithRef  # Mamba groups: the restored state's token position


def load_plan(enc: Enc, cfg: Cfg, d: D, hit: z3.ArithRef, groups: Sequence[int] | None = None
              ) -> dict[int, Load]:
    end = cfg.computed + hit
    out = {}
    for g, kind in enumerate(cfg.kinds):
        if groups is not None and g not in groups:
            continue
        tpb = cfg.gpu[g]
        num_gpu_blocks = enc.cdiv(end, tpb, f"gpu_blocks{g}")  # scheduler.py:1393
        first_fresh = enc.cdiv(cfg.computed, tpb, f"first_fresh{g}")  # scheduler.py:1401
        w = cfg.window[g]
        if kind == SW and w is not None:  # single_type_kv_cache_manager.py
            skipped = zmax(z3.IntVal(0), end - w + 1)
        elif kind == MAMBA:
            skipped = end - 1  # every Mamba block but the running one
        else:
            skipped = z3.IntVal(0)
        first_real = enc.floordiv(skipped, tpb, f"first_real{g}")  # scheduler.py:1406
        load_start = zmin(zmax(first_fresh, first_real), num_gpu_blocks)
        pending = num_gpu_blocks - load_start
        start_chunk = enc.floordiv(load_start, cfg.bpc, f"load_start{g}")  # :1425
        num_chunks = enc.cdiv(end, d.tpc[g], f"load_end{g}")  # scheduler.py:1423
        has = z3.And(hit > 0, pending > 0)
        out[g] = Load(z3.If(has, start_chunk, num_chunks), num_chunks, pending,
                      num_gpu_blocks * tpb)
    return out


def is_hit(st: Store, i: z3.ArithRef) -> z3.BoolRef:
    """The store answers HIT for chunk ``i``: counted and not pending."""
    return z3.And(st.stored(i), z3.Not(st.deferred(i)))


def ok_range(enc: Enc, cfg: Cfg, d: D, g: int, y: z3.ArithRef
             ) -> tuple[z3.ArithRef, z3.ArithRef]:
    """The chunks a hit ending at token ``y`` needs from group ``g``, as the lookup counts
    them: from the GPU hit's chunk (full attention), or the last
    ``load_window_size_in_chunks(y)`` (scheduler.py:117) of them (sliding window, Mamba),
    up to ``cdiv(y, tokens_per_chunk)``."""
    hi = enc.cdiv(y, d.tpc[g], f"ok_end{g}")
    window = load_window(enc, cfg, d, g, y)
    lo = d.start[g] if window is None else zmax(d.start[g], hi - window)
    return lo, hi


def chunks_ok(enc: Enc, cfg: Cfg, d: D, g: int, y: z3.ArithRef) -> z3.BoolRef:
    """``OK_g(y)``: every chunk of ``ok_range`` answers HIT."""
    lo, hi = ok_range(enc, cfg, d, g, y)
    return enc.forall(lo, hi, partial(is_hit, cfg.stores[g]))


def load_ok(enc: Enc, cfg: Cfg, d: D, g: int, y: z3.ArithRef) -> z3.BoolRef:
    """``OK_g(y)``: every chunk group ``g`` loads for a hit ending at token ``y`` (the
    hit ``y - num_computed_tokens``; none when it is not positive) answers HIT
    (model/invariants.py loads_stored_only)."""
    ld = load_plan(enc, cfg, d, y - cfg.computed, [g])[g]
    return enc.forall(ld.lo, ld.hi, partial(is_hit, cfg.stores[g]))


# --- the invariants the layered proof covers (model/invariants.py) -----------------------


def active(r: Result) -> z3.BoolRef:
    return z3.And(z3.Not(r.deferred), r.hit > 0)


def violates_no_partial_state(enc: Enc, cfg: Cfg, d: D, r: Result) -> z3.BoolRef:
    mamba = [g for g, k in enumerate(cfg.kinds) if k == MAMBA]
    loads = load_plan(enc, cfg, d, r.hit, mamba)
    end = cfg.computed + r.hit
    bad = [z3.And(cfg.prefix_caching,  # mode align or all: the hit restores a saved state
                  loads[g].pending > 0, loads[g].state != end) for g in mamba]
    return z3.And(active(r), z3.Or(bad)) if bad else z3.BoolVal(False)


def violates_leaves_last_token(enc: Enc, cfg: Cfg, d: D, r: Result) -> z3.BoolRef:
    return z3.And(d.any_windowed, active(r), cfg.computed + r.hit > cfg.prompt - 1)


def violates_loads_stored_only(enc: Enc, cfg: Cfg, d: D, r: Result) -> z3.BoolRef:
    end = cfg.computed + r.hit
    return z3.And(active(r), z3.Or([z3.Not(load_ok(enc, cfg, d, g, end))
                                    for g in range(len(cfg.kinds))]))


def violates_whole_blocks(enc: Enc, cfg: Cfg, d: D, r: Result) -> z3.BoolRef:
    return z3.And(active(r), z3.Or([r.hit < t for t in d.tpc]))


VIOLATIONS = {
    "no-partial-state": violates_no_partial_state,
    "loads-stored-only": violates_loads_stored_only,
    "leaves-last-token": violates_leaves_last_token,
    "whole-blocks": violates_whole_blocks,
}
