"""Pinning the 0.33.0 encoding (``proofs.encoding_chunked``) to ``model/*_chunked.py``: every
input fixed to a concrete scenario's values, so every term of the encoding simplifies to
a value (no solver call), and the result is compared with the model
(``tests/test_conformance_chunked.py``). ``mod`` names the encoding module, so that a test
can hand in a sabotaged copy and see the comparison fail. ``over``: the encoding's source
run over ints and bools (``"ints"``, the default: ``proofs.conformance_ints``, each term's
value computed directly) or its Z3 terms built and simplified (``"z3"``); the two give the
same answers (``tests/test_conformance_chunked.py`` checks it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

import z3

from model import layout_chunked
from model.layout import Refused
from model.lookup_chunked import HIT, HIT_PENDING, MISS, RETRY, answer
from model.scenario import Scenario
from model.semantics import get_semantics
from proofs import encoding_chunked as encoding_module
from proofs.conformance_ints import Z3_INTS, ints_copy

_CODES = {HIT: 0, HIT_PENDING: 1, RETRY: 2, MISS: 3}
MAX_PASSES = 64


def tails_on(s: Scenario, scope: Any = None) -> bool:
    """Whether ``s`` is in the encoding's partial-tail templates: full attention and one
    Mamba group with partial tails on, at most ``Scope.hashes_per_block`` hash blocks per
    block."""
    scope = scope or encoding_module.SCOPE
    if sorted(g.kind for g in s.groups) != ["full_attention", "mamba"]:
        return False
    try:
        layout = release_layout(s)
    except Refused:
        return False
    return (layout.supports_partial_tail
            and layout.partial_tail_block_size <= scope.hashes_per_block
            * layout.tokens_per_hash)


def release_layout(s: Scenario) -> layout_chunked.ChunkLayout:
    """What the start-up of ``s``'s release builds (its steps: ``tail_eagle``)."""
    sem = get_semantics(s.semantics)
    return layout_chunked.resolve_layout(s, sem.steps, sem.base_version)


def tails_shape(s: Scenario, scope: Any = None) -> bool:
    """Whether ``s`` has the partial-tail templates' layout apart from its EAGLE groups:
    full attention and one Mamba group that its release's start-up would give partial
    tails were EAGLE groups allowed them (0.33.0 allows them; 0.28.0-0.32.0 do not,
    ``ChunkSteps.tail_eagle``), at most ``Scope.hashes_per_block`` hash blocks per
    block. On these the start-up's EAGLE rule decides (``tails_gate``)."""
    scope = scope or encoding_module.SCOPE
    if sorted(g.kind for g in s.groups) != ["full_attention", "mamba"]:
        return False
    sem = get_semantics(s.semantics)
    try:
        layout = layout_chunked.resolve_layout(s, replace(sem.steps, tail_eagle=True),
                                               sem.base_version)
    except Refused:
        return False
    return (layout.supports_partial_tail
            and layout.partial_tail_block_size <= scope.hashes_per_block
            * layout.tokens_per_hash)


def tails_gate(s: Scenario, mod: ModuleType = encoding_module) -> tuple[bool, bool]:
    """For ``s`` of ``tails_shape``: whether the encoding's start-up turns partial tails on
    (``partial_tails_on`` with the release's steps, on ``s``'s values) and whether the
    release's start-up (``model/layout_chunked.py``) does."""
    assert tails_shape(s), "not of the partial-tail templates' shape"
    sem = get_semantics(s.semantics)
    scope, cfg, _ = concrete(s, mod, tails=True)
    on = _val(mod.partial_tails_on(chunk_enc(mod, scope), cfg, sem.steps))
    return bool(on), release_layout(s).supports_partial_tail


def mode_all(s: Scenario) -> bool:
    """Whether ``s``'s Mamba groups run cache mode "all" (0.28.0-0.31.0)."""
    return any(g.kind == "mamba" and g.mamba_cache_mode == "all" for g in s.groups)


def in_scope(s: Scenario) -> bool:
    """Whether ``s`` is a request the encoding covers: at most one group of each kind,
    factor 1, a new request; ``prefix_match_unit`` unset, or set with partial tails on
    (``tails_on``); partial-tail answers only then."""
    kinds = [g.kind for g in s.groups]
    tails = tails_on(s)
    return (all(kinds.count(k) <= 1 for k in set(kinds)) and s.block_size_factor == 1
            and (s.hash_block_size is None or tails) and s.output_tokens == 0
            and s.context_parallel_size == 1 and s.valid_hit is None
            and (tails or not any(g.stored_tails or g.pending_tails or g.deferred_tails
                                  for g in s.groups)))


@dataclass(frozen=True)
class Encoded:
    hit: int | None  # None: deferred
    passes: int
    tail: bool  # a partial-tail hit
    loads: dict[int, tuple[tuple[int, ...], int | None]]  # keys (end tokens), Mamba state
    violations: frozenset[str]
    order_holds: bool


def _numeral(e: z3.ExprRef) -> int | None:
    """``e``'s value where it folds to a number (every input fixed), else None."""
    if not z3.is_int_value(e):
        e = z3.simplify(e)
    return int(e.as_long()) if z3.is_int_value(e) else None


_FOLDING: dict[type, type] = {}


def chunk_enc(mod: ModuleType, scope: Any) -> Any:
    """``mod.ChunkEnc(scope)`` as it is for a copy over ints (``over_ints``), else
    ``mod.ChunkEnc(scope)`` whose bounded arithmetic (``floordiv``, ``cdiv``,
    ``round_down``, ``times``: sums of one ``If`` per candidate quotient) on numbers is the
    value that ``mod``'s own method gives on those numbers, simplified once and then
    remembered for every later scenario (the same block sizes and bounds recur). On a
    symbolic argument the method itself builds the term. Values, not rules: a sabotaged
    method in ``mod`` gives its own (wrong) values here."""
    if mod.z3 is Z3_INTS:
        return mod.ChunkEnc(scope)
    base = mod.ChunkEnc
    if base not in _FOLDING:
        memo: dict[tuple[Any, ...], z3.ArithRef] = {}

        def folded(name: str) -> Any:
            method = getattr(base, name)

            def run(self: Any, x: z3.ArithRef, d: z3.ArithRef, *bounds: int,
                    **named: int) -> z3.ArithRef:
                a, b = _numeral(x), _numeral(d)
                if a is None or b is None:
                    return method(self, x, d, *bounds, **named)
                key = (name, a, b, bounds, tuple(sorted(named.items())))
                if key not in memo:
                    memo[key] = z3.simplify(method(self, z3.IntVal(a), z3.IntVal(b), *bounds,
                                                   **named))
                    assert z3.is_int_value(memo[key]), f"{name} on numbers: not a number"
                return memo[key]

            return run

        _FOLDING[base] = type(f"Folding{base.__name__}", (base,), {
            name: folded(name) for name in ("floordiv", "cdiv", "round_down", "times")})
    return _FOLDING[base](scope)


def over_ints(mod: ModuleType, over: str) -> ModuleType:
    """``mod`` itself (``over="z3"``) or its copy over ints and bools (``"ints"``)."""
    if over not in ("ints", "z3"):
        raise ValueError(f"over: expected 'ints' or 'z3', got {over!r}")
    return ints_copy(mod) if over == "ints" else mod


def _val(e: Any) -> int | bool:
    if isinstance(e, bool | int):  # a copy over ints (``over_ints``) computes values
        return e
    v = z3.simplify(e)
    if z3.is_true(v) or z3.is_false(v):
        return bool(z3.is_true(v))
    assert z3.is_int_value(v), f"not a value: {v}"
    return int(v.as_long())


def concrete(s: Scenario, mod: ModuleType = encoding_module,
             tails: bool | None = None) -> tuple[Any, Any, Any]:
    """The encoding's (scope, config, lookup order) for ``s``; ``tails``: in the
    partial-tail templates (default: where its release's start-up turns them on)."""
    layout = release_layout(s)
    tpcs = [c.tokens_per_chunk for c in layout.groups]
    n = max(s.prompt_tokens // t for t in tpcs)
    tails = tails_on(s) if tails is None else tails
    tph = layout.tokens_per_hash
    # one block size with partial tails on: the partial-tail block (scheduler.py:597)
    hpb = s.groups[0].gpu_block_size // tph if tails else 0
    scope = mod.Scope(chunks=max(1, n), max_bpc=layout.blocks_per_chunk, passes=1,
                      hashes_per_block=max(2, hpb))
    iv, bv = mod.z3.IntVal, mod.z3.BoolVal  # Z3's, or a copy over ints' (over_ints)
    cfg = mod.ChunkConfig(
        kinds=tuple(g.kind for g in s.groups),
        gpu=tuple(iv(g.gpu_block_size) for g in s.groups),
        bpc=iv(layout.blocks_per_chunk),
        prompt=iv(s.num_tokens), computed=iv(s.num_computed_tokens),
        window=tuple(None if g.sliding_window is None else iv(g.sliding_window)
                     for g in s.groups),
        eagle=tuple(bv(g.eagle) for g in s.groups),
        prefix_caching=bv(s.enable_prefix_caching),
        skip_reading=bv(s.skip_reading_prefix_cache), in_flight=bv(s.in_flight_transfers),
        has_new_cap=bv(s.max_num_new_tokens is not None),
        new_cap=iv(s.max_num_new_tokens or 0),
        has_load_cap=bv(s.max_load_tokens is not None),
        load_cap=iv(s.max_load_tokens or 0),
        ans=tuple(tuple(iv(_CODES[answer(g, (i + 1) * t, t)]) for i in range(scope.chunks))
                  for g, t in zip(s.groups, tpcs, strict=True)),
        loading=tuple(tuple(bv(i in g.being_loaded) for i in range(scope.chunks))
                      for g in s.groups),
        tails=tails, tph=iv(tph if tails else 0), hpb=iv(hpb),
        tail_ans=tuple(tuple(tuple(iv(_CODES[answer(g, c * t + k * tph, t)])
                                   for k in range(1, scope.hashes_per_block))
                             for c in range(scope.chunks + 1))
                       for g, t in zip(s.groups, tpcs, strict=True)) if tails else (),
        mamba_all=bv(mode_all(s)),
    )
    return scope, cfg, layout.lookup_groups


def encode_scenario(s: Scenario, mod: ModuleType = encoding_module, over: str = "ints"
                    ) -> Encoded:
    """The encoding's answer for ``s`` (inputs fixed, the loop run until it ends)."""
    mod = over_ints(mod, over)
    sem = get_semantics(s.semantics)
    scope, cfg, order = concrete(s, mod)
    enc = chunk_enc(mod, scope)
    d = mod.derive(enc, cfg, order)
    assert _val(mod.startup(enc, cfg, sem.steps)), \
        "start-up constraints refuse a scenario model/ takes"
    st = mod.run_pass(enc, cfg, d, sem, mod.initial_state(enc, cfg, d, sem),
                      mod.z3.BoolVal(False))
    passes = 1
    while not _val(mod.finished(st)):
        assert passes < MAX_PASSES, "the loop does not end"
        st = mod.run_pass(enc, cfg, d, sem, st, st.next == mod.NEXT_SW)
        passes += 1
    r = mod.result_of(enc, cfg, d, st, sem.steps)
    deferred, hit = _val(r.deferred), _val(r.hit)
    loads: dict[int, tuple[tuple[int, ...], int | None]] = {}
    if not deferred and hit:
        for g, ld in mod.load_plan(enc, cfg, d, r.hit, r.tail, r.tail_q).items():
            lo, hi, tpc = _val(ld.lo), _val(ld.hi), _val(d.tpc[g])
            keys = tuple((c + 1) * tpc for c in range(lo, hi))
            if _val(ld.tail_key):
                keys += (int(_val(ld.tail_q * cfg.tph)),)
            state = _val(ld.state) if cfg.kinds[g] == mod.MAMBA and _val(ld.pending) else None
            loads[g] = (keys, state)
    violated = frozenset(name for name, f in mod.VIOLATIONS.items()
                         if _val(f(enc, cfg, d, r)))
    assert not _val(r.tail_left), "a partial-tail boundary is left past the scope's bound"
    return Encoded(None if deferred else int(hit), passes, bool(_val(r.tail)), loads,
                   violated, bool(_val(d.order_holds)))


def valid_hits(s: Scenario, mod: ModuleType = encoding_module, over: str = "ints"
               ) -> frozenset[int]:
    """The hits ``h`` (0 .. prompt) for which the encoding's ``valid_hit`` holds on ``s``
    (``model.maximality_chunked.is_valid_hit``'s twin; tests/test_maximality_chunked.py)."""
    mod = over_ints(mod, over)
    scope, cfg, order = concrete(s, mod)
    enc = chunk_enc(mod, scope)
    d = mod.derive(enc, cfg, order)
    if mod.z3 is Z3_INTS:
        return frozenset(h for h in range(0, s.num_tokens + 1)
                         if _val(mod.valid_hit(enc, cfg, d, h)))
    hit = z3.Int("hit")
    formula = z3.simplify(mod.valid_hit(enc, cfg, d, hit))  # built once, then each hit
    return frozenset(h for h in range(0, s.num_tokens + 1)
                     if _val(z3.substitute(formula, (hit, z3.IntVal(h)))))
