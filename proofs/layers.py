"""The per-group lemmas and the final step of a layered proof (see ``proofs.abstract``).

Each function returns queries that must be unsatisfiable, on the exact encoding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import z3

from model.semantics import Semantics
from proofs.encoding import (
    FA,
    Config,
    Derived,
    Enc,
    Result,
    derive,
    fresh_state,
    group_step,
    initial_max_hit,
    initial_max_hit_blocks,
    load_plan,
    ok_facts,
    ok_range,
    startup,
    symbolic_config,
)
from proofs.theorems import TEMPLATE, Context, precondition_formula, valid_hit

Query = tuple[str, Callable[[bool], list[z3.BoolRef]]]  # built with or without rich grounding


def _setup(sem: Semantics, assumed: Sequence[str], rich: bool = False
           ) -> tuple[Enc, Config, Derived, list[z3.BoolRef]]:
    enc = Enc(rich=rich)
    cfg = symbolic_config(TEMPLATE)
    d = derive(enc, cfg, sem)
    premises = [startup(cfg, sem)] + [precondition_formula(p, enc, cfg, d) for p in assumed]
    return enc, cfg, d, premises


def _finish(enc: Enc, cons: list[z3.BoolRef]) -> list[z3.BoolRef]:
    cons = cons + enc.cons
    return cons + enc.grounded(cons)


def lemma_post(sem: Semantics, assumed: Sequence[str], g: int, rich: bool = False
               ) -> list[z3.BoolRef]:
    """post(g): a turn that neither defers nor stops leaves OK_g at the new max hit."""
    enc, cfg, d, pre = _setup(sem, assumed, rich)
    st = fresh_state(enc, len(cfg.kinds), "pre")
    _, info = group_step(enc, cfg, d, st, g)
    out = info.outcome
    claim = ok_facts(enc, cfg, d, g, info.m2)
    return _finish(enc, pre + [z3.Not(info.too_short), z3.Not(out.deferred),
                               z3.Not(out.no_hit), z3.Not(claim)])


def lemma_keeps(sem: Semantics, assumed: Sequence[str], g: int, rich: bool = False
                ) -> list[z3.BoolRef]:
    """keeps(g): with a valid hit h* and max hit >= nc + h*, the turn finds a hit and
    does not cut below nc + h*."""
    enc, cfg, d, pre = _setup(sem, assumed, rich)
    h = z3.Int("larger_hit")
    ctx = Context(enc, cfg, d, sem, Result(z3.BoolVal(False), h), initial_max_hit(
        enc, cfg, d, sem))
    st = fresh_state(enc, len(cfg.kinds), "pre")
    _, info = group_step(enc, cfg, d, st, g)
    target = cfg.computed + h
    out = info.outcome
    # the run the lookup must find starts where the valid hit's load starts
    ld = load_plan(enc, cfg, d, h, [g])[g]
    enc.hints.setdefault(str(g), []).extend([ld.lo, ld.hi - 1])
    keeps = z3.And(z3.Not(out.no_hit), z3.Or(out.deferred, out.cut >= target))
    return _finish(enc, pre + [valid_hit(ctx, h), info.m1 >= target, z3.Not(keeps)])


def lemma_valid_bounds(sem: Semantics, assumed: Sequence[str], part: int, rich: bool = False
                       ) -> list[z3.BoolRef]:
    """valid-bounds: a valid hit h* covers a block of every group, stays within every
    group's keys and within the initial max hit (what the abstract loop assumes of it)."""
    enc, cfg, d, pre = _setup(sem, assumed, rich)
    h = z3.Int("larger_hit")
    m0 = initial_max_hit(enc, cfg, d, sem)
    ctx = Context(enc, cfg, d, sem, Result(z3.BoolVal(False), h), m0)
    end = cfg.computed + h
    # part 0: blocks and keys; 1: the initial max hit without rounding; 2: with rounding,
    # the hit ends where the Mamba group's loaded block ends (3 shows that is <= M0)
    aligned_end = end == enc.cdiv(end, d.align, "end_blocks") * d.align
    if part == 0:
        claim = [z3.Not(z3.And([h >= o for o in d.obs] + [end <= c for c in d.cap]))]
    elif part == 1:
        claim = [z3.Not(d.align_on), end > m0]
    elif part == 2:
        claim = [d.align_on, z3.Not(aligned_end)]
    else:  # arithmetic: a multiple of A below prompt - 1 is below round_down(prompt - 1, A)
        return _finish(enc, pre + [d.align_on, aligned_end, h > 0, end <= cfg.prompt - 1,
                                   end > m0])
    return _finish(enc, pre + [valid_hit(ctx, h)] + claim)


def lemma_down(sem: Semantics, assumed: Sequence[str], g: int, rich: bool = False
               ) -> list[z3.BoolRef]:
    """down(g): a full-attention group's OK facts are downward closed."""
    enc, cfg, d, pre = _setup(sem, assumed, rich)
    a, b = z3.Int("lower"), z3.Int("upper")
    return _finish(enc, pre + [a <= b, ok_facts(enc, cfg, d, g, b),
                               z3.Not(ok_facts(enc, cfg, d, g, a))])


def nested_division(ceiling: bool, rich: bool = False) -> list[z3.BoolRef]:
    """(x // a) // b == x // (a * b), or the same with cdiv, for a, b > 0: the identity
    the encoding's load plan states for its own terms."""
    x, a, b = z3.Ints("x a b")
    enc = Enc()
    div = enc.cdiv if ceiling else enc.floordiv
    return enc.cons + [a > 0, b > 0, div(div(x, a), b) != div(x, a * b)]


ARITHMETIC: list[Query] = [
    ("lemma (x // a) // b == x // (a * b)", partial(nested_division, False)),
    ("lemma cdiv(cdiv(x, a), b) == cdiv(x, a * b)", partial(nested_division, True)),
]


def lemma_queries(sem: Semantics, assumed: Sequence[str], maximal: bool) -> list[Query]:
    out: list[Query] = list(ARITHMETIC)
    if maximal:
        out += [(f"lemma valid-bounds ({part})", partial(lemma_valid_bounds, sem, assumed, part))
                for part in range(4)]
    for g, k in enumerate(TEMPLATE):
        out.append((f"lemma last-token-block(g{g})", partial(last_token_block, sem, assumed, g)))
        out.append((f"lemma post(g{g})", partial(lemma_post, sem, assumed, g)))
        if k == FA:
            out.append((f"lemma down(g{g})", partial(lemma_down, sem, assumed, g)))
        if maximal:
            out.append((f"lemma keeps(g{g})", partial(lemma_keeps, sem, assumed, g)))
    return out


def _ends_on_a_block(cfg: Config, d: Derived, end: z3.ArithRef, m0: z3.ArithRef
                     ) -> z3.BoolRef:
    return z3.Or([end == m0] + [end == d.obs[g] * z3.Int(f"final_blocks{g}")
                                for g in range(len(cfg.kinds))])


def _unrounded_m0_near_cap(d: Derived, end: z3.ArithRef, g: int) -> z3.BoolRef:
    return z3.Implies(z3.Not(d.align_on), z3.Or(end == d.cap[g], end == d.cap[g] - 1))


def last_token_block(sem: Semantics, assumed: Sequence[str], g: int, rich: bool = False
                     ) -> list[z3.BoolRef]:
    """Without rounding the initial max hit is prompt - 1; if it is within group g's
    keys, it is that group's last block end or one less."""
    enc, cfg, d, pre = _setup(sem, assumed)
    end = initial_max_hit(enc, cfg, d, sem)
    return _finish(enc, pre + [end <= d.cap[g], z3.Not(_unrounded_m0_near_cap(d, end, g))])


def alignment_queries(sem: Semantics, assumed: Sequence[str]) -> list[Query]:
    """The loop's final max hit is a multiple of the Mamba alignment size (when the
    semantics aligns): the cut that ``final_query(aligned=True)`` relies on. One query per
    way the summary says the hit may end, each with its multiple named."""
    def case(g: int | None, rich: bool) -> list[z3.BoolRef]:
        enc, cfg, d, pre = _setup(sem, assumed)
        m0, blocks = initial_max_hit_blocks(enc, cfg, d, sem)
        end = z3.Int("final_max_hit")
        if g is None:
            where = end == m0
            witness = blocks if blocks is not None else z3.Int("no_witness")
        else:
            where = end == d.obs[g] * z3.Int(f"final_blocks{g}")
            witness = z3.Int(f"blocks_per_align{g}") * z3.Int(f"final_blocks{g}")
        return _finish(enc, pre + [where, d.align_on, end != d.align * witness])

    cases: list[int | None] = [None, *range(len(TEMPLATE))]
    return [(f"the hit ends on a Mamba alignment boundary ({'M0' if g is None else f'g{g}'})",
             partial(case, g)) for g in cases]


def final_query(sem: Semantics, assumed: Sequence[str],
                violation: Callable[[Context, z3.ArithRef | None], z3.BoolRef],
                maximal: bool, uses_store: bool = True, aligned: bool = False,
                group: int | None = None, case: int | None = None,
                subcase: int | None = None, rich: bool = False,
                containment: bool | None = None) -> list[z3.BoolRef]:
    """The property at the loop's end, from the summary interpreted exactly.

    With ``aligned``, the summary's "the hit ends at the initial max hit or at a multiple
    of some group's block" is replaced by its consequence "the hit ends at a multiple of
    the Mamba alignment size", which ``alignment_query`` proves.

    ``containment`` (with ``group``) splits loads-stored-only in two: True asks, with no
    store at all, that the blocks the group loads lie within the blocks its lookup
    confirmed (``ok_range``); False assumes that and asks the property itself.
    """
    enc, cfg, d, pre = _setup(sem, assumed, rich)
    n = len(cfg.kinds)
    if subcase is not None and not subcase & 2 and d.windowed:
        m0: z3.ArithRef = cfg.prompt - 1  # no rounding in this case (scheduler.py:467)
    else:
        m0 = initial_max_hit(enc, cfg, d, sem)
    end = z3.Int("final_max_hit")
    nc = cfg.computed
    facts = [end - nc >= 1, end <= m0]
    facts += [end <= cap for cap in d.cap]
    if uses_store and not containment:
        facts += [ok_facts(enc, cfg, d, g, end) for g in range(n)
                  if group is None or g == group]
    if case is not None:
        facts.append(end == m0 if case < 0 else end == d.obs[case] * z3.Int("final_blocks"))
        if case < 0:  # lemma last-token-block: a consequence, stated for the solver
            facts += [_unrounded_m0_near_cap(d, end, g) for g in range(n)]
    elif aligned:
        facts.append(z3.Implies(d.align_on, end == d.align * z3.Int("end_in_align_blocks")))
    else:
        facts.append(_ends_on_a_block(cfg, d, end, m0))
    facts.append(z3.Or([end - nc >= o for o in d.obs]))
    hit: z3.ArithRef = end - nc
    if sem.align_at == "num_hit":  # alt-round-num-hit rounds after the loop
        hit = z3.If(d.align_on, d.align * enc.floordiv(hit, d.align, "rounded_hit"), hit)
    deferred: z3.BoolRef = z3.BoolVal(False)
    if sem.skip_reading_check:
        hit = z3.If(cfg.skip_reading, z3.IntVal(0), hit)
    if sem.in_flight_check:
        deferred = cfg.in_flight
    if subcase is not None:  # block_size_factor 1 or more, rounding on or off
        facts.append(cfg.factor == 1 if subcase & 1 else cfg.factor > 1)
        facts.append(d.align_on if subcase & 2 else z3.Not(d.align_on))
    ctx = Context(enc, cfg, d, sem, Result(deferred, hit), m0, group)
    if containment is not None:
        assert group is not None
        load = load_plan(enc, cfg, d, hit, [group])[group]
        ok_lo, ok_hi = ok_range(enc, d, group, end)
        within = z3.Or(load.lo >= load.hi, z3.And(ok_lo <= load.lo, load.hi <= ok_hi))
        active = z3.And(z3.Not(deferred), hit > 0)
        if containment:
            return _finish(enc, pre + facts + [active, z3.Not(within)])
        facts.append(within)
    candidate = None
    if maximal:
        candidate = z3.Int("larger_hit")
        facts += [valid_hit(ctx, candidate), end >= nc + candidate]
    return _finish(enc, pre + facts + [violation(ctx, candidate)])
