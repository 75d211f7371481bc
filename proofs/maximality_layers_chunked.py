"""Maximality on vLLM 0.33.0 over every layout 0.33.0 accepts (partial tails off): the
layered proof, as ``proofs.layers`` proves it for 0.24.0 (``keeps``, ``valid-bounds``,
``valid-below-m0``), on ``proofs.turn_chunked``'s exact unbounded turn and
``proofs.abstract_chunked``'s loop over any number of groups.

The valid hits are ``model/maximality_chunked.py``'s (11 rules). Each rule is about the
whole request or about one group, so a hit is valid exactly when the six *global* rules
hold and the five *group* rules hold for every group: ``GLOBAL_RULES`` and
``GROUP_RULES`` below restate them over ``proofs.turn_chunked``'s terms, rule for rule
(``tests/test_maximality_layers_chunked.py`` pins the conjunction to the model's
``is_valid_hit`` on generated scenarios of several groups of each kind, and dropping any
one rule is caught). The global rules read the layout only through what
``proofs.turn_chunked.Env`` carries (whether it has a windowed group, the Mamba align size).

The proof, for a valid hit ``h*`` ending at ``c = num_computed_tokens + h*``:

1. Lemmas on one exact turn of one group of each kind (the global rules and that
   group's rules assumed, every other group unknown): ``keeps`` (from a bound
   ``max_hit_size_tokens >= c`` the turn finds a hit and leaves the bound at or above
   ``c``), ``valid-covers-chunk`` (``c`` is at least one of the group's chunks past the
   GPU hit); and on the exact initial bound, ``valid-below-m0`` (``c`` is at most the
   initial ``max_hit_size_tokens``: this is where ``caps-reach-prompt`` is needed).
2. The loop (``obligations``): ``proofs.abstract_chunked``'s invariant with ``m >= c``
   added holds at the start, is kept by every turn of every group, and no turn stops the
   loop; a pass that schedules nothing ends with ``m >= c`` or a deferral.
3. The answer (``final_query``): read exactly from that end, the lookup defers or
   answers at least ``h*``.

The statement is the bounded check's (``proofs.check_chunked.violation``): the lookup, when
it answers, answers at least every valid hit. (That the answer is itself valid is not
part of it: its parts are the other theorems.) The nonlinear steps (a multiple of a
chunk or of the align size below a bound stays below its round-down) get instances of
lemma monotone, proved by its own query, at the query's quotients; a Mamba group's keeps
is asked in two cases, Mamba align on and off.

``no-eagle`` enters the lemmas (an EAGLE group's pop gives its trailing chunk away), and
``caps-reach-prompt`` the lemma ``valid-below-m0`` (a cap below the prompt still loses
the last-token margin of scheduler.py:876): both are shown necessary by the bounded
counterexamples (``proofs.check_chunked``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import z3

from model.evaluate import evaluate
from model.maximality_chunked import is_valid_hit
from model.scenario import parse_scenario
from model.semantics import Semantics
from proofs import (
    abstract_chunked,
    layers_chunked,
    lemmas_chunked,
    pinned_chunked,
    premises_chunked,
    turn_chunked,
)
from proofs import assume as _assume
from proofs.assume import assume, shape
from proofs.encoding import NEXT_ALL, NEXT_NONE, NEXT_SW, Enc, State, Store, fresh_state, zmax
from proofs.lemmas_chunked import Lemma
from proofs.lemmas_chunked import assumed as loop_assumes
from proofs.witness import BACKSTOP_MS, Witness
from releases.base import ChunkSteps

THEOREM = "maximality"
TAKES = ("no-eagle", "caps-reach-prompt", "mamba-mode-not-all")


def covers(thm: str, assumed: Sequence[str]) -> bool:
    """The layered maximality proof needs no-eagle (an EAGLE group's pop gives a chunk
    away); without it the bounded check finds the counterexample."""
    return thm == THEOREM and "no-eagle" in assumed and all(p in TAKES for p in assumed)


def precondition(name: str, enc: Enc, cfg: turn_chunked.Cfg, d: turn_chunked.D) -> z3.BoolRef:
    """``caps-reach-prompt`` over the turn's terms (the words: ``proofs.theorems``; the
    bounded twin: ``proofs.check_chunked.precondition``); the rest as the layered proof."""
    if name == "caps-reach-prompt":  # with windowed groups no cap ends before the prompt
        nc = cfg.computed
        return z3.Implies(
            d.any_windowed,
            z3.And(
                z3.Implies(cfg.has_new_cap, nc + cfg.new_cap >= cfg.prompt),
                z3.Implies(cfg.has_load_cap, nc + cfg.load_cap >= cfg.prompt),
            ),
        )
    return turn_chunked.precondition(name, enc, cfg, d)


# --- the valid hits, rule for rule (model/maximality_chunked.py), split per group ---------


def _multiple(enc: Enc, y: z3.ArithRef, x: z3.ArithRef, name: str) -> z3.BoolRef:
    return y == x * enc.floordiv(y, x, name)


def needed(
    enc: Enc, cfg: turn_chunked.Cfg, d: turn_chunked.D, g: int, y: z3.ArithRef
) -> tuple[z3.ArithRef, z3.ArithRef]:
    """The chunks [lo, hi) group ``g`` needs for a hit ending at ``y``
    (``model.maximality_chunked.needed_chunks``)."""
    stop = enc.cdiv(y, d.tpc[g], f"valid_stop{g}")  # scheduler.py:942, :1035
    window = turn_chunked.load_window(enc, cfg, d, g, y)  # scheduler.py:1027
    start = d.start[g]  # scheduler.py:943
    lo = start if window is None else zmax(start, stop - window)
    return lo, zmax(start, stop)


def _ready(st: Store, i: z3.ArithRef) -> z3.BoolRef:
    return z3.And(st.stored(i), z3.Not(st.deferred(i)))  # answered HIT


def _idle(st: Store, i: z3.ArithRef) -> z3.BoolRef:
    return z3.Not(st.loading(i))


GlobalRule = Callable[[Enc, turn_chunked.Cfg, turn_chunked.D, z3.ArithRef, z3.ArithRef], z3.BoolRef]
GroupRule = Callable[
    [Enc, turn_chunked.Cfg, turn_chunked.D, int, z3.ArithRef, z3.ArithRef], z3.BoolRef
]

# (enc, cfg, d, h, y): y = num_computed_tokens + h
GLOBAL_RULES: dict[str, GlobalRule] = {
    "not-in-flight": lambda enc, cfg, d, h, y: z3.Not(cfg.in_flight),  # scheduler.py:1247
    "reads-prefix-cache": lambda enc, cfg, d, h, y: z3.Not(cfg.skip_reading),  # :1258
    "new-tokens-cap": lambda enc, cfg, d, h, y: z3.Implies(
        cfg.has_new_cap, h <= cfg.new_cap
    ),  # :863
    "load-cap": lambda enc, cfg, d, h, y: z3.Implies(cfg.has_load_cap, h <= cfg.load_cap),  # :867
    "last-token": lambda enc, cfg, d, h, y: z3.Implies(d.any_windowed, y <= cfg.prompt - 1),  # :876
    "mamba-align": lambda enc, cfg, d, h, y: z3.Implies(  # scheduler.py:877
        d.align_on, _multiple(enc, y, d.align, "valid_in_align")
    ),
}
# (enc, cfg, d, g, h, y)
GROUP_RULES: dict[str, GroupRule] = {
    "load-cap-chunks": lambda enc, cfg, d, g, h, y: z3.Implies(  # scheduler.py:917
        cfg.has_load_cap, _multiple(enc, y, d.tpc[g], f"valid_chunks{g}")
    ),
    "keyed": lambda enc, cfg, d, g, h, y: y <= d.cap[g],  # scheduler.py:914
    "whole-chunk": lambda enc, cfg, d, g, h, y: h >= d.tpc[g],  # scheduler.py:921, :994
    "ready-hit": lambda enc, cfg, d, g, h, y: enc.forall(  # scheduler.py:788-838
        *needed(enc, cfg, d, g, y), partial(_ready, cfg.stores[g])
    ),
    "not-being-loaded": lambda enc, cfg, d, g, h, y: z3.Implies(  # :1022, :641
        cfg.prefix_caching, enc.forall(*needed(enc, cfg, d, g, y), partial(_idle, cfg.stores[g]))
    ),
}


def valid_global(enc: Enc, cfg: turn_chunked.Cfg, d: turn_chunked.D, h: z3.ArithRef) -> z3.BoolRef:
    y = cfg.computed + h
    return z3.And([r(enc, cfg, d, h, y) for r in GLOBAL_RULES.values()])


def valid_group(
    enc: Enc, cfg: turn_chunked.Cfg, d: turn_chunked.D, g: int, h: z3.ArithRef
) -> z3.BoolRef:
    y = cfg.computed + h
    return z3.And([r(enc, cfg, d, g, h, y) for r in GROUP_RULES.values()])


def valid_hit(
    enc: Enc,
    cfg: turn_chunked.Cfg,
    d: turn_chunked.D,
    h: z3.ArithRef,
    groups: Sequence[int] | None = None,
) -> z3.BoolRef:
    """The global rules and the group rules of ``groups`` (None: every group); over a
    whole layout, ``model.maximality_chunked.is_valid_hit``."""
    gs = range(len(cfg.kinds)) if groups is None else groups
    return z3.And(valid_global(enc, cfg, d, h), *[valid_group(enc, cfg, d, g, h) for g in gs])


# --- the facts: defined once, proved on the exact turn, assumed by the loop -------------


def _keeps(t: turn_chunked.Step, c: z3.ArithRef) -> z3.BoolRef:
    return z3.Implies(t.m >= c, z3.And(t.m1 >= c, t.m2 >= c, z3.Not(t.no_hit)))


def _covers_chunk(c: z3.ArithRef, nc: z3.ArithRef, tpc: z3.ArithRef) -> z3.BoolRef:
    return c - nc >= tpc


def _below_m0(c: z3.ArithRef, m0: z3.ArithRef) -> z3.BoolRef:
    return c <= m0


LEMMAS: dict[str, Lemma] = {
    lem.name: lem
    for lem in (
        Lemma(
            "keeps",
            "from max_hit_size_tokens at or above the end of a valid hit, a "
            "turn keeps it there (the caps, the fix's round-down, the lookup's cut) and "
            "finds a hit",
            _keeps,
        ),
        Lemma(
            "valid-covers-chunk",
            "a valid hit covers at least one chunk of every group",
            _covers_chunk,
        ),
        Lemma(
            "valid-below-m0",
            "a valid hit ends at or below the initial max_hit_size_tokens (scheduler.py:862-881)",
            _below_m0,
        ),
    )
}


WHERE = "proofs.maximality_layers_chunked"  # the key proofs.assume knows these by
_assume.register(WHERE, LEMMAS)


def fact(name: str, *args: Any) -> z3.BoolRef:
    return LEMMAS[name].fact(*args)


def use(name: str, *args: object, when: z3.BoolRef | None = None) -> _assume.Use:
    """The maximality loop's use of lemma ``name`` on ``args`` (``proofs.assume``)."""
    if name not in LEMMAS:
        raise KeyError(f"lemma {name!r}: not defined in {WHERE}")
    return _assume.Use(WHERE, name, args, when)


def assumed() -> tuple[str, ...]:
    """The maximality facts the loop assumes (besides ``proofs.lemmas_chunked.assumed``)."""
    return ("valid-covers-chunk", "valid-below-m0", "keeps")  # the costliest last


def _base_assumed(pre: Sequence[str]) -> tuple[str, ...]:
    """The preconditions the loop's other lemmas take: they hold without
    caps-reach-prompt (proved with fewer premises: stronger)."""
    return tuple(p for p in pre if p != "caps-reach-prompt")


# --- the lemma queries on the exact turn -------------------------------------------------


def _setup(
    pre: Sequence[str], kinds: Sequence[str], steps: ChunkSteps = turn_chunked.STOCK
) -> tuple[Enc, turn_chunked.Cfg, turn_chunked.D, list[z3.BoolRef]]:
    enc = Enc()
    cfg = turn_chunked.symbolic_config(kinds, steps=steps)  # ``mamba_all``: mode "all"
    d = turn_chunked.derive(enc, cfg, turn_chunked.symbolic_env())
    return (
        enc,
        cfg,
        d,
        [turn_chunked.startup(enc, cfg)] + [precondition(p, enc, cfg, d) for p in pre],
    )


def _finish(enc: Enc, cons: list[z3.BoolRef]) -> list[z3.BoolRef]:
    cons = cons + enc.cons
    return cons + enc.grounded(cons)


Pin = Callable[[turn_chunked.Cfg, State, turn_chunked.Step], list[z3.BoolRef]]


def lemma_query(
    sem: Semantics,
    pre: Sequence[str],
    name: str,
    kind: str,
    pin: Pin | None = None,
    negated: bool = True,
    align: bool | None = None,
) -> list[z3.BoolRef]:
    """A maximality fact about a group of ``kind`` of an unknown layout with a valid hit
    ``h*`` (the global rules and this group's rules), on the exact terms: one turn from
    any state (``keeps``), the hit itself (``valid-covers-chunk``) or the initial bound
    (``valid-below-m0``). ``pin``/``negated`` as ``proofs.layers_chunked.lemma_turn``;
    ``align`` (None: both) takes one case of whether the layout rounds to a Mamba align
    size (``proof_queries`` asks both for a Mamba group's keeps: under the round-down fix
    each is several times faster than the two at once)."""
    x = lemma_parts(sem, pre, name, kind, align)
    pinned = [] if pin is None or x.st is None or x.turn is None else pin(x.cfg, x.st, x.turn)
    return x.query(pinned, negated)


def lemma_parts(sem: Semantics, pre: Sequence[str], name: str, kind: str,
                align: bool | None = None) -> layers_chunked.LemmaParts:
    """The parts of ``lemma_query``'s query (``proofs.layers_chunked.LemmaParts``; a pin
    goes in at the turn, which ``keeps`` alone has)."""
    enc, cfg, d, premises = _setup(pre, (kind,), sem.steps)
    h = z3.Int("valid_hit")
    c = cfg.computed + h
    premises.append(valid_hit(enc, cfg, d, h, [0]))
    if align is not None:
        premises.append(d.align_on if align else z3.Not(d.align_on))
    ends: tuple[z3.ArithRef, ...] = ()
    st: State | None = None
    t: turn_chunked.Step | None = None
    if name == "keeps":
        st = fresh_state(enc, 1, "pre")
        _, t = turn_chunked.group_step(enc, cfg, d, sem, st, 0)
        # the run the lookup must find ends where the valid hit's chunks end: instantiate
        # the store facts there too (the scan's gap witnesses follow in a second round)
        lo, hi = needed(enc, cfg, d, 0, c)
        enc.hints.setdefault("0", []).extend([lo, hi - 1])
        claim = fact(name, t, c)
        ends = t.ends
    elif name == "valid-covers-chunk":
        claim = fact(name, c, cfg.computed, d.tpc[0])
    elif name == "valid-below-m0":
        claim = fact(name, c, turn_chunked.initial_max_hit(enc, cfg, d, sem.steps))
    else:
        raise ValueError(f"maximality lemma {name!r}: unknown")
    helpers = monotone_instances(enc, ends, d.tpc[0])
    return layers_chunked.LemmaParts(enc, tuple(premises), tuple(helpers), z3.Not(claim),
                                     tuple(enc.cons), cfg, st, t)


def _parts(sem: Semantics, pre: Sequence[str], name: str, kind: str,
           align: bool | None = None) -> layers_chunked.LemmaParts:
    """``lemma_parts``, kept for the rest of the ``prove`` call that runs
    (``proofs.layers_chunked.kept``): the premises audit and the proof share them."""
    return layers_chunked.kept(("maximality", sem.name, tuple(pre), name, kind, align),
                               partial(lemma_parts, sem, pre, name, kind, align))


def proof_lemma(sem: Semantics, pre: Sequence[str], name: str, kind: str,
                align: bool | None = None) -> list[z3.BoolRef]:
    """``lemma_query``'s query, from the parts this ``prove`` call built (``_parts``)."""
    return _parts(sem, pre, name, kind, align).query()


def _monotone(x: z3.ArithRef, y: z3.ArithRef, b: z3.ArithRef) -> z3.BoolRef:
    return z3.Implies(z3.And(b >= 1, x <= y), x * b <= y * b)


def monotone_lemma() -> list[z3.BoolRef]:
    """Lemma monotone (multiplication by a positive size keeps an order): its instances
    are the only arithmetic help the maximality lemmas get."""
    x, y, b = z3.Ints("x y b")
    return [z3.Not(_monotone(x, y, b))]


def monotone_instances(
    enc: Enc, extra: Sequence[z3.ArithRef] = (), unit: z3.ArithRef | None = None
) -> list[z3.BoolRef]:
    """Instances of lemma monotone at every pair (``x, y`` and ``x + 1, y``) of the
    query's quotients by the same divisor; ``extra`` terms (chunk counts) join those by
    ``unit`` (the group's tokens_per_chunk)."""
    by: dict[int, tuple[z3.ArithRef, dict[int, z3.ArithRef]]] = {}
    for (_, _, did), (_, d, q) in enc.memo.items():
        by.setdefault(did, (d, {}))[1][q.get_id()] = q
    if unit is not None:
        pool = by.setdefault(unit.get_id(), (unit, {}))[1]
        pool.update((x.get_id(), x) for x in extra)
    out = []
    for d, qs in by.values():
        for x in qs.values():
            for y in qs.values():
                if x.get_id() != y.get_id():
                    out += [_monotone(x, y, d), _monotone(x + 1, y, d)]
    return out


# --- the loop over any number of groups (proofs.abstract_chunked plus m >= c) -------------


def _in(lp: abstract_chunked.Loop, g: z3.ArithRef) -> z3.BoolRef:
    return z3.And(0 <= g, g < lp.n)


def obligations(reround: bool, rerun: bool) -> list[tuple[str, list[z3.BoolRef]]]:
    """(name, query) pairs, each unsatisfiable: with a valid hit ending at ``c``, the
    loop over any layout keeps ``max_hit_size_tokens >= c``, never returns 0, and a pass
    that schedules nothing ends with a deferral or ``m >= c``."""
    lp = abstract_chunked.loop(reround, rerun, False)
    c = z3.Int("valid_end")  # num_computed_tokens + a valid hit
    base = shape(lp.n >= 1, 0 <= lp.f, lp.f <= lp.n, lp.nc >= 0) + assume(
        [use("valid-below-m0", c, lp.m0)]
    )

    def inv(s: abstract_chunked.St) -> z3.BoolRef:
        return z3.And(abstract_chunked.invariant(lp, s), s.m >= c)

    init = abstract_chunked.St(
        z3.IntVal(0),
        lp.m0,
        z3.IntVal(0),
        z3.BoolVal(False),
        z3.BoolVal(False),
        z3.IntVal(NEXT_NONE),
        z3.BoolVal(False),
        z3.BoolVal(False),
        lp.m0,
        z3.BoolVal(False),
    )
    s = abstract_chunked.fresh("s")
    after, uses, t = abstract_chunked.turn(lp, s, "t")
    mine = [
        use("keeps", t, c),
        use("valid-covers-chunk", c, lp.nc, lp.tpc(s.k), when=_in(lp, s.k)),
    ]
    out = [
        ("maximality loop: the invariant holds at the start", base + shape(z3.Not(inv(init)))),
        (
            "maximality loop: a turn of any group keeps the invariant and goes on",
            base
            + shape(inv(s), s.k < lp.n)
            + assume(uses + abstract_chunked.group_facts(lp, s.k) + mine)
            + shape(z3.Not(z3.And(z3.Not(after.halted), inv(after)))),
        ),
    ]
    e = abstract_chunked.fresh("e")
    end = base + shape(inv(e), e.k == lp.n)
    rerun_all = replace(
        e,
        k=z3.IntVal(0),
        looked=z3.BoolVal(False),
        next=z3.IntVal(NEXT_NONE),
        ms=e.m,
        fresh_all=z3.BoolVal(True),
    )
    rerun_sw = replace(rerun_all, k=lp.f, fresh_all=z3.BoolVal(False))
    done = loop_done(e.halted, e.defer, e.m, c)
    out += [
        (
            "maximality loop: a pass that schedules nothing ends at or above the valid hit",
            end + shape(e.next == NEXT_NONE, z3.Not(done)),
        ),
        (
            "maximality loop: a pass of every group follows one that schedules it",
            end + shape(e.next == NEXT_ALL, z3.Not(inv(rerun_all))),
        ),
        (
            "maximality loop: a pass of the windowed groups follows one that schedules it",
            end + shape(e.next == NEXT_SW, z3.Not(inv(rerun_sw))),
        ),
    ]
    return out


def loop_done(halted: z3.BoolRef, defer: z3.BoolRef, m: z3.ArithRef, c: z3.ArithRef) -> z3.BoolRef:
    """What ``obligations`` prove of the loop's end, with a valid hit ending at ``c``: not
    stopped, and a deferral or max_hit_size_tokens ``m`` at or above ``c`` (the tail
    proof, ``proofs.tail_layers_chunked``, reads it from here)."""
    return z3.And(z3.Not(halted), z3.Or(defer, m >= c))


def violates(deferred: z3.BoolRef, hit: z3.ArithRef, h: z3.ArithRef) -> z3.BoolRef:
    """The theorem's violation (``proofs.check_chunked.violation``): the lookup answers,
    below a valid hit ``h``."""
    return z3.And(z3.Not(deferred), hit < h)


def final_query(
    pre: Sequence[str], kind: str, steps: ChunkSteps = turn_chunked.STOCK
) -> list[z3.BoolRef]:
    """The answer, read exactly (``turn_chunked.result_of``) from the loop's end as
    ``obligations`` leaves it: not stopped, with max_hit_size_tokens ``y`` and the loop's
    deferral flag ``defer``, ``defer`` or ``y >= c``. A valid hit reads the prefix cache
    and has no transfer in flight, so the lookup defers or answers at least ``h*``. The
    other groups' being-loaded delay is left out (it only defers more)."""
    enc, cfg, d, premises = _setup(pre, (kind,), steps)
    h = z3.Int("valid_hit")
    premises.append(valid_hit(enc, cfg, d, h, [0]))
    y, defer = z3.Int("final_max_hit"), z3.Bool("final_defer")
    st = State(
        y,
        y - cfg.computed,
        defer,
        z3.BoolVal(False),
        (z3.BoolVal(False),),
        z3.IntVal(NEXT_NONE),
        z3.BoolVal(False),
    )
    r = turn_chunked.result_of(enc, cfg, d, st, [0])
    return _finish(
        enc,
        premises
        + [loop_done(st.halted, defer, y, cfg.computed + h), violates(r.deferred, r.hit, h)],
    )


# lemmas proved for some groups only (proofs.assume.audit): down, full attention's
ONLY = {(lemmas_chunked.WHERE, "down"): abstract_chunked.full_attention}


def proof_queries(sem: Semantics, pre: Sequence[str]) -> list[layers_chunked.Query]:
    """Every query of the layered maximality proof: the loop's own lemmas
    (``proofs.lemmas_chunked``, without the align size), the maximality lemmas for every
    kind, the loop obligations and the answer."""
    loop = obligations(sem.reround_mamba, sem.reround_rerun)
    # every fact the loop assumes is one of the lemmas below (asked first: it is cheap)
    proved = {
        lemmas_chunked.WHERE: loop_assumes(sem.reround_mamba, sem.reround_rerun, False),
        WHERE: assumed(),
    }
    out: list[layers_chunked.Query] = [
        (pinned_chunked.NAME, partial(pinned_chunked.query, sem.name)),
        (_assume.AUDIT, partial(_assume.audit_query, loop, proved, ONLY)),
        ("lemma monotone: x <= y and b >= 1 give x * b <= y * b", monotone_lemma),
        # every lemma query below has premises a real request meets (asked before them:
        # a sabotage is named before any costly query)
        (PREMISES, partial(premises_query, sem, pre)),
    ]
    base = _base_assumed(pre)
    for name in loop_assumes(sem.reround_mamba, sem.reround_rerun, False):
        for kind in turn_chunked.KINDS:
            out.append(
                (
                    f"lemma {name} ({kind})",
                    partial(layers_chunked.proof_lemma, sem, base, name, kind),
                )
            )
    for name in assumed():
        for kind in turn_chunked.KINDS:
            if name != "keeps" or kind != turn_chunked.MAMBA:
                out.append((f"lemma {name} ({kind})", partial(proof_lemma, sem, pre, name, kind)))
                continue
            for align in (True, False):  # the two cases cover every layout
                out.append(
                    (
                        f"lemma {name} ({kind}; Mamba align {'on' if align else 'off'})",
                        partial(proof_lemma, sem, pre, name, kind, align=align),
                    )
                )
    for name, q in loop:
        out.append((name, partial(list, q)))
    out.append(
        ("maximality: the answer from the loop's end",
         partial(final_query, pre, turn_chunked.FA, sem.steps))
    )
    return out


# --- premise satisfiability of every lemma query (issue 23; proofs.premises_chunked) ------

PREMISES = f"maximality premises: {premises_chunked.WORDS}"


def lemma_premises(sem: Semantics, pre: Sequence[str], name: str, kind: str,
                   align: bool | None = None) -> str | None:
    """None when maximality lemma ``name``'s query about a group of ``kind`` (``align``:
    one case of a Mamba group's keeps) has satisfiable premises on the pinned request
    with its valid hit, replayed through model/; else why not. Align off is prefix
    caching off (no GPU hit, one block size: kv_cache_utils.py:878, :892)."""
    caching = align is not False
    p = premises_chunked.Pin(kind, True, caching, z3.Int("valid_hit"),
                             block=premises_chunked.block_for(kind, pre))
    cfg = turn_chunked.symbolic_config((kind,), steps=sem.steps)
    env = turn_chunked.symbolic_env()

    def pin(c: turn_chunked.Cfg, st: State, t: turn_chunked.Step) -> list[z3.BoolRef]:
        return premises_chunked.pins(p, c, env)

    def build() -> list[z3.BoolRef]:
        x = _parts(sem, pre, name, kind, align)
        if name != "keeps":  # the pin goes in at the turn; these queries have none
            return x.query(negated=False) + premises_chunked.pins(p, cfg, env)
        return x.query(premises_chunked.pins(p, x.cfg, env), negated=False)

    key = ("maximality", sem.reround_mamba, sem.reround_rerun, sem.steps, name, kind, align)
    return premises_chunked.holds(build, key, p, sem, cfg, env, assumed=pre)


def premises_query(sem: Semantics, pre: Sequence[str]) -> list[z3.BoolRef]:
    """Every lemma query of the layered maximality proof (the loop's own lemmas, with the
    preconditions they take, and the maximality lemmas for every kind and case) has
    satisfiable premises on the pinned request (``proofs.premises_chunked``)."""
    base = _base_assumed(pre)
    checks: list[premises_chunked.Check] = []
    for name in loop_assumes(sem.reround_mamba, sem.reround_rerun, False):
        for kind in turn_chunked.KINDS:
            checks.append((f"lemma {name} ({kind})",
                           partial(layers_chunked.lemma_premises, sem, base, name, kind)))
    for name in assumed():
        for kind in turn_chunked.KINDS:
            cases: tuple[bool | None, ...] = (
                (True, False) if name == "keeps" and kind == turn_chunked.MAMBA else (None,))
            for align in cases:
                checks.append((f"lemma {name} ({kind}; align {align})",
                               partial(lemma_premises, sem, pre, name, kind, align)))
    return premises_chunked.query(PREMISES, checks, sem)


def prove(sem: Semantics, assumed: Sequence[str], timeout_ms: int) -> tuple[str, str, float]:
    """('PROVED' | 'FAILED' | 'UNKNOWN', which query, seconds), as
    ``proofs.layers_chunked.prove``; a query whose text was proved before in this process
    is not asked again (the round-down fix's two forms give the same maximality lemmas:
    the completed form only adds the rerun, which the lemmas do not read)."""
    t0 = time.monotonic()
    deadline = t0 + timeout_ms / 1000
    for name, build in proof_queries(sem, assumed):
        failed = layers_chunked.ask_unsat(name, build(), t0, deadline)
        if failed is not None:
            return failed
    return "PROVED", "", time.monotonic() - t0


# --- the witness: the premises hold on a run with a non-zero valid hit and Mamba load ---


def _witness_query(
    sem: Semantics, pre: Sequence[str], kinds: tuple[str, ...], gpu: int, bpc: int, passes: int
) -> tuple[z3.Solver, turn_chunked.Cfg, z3.ArithRef, z3.ArithRef]:
    """The whole loop of exact turns on a small layout under the proof's premises, with
    a valid hit (every group's rules) above zero and a lookup hit that restores a Mamba
    state."""
    enc = Enc(bound=layers_chunked.WITNESS_CHUNKS + 2)
    cfg = replace(
        turn_chunked.symbolic_config(kinds, steps=sem.steps),  # the release's caps, modes
        gpu=tuple(z3.IntVal(gpu) for _ in kinds),
        bpc=z3.IntVal(bpc),
        window=tuple(None if k != turn_chunked.SW else z3.IntVal(2 * gpu * bpc) for k in kinds),
    )
    d = turn_chunked.derive(enc, cfg)
    cons = [turn_chunked.startup(enc, cfg)] + [precondition(p, enc, cfg, d) for p in pre]
    cons += [k <= layers_chunked.WITNESS_CHUNKS for k in d.keys]
    st = turn_chunked.run_loop(enc, cfg, d, sem, passes)
    r = turn_chunked.result_of(enc, cfg, d, st)
    h = z3.Int("valid_hit")
    mamba = [g for g, k in enumerate(kinds) if k == turn_chunked.MAMBA]
    loads = turn_chunked.load_plan(enc, cfg, d, r.hit, mamba)
    cons += [
        valid_hit(enc, cfg, d, h),
        h >= 1,
        turn_chunked.finished(st),
        turn_chunked.active(r),
        cfg.prefix_caching,
        z3.Or([loads[g].pending > 0 for g in mamba]),
    ]
    s = z3.Solver()
    s.add(*(cons + enc.cons))
    return s, cfg, r.hit, h


def witness(sem: Semantics, assumed: Sequence[str], timeout_ms: int = BACKSTOP_MS) -> Witness:
    """A run the proof's premises admit with a non-zero valid hit and a lookup hit that
    restores a Mamba state, replayed through model/ (same hit, a Mamba load, the valid
    hit valid there too)."""
    from proofs.witness import _solve_alone

    t0 = time.monotonic()
    deadline = t0 + timeout_ms / 1000
    for kinds in layers_chunked.WITNESS_LAYOUTS:
        for gpu, bpc, passes in ((1, 1, 1), (2, 1, 1), (1, 2, 1), (2, 2, 2)):
            left = int((deadline - time.monotonic()) * 1000)
            if left <= 0:
                break
            s, cfg, hit, h = _witness_query(sem, assumed, kinds, gpu, bpc, passes)
            m = _solve_alone(s, left)
            if m is None:
                continue
            scen = layers_chunked.scenario_of(m, cfg, sem, layers_chunked.WITNESS_CHUNKS + 2)
            z_hit = int(m.eval(hit, model_completion=True).as_long())
            valid = int(m.eval(h, model_completion=True).as_long())
            s_model = parse_scenario(scen)
            o = evaluate(s_model)
            layout = o.layout
            ok_valid = (
                o.refused is None
                and layout is not None
                and is_valid_hit(s_model, layout, valid)  # type: ignore[arg-type]
            )
            mamba_load = any(ld.blocks and ld.state_position is not None for ld in o.loads)
            mamba_load = mamba_load and ok_valid
            if o.refused or o.hit_tokens != z_hit or not mamba_load:
                return Witness(
                    False,
                    time.monotonic() - t0,
                    scen,
                    z_hit,
                    valid,
                    note=f"witness not reproduced by model/ (hit {o.hit_tokens}, "
                    f"Z3 {z_hit}; valid hit {valid} valid there: "
                    f"{ok_valid}; refused: {o.refused}): encoding bug",
                )
            w = Witness(True, time.monotonic() - t0, scen, z_hit, valid)
            return layers_chunked._tail_witness(THEOREM, sem, assumed, w, deadline)
    return Witness(
        False,
        time.monotonic() - t0,
        note="no run with a non-zero valid hit and a Mamba load satisfies the "
        "layered maximality proof's premises (small layouts): the proof "
        "may be vacuous",
    )
