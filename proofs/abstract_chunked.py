"""vLLM 0.33.0's convergence loop over any number of groups, each turn known only through
its lemmas (``proofs.lemmas_chunked``): the 0.33.0 twin of ``proofs.abstract``.

The loop (scheduler.py:893-1011) runs over ``N >= 1`` groups, the first ``F`` full
attention (``0 <= F <= N``) and the rest sliding-window or Mamba groups in any order
(:588-593), each with its own chunk size ``tpc(g)``; a pass runs every group or the
windowed ones. A turn of group ``g`` is the exact control flow of ``proofs.turn_chunked.
group_step`` (too short, no hit, shrank: return 0; the deferral, the reruns it schedules,
the completed fix's rerun) over symbols for what its lookup gives (``m1``, ``m2``,
deferred, no hit, lowered), tied by the lemmas' facts. Whether a group is EAGLE and its
eagle_verified flag only change what its lookup gives, and the lemmas hold for every
value of them, so the loop need not track them.

For loads-stored-only the loop also tracks ``OK(g, y)`` (lemmas post and down), as
``proofs.abstract`` does for 0.24.0: a full-attention group is OK at the bound while no
deferral and no pass of every group is pending, a windowed group of this pass while
nothing is pending (a later cut schedules a pass of the windowed groups); statements
about every group are shown at a fresh group ``g``.

The invariant holds at the start, is kept by the turn of any group ``k`` (proved for a
fresh ``g`` standing for every group), and at a pass's end gives the next pass's start
or, when nothing is scheduled, the summary: for every layout, every store and every
number of passes. Termination: a pass that schedules another has lowered
max_hit_size_tokens, which stays above num_computed_tokens while the loop runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import z3

from proofs.encoding import NEXT_ALL as ALL
from proofs.encoding import NEXT_NONE as NONE
from proofs.encoding import NEXT_SW as SW
from proofs.lemmas_chunked import assumed, fact
from proofs.turn_chunked import Step


@dataclass(frozen=True)
class Loop:
    n: z3.ArithRef  # number of groups
    f: z3.ArithRef  # groups [0, f) are full attention, [f, n) windowed
    nc: z3.ArithRef  # num_computed_tokens
    m0: z3.ArithRef  # the initial max_hit_size_tokens
    tpc: z3.FuncDeclRef  # tokens_per_chunk per group
    align_on: z3.BoolRef  # mamba_align_size is not None
    ma: z3.FuncDeclRef  # MA(y): y is a multiple of mamba_align_size
    mul: z3.FuncDeclRef  # MUL(g, y): y is a multiple of group g's tokens_per_chunk
    reround: bool  # finding 001's fix
    rerun: bool  # its completed form
    aligned: bool  # the invariant tracks the align size (no-partial-state)
    ok: z3.FuncDeclRef  # OK(g, y): the chunks group g needs for a hit ending at y are HITs
    stored: bool  # the invariant tracks OK (loads-stored-only)
    whole: bool  # the invariant tracks the hit against the chunks (whole-blocks)


@dataclass(frozen=True)
class St:
    """The loop's variables before the turn of group ``k``."""

    k: z3.ArithRef
    m: z3.ArithRef  # max_hit_size_tokens
    num_hit: z3.ArithRef
    defer: z3.BoolRef
    looked: z3.BoolRef  # looked_up_sliding_window
    next: z3.ArithRef  # lookup_groups for the next pass
    halted: z3.BoolRef  # returned 0
    started: z3.BoolRef  # some turn ran
    ms: z3.ArithRef  # max_hit_size_tokens when this pass began
    fresh_all: z3.BoolRef  # a pass of every group, before its first turn
    wl: z3.ArithRef = z3.IntVal(0)  # the group of the last turn


def loop(reround: bool, rerun: bool, aligned: bool, stored: bool = False,
         whole: bool = False) -> Loop:
    i = z3.IntSort()
    return Loop(z3.Int("groups"), z3.Int("full_groups"), z3.Int("nc"), z3.Int("m0"),
                z3.Function("tpc", i, i), z3.Bool("align_on"),
                z3.Function("MA", i, z3.BoolSort()), z3.Function("MUL", i, i, z3.BoolSort()),
                reround, rerun, aligned, z3.Function("OK", i, i, z3.BoolSort()), stored,
                whole)


def fresh(name: str) -> St:
    k, m, num_hit, nxt, ms = z3.Ints(" ".join(f"{name}_{v}" for v in
                                              ("k", "m", "num_hit", "next", "ms")))
    b = z3.Bools(" ".join(f"{name}_{v}" for v in ("defer", "looked", "halted", "started",
                                                  "fresh_all")))
    return St(k, m, num_hit, b[0], b[1], nxt, b[2], b[3], ms, b[4], z3.Int(f"{name}_wl"))


def _in(lp: Loop, g: z3.ArithRef) -> z3.BoolRef:
    return z3.And(0 <= g, g < lp.n)


def group_facts(lp: Loop, g: z3.ArithRef, ys: Sequence[z3.ArithRef] = ()
                ) -> list[z3.BoolRef]:
    """What holds of every group, used at group ``g`` (and, tracking OK, its OK facts at
    the bounds ``ys``)."""
    out = [z3.Implies(_in(lp, g), fact("chunk-positive", lp.tpc(g)))]
    if "down" in assumed(lp.reround, lp.rerun, lp.aligned, lp.stored):
        full = z3.And(0 <= g, g < lp.f)
        out += [z3.Implies(full, fact("down", a, b, lp.ok(g, a), lp.ok(g, b)))
                for a in ys for b in ys if a is not b]
    return out


def turn(lp: Loop, s: St, tag: str) -> tuple[St, list[z3.BoolRef], Step]:
    """The turn of group ``s.k`` (scheduler.py:898-1011), its lookup known by its
    lemmas."""
    g = s.k
    m1, m2 = z3.Int(f"{tag}_m1"), z3.Int(f"{tag}_m2")
    deferred, no_hit = z3.Bool(f"{tag}_deferred"), z3.Bool(f"{tag}_no_hit")
    windowed = g >= lp.f
    # the completed fix looks at a window's confirmed end (turn_chunked: windows only)
    lowered = z3.And(windowed, z3.Bool(f"{tag}_lowered")) if lp.rerun else z3.BoolVal(False)
    too_short = m1 - lp.nc < lp.tpc(g)  # scheduler.py:921
    t = Step(s.m, m1, too_short, deferred, no_hit, m2, lowered, z3.Bool(f"{tag}_cleared"))
    facts = []
    for name in assumed(lp.reround, lp.rerun, lp.aligned, lp.stored):
        if name in ("pre-below", "cut-below", "no-hit-not-deferred", "lowered-below"):
            facts.append(fact(name, t))
        elif name == "cut-on-chunk":
            facts.append(fact(name, t, lambda y: lp.mul(g, y)))
        elif name == "chunk-in-align":
            facts.append(fact(name, lp.align_on, lp.mul(g, m2), lp.ma(m2)))
        elif name == "align-after":
            facts.append(fact(name, t, lp.align_on, lp.ma(m2)))
        elif name == "post":
            facts.append(fact(name, t, lp.ok(g, m2)))
    nxt = s.next
    if lp.rerun:  # the completed fix: a window cut by the round-down is looked up again
        nxt = z3.If(z3.And(windowed, lowered, nxt == NONE), z3.IntVal(SW), nxt)
    defer = z3.Or(s.defer, deferred)  # scheduler.py:982
    new_hit = m2 - lp.nc  # scheduler.py:993
    shrank = new_hit < lp.tpc(g)  # scheduler.py:994
    tightened = new_hit < s.num_hit  # scheduler.py:998
    next_all = z3.And(tightened, defer)  # scheduler.py:1001
    next_sw = z3.And(tightened, z3.Not(defer), s.looked, nxt == NONE)  # :1009
    after = St(
        k=s.k + 1, m=m2, num_hit=new_hit,
        defer=z3.If(next_all, z3.BoolVal(False), defer),
        looked=z3.Or(s.looked, windowed),  # scheduler.py:1011
        next=z3.If(next_all, z3.IntVal(ALL), z3.If(next_sw, z3.IntVal(SW), nxt)),
        halted=z3.Or(too_short, no_hit, shrank), started=z3.BoolVal(True), ms=s.ms,
        fresh_all=z3.BoolVal(False), wl=g,
    )
    return after, facts, t


def _aligned(lp: Loop, s: St) -> z3.BoolRef:
    """Where max_hit_size_tokens is on the Mamba align size. Without the fix every turn
    keeps it there (given align-divides-blocks); with it, a deferred turn may leave it
    off, but then the lookup is deferred, or every group runs again and the first turn
    that is not deferred puts it back."""
    if not lp.aligned:
        return z3.BoolVal(True)
    if not lp.reround:
        return z3.Implies(lp.align_on, lp.ma(s.m))
    return z3.Implies(z3.And(lp.align_on, z3.Not(s.fresh_all)),
                      z3.Or(lp.ma(s.m), s.defer, s.next == ALL))


def _ok_now(lp: Loop, s: St, g: z3.ArithRef) -> z3.BoolRef:
    """Tracking OK, at group ``g``: a full-attention group looked up (in this pass or,
    in a pass of the windowed groups, before) is OK at max_hit_size_tokens unless a
    deferral or a pass of every group is pending; a windowed group of this pass, while
    nothing is pending."""
    if not lp.stored:
        return z3.BoolVal(True)
    return z3.And(
        z3.Implies(z3.And(0 <= g, g < s.k, g < lp.f, s.next != ALL, z3.Not(s.defer)),
                   lp.ok(g, s.m)),
        z3.Implies(z3.And(lp.f <= g, g < s.k, s.next == NONE, z3.Not(s.defer)),
                   lp.ok(g, s.m)))


def _whole_now(lp: Loop, s: St, g: z3.ArithRef) -> z3.BoolRef:
    """Tracking the hit against the chunks: it covers a chunk of the last turn's group
    and, while nothing is pending, of every windowed group of this pass (a later cut
    schedules a pass of the windowed groups; full attention is not looked up again)."""
    if not lp.whole:
        return z3.BoolVal(True)
    return z3.And(
        z3.Implies(s.started, z3.And(_in(lp, s.wl), s.m - lp.nc >= lp.tpc(s.wl))),
        z3.Implies(z3.And(lp.f <= g, g < s.k, s.next == NONE, z3.Not(s.defer)),
                   s.m - lp.nc >= lp.tpc(g)))


def invariant(lp: Loop, s: St, g: z3.ArithRef | None = None) -> z3.BoolRef:
    """Before the turn of group ``s.k`` of a pass; the "every group" part at ``g``."""
    nc = lp.nc
    at = z3.IntVal(-1) if g is None else g
    return z3.And(
        _ok_now(lp, s, at), _whole_now(lp, s, at),
        z3.Not(s.halted), 0 <= s.k, s.k <= lp.n,
        z3.Implies(s.started, z3.And(s.num_hit == s.m - nc, s.m - nc >= 1)),
        z3.Implies(z3.Not(s.started), z3.And(s.k == 0, s.m == lp.m0, s.num_hit == 0,
                                             z3.Not(s.defer), s.next == NONE,
                                             z3.Not(s.fresh_all))),
        z3.Implies(s.fresh_all, s.k == 0),
        s.m <= s.ms, s.ms <= lp.m0,
        s.looked == (s.k > lp.f),
        z3.Or(s.next == NONE, s.next == ALL, s.next == SW),
        z3.Implies(s.next != NONE, s.m < s.ms),
        _aligned(lp, s),
    )


def summary(lp: Loop, s: St, g: z3.ArithRef | None = None) -> z3.BoolRef:
    """When the loop ends with a hit (not stopped, not deferred): what the final step
    (``proofs.layers_chunked``) starts from (tracking OK: every group ``g`` is OK)."""
    facts = [s.m - lp.nc >= 1, s.m <= lp.m0]
    if lp.aligned:
        facts.append(z3.Implies(lp.align_on, lp.ma(s.m)))
    if lp.stored and g is not None:
        facts.append(z3.Implies(_in(lp, g), lp.ok(g, s.m)))
    if lp.whole:  # a chunk of the last turn's group and of every windowed group
        facts += [_in(lp, s.wl), s.m - lp.nc >= lp.tpc(s.wl)]
        if g is not None:
            facts.append(z3.Implies(z3.And(lp.f <= g, g < lp.n),
                                    s.m - lp.nc >= lp.tpc(g)))
    return z3.Implies(z3.And(z3.Not(s.halted), z3.Not(s.defer)), z3.And(facts))


def obligations(reround: bool, rerun: bool, aligned: bool, stored: bool = False,
                whole: bool = False) -> list[tuple[str, list[z3.BoolRef]]]:
    """(name, query) pairs; each query must be unsatisfiable. Together: for every layout
    and every run of the loop, the loop stops and its end satisfies ``summary``. What is
    shown at the fresh group ``g`` holds for every group."""
    lp = loop(reround, rerun, aligned, stored, whole)
    g = z3.Int("any_group")
    base = [lp.n >= 1, 0 <= lp.f, lp.f <= lp.n, lp.nc >= 0]
    if aligned:
        base.append(fact("initial-aligned", lp.align_on, lp.ma(lp.m0)))
    init = St(z3.IntVal(0), lp.m0, z3.IntVal(0), z3.BoolVal(False), z3.BoolVal(False),
              z3.IntVal(NONE), z3.BoolVal(False), z3.BoolVal(False), lp.m0,
              z3.BoolVal(False))
    s = fresh("s")
    after, facts, _ = turn(lp, s, "t")
    ys = (s.m, after.m)
    step_goal = z3.Or(after.halted, invariant(lp, after, g))
    out = [
        ("loop: the invariant holds at the start",
         base + [z3.Not(invariant(lp, init, g))]),
        ("loop: a turn of any group keeps the invariant",
         base + [invariant(lp, s, g), s.k < lp.n] + facts + group_facts(lp, s.k)
         + group_facts(lp, g, ys) + [z3.Not(step_goal)]),
    ]
    e = fresh("e")
    end = base + [invariant(lp, e, g), e.k == lp.n]
    rerun_all = replace(e, k=z3.IntVal(0), looked=z3.BoolVal(False), next=z3.IntVal(NONE),
                        ms=e.m, fresh_all=z3.BoolVal(True))
    rerun_sw = replace(rerun_all, k=lp.f, fresh_all=z3.BoolVal(False))
    out += [
        ("loop: the summary when a pass schedules nothing",
         end + [e.next == NONE, z3.Not(summary(lp, e, g))]),
        ("loop: a pass of every group follows one that schedules it",
         end + [e.next == ALL, z3.Not(invariant(lp, rerun_all, g))]),
        ("loop: a pass of the windowed groups follows one that schedules it",
         end + [e.next == SW, z3.Not(invariant(lp, rerun_sw, g))]),
    ]
    return out
