"""The convergence loop over any number of groups, with each lookup known only through
its lemmas: proved once for every layout.

Z3 cannot prove the whole loop at once when every size is symbolic (nonlinear integer
arithmetic and store facts together time out), and a layout may have any number of
groups. So a proof has three layers, each a set of small unsatisfiable queries:

1. Per-group lemmas on the exact encoding of one turn of *one* group of each kind, with
   every size symbolic (``proofs.layers``). They mention no other group, so they hold
   for every group of every layout. Their statements are ``proofs.lemmas.LEMMAS``.
2. The loop (this module) over ``N >= 1`` groups, the first ``F`` full attention (any
   ``0 <= F <= N``) and the rest sliding-window or Mamba groups in any order
   (scheduler.py:342 puts full attention first), each turn replaced by the facts of
   ``proofs.lemmas`` about uninterpreted per-group symbols: ``obs(g)``, ``cap(g)``,
   ``OK(g, y)`` ("group g's store confirms what a hit ending at y needs from it") and
   ``MUL(g, y)`` ("y is a multiple of group g's offloaded block size"). A turn
   invariant (``invariant``) over the loop's variables and the turn index ``k`` holds
   at the start, is kept by the turn of any group ``k``, and at a pass's end gives the
   next pass's start or, when the loop stops, the summary. Statements "for every group
   g < k" are proved for an arbitrary ``g`` (a fresh symbol), so the proof is for every
   number of groups, every order of the windowed groups and every number of passes.
3. The property from the summary, for one group of each kind and what the rest of the
   layout contributes (``proofs.layers.final_query``).

No query here has a quantifier: a hypothesis "for every g" is used at the groups the
query names (the turn's group, the fresh ``g``, the witnesses), which only weakens it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import z3

from proofs.assume import Together, Use, assume, shape
from proofs.encoding import NEXT_ALL as ALL
from proofs.encoding import NEXT_NONE as NONE
from proofs.encoding import NEXT_SW as SW
from proofs.lemmas import Turn, use


@dataclass(frozen=True)
class Loop:
    """The symbols of the abstract loop over an unknown layout."""

    n: z3.ArithRef  # number of groups
    f: z3.ArithRef  # groups [0, f) are full attention, [f, n) windowed (SW or Mamba)
    nc: z3.ArithRef  # num_computed_tokens
    m0: z3.ArithRef  # the initial max_hit_size_tokens
    obs: z3.FuncDeclRef
    cap: z3.FuncDeclRef
    ok: z3.FuncDeclRef
    mul: z3.FuncDeclRef
    candidate: z3.ArithRef | None  # maximality: num_computed_tokens + a valid larger hit
    quiet: bool  # the store defers nothing


@dataclass(frozen=True)
class St:
    """The loop's variables before the turn of group ``k`` (scheduler.py:482-580)."""

    k: z3.ArithRef
    m: z3.ArithRef  # max_hit_size_tokens
    num_hit: z3.ArithRef
    defer: z3.BoolRef
    looked: z3.BoolRef  # looked_up_sliding_window
    next: z3.ArithRef  # lookup_groups for the next pass
    halted: z3.BoolRef  # returned 0
    started: z3.BoolRef  # some turn ran
    ms: z3.ArithRef  # max_hit_size_tokens when this pass began
    wh: z3.ArithRef  # a group on whose block m ends (unless m is the initial max hit)
    wl: z3.ArithRef  # the group of the last turn (m - nc is at least its block)


def loop(maximal: bool, quiet: bool) -> Loop:
    i = z3.IntSort()
    return Loop(z3.Int("groups"), z3.Int("full_groups"), z3.Int("nc"), z3.Int("m0"),
                z3.Function("obs", i, i), z3.Function("cap", i, i),
                z3.Function("OK", i, i, z3.BoolSort()), z3.Function("MUL", i, i, z3.BoolSort()),
                z3.Int("candidate") if maximal else None, quiet)


def fresh(name: str) -> St:
    ints = z3.Ints(" ".join(f"{name}_{v}" for v in ("k", "m", "num_hit", "next", "ms", "wh",
                                                     "wl")))
    k, m, num_hit, nxt, ms, wh, wl = ints
    b = z3.Bools(" ".join(f"{name}_{v}" for v in ("defer", "looked", "halted", "started")))
    return St(k, m, num_hit, b[0], b[1], nxt, b[2], b[3], ms, wh, wl)


def full_attention(g: z3.ArithRef) -> z3.BoolRef:
    """Group ``g`` is one of the loop's full-attention groups (where lemma down is
    proved: ``proofs.assume.audit``)."""
    f = loop(False, False).f
    return z3.And(0 <= g, g < f)


def _in(lp: Loop, g: z3.ArithRef) -> z3.BoolRef:
    return z3.And(0 <= g, g < lp.n)


def group_facts(lp: Loop, g: z3.ArithRef, ys: list[z3.ArithRef]) -> list[Use | Together]:
    """What holds of every group, used at group ``g`` (and its OK facts at ``ys``): lemma
    uses, made facts by ``proofs.assume.assume``."""
    out: list[Use | Together] = [Together((use("block-positive", lp.obs(g)), use(
        "cap-on-block", lp.cap(g), lambda y: lp.mul(g, y))), _in(lp, g))]
    full = z3.And(0 <= g, g < lp.f)
    for a in ys:
        for b in ys:
            if a is not b:
                out.append(use("down", a, b, lp.ok(g, a), lp.ok(g, b), when=full, group=g))
    if lp.candidate is not None:
        out.append(use("valid-bounds", lp.candidate, lp.nc, lp.obs(g), lp.cap(g),
                       when=_in(lp, g)))
    return out


def turn(lp: Loop, s: St, tag: str) -> tuple[St, list[Use | Together]]:
    """The turn of group ``s.k`` (scheduler.py:486-580), its lookup known by its lemmas
    (their uses: ``proofs.assume.assume`` makes the facts)."""
    g = s.k
    deferred = z3.BoolVal(False) if lp.quiet else z3.Bool(f"{tag}_deferred")
    no_hit, cut = z3.Bool(f"{tag}_no_hit"), z3.Int(f"{tag}_cut")
    m1 = z3.If(s.m <= lp.cap(g), s.m, lp.cap(g))  # scheduler.py:504
    too_short = m1 - lp.nc < lp.obs(g)  # scheduler.py:507
    m2 = z3.If(deferred, m1, z3.If(m1 <= cut, m1, cut))  # scheduler.py:556
    t = Turn(m1, too_short, deferred, no_hit, cut, m2)
    uses: list[Use | Together] = [use("post", t, lp.ok(g, m2)), use("no-hit-not-deferred", t),
                                  use("cut-on-block", t.cut, lambda y: lp.mul(g, y))]
    if lp.candidate is not None:
        uses.append(use("keeps", t, lp.candidate))
    windowed = g >= lp.f
    defer = z3.Or(s.defer, deferred)  # scheduler.py:550
    new_hit = m2 - lp.nc  # scheduler.py:561
    shrank = new_hit < lp.obs(g)  # scheduler.py:562
    tightened = new_hit < s.num_hit  # scheduler.py:566
    next_all = z3.And(tightened, defer)  # scheduler.py:569
    next_sw = z3.And(tightened, z3.Not(defer), s.looked, s.next == NONE)  # :574
    after = St(
        k=s.k + 1, m=m2, num_hit=new_hit,
        defer=z3.If(next_all, z3.BoolVal(False), defer),
        looked=z3.Or(s.looked, windowed),  # scheduler.py:579
        next=z3.If(next_all, z3.IntVal(ALL), z3.If(next_sw, z3.IntVal(SW), s.next)),
        halted=z3.Or(too_short, no_hit, shrank),
        started=z3.BoolVal(True), ms=s.ms,
        wh=z3.If(m2 == s.m, s.wh, g), wl=g,
    )
    return after, uses


def invariant(lp: Loop, s: St, g: z3.ArithRef) -> z3.BoolRef:
    """Before the turn of group ``s.k`` of a pass; the "every group" parts at ``g``."""
    nc = lp.nc
    c = [
        z3.Not(s.halted), 0 <= s.k, s.k <= lp.n,
        z3.Implies(s.started, z3.And(s.num_hit == s.m - nc, s.m - nc >= 1,
                                     _in(lp, s.wl), s.m - nc >= lp.obs(s.wl))),
        z3.Implies(z3.Not(s.started), z3.And(s.k == 0, s.m == lp.m0, s.num_hit == 0,
                                             z3.Not(s.defer), s.next == NONE)),
        s.m <= s.ms, s.ms <= lp.m0,
        z3.Or(s.m == lp.m0, z3.And(_in(lp, s.wh), lp.mul(s.wh, s.m))),
        s.looked == (s.k > lp.f),
        z3.Or(s.next == NONE, s.next == ALL, s.next == SW),
        z3.Implies(s.next != NONE, s.m < s.ms),
        # every group looked up (in this pass or, full attention, before) caps m
        z3.Implies(z3.And(0 <= g, g < s.k), s.m <= lp.cap(g)),
        # full attention: confirmed at m unless a deferral (or a rerun of all) is pending
        z3.Implies(z3.And(0 <= g, g < s.k, g < lp.f, s.next != ALL, z3.Not(s.defer)),
                   lp.ok(g, s.m)),
        # windowed groups of this pass: confirmed at m while no rerun is scheduled
        z3.Implies(z3.And(lp.f <= g, g < s.k, s.next == NONE, z3.Not(s.defer)),
                   lp.ok(g, s.m)),
    ]
    if lp.candidate is not None:
        c.append(s.m >= lp.candidate)
    return z3.And(c)


def summary(lp: Loop, s: St, g: z3.ArithRef) -> z3.BoolRef:
    """When the loop ends with a hit (not stopped, not deferred), at the group ``g``:
    what ``proofs.layers.final_query`` starts from."""
    nc = lp.nc
    facts = z3.And(
        s.m - nc >= 1, s.m <= lp.m0,
        z3.Or(s.m == lp.m0, z3.And(_in(lp, s.wh), lp.mul(s.wh, s.m))),
        _in(lp, s.wl), s.m - nc >= lp.obs(s.wl),
        z3.Implies(_in(lp, g), z3.And(s.m <= lp.cap(g), lp.ok(g, s.m))),
    )
    done = z3.Implies(z3.And(z3.Not(s.halted), z3.Not(s.defer)), facts)
    if lp.candidate is None:
        return done
    return z3.And(done, z3.Not(s.halted), z3.Or(s.defer, s.m >= lp.candidate))


def obligations(maximal: bool, quiet: bool) -> list[tuple[str, list[z3.BoolRef]]]:
    """(name, query) pairs; each query must be unsatisfiable. Together: for every layout
    and every run of the loop, the loop stops (max_hit_size_tokens falls with every
    scheduled pass and stays above num_computed_tokens) and its end satisfies
    ``summary``."""
    lp = loop(maximal, quiet)
    g = z3.Int("any_group")  # a fresh group: what is shown at g holds for every group
    base = shape(lp.n >= 1, 0 <= lp.f, lp.f <= lp.n, lp.nc >= 0)
    if lp.candidate is not None:
        base += assume([use("valid-below-m0", lp.candidate, lp.m0)])
    init = St(z3.IntVal(0), lp.m0, z3.IntVal(0), z3.BoolVal(False), z3.BoolVal(False),
              z3.IntVal(NONE), z3.BoolVal(False), z3.BoolVal(False), lp.m0, z3.IntVal(0),
              z3.IntVal(0))
    s = fresh("s")
    after, uses = turn(lp, s, "t")
    m_terms = [s.m, after.m, s.ms]

    def used(*at: z3.ArithRef) -> list[Use | Together]:
        """The groups' "every group" facts, used at ``at``."""
        out: list[Use | Together] = []
        for x in at:
            out += group_facts(lp, x, m_terms)
        return out

    stop = (z3.Not(after.halted) if lp.candidate is not None  # a valid hit: never stops
            else z3.BoolVal(True))
    step_goal = z3.Or(z3.And(after.halted, stop), invariant(lp, after, g))
    out = [
        ("loop: the invariant holds at the start",
         base + shape(z3.Not(invariant(lp, init, g)))),
        ("loop: a turn of any group keeps the invariant",
         base + shape(invariant(lp, s, g), invariant(lp, s, s.k), invariant(lp, s, s.wh),
                      s.k < lp.n) + assume(uses + used(g, s.k, s.wh, s.wl))
         + shape(z3.Not(step_goal))),
    ]
    # a pass ends (k = n): the next pass starts, or the loop stops with the summary
    e = fresh("e")
    end = base + shape(invariant(lp, e, g), e.k == lp.n) + assume(used(g, e.wh, e.wl))
    rerun_all = replace(e, k=z3.IntVal(0), looked=z3.BoolVal(False), next=z3.IntVal(NONE),
                        ms=e.m)
    rerun_sw = replace(rerun_all, k=lp.f)
    out += [
        ("loop: the summary when a pass schedules nothing",
         end + shape(e.next == NONE, z3.Not(summary(lp, e, g)))),
        ("loop: a pass of every group follows one that schedules it",
         end + shape(e.next == ALL, z3.Not(invariant(lp, rerun_all, g)))),
        ("loop: a pass of the windowed groups follows one that schedules it",
         end + shape(e.next == SW, z3.Not(invariant(lp, rerun_sw, g)))),
    ]
    return out
