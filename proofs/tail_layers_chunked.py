"""The layered proof of vLLM 0.33.0's partial-tail phase (scheduler.py:1077-1153) over
every layout 0.33.0 accepts with partial tails on: each step exact and unbounded
(``proofs.tail_chunked``), the loops around them proved by induction, the property from
their summaries. With ``proofs.layers_chunked`` (the complete chunks, partial tails on or
off) it covers every layout 0.33.0 accepts, partial tails on or off.

Layers:

* Per-group facts (``LEMMAS``), each defined once: the abstract loops assume ``fact``
  on their symbols; the lemma queries ask for its negation on the exact turn of one
  group of each kind in an unknown layout (sizes, store, flags all symbolic).
* The two bridge loops over any number of groups (``bridge_obligations``): the bridge
  can only miss when it is looked at (scheduler.py:1116), so a miss only lowers
  max_boundary (:1130).
* The descending search over any number of boundaries (``scan_obligations``): an
  inductive invariant over the exact ``boundary_turn`` whatever each boundary's keys
  answer (a symbolic number of tries, not unrolled): the boundary chosen is above the
  complete boundary and at most max_boundary; a ranking (the tokens left above the
  complete boundary, down by tokens_per_hash >= 1 per try) ends it.
* The answer (``final_query``): a partial-tail hit keeps the property by the summaries;
  without one the answer is the complete chunks' (or a deferral), whose violations are
  the tails-off answer's, which ``proofs.layers_chunked`` proves free of them for every
  layout its start-up accepts (which the layouts with partial tails on are:
  ``layouts_query``).
* whole-blocks (``tail_chunked.violates_whole_blocks``): a partial-tail hit ends inside a
  block by design, so only the complete-chunk answer counts, which is the tails-off
  answer (above); every layout with partial tails on keeps full-chunk-within-windowed
  (every chunk is one block: ``layouts_query``, ``TAILS_KEEP``).
* maximality (``maximality_query``): the complete-chunk loop ends as the tails-off
  maximality proof's obligations leave it (``maximality_layers_chunked.loop_done``: a
  deferral or max_hit_size_tokens at or above a valid hit's end), so the complete hit the
  tail phase keeps is at least every valid hit, and a partial-tail hit ends past the
  complete boundary (the search's summary), so it is longer still; the tail phase never
  turns a non-deferred complete answer into a shorter one. no-eagle and
  caps-reach-prompt are not kept by every layout with partial tails on (EAGLE groups
  are allowed): ``layouts_query`` takes them as premises, as the theorem does.
* What other modules prove is read from their definitions, not restated: the
  complete-chunk loop's end is ``proofs.abstract_chunked.summary`` (``loop_end``), the
  tails-off loads-stored-only is ``turn_chunked``'s violation negated (``load_ok``), and
  confirmed-hits holds at the start and is kept by another group's exact turn
  (``confirmed_hits_kept_query``: ``tail_chunked.hit_ends_after`` writes only its own
  group's lookup_hit_end_chunk_idx).

The tail phase is the same in the three 0.33.0 semantics (the fixes change only the
complete chunks), so its queries are asked once per process.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import z3

from model.evaluate import evaluate
from model.scenario import parse_scenario
from model.semantics import Semantics
from proofs import abstract_chunked, memo, premises_chunked, tail_chunked, turn_chunked
from proofs import assume as _assume
from proofs.assume import assume, shape
from proofs.encoding import Enc, State, Store, fresh_state
from proofs.encoding_chunked import LAYERED_GPU_HIT_WORDS, UNMODELLED_WORDS
from proofs.witness import BACKSTOP_MS, Witness
from releases.base import ChunkSteps

STOCK = turn_chunked.STOCK  # vLLM 0.33.0's steps (0.32.0 overrides the partial tail's)

COVERED = (
    "no-partial-state",
    "leaves-last-token",
    "termination",
    "loads-stored-only",
    "whole-blocks",
    "maximality",
)
# the preconditions every layout with partial tails on keeps (``layouts_query`` proves
# it); the others (no-eagle, caps-reach-prompt) the tail proof takes as premises
TAILS_KEEP = (
    "align-divides-blocks",
    "same-block-size",
    "full-chunk-within-windowed",
    "mamba-mode-not-all",
)


def scope_words(sem: Semantics) -> str:
    """What the layered proof covers on ``sem`` (the tails-off proof with this one): its
    release's layouts, and its partial tail where that differs from 0.33.0's."""
    steps = sem.steps
    eagle = (
        "EAGLE on any group"
        if steps.tail_eagle
        else f"EAGLE on any group (one turns partial tails off in {sem.base_version})"
    )
    tails = "any number of full-attention and Mamba groups"
    if not steps.tail_eagle:
        tails += ", none EAGLE"
    if steps.tail_search is not STOCK.tail_search:
        tails += f", the search end of releases.steps.{steps.tail_search.__name__}"
    if not steps.tail_bridge:
        tails += ", no bridge chunk looked up"
    return (
        f"every layout {sem.base_version} accepts, partial tails on or off (any number of "
        "groups of each kind, each with its own block size; any blocks_per_chunk, "
        f"window, prompt and caps; {eagle}; with partial tails "
        f"on: {tails}, any block size and "
        f"prefix_match_unit, any number of boundaries tried); {LAYERED_GPU_HIT_WORDS}; "
        f"{UNMODELLED_WORDS}"
    )


Query = tuple[str, Callable[[], list[z3.BoolRef]]]


@dataclass(frozen=True)
class Lemma:
    name: str
    words: str
    fact: Callable[..., z3.BoolRef]


def _keeps_missed(before: tail_chunked.Bridge, after: tail_chunked.Bridge) -> z3.BoolRef:
    return z3.And(after.missed == before.missed, z3.Implies(before.pending, after.pending))


def _miss_checked(
    before: tail_chunked.Bridge, after: tail_chunked.Bridge, check: z3.BoolRef
) -> z3.BoolRef:
    return z3.Implies(after.missed, z3.Or(before.missed, check))


def _key_ready(
    before: tail_chunked.Keys | tail_chunked.Bridge,
    after: tail_chunked.Keys | tail_chunked.Bridge,
    ok: z3.BoolRef,
) -> z3.BoolRef:
    """After the turn nothing missed or pends only if nothing did before and this
    group's key answered HIT (``ok``)."""
    return z3.Implies(
        z3.And(z3.Not(after.missed), z3.Not(after.pending)),
        z3.And(z3.Not(before.missed), z3.Not(before.pending), ok),
    )


def _hit_chunk(st: Store, i: z3.ArithRef) -> z3.BoolRef:
    return z3.And(st.stored(i), z3.Not(st.deferred(i)))


def _confirmed_hits(
    start: z3.ArithRef, end: z3.ArithRef, i: z3.ArithRef, hit: z3.BoolRef
) -> z3.BoolRef:
    """Chunk ``i`` between the group's first chunk past the GPU hit and its
    lookup_hit_end_chunk_idx is a HIT."""
    return z3.Implies(z3.And(start <= i, i < end), hit)


LEMMAS: dict[str, Lemma] = {
    lem.name: lem
    for lem in (
        Lemma(
            "bridge-scan-keeps-missed",
            "a group's turn of the first bridge loop (scheduler.py:1117-1126) looks nothing up",
            _keeps_missed,
        ),
        Lemma(
            "bridge-miss-checked",
            "a group's bridge lookup (:1127-1132) misses only when the bridge is looked at (:1116)",
            _miss_checked,
        ),
        Lemma(
            "key-ready",
            "a group's turn at a boundary (:1179-1187) leaves the boundary "
            "ready only if it was and the group's key answered HIT",
            _key_ready,
        ),
        Lemma(
            "bridge-ready",
            "a group's bridge lookup leaves the bridge ready (no miss, "
            "nothing pending) only if it was and, when it looks the key up, the key "
            "answered HIT",
            _key_ready,
        ),
        Lemma(
            "confirmed-hits",
            "a full-attention group's turn of the complete-chunk loop "
            "(:957) keeps every chunk it confirms (up to lookup_hit_end_chunk_idx) a "
            "HIT",
            _confirmed_hits,
        ),
    )
}
STORED_ONLY = ("bridge-ready", "confirmed-hits")  # asked for loads-stored-only only


WHERE = "proofs.tail_layers_chunked"  # the key proofs.assume knows these definitions by
_assume.register(WHERE, LEMMAS)


def fact(name: str, *args: object) -> z3.BoolRef:
    return LEMMAS[name].fact(*args)


def use(name: str, *args: object) -> _assume.Use:
    """A loop's use of lemma ``name`` on ``args`` (``proofs.assume``)."""
    if name not in LEMMAS:
        raise KeyError(f"lemma {name!r}: not defined in {WHERE}")
    return _assume.Use(WHERE, name, args)


def _finish(enc: Enc, cons: list[z3.BoolRef]) -> list[z3.BoolRef]:
    cons = cons + enc.cons
    return cons + enc.grounded(cons)


def _fresh_bridge(name: str) -> tail_chunked.Bridge:
    return tail_chunked.Bridge(z3.Bool(f"{name}_missed"), z3.Bool(f"{name}_pending"))


def _setup(
    kinds: Sequence[str], steps: ChunkSteps = STOCK
) -> tuple[Enc, tail_chunked.TailCfg, list[z3.BoolRef]]:
    enc = Enc()
    tc = tail_chunked.symbolic_tail_config(kinds, steps=steps)
    return enc, tc, [tail_chunked.startup(enc, tc, whole=False)]


def _prologue(
    enc: Enc, tc: tail_chunked.TailCfg
) -> tuple[tail_chunked.Prologue, z3.ArithRef, list[z3.BoolRef]]:
    ch = z3.Int("complete_hit")
    return tail_chunked.prologue(enc, tc, ch), ch, [ch >= 0]


def lemma_query(
    name: str,
    kind: str,
    negated: bool = True,
    sem: Semantics | None = None,
    steps: ChunkSteps = STOCK,
) -> list[z3.BoolRef]:
    """``name`` on the exact turn of one group of ``kind`` in an unknown layout, from any
    state (``negated`` False: the premises alone, to see them hold); confirmed-hits on
    the complete-chunk turn of ``sem``."""
    enc, tc, premises = _setup((kind,), steps)
    pro, _, more = _prologue(enc, tc)
    before = _fresh_bridge("before")
    if name == "confirmed-hits":
        assert sem is not None
        c = tc.base
        d, env = _env(enc, tc)
        st = fresh_state(enc, 1, "pre")
        st = State(
            st.m, st.num_hit, st.defer, st.looked, st.verified, st.next, z3.Bool("pre_halted")
        )
        _, t = turn_chunked.group_step(enc, c, d, sem, st, 0)
        old, i = z3.Int("hit_end_before"), z3.Int("chunk")
        new = tail_chunked.hit_end_after(c, d, 0, st, t, old)
        hit = _hit_chunk(c.stores[0], i)
        more += env + [fact(name, d.start[0], old, i, hit)]
        claim = fact(name, d.start[0], new, i, hit)
    elif name == "bridge-ready":
        after = tail_chunked.bridge_lookup_turn(tc, pro, 0, before)
        ok = (
            z3.BoolVal(True)
            if kind == tail_chunked.MAMBA
            else z3.Implies(
                z3.And(pro.check, tail_chunked.unconfirmed(tc, pro, 0)),
                tail_chunked.chunk_answer(tc, 0, pro.bridge_idx) == tail_chunked.HIT,
            )
        )
        claim = fact(name, before, after, ok)
    elif name == "key-ready":
        b = z3.Int("boundary")
        keys = tail_chunked.Keys(before.missed, before.pending)
        ok = tail_chunked.key_answer(enc, tc, 0, b) == tail_chunked.HIT
        claim = fact(name, keys, tail_chunked.key_turn(enc, tc, 0, b, keys), ok)
        more.append(b >= 1)
    elif name == "bridge-scan-keeps-missed":
        claim = fact(name, before, tail_chunked.bridge_scan_turn(tc, pro, 0, before))
    else:
        claim = fact(name, before, tail_chunked.bridge_lookup_turn(tc, pro, 0, before), pro.check)
    return _finish(enc, premises + more + ([z3.Not(claim)] if negated else []))


def confirmed_hits_kept_query(
    other: str, sem: Semantics | None, negated: bool = True, steps: ChunkSteps = STOCK
) -> list[z3.BoolRef]:
    """confirmed-hits of a full-attention group (group 0) holds at the loop's start
    (:887 sets every lookup_hit_end_chunk_idx to 0) and is kept by the exact turn of
    another group (group 1, of kind ``other``): ``tail_chunked.hit_ends_after``, which the
    composed loop uses, changes only the turn's own group's entry."""
    assert sem is not None
    enc, tc, premises = _setup((tail_chunked.FA, other), steps)
    c = tc.base
    d, env = _env(enc, tc)
    st = fresh_state(enc, 2, "pre")
    st = replace(st, halted=z3.Bool("pre_halted"))
    _, t = turn_chunked.group_step(enc, c, d, sem, st, 1)
    old = (z3.Int("hit_end_before0"), z3.Int("hit_end_before1"))
    new = tail_chunked.hit_ends_after(c, d, 1, st, t, old)
    i = z3.Int("chunk")
    hit = _hit_chunk(c.stores[0], i)
    start = fact("confirmed-hits", d.start[0], z3.IntVal(0), i, hit)
    kept = z3.Implies(
        fact("confirmed-hits", d.start[0], old[0], i, hit),
        fact("confirmed-hits", d.start[0], new[0], i, hit),
    )
    claim = z3.And(start, kept)
    return _finish(enc, premises + env + ([z3.Not(claim)] if negated else []))


# --- the bridge loops over any number of groups -----------------------------------------


def bridge_obligations(stored: bool = False) -> list[tuple[str, list[z3.BoolRef]]]:
    """The two bridge loops over ``n >= 1`` groups (any kinds, any order), each turn known
    by its lemma; invariant: a miss happened only if the bridge was looked at."""
    n, k, check = z3.Int("bridge_groups"), z3.Int("bridge_k"), z3.Bool("bridge_check")
    s, t = _fresh_bridge("s"), _fresh_bridge("t")

    def inv(st: tail_chunked.Bridge) -> z3.BoolRef:
        return z3.Implies(st.missed, check)

    base = shape(n >= 1, 0 <= k, k < n)
    out = [
        (
            "bridge loops: the invariant holds at the start",
            shape(z3.Not(inv(tail_chunked.NO_BRIDGE))),
        ),
        (
            "bridge loops: a scan turn of any group keeps it",
            base
            + shape(inv(s))
            + assume([use("bridge-scan-keeps-missed", s, t)])
            + shape(z3.Not(inv(t))),
        ),
        (
            "bridge loops: a lookup turn of any group keeps it",
            base
            + shape(inv(s))
            + assume([use("bridge-miss-checked", s, t, check)])
            + shape(z3.Not(inv(t))),
        ),
    ]
    if not stored:
        return out
    # for any group h: the bridge ready at the end means h's looked-up key was a HIT
    h, ok = z3.Int("bridge_any_group"), z3.Function("bridge_ok", z3.IntSort(), z3.BoolSort())

    def ready(st: tail_chunked.Bridge, done: z3.ArithRef) -> z3.BoolRef:
        return z3.Implies(
            z3.And(z3.Not(st.missed), z3.Not(st.pending)),
            z3.Implies(z3.And(0 <= h, h < done), ok(h)),
        )

    return out + [
        (
            "bridge loops: the readiness holds when the lookups start (any scan state)",
            shape(z3.Not(ready(s, z3.IntVal(0)))),
        ),
        (
            "bridge loops: a lookup turn of any group keeps the readiness",
            base
            + shape(ready(s, k))
            + assume([use("bridge-ready", s, t, ok(k))])
            + shape(z3.Not(ready(t, k + 1))),
        ),
        (
            "bridge loops: the readiness at the end",
            shape(
                n >= 1,
                ready(s, n),
                0 <= h,
                h < n,
                z3.Not(s.missed),
                z3.Not(s.pending),
                z3.Not(ok(h)),
            ),
        ),
    ]


def bridge_summary(pro: tail_chunked.Prologue, missed: z3.BoolRef) -> z3.BoolRef:
    """What the bridge loops leave (their invariant at the end)."""
    return z3.Implies(missed, pro.check)


# --- one boundary's keys: the loop over any number of groups ----------------------------


def key_obligations() -> list[tuple[str, list[z3.BoolRef]]]:
    """``_lookup_partial_tail``'s loop over ``n >= 1`` groups (:1178-1187), each turn
    known by key-ready; ``ok(g)``: group g's key answered HIT. For any group ``h``, the
    invariant says a ready boundary had the bridge ready (``p0`` false) and ``ok(h)``
    once ``h`` has had its turn: so a hit (:1189) means every group's key is a HIT."""
    n, k, h = z3.Int("key_groups"), z3.Int("key_k"), z3.Int("key_any_group")
    ok = z3.Function("key_ok", z3.IntSort(), z3.BoolSort())
    p0 = z3.Bool("key_bridge_pending")
    s = tail_chunked.Keys(z3.Bool("s_missed"), z3.Bool("s_pending"))
    t = tail_chunked.Keys(z3.Bool("t_missed"), z3.Bool("t_pending"))

    def inv(st: tail_chunked.Keys, done: z3.ArithRef) -> z3.BoolRef:
        return z3.Implies(
            z3.And(z3.Not(st.missed), z3.Not(st.pending)),
            z3.And(z3.Not(p0), z3.Implies(z3.And(0 <= h, h < done), ok(h))),
        )

    hit, _ = tail_chunked.key_result(s)
    return [
        (
            "keys: the invariant holds at the start",
            shape(n >= 1, z3.Not(inv(tail_chunked.Keys(z3.BoolVal(False), p0), z3.IntVal(0)))),
        ),
        (
            "keys: a turn of any group keeps it",
            shape(n >= 1, 0 <= k, k < n, inv(s, k))
            + assume([use("key-ready", s, t, ok(k))])
            + shape(z3.Not(inv(t, k + 1))),
        ),
        (
            "keys: the summary when every group has had its turn",
            shape(n >= 1, inv(s, n), 0 <= h, h < n, z3.Not(key_summary(hit, p0, ok(h)))),
        ),
    ]


def key_summary(hit: z3.BoolRef, bridge_pending: z3.BoolRef, ok: z3.BoolRef) -> z3.BoolRef:
    """A boundary's keys all ready: the bridge was ready and this group's key a HIT."""
    return z3.Implies(hit, z3.And(z3.Not(bridge_pending), ok))


# --- the descending search over any number of boundaries ---------------------------------


def _fresh_scan(name: str) -> tail_chunked.Scan:
    return tail_chunked.Scan(
        z3.Int(f"{name}_cur"),
        z3.Bool(f"{name}_found"),
        z3.Int(f"{name}_chosen"),
        z3.Bool(f"{name}_pending"),
    )


ACCEPTED = z3.Function("keys_all_hit", z3.IntSort(), z3.BoolSort())  # at a boundary


def _accepted(pro: tail_chunked.Prologue, bp: z3.BoolRef, b: z3.ArithRef) -> z3.BoolRef:
    """Every group's key at ``b`` answered HIT and, if ``b`` loads the bridge, the
    bridge was ready (``key_summary`` over every group)."""
    return z3.And(ACCEPTED(b), z3.Not(z3.And(tail_chunked.loads_bridge(pro, b), bp)))


def scan_invariant(
    pro: tail_chunked.Prologue, mbp: z3.ArithRef, bp: z3.BoolRef, st: tail_chunked.Scan
) -> z3.BoolRef:
    return z3.And(st.cur <= mbp, scan_summary(pro, mbp, bp, st))


def scan_summary(
    pro: tail_chunked.Prologue, mbp: z3.ArithRef, bp: z3.BoolRef, st: tail_chunked.Scan
) -> z3.BoolRef:
    """When the search ends: a boundary found is above the complete boundary, at most
    max_boundary (after the bridge) and accepted by every group."""
    return z3.Implies(
        st.found, z3.And(pro.cb < st.chosen, st.chosen <= mbp, _accepted(pro, bp, st.chosen))
    )


def rank(pro: tail_chunked.Prologue, st: tail_chunked.Scan) -> z3.ArithRef:
    """Tokens left above the complete boundary while the search runs."""
    return z3.If(tail_chunked.running(pro, st), st.cur - pro.cb, 0)


def scan_obligations(
    negated: bool = True, steps: ChunkSteps = STOCK
) -> list[tuple[str, list[z3.BoolRef]]]:
    """The search ``for boundary in range(max_boundary, complete_boundary, -tph)``
    (scheduler.py:1134) for any number of boundaries: the exact try (``boundary_turn``)
    with whatever its keys answered (``hit``, ``pending`` free). ``negated`` False: the
    premises alone (tests see them hold)."""
    enc, tc, premises = _setup((tail_chunked.FA,), steps)
    pro, _, more = _prologue(enc, tc)
    mbp = z3.Int("max_boundary_after_bridge")
    bp = z3.Bool("bridge_pending")
    s = _fresh_scan("s")
    hit, pending = z3.Bools("keys_hit keys_pending")
    after = tail_chunked.boundary_turn(tc, pro, s, hit, pending)
    # what the keys' loop gives at this boundary (its summary, for every group)
    keys = z3.Implies(hit, _accepted(pro, bp, s.cur))
    base = premises + more
    start = tail_chunked.scan_start(mbp, bp)
    obligations: list[tuple[str, list[z3.BoolRef], z3.BoolRef]] = [
        ("search: the invariant holds at the start", [], scan_invariant(pro, mbp, bp, start)),
        (
            "search: a try of any boundary keeps it",
            [scan_invariant(pro, mbp, bp, s), keys],
            scan_invariant(pro, mbp, bp, after),
        ),
        (
            "search: a try lowers the rank (termination)",
            [tail_chunked.running(pro, s)],
            z3.And(rank(pro, s) >= 1, 0 <= rank(pro, after), rank(pro, after) < rank(pro, s)),
        ),
        (
            "search: the summary when it ends",
            [scan_invariant(pro, mbp, bp, s), z3.Not(tail_chunked.running(pro, s))],
            scan_summary(pro, mbp, bp, s),
        ),
    ]
    return [
        (name, _finish(enc, base + pre + ([z3.Not(claim)] if negated else [])))
        for name, pre, claim in obligations
    ]


# --- the answer --------------------------------------------------------------------------


def _env(enc: Enc, tc: tail_chunked.TailCfg) -> tuple[turn_chunked.D, list[z3.BoolRef]]:
    """The tails-off proof's view of these groups of an unknown layout with partial tails
    on: the layout has a Mamba align group (so a windowed one) of block size ``B``."""
    env = turn_chunked.symbolic_env()
    d = turn_chunked.derive(enc, tc.base, env)
    return d, [env.has_mamba, env.has_windowed, env.mamba_gpu == tc.block]


def loop_end(
    enc: Enc, tc: tail_chunked.TailCfg, d: turn_chunked.D
) -> tuple[State, list[z3.BoolRef]]:
    """The complete-chunk loop's end state (max_hit_size_tokens ``m``, the hit
    ``m - num_computed_tokens``, as ``proofs.layers_chunked.final_query`` reads it) and the
    loop's summary there: ``proofs.abstract_chunked.summary`` of the aligned loop (proved
    with align-divides-blocks, which every layout with partial tails on keeps:
    ``layouts_query``), its symbols pinned to this state and ``MA`` read at ``m`` as a
    multiple ``complete_end_blocks`` of the Mamba align size."""
    c = tc.base
    st = fresh_state(enc, 1, "end")
    st = replace(st, num_hit=st.m - c.computed, halted=z3.Bool("end_halted"))
    lp = abstract_chunked.loop(reround=False, rerun=False, aligned=True)
    s = replace(
        abstract_chunked.fresh("loop_end"),
        m=st.m,
        num_hit=st.num_hit,
        defer=st.defer,
        halted=st.halted,
    )
    k = z3.Int("complete_end_blocks")
    pins = [lp.nc == c.computed, lp.align_on == d.align_on, lp.ma(st.m) == (st.m == d.align * k)]
    return st, [abstract_chunked.summary(lp, s)] + pins


def _tail_answer(
    enc: Enc, tc: tail_chunked.TailCfg, d: turn_chunked.D, st: State
) -> tuple[tail_chunked.Answer, list[z3.BoolRef]]:
    """``_lookup``'s answer with partial tails on after the complete-chunk loop ends in
    ``st`` (the request reads the prefix cache and has nothing in flight): the complete
    chunks' answer (``turn_chunked.result_of``), then the partial tail from fresh bridge and
    search states, with the bridge's and the search's summaries as facts."""
    inner = replace(tc.base, skip_reading=z3.BoolVal(False), in_flight=z3.BoolVal(False))
    r_complete = turn_chunked.result_of(enc, inner, d, st, [0])  # _lookup_complete_chunks' answer
    pro = tail_chunked.prologue(enc, tc, r_complete.hit)
    missed = z3.Bool("bridge_missed")
    mbp = tail_chunked.after_bridge(tc, pro, missed)
    scan = _fresh_scan("end")
    a = tail_chunked.finish(tc, r_complete.deferred, r_complete.hit, scan)
    return a, [bridge_summary(pro, missed), scan_summary(pro, mbp, z3.Bool("bridge_pending"), scan)]


def final_query(thm: str, kind: str, tail: bool, steps: ChunkSteps = STOCK) -> list[z3.BoolRef]:
    """The property for a group of ``kind`` of an unknown layout with partial tails on,
    from the summaries read exactly, for a partial-tail hit (``tail``); without one the
    answer must be the tails-off answer (``proofs.turn_chunked.result_of`` of the same
    complete-chunk loop state) or a deferral."""
    enc, tc, premises = _setup((kind,), steps)
    c = tc.base
    d, env = _env(enc, tc)
    st = fresh_state(enc, 1, "end")
    st = State(st.m, st.num_hit, st.defer, st.looked, st.verified, st.next, z3.Bool("end_halted"))
    a, facts = _tail_answer(enc, tc, d, st)
    if tail:
        goal = [a.tail, tail_chunked.VIOLATIONS[thm](enc, tc, a)]
    else:
        r_off = turn_chunked.result_of(enc, c, d, st, [0])  # the answer with partial tails off
        goal = [
            z3.Not(a.tail),
            tail_chunked.active(a),
            z3.Not(z3.And(z3.Not(r_off.deferred), r_off.hit == a.hit)),
        ]
    return _finish(enc, premises + env + facts + goal)


CASES = ("below the bridge", "the bridge")  # above it: tail_end_query


def boundary_on_block_query(steps: ChunkSteps = STOCK) -> list[z3.BoolRef]:
    """The complete boundary (the GPU hit plus the complete chunks' answer) is on a
    block: the aligned loop summary (a converged hit ends on the Mamba align size, which
    is the block), or the GPU hit itself when the loop stopped (the connector's: a
    multiple of the block, ``connector_tokens``). ``tail_end_query`` takes it for any
    complete hit."""
    enc, tc, premises = _setup((tail_chunked.FA,), steps)
    c = tc.base
    d, env = _env(enc, tc)
    st, summary = loop_end(enc, tc, d)
    inner = replace(c, skip_reading=z3.BoolVal(False), in_flight=z3.BoolVal(False))
    r = turn_chunked.result_of(enc, inner, d, st, [0])
    k = z3.Int("complete_end_blocks")
    blocks = z3.If(st.halted, enc.floordiv(c.computed, c.gpu[0], "computed_blocks0"), k)
    return _finish(
        enc,
        premises + env + summary + [z3.Not(r.deferred), c.computed + r.hit != tc.block * blocks],
    )


def tail_end_query(kind: str, steps: ChunkSteps = STOCK) -> list[z3.BoolRef]:
    """A partial-tail hit loads no chunk past the bridge (a group of ``kind``): its
    boundary is at most max_boundary (the summaries), below the complete boundary plus
    two blocks; the complete boundary is on a block (the complete-chunk loop's aligned
    summary, or the GPU hit when it stopped: any ``complete_hit`` with that property)."""
    enc, tc, premises = _setup((kind,), steps)
    pro, ch, more = _prologue(enc, tc)
    k = z3.Int("complete_end_blocks")
    mbp = tail_chunked.after_bridge(tc, pro, z3.Bool("bridge_missed"))
    scan = _fresh_scan("end")
    a = tail_chunked.finish(tc, z3.Bool("complete_deferred"), ch, scan)
    ld = tail_chunked.load_plan(enc, tc, a, [0])[0]
    nb = enc.cdiv(tc.base.computed + a.hit, tc.block, "gpu_blocks")
    facts = [
        tc.base.computed + ch == tc.block * k,
        bridge_summary(pro, z3.Bool("bridge_missed")),
        scan_summary(pro, mbp, z3.Bool("bridge_pending"), scan),
        exact(pro.bridge_idx, k, tc.block),
        ceil_below(nb, tc.base.computed + a.hit, k + 2, tc.block),
    ]
    goal = [a.tail, tail_chunked.active(a), ld.hi > pro.bridge_idx + 1]
    return _finish(enc, premises + more + facts + goal)


def stored_only_query(kind: str, case: str, steps: ChunkSteps = STOCK) -> list[z3.BoolRef]:
    """loads-stored-only for a partial-tail hit, at any chunk ``i`` of a group of
    ``kind`` of an unknown layout: a chunk below the complete boundary is one the
    complete chunks' answer loads (a HIT by the tails-off proof of loads-stored-only,
    ``proofs.layers_chunked``: assumed here at ``i``); the bridge chunk was confirmed
    (confirmed-hits) or looked up ready (the bridge loops' readiness); the boundary key
    was accepted (the keys' and the search's summaries)."""
    enc, tc, premises = _setup((kind,), steps)
    c = tc.base
    d, env = _env(enc, tc)
    st, summary = loop_end(enc, tc, d)
    inner = replace(c, skip_reading=z3.BoolVal(False), in_flight=z3.BoolVal(False))
    r_complete = turn_chunked.result_of(enc, inner, d, st, [0])
    r_off = turn_chunked.result_of(enc, c, d, st, [0])
    pro = tail_chunked.prologue(enc, tc, r_complete.hit)
    missed, bp = z3.Bool("bridge_missed"), z3.Bool("bridge_pending")
    mbp = tail_chunked.after_bridge(tc, pro, missed)
    scan = _fresh_scan("end")
    a = tail_chunked.finish(tc, r_complete.deferred, r_complete.hit, scan)
    i = z3.Int("chunk")
    hit_i = _hit_chunk(c.stores[0], i)
    facts = summary + [
        bridge_summary(pro, missed),
        scan_summary(pro, mbp, bp, scan),
        z3.Implies(
            ACCEPTED(scan.chosen),
            tail_chunked.key_answer(enc, tc, 0, scan.chosen) == tail_chunked.HIT,
        ),
        # the tails-off theorem (proofs/layers_chunked.py proves its violation unsat): every
        # chunk the tails-off answer loads is a HIT (turn_chunked.load_ok)
        z3.Not(turn_chunked.VIOLATIONS["loads-stored-only"](enc, c, d, r_off)),
    ]
    if kind == tail_chunked.FA:
        facts += [
            fact("confirmed-hits", d.start[0], tc.hit_end[0], i, hit_i),
            z3.Implies(
                z3.And(z3.Not(missed), z3.Not(bp)),
                z3.Implies(
                    z3.And(pro.check, tail_chunked.unconfirmed(tc, pro, 0)),
                    tail_chunked.chunk_answer(tc, 0, pro.bridge_idx) == tail_chunked.HIT,
                ),
            ),
        ]
    # instances of monotone multiplication by the block size (``monotone``, proved alone
    # by ``arithmetic_query``): the bridge chunk is the complete boundary's block, a
    # loaded chunk ends below the boundary
    # the chunk part of the violation (the key part: keys_loaded_query), by the chunk's
    # place, each case with the instances of ``exact`` / ``ceil_below`` it needs (both
    # proved alone by ``arithmetic_query``)
    k = z3.Int("complete_end_blocks")
    ld = tail_chunked.load_plan(enc, tc, a, [0])[0]
    where = {"below the bridge": i < pro.bridge_idx, "the bridge": i == pro.bridge_idx}[case]
    if case == "the bridge":
        facts.append(exact(pro.bridge_idx, k, tc.block))
    goal = [a.tail, tail_chunked.active(a), where, tail_chunked.chunk_not_hit(tc, ld, 0, i)]
    return _finish(enc, premises + env + facts + goal)


def ceil_below(q: z3.ArithRef, x: z3.ArithRef, y: z3.ArithRef, b: z3.ArithRef) -> z3.BoolRef:
    """A ceiling quotient ``q`` of ``x`` by ``b`` (its lower bound) with ``x < y * b`` is
    at most ``y``."""
    return z3.Implies(z3.And(b >= 1, (q - 1) * b < x, x < y * b), q <= y)


def exact(q: z3.ArithRef, k: z3.ArithRef, b: z3.ArithRef) -> z3.BoolRef:
    """A quotient of ``b * k`` by ``b`` (its floor-division bounds) is ``k``."""
    return z3.Implies(
        z3.And(b >= 1, q * b <= b * k, b * k < (q + 1) * b),
        z3.And(q == k, q * b == b * k, (q + 1) * b == b * k + b),
    )


def arithmetic_query() -> list[z3.BoolRef]:
    """``exact`` and ``ceil_below`` hold for all integers (their instances are premises
    elsewhere)."""
    q, k, b = z3.Ints("q k b")
    x = z3.Int("x")
    return [z3.Not(z3.And(exact(q, k, b), ceil_below(q, x, k, b)))]


def keys_loaded_query(kind: str, steps: ChunkSteps = STOCK) -> list[z3.BoolRef]:
    """A partial-tail hit's boundary key of a group of ``kind`` answered HIT: the search's
    summary (the boundary was accepted) and the keys' summary for this group."""
    enc, tc, premises = _setup((kind,), steps)
    pro, ch, more = _prologue(enc, tc)
    mbp = tail_chunked.after_bridge(tc, pro, z3.Bool("bridge_missed"))
    bp = z3.Bool("bridge_pending")
    scan = _fresh_scan("end")
    a = tail_chunked.finish(tc, z3.Bool("complete_deferred"), ch, scan)
    ok = tail_chunked.key_answer(enc, tc, 0, scan.chosen) == tail_chunked.HIT
    facts = [
        scan_summary(pro, mbp, bp, scan),
        z3.Implies(ACCEPTED(scan.chosen), ok),
    ]  # keys: every group, this one too
    return _finish(enc, premises + more + facts + [a.tail, z3.Not(ok)])


def same_violation_query(thm: str, kind: str, steps: ChunkSteps = STOCK) -> list[z3.BoolRef]:
    """Without a partial-tail hit, an answer's violation (its load: ``tail_chunked.
    load_plan``) is the tails-off encoding's for the same answer (``turn_chunked``)."""
    enc, tc, premises = _setup((kind,), steps)
    d, env = _env(enc, tc)
    deferred, hit = z3.Bool("answer_deferred"), z3.Int("answer_hit")
    a = tail_chunked.Answer(deferred, hit, z3.BoolVal(False), z3.Int("answer_boundary"))
    off = turn_chunked.Result(deferred, hit)
    goal = [
        tail_chunked.VIOLATIONS[thm](enc, tc, a),
        z3.Not(turn_chunked.VIOLATIONS[thm](enc, tc.base, d, off)),
    ]
    return _finish(enc, premises + env + goal)


def _precondition(name: str, enc: Enc, cfg: turn_chunked.Cfg, d: turn_chunked.D) -> z3.BoolRef:
    """A precondition over the tails-off terms (``turn_chunked.precondition``, and
    caps-reach-prompt as the layered maximality proof states it)."""
    from proofs.maximality_layers_chunked import precondition

    return precondition(name, enc, cfg, d)


def layouts_query(assumed: Sequence[str] = (), steps: ChunkSteps = STOCK) -> list[z3.BoolRef]:
    """A layout with partial tails on (under the theorem's preconditions that not every
    such layout keeps: no-eagle, caps-reach-prompt) is one the tails-off proof covers:
    the same start-up constraints (``turn_chunked.startup`` is part of
    ``tail_chunked.startup``), align-divides-blocks (every chunk is the Mamba chunk) and
    the preconditions the theorem's tails-off proof takes (``assumed``)."""
    enc, tc, premises = _setup((tail_chunked.FA, tail_chunked.MAMBA), steps)
    d = turn_chunked.derive(enc, tc.base, turn_chunked.symbolic_env())
    names = dict.fromkeys(("align-divides-blocks", *assumed))
    pre = {p: _precondition(p, enc, tc.base, d) for p in names}
    taken = [pre[p] for p in names if p not in TAILS_KEEP]
    goal = z3.And(turn_chunked.startup(enc, tc.base), *pre.values())
    c = [z3.Int(f"chunks_per_align{g}") == 1 for g in range(2)]  # the witness of the fact
    return _finish(enc, premises + taken + [d.align_on == z3.BoolVal(True)] + c + [z3.Not(goal)])


def maximality_query(
    kind: str, tail: bool, negated: bool = True, steps: ChunkSteps = STOCK
) -> list[z3.BoolRef]:
    """maximality for a group of ``kind`` of an unknown layout with partial tails on and
    a valid hit ``h*`` (``proofs.maximality_layers_chunked.valid_hit``, the rules of the
    whole request and this group's): the complete-chunk loop ends as the tails-off
    maximality proof's obligations leave it (``maximality_layers_chunked.loop_done``: a
    deferral or max_hit_size_tokens at or above the valid hit's end), so a complete hit
    the tail phase keeps is at least ``h*``; a partial-tail hit (``tail``) ends past the
    complete boundary (the search's summary), so it is longer still. The answer's
    violation is the theorem's (``maximality_layers_chunked.violates``). ``negated`` False:
    the premises alone (tests see them hold)."""
    from proofs import maximality_layers_chunked

    enc, tc, premises = _setup((kind,), steps)
    c = tc.base
    d, env = _env(enc, tc)
    st, h = fresh_state(enc, 1, "end"), z3.Int("valid_hit")
    st = replace(st, num_hit=st.m - c.computed, halted=z3.Bool("end_halted"))
    a, summaries = _tail_answer(enc, tc, d, st)
    facts = [
        maximality_layers_chunked.valid_hit(enc, c, d, h, [0]),
        maximality_layers_chunked.loop_done(st.halted, st.defer, st.m, c.computed + h),
        *summaries,
    ]
    goal = [a.tail if tail else z3.Not(a.tail)]
    goal += (
        [maximality_layers_chunked.violates(a.deferred, a.hit, h)]
        if negated
        else [tail_chunked.active(a)]
    )
    return _finish(enc, premises + env + facts + goal)


def same_load_query(kind: str, steps: ChunkSteps = STOCK) -> list[z3.BoolRef]:
    """Without a partial-tail hit, a group's load (``tail_chunked.load_plan``) is the
    tails-off encoding's (``turn_chunked.load_plan``) for the same hit: loads-stored-only
    of such an answer is the tails-off theorem."""
    enc, tc, premises = _setup((kind,), steps)
    d, env = _env(enc, tc)
    deferred, hit = z3.Bool("answer_deferred"), z3.Int("answer_hit")
    a = tail_chunked.Answer(deferred, hit, z3.BoolVal(False), z3.Int("answer_boundary"))
    ld, off = (
        tail_chunked.load_plan(enc, tc, a, [0])[0],
        turn_chunked.load_plan(enc, tc.base, d, hit, [0])[0],
    )
    same = z3.And(ld.lo == off.lo, ld.hi == off.hi, z3.Not(ld.tail_key))
    return _finish(enc, premises + env + [tail_chunked.active(a), z3.Not(same)])


LOCAL_TAIL = "the engine's local-tail choice (scheduler.py:1167, :1179) keeps the property"


# --- premise satisfiability of every lemma query (issue 23; proofs.premises_chunked) ------

PREMISES = f"tail premises: {premises_chunked.WORDS}"


def lemma_premises(name: str, kind: str, sem: Semantics, other: str | None = None
                   ) -> str | None:
    """None when tail lemma ``name``'s query about a group of ``kind`` (``other``: the
    query that confirmed-hits is kept by another group's turn, of that kind) has
    satisfiable premises on the pinned request with partial tails on (one block size,
    0.33.0's rule: the block other than the hash block), replayed through model/; else
    why not."""
    p = premises_chunked.Pin(kind, True, tails=True)
    kinds = (kind,) if other is None else (kind, other)
    tc = tail_chunked.symbolic_tail_config(kinds)
    env = turn_chunked.symbolic_env()
    def build() -> list[z3.BoolRef]:
        q = (lemma_query(name, kind, False, sem) if other is None
             else confirmed_hits_kept_query(other, sem, False))
        return q + premises_chunked.pins(p, tc.base, env) + [tc.tph == premises_chunked.TAIL_HASH]

    # the tail phase is the same in every 0.33.0 semantics; confirmed-hits reads the turn
    reads = (sem.reround_mamba, sem.reround_rerun, sem.steps) if name == "confirmed-hits" else ()
    key = ("tail", name, kind, other, reads)
    return premises_chunked.holds(build, key, p, sem, tc.base, env, tc.tph)


def lemma_cases(stored: bool) -> Iterator[tuple[str, str, str | None]]:
    """(lemma, group kind, other) of every tail lemma query, in the proof's order
    (``stored``: loads-stored-only's lemmas too). ``other`` is None for the lemma's own
    query; for confirmed-hits (only full-attention groups confirm, :957) it is also the
    kind of the group whose turn must keep it."""
    for name in LEMMAS:
        if name in STORED_ONLY and not stored:
            continue
        for kind in (tail_chunked.FA, tail_chunked.MAMBA):
            if name != "confirmed-hits":
                yield name, kind, None
            elif kind == tail_chunked.FA:
                yield name, kind, None
                for other in (tail_chunked.FA, tail_chunked.MAMBA):
                    yield name, kind, other


def premises_query(sem: Semantics, stored: bool) -> list[z3.BoolRef]:
    """Every tail lemma query (``stored``: loads-stored-only's too) has satisfiable
    premises on the pinned request (``proofs.premises_chunked``)."""
    checks: list[premises_chunked.Check] = [
        (f"tail lemma {name} ({kind})" if other is None
         else f"tail lemma {name}: kept by another group's turn ({other})",
         partial(lemma_premises, name, kind, sem, other))
        for name, kind, other in lemma_cases(stored)]
    return premises_chunked.query(PREMISES, checks, sem)


def local_tail_query(thm: str, kind: str) -> list[z3.BoolRef]:
    """``proofs.layers_chunked.local_tail_query`` with partial tails on: a kept local
    tail loads nothing (``tail_chunked.engine_choice``), partial tail included; otherwise
    the engine takes the connector's answer (a partial-tail hit or not) itself."""
    enc, tc, premises = _setup((kind,))
    local = z3.Int("local_tail")
    a = tail_chunked.Answer(z3.Bool("connector_deferred"), z3.Int("connector_hit"),
                            z3.Bool("connector_tail"), z3.Int("connector_boundary"))
    chosen = tail_chunked.engine_choice(local, a)
    if thm == "loads-stored-only":
        bad = tail_chunked.violates_loads_stored_only(enc, tc, chosen, z3.Int("chunk"))
    else:
        bad = tail_chunked.VIOLATIONS[thm](enc, tc, chosen)
    kept = turn_chunked.keeps_tail(local, turn_chunked.Result(a.deferred, a.hit))
    rest = z3.Or(chosen.deferred != a.deferred, chosen.hit != a.hit, chosen.tail != a.tail,
                 chosen.boundary != a.boundary)
    return _finish(enc, premises + [local >= 0, z3.Or(z3.And(kept, bad),
                                                      z3.And(z3.Not(kept), rest))])


def proof_queries(
    thm: str, sem: Semantics | None = None, assumed: Sequence[str] = ()
) -> list[Query]:
    """Every query of the tail proof for ``thm`` (``sem``: loads-stored-only's
    confirmed-hits lemma is about the complete-chunk turn of a semantics; its steps
    are the partial tail's, ``variant``)."""
    steps = STOCK if sem is None else sem.steps
    stored = thm == "loads-stored-only"
    loops = bridge_obligations(stored) + key_obligations()
    # every fact the bridge and key loops assume is one of the tail lemmas below (asked
    # first: it is cheap)
    proved = {WHERE: [n for n in LEMMAS if stored or n not in STORED_ONLY]}
    out: list[Query] = [(_assume.AUDIT, partial(_assume.audit_query, loops, proved))]
    # asked first too (cheap): the lemma queries below have premises a real request meets
    # (proofs.premises_chunked), and what the engine loads keeps the property
    if sem is not None:
        out.append((f"{PREMISES} ({'with' if stored else 'without'} {', '.join(STORED_ONLY)}; "
                    f"{sem.name})", partial(premises_query, sem, stored)))
    if thm in (*tail_chunked.VIOLATIONS, "loads-stored-only"):
        for kind in (tail_chunked.FA, tail_chunked.MAMBA):
            out.append((f"{LOCAL_TAIL} with partial tails on ({kind})",
                        partial(local_tail_query, thm, kind)))
    label = getattr(sem, "name", sem)
    for name, kind, other in lemma_cases(stored):
        if other is not None:  # and only their own entry
            out.append((f"tail lemma {name}: at the start and kept by another group's turn "
                        f"({other}, {label})",
                        partial(confirmed_hits_kept_query, other, sem, steps=steps)))
        elif name == "confirmed-hits":
            out.append((f"tail lemma {name} ({kind}, {label})",
                        partial(lemma_query, name, kind, True, sem, steps)))
        else:
            out.append((f"tail lemma {name} ({kind})",
                        partial(lemma_query, name, kind, steps=steps)))
    for name, q in loops + scan_obligations(steps=steps):
        out.append((name, partial(list, q)))
    for kind in (tail_chunked.FA, tail_chunked.MAMBA):
        out.append(
            (
                f"a partial-tail hit's boundary keys are HITs ({kind})",
                partial(keys_loaded_query, kind, steps),
            )
        )
    out.append(
        (
            "layouts with partial tails on are covered by the tails-off proof "
            f"({', '.join(assumed) or 'no precondition'})",
            partial(layouts_query, tuple(assumed), steps),
        )
    )
    if stored:
        out.append(("arithmetic: exact division, a ceiling below a multiple", arithmetic_query))
        out.append(("the complete boundary is on a block", partial(boundary_on_block_query, steps)))
        for kind in (tail_chunked.FA, tail_chunked.MAMBA):
            for case in CASES:
                out.append(
                    (
                        f"loads-stored-only with a partial-tail hit: a chunk {case} ({kind})",
                        partial(stored_only_query, kind, case, steps),
                    )
                )
            out.append(
                (
                    f"loads-stored-only with a partial-tail hit: no chunk past the bridge ({kind})",
                    partial(tail_end_query, kind, steps),
                )
            )
            out.append(
                (
                    f"loads-stored-only: no partial-tail hit, the same answer as tails "
                    f"off ({kind})",
                    partial(final_query, "no-partial-state", kind, False, steps),
                )
            )
            out.append(
                (
                    f"loads-stored-only: no partial-tail hit, the same load as tails off ({kind})",
                    partial(same_load_query, kind, steps),
                )
            )
    elif thm == "maximality":
        for kind in (tail_chunked.FA, tail_chunked.MAMBA):
            for tail in (True, False):
                out.append(
                    (
                        f"maximality {'with' if tail else 'without'} a partial-tail hit ({kind})",
                        partial(maximality_query, kind, tail, steps=steps),
                    )
                )
    elif thm != "termination":
        kinds = (
            (tail_chunked.MAMBA,)
            if thm == "no-partial-state"
            else (tail_chunked.FA, tail_chunked.MAMBA)
        )
        for kind in kinds:
            out.append(
                (
                    f"{thm} with a partial-tail hit ({kind})",
                    partial(final_query, thm, kind, True, steps),
                )
            )
            out.append(
                (
                    f"{thm}: no partial-tail hit, the same answer as tails off ({kind})",
                    partial(final_query, thm, kind, False, steps),
                )
            )
            out.append(
                (
                    f"{thm}: no partial-tail hit, the same violation as tails off ({kind})",
                    partial(same_violation_query, thm, kind, steps),
                )
            )
    # a query of another partial tail is another query (``prove`` keeps proved names)
    v = variant(steps)
    return [(name if name == _assume.AUDIT else name + v, q) for name, q in out]


def variant(steps: ChunkSteps) -> str:
    """How ``steps``' partial tail differs from vLLM 0.33.0's ("" where it does not), for
    the query names: the search end, the bridge, EAGLE groups."""
    parts = []
    if steps.tail_search is not STOCK.tail_search:
        parts.append(f"search {steps.tail_search.__name__}")
    if steps.tail_bridge != STOCK.tail_bridge:
        parts.append("bridge" if steps.tail_bridge else "no bridge")
    if steps.tail_eagle != STOCK.tail_eagle:
        parts.append("EAGLE tails" if steps.tail_eagle else "no EAGLE tails")
    return f" [{'; '.join(parts)}]" if parts else ""


_PROVED: set[str] = set()

# the loads-stored-only chunk cases (``stored_only_query``) with Z3's nonlinear arithmetic
# lightened as for the layered lemmas post and keeps (``layers_chunked.LIGHT_NL``): over the
# 67 distinct tail queries and z3 seeds 0..5 every answer unsat under both settings; the
# four chunk cases took 0.27 -> 0.17 s CPU (sum of means), the others no measurable gain
# (all 67: 0.97 -> 0.84 s); their sabotaged bridge case stays sat on every seed
# (bench/results/tail_chunked.txt). A setting changes how Z3 searches, not what is proved.
LIGHT_NL_QUERIES = ("loads-stored-only with a partial-tail hit: a chunk ",)


def settings(name: str) -> tuple[tuple[str, bool], ...]:
    """The Z3 settings for query ``name``."""
    from proofs.layers_chunked import LIGHT_NL

    return LIGHT_NL if name.startswith(LIGHT_NL_QUERIES) else ()


def new_solver(name: str) -> z3.Solver:
    """The solver ``prove`` asks for query ``name``."""
    from proofs.layers_chunked import solver_with

    return solver_with(settings(name))


def prove(
    thm: str, sem: Semantics, assumed: Sequence[str], timeout_ms: int
) -> tuple[str, str, float]:
    """('PROVED' | 'FAILED' | 'UNKNOWN', which query, seconds) for the tail phase (the
    same in every 0.33.0 semantics, but for loads-stored-only's confirmed-hits lemma and
    the aligned loop summary it takes from ``proofs.layers_chunked``). Queries proved once
    in this process are not asked again."""
    t0 = time.monotonic()
    deadline = t0 + timeout_ms / 1000
    if thm == "loads-stored-only":  # the complete hit ends on the block (aligned summary)
        from proofs.layers_chunked import prove as prove_complete

        status, where, _ = prove_complete(
            "no-partial-state", sem, ("align-divides-blocks",), timeout_ms // 2
        )
        if status != "PROVED":
            return status, f"the aligned loop summary: {where}", time.monotonic() - t0
    for name, build in proof_queries(thm, sem, assumed):
        if name in _PROVED:
            continue
        left = int((deadline - time.monotonic()) * 1000)
        if left <= 0:
            return "UNKNOWN", f"{name}: out of time", time.monotonic() - t0
        s = new_solver(name)
        s.set("timeout", left)
        try:
            s.add(*build())
        except ValueError as e:  # a precondition the tails-off proof does not take
            return "UNKNOWN", f"{name}: {e}", time.monotonic() - t0
        res = memo.check(s, "z3.Solver", settings(name))  # answered once per run
        if res == z3.sat:
            if name.startswith(LOCAL_TAIL):  # no precondition: never expected to fail
                print(f"{name}: FAILED: a kept tail loads what violates it",
                      file=sys.stderr, flush=True)
            return "FAILED", name, time.monotonic() - t0
        if res == z3.unknown:
            return "UNKNOWN", f"{name}: solver returned unknown", time.monotonic() - t0
        _PROVED.add(name)
    return "PROVED", "", time.monotonic() - t0


def covers(thm: str) -> bool:
    return thm in COVERED


# --- the witness: a partial-tail hit that restores a Mamba state -------------------------

WITNESS_SIZES = ((2, 1), (4, 2), (4, 1))  # (block size, tokens_per_hash)
WITNESS_BLOCKS = 3


def _table(row: Sequence[z3.ArithRef], q: z3.ArithRef) -> z3.ArithRef:
    out: z3.ArithRef = z3.IntVal(tail_chunked.MISS)
    for k, x in enumerate(row):
        out = z3.If(q == k, x, out)
    return out


def _witness_query(
    sem: Semantics,
    kinds: tuple[str, ...],
    block: int,
    tph: int,
    taken: Sequence[str] = (),
    valid: bool = False,
) -> tuple[z3.Solver, tail_chunked.TailCfg, tail_chunked.Answer, z3.ArithRef]:
    """``taken``: the theorem's preconditions the tail proof takes as premises;
    ``valid``: maximality's premise, a valid hit ``h* >= 1`` (returned; 0 without)."""
    from proofs import maximality_layers_chunked

    enc = Enc(bound=WITNESS_BLOCKS + 2)
    positions = WITNESS_BLOCKS * block // tph + 2
    codes = [[z3.Int(f"tail_answer{g}_{q}") for q in range(positions)] for g in kinds]
    tc = replace(
        tail_chunked.symbolic_tail_config(kinds, steps=sem.steps),
        tails=tuple(partial(_table, row) for row in codes),
    )
    cons = [
        tc.block == block,
        tc.tph == tph,
        tc.base.prompt <= WITNESS_BLOCKS * block,
        tail_chunked.startup(enc, tc, whole=True),
    ]
    cons += [z3.And(0 <= x, x <= 3) for row in codes for x in row]
    d = turn_chunked.derive(enc, tc.base)
    a, ended = tail_chunked.run_lookup(enc, tc, sem, 2, 2 * (block // tph) + 1, d)
    cons += [_precondition(p, enc, tc.base, d) for p in taken]
    h: z3.ArithRef = z3.IntVal(0)
    if valid:
        h = z3.Int("valid_hit")
        cons += [maximality_layers_chunked.valid_hit(enc, tc.base, d, h), h >= 1]
    mamba = [g for g, k in enumerate(kinds) if k == tail_chunked.MAMBA]
    loads = tail_chunked.load_plan(enc, tc, a, mamba)
    cons += [
        ended,
        tail_chunked.active(a),
        a.tail,
        a.boundary % block != 0,  # inside a block
        z3.Or([loads[g].pending > 0 for g in mamba]),
        z3.Not(tc.base.skip_reading),
        z3.Not(tc.base.in_flight),
    ]
    # a plain store, to read easily: every key a HIT or a MISS, nothing being loaded, no cap
    c = tc.base
    cons += [z3.Not(c.has_new_cap), z3.Not(c.has_load_cap)]
    cons += [z3.Or(x == tail_chunked.HIT, x == tail_chunked.MISS) for row in codes for x in row]
    cons += [
        z3.And(z3.Not(st.deferred(z3.IntVal(i))), z3.Not(st.loading(z3.IntVal(i))))
        for st in c.stores
        for i in range(WITNESS_BLOCKS + 1)
    ]
    s = z3.Solver()
    s.add(*(cons + enc.cons))
    return s, tc, a, h


def scenario_of(m: z3.ModelRef, tc: tail_chunked.TailCfg, sem: Semantics) -> dict[str, Any]:
    def b(e: z3.BoolRef) -> bool:
        return bool(z3.is_true(m.eval(e, model_completion=True)))

    def i(e: z3.ArithRef) -> int:
        return int(m.eval(e, model_completion=True).as_long())

    c = tc.base
    prompt, block, tph = i(c.prompt), i(tc.block), i(tc.tph)
    n = prompt // block
    names = {tail_chunked.HIT_PENDING: "pending_tails", tail_chunked.RETRY: "deferred_tails"}
    groups = []
    for g, kind in enumerate(tc.kinds):
        st = c.stores[g]
        idx = [z3.IntVal(x) for x in range(n)]
        grp: dict[str, Any] = {
            "kind": kind,
            "gpu_block_size": block,
            "stored": [x for x in range(n) if b(st.stored(idx[x])) and not b(st.deferred(idx[x]))],
        }
        if kind == tail_chunked.MAMBA:
            grp["mamba_cache_mode"] = "align"
        if b(c.eagle[g]):
            grp["eagle"] = True
        stored = [b(st.stored(x)) for x in idx]
        deferred = [b(st.deferred(x)) for x in idx]
        for name, chosen in (
            ("pending", [x for x in range(n) if stored[x] and deferred[x]]),
            ("deferred", [x for x in range(n) if deferred[x] and not stored[x]]),
            ("being_loaded", [x for x in range(n) if b(st.loading(idx[x]))]),
        ):
            if chosen:
                grp[name] = chosen
        tails: dict[str, list[int]] = {}
        for qv in range(1, prompt // tph + 1):
            if (qv * tph) % block == 0:
                continue
            code = i(tc.tails[g](z3.IntVal(qv)))
            key = (
                "stored_tails"
                if code in (tail_chunked.HIT, tail_chunked.HIT_PENDING)
                else names.get(code)
            )
            if key is not None:
                tails.setdefault(key, []).append(qv * tph)
            if code == tail_chunked.HIT_PENDING:
                tails.setdefault("pending_tails", []).append(qv * tph)
        grp |= tails
        groups.append(grp)
    out: dict[str, Any] = {
        "semantics": sem.name,
        "block_size_factor": 1,
        "hash_block_size": tph,
        "prompt_tokens": prompt,
        "num_computed_tokens": i(c.computed),
        "groups": groups,
    }
    if b(c.has_new_cap):
        out["max_num_new_tokens"] = i(c.new_cap)
    if b(c.has_load_cap):
        out["max_load_tokens"] = i(c.load_cap)
    return out


# the witnesses found in this process, by semantics: the tail witness reads nothing but
# the semantics (each of the four theorems the tail proof covers asks the same one), and
# the search is deterministic (each query solved alone: proofs.witness._solve_alone), so
# a found witness is the one a new search would find; a search that found none (out of
# time, say) is not kept
_FOUND: dict[tuple[Semantics, tuple[str, ...], bool], Witness] = {}


def witness(
    thm: str, sem: Semantics, assumed: Sequence[str] = (), timeout_ms: int = BACKSTOP_MS
) -> Witness:
    """A run of the tail phase's premises (start-up with partial tails on, the request
    rules, the theorem's preconditions not every such layout keeps, and for maximality a
    valid hit) with a non-zero partial-tail hit ending inside a block whose load
    restores a Mamba state, replayed through model/ (same hit, same boundary, a Mamba
    load; for maximality the valid hit valid there and at most the hit)."""
    key = (sem, tuple(sorted(p for p in assumed if p not in TAILS_KEEP)), thm == "maximality")
    if key in _FOUND:
        return replace(_FOUND[key], seconds=0.0)
    w = _witness(sem, timeout_ms, key[1], key[2])
    if w.found:
        _FOUND[key] = w
    return w


def _witness(sem: Semantics, timeout_ms: int, taken: tuple[str, ...], valid: bool) -> Witness:
    from model.maximality_chunked import is_valid_hit
    from proofs.witness import _solve_alone

    t0 = time.monotonic()
    deadline = t0 + timeout_ms / 1000
    for kinds in ((tail_chunked.FA, tail_chunked.MAMBA), (tail_chunked.MAMBA, tail_chunked.FA)):
        for block, tph in WITNESS_SIZES:
            left = int((deadline - time.monotonic()) * 1000)
            if left <= 0:
                break
            s, tc, a, h = _witness_query(sem, kinds, block, tph, taken, valid)
            m = _solve_alone(s, left)
            if m is None:
                continue
            scen = scenario_of(m, tc, sem)
            z_hit = int(m.eval(a.hit, model_completion=True).as_long())
            z_b = int(m.eval(a.boundary, model_completion=True).as_long())
            z_valid = int(m.eval(h, model_completion=True).as_long()) if valid else None
            s_model = parse_scenario(scen)
            o = evaluate(s_model)
            mamba_load = any(ld.blocks and ld.state_position is not None for ld in o.loads)
            broken = {v.invariant for v in o.violations} & set(COVERED)
            if z_valid is not None and not (
                o.layout is not None
                and o.hit_tokens is not None
                and is_valid_hit(s_model, o.layout, z_valid)  # type: ignore[arg-type]
                and o.hit_tokens >= z_valid
            ):
                broken.add("maximality")
            if (
                o.refused
                or o.hit_tokens != z_hit
                or o.tail_boundary != z_b
                or not mamba_load
                or broken
            ):
                return Witness(
                    False,
                    time.monotonic() - t0,
                    scen,
                    z_hit,
                    z_valid,
                    note=f"tail witness not reproduced by model/ (hit "
                    f"{o.hit_tokens}, boundary {o.tail_boundary}; Z3 "
                    f"{z_hit}, {z_b}; refused: {o.refused}; violations: "
                    f"{sorted(broken)}): encoding bug",
                )
            return Witness(True, time.monotonic() - t0, scen, z_hit, z_valid)
    return Witness(
        False,
        time.monotonic() - t0,
        note="no run with a partial-tail hit and a Mamba load satisfies the "
        "tail proof's premises (small layouts): the proof may be vacuous",
    )
