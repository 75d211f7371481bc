"""The layered proof for vLLM 0.33.0's complete-chunk lookup over every layout 0.33.0's
start-up checks accept (partial tails off): per-group lemmas on the exact unbounded turn
(``proofs.turn_chunked``), the abstract loop over any number of groups
(``proofs.abstract_chunked``) and the property from the loop's summary.

Each lemma query is about one group of a given kind in an unknown layout: the rest of
the layout enters only through ``proofs.turn_chunked.Env`` (whether it has a windowed or a
Mamba group, the Mamba group's block size), tied to the group at hand by the start-up
checks. Every size is symbolic and unbounded, the store is uninterpreted, the group's
EAGLE flag and eagle_verified flag are symbolic and so is the state the turn starts
from: a lemma proved for each kind holds for every turn of every group of every layout.

Theorems covered (``covers``): no-partial-state (0.33.0 with align-divides-blocks; the
two fixes with nothing assumed), loads-stored-only (0.33.0 and the completed fix with
nothing assumed, the proposed fix with same-block-size), whole-blocks (with
full-chunk-within-windowed), leaves-last-token and termination; maximality (with no-eagle
and caps-reach-prompt) in ``proofs.maximality_layers_chunked``. Counterexamples still come
from the bounded exact encoding (``proofs.check_chunked``).

loads-stored-only, as for 0.24.0 (``proofs.layers``): the loop tracks ``OK(g, y)``
("the chunks group g needs for a hit ending at y answer HIT", ``turn_chunked.chunks_ok``):
lemma post (a turn that neither stops, defers nor has its window cut by the fix's
round-down leaves its group OK) and lemma down (full attention stays OK below); the
final step shows that what each group loads (``turn_chunked.load_plan``) lies within what
OK covers. whole-blocks (``whole_query``): the loop tracks the hit against the last
turn's chunk and every windowed group's; the final step closes for a full-attention
group beside a windowed one (full-chunk-within-windowed names it) and, in a layout of
full-attention groups alone, by the precondition's clause that they share one chunk
size (without it a later full-attention group can cut the hit inside an earlier one's
chunk: tests/scenarios/vllm-0.33.0-whole-blocks, model and real 0.33.0 agree). The nonlinear
quotients get instances of two small arithmetic lemmas
(``division_facts``: division-monotone, division-exact), each proved by its own query.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import z3

from model.evaluate import evaluate
from model.scenario import parse_scenario
from model.semantics import Semantics
from proofs import (
    abstract_chunked,
    assume,
    lemmas_chunked,
    memo,
    pinned_chunked,
    pinned_violation_chunked,
    premises_chunked,
    tail_layers_chunked,
    turn_chunked,
)
from proofs.abstract_chunked import obligations
from proofs.encoding import NEXT_NONE, Enc, State, fresh_state
from proofs.encoding_chunked import LAYERED_GPU_HIT_WORDS, UNMODELLED_WORDS
from proofs.lemmas_chunked import assumed as loop_assumes
from proofs.lemmas_chunked import fact
from proofs.witness import BACKSTOP_MS, Witness
from releases.base import ChunkSteps

if TYPE_CHECKING:
    from proofs.check import Verdict



def scope_words(sem: Semantics) -> str:
    """What the tails-off layered proof covers on ``sem`` (its release's layouts)."""
    return (
        f"every layout {sem.base_version} accepts (any number of groups of each kind, each "
        "with its own block size; any blocks_per_chunk, window, prompt and caps; EAGLE on "
        f"any group), partial tails off (prefix_match_unit unset); {LAYERED_GPU_HIT_WORDS}; "
        f"{UNMODELLED_WORDS}"
    )


# the theorems the layered proof covers, and the preconditions it may take
COVERED = (
    "no-partial-state",
    "loads-stored-only",
    "whole-blocks",
    "leaves-last-token",
    "termination",
)
TAKES = (
    "align-divides-blocks",
    "no-eagle",
    "mamba-mode-not-all",
    "same-block-size",
    "full-chunk-within-windowed",
)

Query = tuple[str, Callable[[], list[z3.BoolRef]]]


def covers(thm: str, assumed: Sequence[str]) -> bool:
    from proofs import maximality_layers_chunked  # maximality: its own module

    return (
        thm in COVERED and all(p in TAKES for p in assumed)
    ) or maximality_layers_chunked.covers(thm, assumed)


def _aligned(thm: str) -> bool:
    return thm == "no-partial-state"


def _whole(thm: str) -> bool:
    """The loop tracks the hit against the chunks (``proofs.abstract_chunked``)."""
    return thm == "whole-blocks"


def _stored(thm: str) -> bool:
    """The loop tracks OK (``proofs.abstract_chunked``): what each group loads is HIT."""
    return thm == "loads-stored-only"


@dataclass
class _Setup:
    enc: Enc
    cfg: turn_chunked.Cfg
    d: turn_chunked.D
    premises: list[z3.BoolRef]
    env: turn_chunked.Env


def _setup(assumed: Sequence[str], kinds: Sequence[str],
           steps: ChunkSteps = turn_chunked.STOCK) -> _Setup:
    """The premises of a query about ``kinds``, groups of an unknown layout of the release
    with ``steps`` (``mamba_all``: its Mamba groups may run mode "all")."""
    enc = Enc()
    cfg = turn_chunked.symbolic_config(kinds, steps=steps)
    env = turn_chunked.symbolic_env()
    d = turn_chunked.derive(enc, cfg, env)
    premises = [turn_chunked.startup(enc, cfg)] + [
        turn_chunked.precondition(p, enc, cfg, d) for p in assumed
    ]
    return _Setup(enc, cfg, d, premises, env)


def _finish(enc: Enc, cons: list[z3.BoolRef]) -> list[z3.BoolRef]:
    cons = cons + enc.cons
    return cons + enc.grounded(cons)


def _monotone(
    x: z3.ArithRef, y: z3.ArithRef, d: z3.ArithRef, qx: z3.ArithRef, qy: z3.ArithRef
) -> z3.BoolRef:
    """Instance of lemma division-monotone: ``x <= y`` gives ``x // d <= y // d`` (and
    the same for cdiv), ``qx``, ``qy`` the quotients by ``d > 0``."""
    return z3.Implies(z3.And(d > 0, x <= y), qx <= qy)


def _exact(x: z3.ArithRef, d: z3.ArithRef, q: z3.ArithRef, k: z3.ArithRef) -> z3.BoolRef:
    """Instance of lemma division-exact: ``x == d * k`` gives ``x // d == k`` (``q``)."""
    return z3.Implies(z3.And(d > 0, x == d * k), q == k)


def division_facts(enc: Enc, counts: Sequence[z3.ArithRef] = ()) -> list[z3.BoolRef]:
    """Lemma division-monotone at every pair of quotients the query names with one
    divisor (floor and ceiling apart), and division-exact at every floor quotient with
    the others of its divisor and ``counts``: the facts the solver's nonlinear
    arithmetic would otherwise have to find."""
    by: dict[tuple[str, int], list[tuple[z3.ArithRef, z3.ArithRef, z3.ArithRef]]] = {}
    for (kind, _, did), (x, d, q) in enc.memo.items():
        by.setdefault((kind, did), []).append((x, d, q))
    out = []
    for (kind, _), items in by.items():
        for i, (x, d, qx) in enumerate(items):
            for y, _, qy in items[i + 1 :]:
                out += [_monotone(x, y, d, qx, qy), _monotone(y, x, d, qy, qx)]
            if kind == "floor":
                out += [
                    _exact(x, d, qx, k)
                    for k in [q for _, _, q in items if q is not qx] + list(counts)
                ]
    return out


def monotone_lemma(ceiling: bool) -> list[z3.BoolRef]:
    """division-monotone, proved: for ``d > 0`` and ``x <= y``, ``x // d <= y // d``
    (``cdiv`` with ``ceiling``)."""
    x, y, d = z3.Ints("x y d")
    enc = Enc()
    div = enc.cdiv if ceiling else enc.floordiv
    return enc.cons + [z3.Not(_monotone(x, y, d, div(x, d), div(y, d)))]


def exact_lemma() -> list[z3.BoolRef]:
    """division-exact, proved: for ``d > 0``, ``(d * k) // d == k``."""
    x, d, k = z3.Ints("x d k")
    enc = Enc()
    return enc.cons + [z3.Not(_exact(x, d, enc.floordiv(x, d), k))]


# the arithmetic lemmas whose instances ``division_facts`` adds (each query unsatisfiable)
ARITHMETIC: list[Query] = [
    ("lemma division-monotone (floor)", partial(monotone_lemma, False)),
    ("lemma division-monotone (cdiv)", partial(monotone_lemma, True)),
    ("lemma division-exact", exact_lemma),
]


def _ma(enc: Enc, d: turn_chunked.D, y: z3.ArithRef, name: str) -> z3.BoolRef:
    """``y`` is a multiple of the Mamba align size."""
    return y == d.align * enc.floordiv(y, d.align, name)


Pin = Callable[[turn_chunked.Cfg, State, turn_chunked.Step], list[z3.BoolRef]]


@dataclass(frozen=True)
class LemmaParts:
    """A turn lemma's query (``lemma_turn``) before its store facts are grounded: the
    premises (start-up, the preconditions), the division facts ``post`` takes, the negated
    claim, the helpers' constraints (a snapshot of ``enc.cons``) and the terms a pin reads
    (``cfg``, the state the turn starts from, the turn)."""

    enc: Enc
    premises: tuple[z3.BoolRef, ...]
    helpers: tuple[z3.BoolRef, ...]
    negation: z3.BoolRef
    cons: tuple[z3.BoolRef, ...]
    cfg: turn_chunked.Cfg
    st: State | None
    turn: turn_chunked.Step | None

    def query(self, pinned: Sequence[z3.BoolRef] = (), negated: bool = True
              ) -> list[z3.BoolRef]:
        """The query ``lemma_turn`` builds: the premises, ``pinned`` (a pin's terms), the
        division facts, the negated claim (``negated``), the helpers' constraints and the
        store facts grounded on all of them (``_finish``: the same terms, in the same
        order; an instance grounded before on ``enc`` is not built again)."""
        assert len(self.enc.cons) == len(self.cons), "the helpers' constraints are fixed"
        cons = [*self.premises, *pinned, *self.helpers,
                *([self.negation] if negated else []), *self.cons]
        return cons + self.enc.grounded(cons)


def lemma_parts(sem: Semantics, assumed: Sequence[str], name: str, kind: str) -> LemmaParts:
    """The parts of lemma ``name``'s query about a group of ``kind`` (``lemma_turn``)."""
    x = _setup(assumed, (kind,), sem.steps)
    st = fresh_state(x.enc, 1, "pre")
    _, t = turn_chunked.group_step(x.enc, x.cfg, x.d, sem, st, 0)
    if name == "chunk-positive":
        claim = fact(name, x.d.tpc[0])
    elif name == "cut-on-chunk":  # the multiple, named: one of the turn's chunk counts
        tpc = x.d.tpc[0]
        claim = fact(name, t, lambda y: z3.Or([y == tpc * k for k in t.ends]))
    elif name == "chunk-in-align":  # y = k * tpc, and tpc = c * A (align-divides-blocks)
        y, k = z3.Int("on_chunk"), z3.Int("chunks")
        c = z3.Int("chunks_per_align0")
        claim = fact(name, x.d.align_on, y == x.d.tpc[0] * k, y == x.d.align * (c * k))
    elif name == "align-after":
        claim = fact(name, t, x.d.align_on, _ma(x.enc, x.d, t.m2, "m2_in_align"))
    elif name == "post":
        claim = fact(name, t, turn_chunked.chunks_ok(x.enc, x.cfg, x.d, 0, t.m2))
    elif name == "down":  # two bounds, from any state: the turn plays no part
        a, b = z3.Int("lower"), z3.Int("upper")
        claim = fact(
            name,
            a,
            b,
            turn_chunked.chunks_ok(x.enc, x.cfg, x.d, 0, a),
            turn_chunked.chunks_ok(x.enc, x.cfg, x.d, 0, b),
        )
    else:
        claim = fact(name, t)
    helpers = division_facts(x.enc, t.ends) if name == "post" else []
    return LemmaParts(x.enc, tuple(x.premises), tuple(helpers), z3.Not(claim),
                      tuple(x.enc.cons), x.cfg, st, t)


# the lemma queries' parts built during one ``prove`` call (by what they are built from:
# the semantics' name, the preconditions, the lemma, the kind): the premises audit and the
# proof of the same call (``lemma_premises``, ``proof_lemma``; maximality's likewise) build
# each once and ground their queries from them. Emptied when the call ends, so a query is
# never built from code a test or a mutant has replaced since
_PARTS: dict[tuple[object, ...], LemmaParts] = {}
_PROVING: list[bool] = []  # non-empty while ``prove`` runs


def kept(key: tuple[object, ...], build: Callable[[], LemmaParts]) -> LemmaParts:
    """The parts under ``key`` built before in this ``prove`` call, else ``build()`` (kept
    while a ``prove`` call runs)."""
    got = _PARTS.get(key)
    if got is None:
        got = build()
        if _PROVING:
            _PARTS[key] = got
    return got


def _parts(sem: Semantics, assumed: Sequence[str], name: str, kind: str) -> LemmaParts:
    return kept((sem.name, tuple(assumed), name, kind),
                partial(lemma_parts, sem, assumed, name, kind))


def lemma_turn(
    sem: Semantics,
    assumed: Sequence[str],
    name: str,
    kind: str,
    pin: Pin | None = None,
    negated: bool = True,
) -> list[z3.BoolRef]:
    """A fact of ``proofs.lemmas_chunked`` about one turn of a group of ``kind``, from any
    state (every flag, eagle_verified included, symbolic), on the exact encoding. Tests
    ``pin`` the configuration, state or turn to a case (an unverified EAGLE group, say),
    or leave the negated claim out (``negated``) to see the premises hold there."""
    x = lemma_parts(sem, assumed, name, kind)
    assert x.st is not None and x.turn is not None
    return x.query(() if pin is None else pin(x.cfg, x.st, x.turn), negated)


def proof_lemma(sem: Semantics, assumed: Sequence[str], name: str, kind: str
                ) -> list[z3.BoolRef]:
    """``lemma_turn``'s query, from the parts this ``prove`` call built (``_parts``)."""
    return _parts(sem, assumed, name, kind).query()


# premise satisfiability of the lemma queries (issue 23): each lemma's premises (start-up,
# the request rules, the preconditions, the derived quantities, a turn from any state)
# hold on the pinned request of proofs.premises_chunked (a GPU hit of 64 tokens, the
# group's block, 32 tokens, other than the layout's Mamba block, 16, where the
# preconditions allow), replayed through model/ with a Mamba load


def lemma_premises(sem: Semantics, assumed: Sequence[str], name: str, kind: str) -> str | None:
    """None when lemma ``name``'s query about a group of ``kind`` has satisfiable premises
    on the pinned request, with a Mamba group elsewhere in the layout (block sizes as the
    preconditions allow: ``premises_chunked.block_for``), replayed through model/ under
    the preconditions; else why not."""
    p = premises_chunked.Pin(kind, True, block=premises_chunked.block_for(kind, assumed))
    cfg = turn_chunked.symbolic_config((kind,), steps=sem.steps)
    env = turn_chunked.symbolic_env()

    def build() -> list[z3.BoolRef]:  # lemma_turn's query, pinned, without its claim
        x = _parts(sem, assumed, name, kind)
        return x.query(premises_chunked.pins(p, x.cfg, env), negated=False)

    key = ("turn", sem.reround_mamba, sem.reround_rerun, sem.steps, name, kind)
    return premises_chunked.holds(build, key, p, sem, cfg, env, assumed=assumed)


PREMISES = f"premises: {premises_chunked.WORDS}"


def premises_query(sem: Semantics, assumed: Sequence[str], names: Sequence[str]
                   ) -> list[z3.BoolRef]:
    """``lemma_premises`` for every lemma of ``names`` (on the turn) and kind, as a
    query named ``PREMISES``: unsatisfiable exactly when all hold; a failure is printed."""
    checks: list[premises_chunked.Check] = [
        (f"lemma {name} ({kind})", partial(lemma_premises, sem, assumed, name, kind))
        for name in names
        if name != "initial-aligned"  # about the initial bound, not a turn: the witness
        for kind in ((turn_chunked.FA,) if name == "down" else turn_chunked.KINDS)
    ]
    return premises_chunked.query(PREMISES, checks, sem)


def lemma_initial(assumed: Sequence[str], steps: ChunkSteps = turn_chunked.STOCK
                  ) -> list[z3.BoolRef]:
    """initial-aligned, on the exact initial max hit of an unknown layout."""
    x = _setup(assumed, (turn_chunked.FA,), steps)
    m0 = turn_chunked.initial_max_hit(x.enc, x.cfg, x.d, steps)
    claim = fact("initial-aligned", x.d.align_on, _ma(x.enc, x.d, m0, "m0_in_align"))
    return _finish(x.enc, x.premises + [z3.Not(claim)])


# whole-blocks' final step for a full-attention group (group 0): the other group of the
# query is the windowed group full-chunk-within-windowed names, or, in a layout without
# one, the group of the loop's last turn (the summary bounds the hit by their chunks; the
# precondition gives the two full-attention groups one chunk size)
WHOLE_CASES = {
    "a sliding-window group": turn_chunked.SW,
    "a Mamba group": turn_chunked.MAMBA,
    "no windowed group": turn_chunked.FA,
}


@dataclass(frozen=True)
class Final:
    """The terms of a property step (``final_query``, ``whole_query``): its setup, the
    loop's end ``y``, the facts the summary gives at ``y``, the answer ``r`` and the
    property's violation there."""

    x: _Setup
    y: z3.ArithRef
    facts: list[z3.BoolRef]
    r: turn_chunked.Result
    violation: z3.BoolRef


def whole_query(
    assumed: Sequence[str],
    kind: str,
    case: str | None = None,
    steps: ChunkSteps = turn_chunked.STOCK,
    negated: bool = True,
) -> list[z3.BoolRef]:
    """whole-blocks at the loop's end for a group of ``kind`` (a full-attention group:
    in ``case``), from ``proofs.abstract_chunked.summary``: the hit covers a chunk of the
    last turn's group and of every windowed group. Tests leave the violation out
    (``negated``) to see the premises hold."""
    f = whole_terms(assumed, kind, case, steps)
    return _finish(f.x.enc, f.x.premises + f.facts
                   + ([f.violation] if negated else [turn_chunked.active(f.r)]))


def whole_terms(
    assumed: Sequence[str],
    kind: str,
    case: str | None = None,
    steps: ChunkSteps = turn_chunked.STOCK,
) -> Final:
    """The terms of ``whole_query`` (``proofs.pinned_violation_chunked`` pins them)."""
    other = WHOLE_CASES[case] if kind == turn_chunked.FA and case is not None else None
    x = _setup(assumed, (kind,) if other is None else (kind, other), steps)
    enc, cfg, d = x.enc, x.cfg, x.d
    y = z3.Int("final_max_hit")
    nc = cfg.computed
    facts = [y - nc >= 1, y <= turn_chunked.initial_max_hit(enc, cfg, d, steps)]
    if kind != turn_chunked.FA:  # a windowed group: the summary's chunk bound at it
        facts.append(y - nc >= d.tpc[0])
    elif other == turn_chunked.FA:  # no windowed group: the last turn's group is group 1
        facts += [z3.Not(x.env.has_windowed), y - nc >= d.tpc[1]]
    else:  # the windowed group the precondition names is group 1
        facts.append(y - nc >= d.tpc[1])
    st = State(
        y,
        y - nc,
        z3.BoolVal(False),
        z3.BoolVal(False),
        (z3.BoolVal(False),) * len(cfg.kinds),
        z3.IntVal(NEXT_NONE),
        z3.BoolVal(False),
    )
    r = turn_chunked.result_of(enc, cfg, d, st, [0])
    violation = z3.And(turn_chunked.active(r), r.hit < d.tpc[0])
    return Final(x, y, facts, r, violation)


def final_query(
    thm: str, assumed: Sequence[str], kind: str, steps: ChunkSteps = turn_chunked.STOCK
) -> list[z3.BoolRef]:
    """The property at the loop's end (``final_terms``), asked: unsatisfiable when it
    holds (``proofs.pinned_violation_chunked`` pins the same terms on counterexamples)."""
    f = final_terms(thm, assumed, kind, steps)
    return _finish(f.x.enc, f.x.premises + f.facts + [f.violation])


def final_terms(
    thm: str, assumed: Sequence[str], kind: str, steps: ChunkSteps = turn_chunked.STOCK
) -> Final:
    """The property at the loop's end for a group of ``kind`` of an unknown layout, from
    ``proofs.abstract_chunked.summary`` read exactly: the loop ended neither stopped nor
    deferred with max_hit_size_tokens ``y`` (num_hit_tokens = y - num_computed_tokens),
    ``y`` at most the initial max hit and, with rounding, on the align size. The other
    groups' being-loaded delay is left out (it only ever defers more)."""
    x = _setup(assumed, (kind,), steps)
    enc, cfg, d = x.enc, x.cfg, x.d
    y = z3.Int("final_max_hit")
    nc = cfg.computed
    m0 = turn_chunked.initial_max_hit(enc, cfg, d, steps)
    facts = [y - nc >= 1, y <= m0]
    if _aligned(thm):
        facts.append(z3.Implies(d.align_on, y == d.align * z3.Int("final_in_align")))
    if _stored(thm):  # the summary's OK at this group
        facts.append(turn_chunked.chunks_ok(enc, cfg, d, 0, y))
    st = State(
        y,
        y - nc,
        z3.BoolVal(False),
        z3.BoolVal(False),
        (z3.BoolVal(False),),
        z3.IntVal(NEXT_NONE),
        z3.BoolVal(False),
    )
    r = turn_chunked.result_of(enc, cfg, d, st, [0])
    violation = turn_chunked.VIOLATIONS[thm](enc, cfg, d, r)
    helpers = division_facts(enc) if _stored(thm) else []
    return Final(x, y, facts + helpers, r, violation)


# the engine's local-tail choice (0.32.0+, fine GPU hits): the encodings' GPU hit is the
# connector's (the engine's, rounded down to the scheduler block); the engine then keeps
# its own sub-block tail and loads nothing unless the connector's hit is longer
LOCAL_TAIL = "the engine's local-tail choice (scheduler.py:1167, :1179) keeps the property"


def local_tail_query(thm: str, kind: str, negated: bool = True) -> list[z3.BoolRef]:
    """What the engine loads when it keeps its local tail (``turn_chunked.engine_choice``:
    any local tail, any answer of the connector) violates no ``thm``, for a group of
    ``kind`` of an unknown layout (start-up and request rules alone). Otherwise it loads
    the connector's answer itself (``local_tail_rest_query``), whose violation is the
    proved property's: every violation is a function of the configuration and the answer.
    ``negated`` False: the premises alone (a kept tail), to see them hold."""
    x = _setup((), (kind,))
    tail = z3.Int("local_tail")
    r = turn_chunked.Result(z3.Bool("connector_deferred"), z3.Int("connector_hit"))
    chosen = turn_chunked.engine_choice(tail, r)
    bad = turn_chunked.VIOLATIONS[thm](x.enc, x.cfg, x.d, chosen)
    return _finish(x.enc, x.premises + [turn_chunked.keeps_tail(tail, r)]
                   + ([bad] if negated else [x.cfg.computed > 0]))


def local_tail_rest_query() -> list[z3.BoolRef]:
    """Unless the engine keeps its local tail, what it takes is the connector's answer."""
    tail = z3.Int("local_tail")
    r = turn_chunked.Result(z3.Bool("connector_deferred"), z3.Int("connector_hit"))
    c = turn_chunked.engine_choice(tail, r)
    return [tail >= 0, z3.Not(turn_chunked.keeps_tail(tail, r)),
            z3.Or(c.deferred != r.deferred, c.hit != r.hit)]


def final_kinds(thm: str) -> tuple[str, ...]:
    """The kinds whose group ``final_query`` asks ``thm`` of: the Mamba groups'
    property, or the layout's (every group's loads, or the full-attention hit)."""
    if thm == "no-partial-state":
        return (turn_chunked.MAMBA,)
    return turn_chunked.KINDS if _stored(thm) else (turn_chunked.FA,)


def proof_queries(thm: str, sem: Semantics, assumed: Sequence[str]) -> list[Query]:
    """Every query of the layered proof: each must be unsatisfiable."""
    if thm == "maximality":  # proofs/maximality_layers_chunked.py
        from proofs import maximality_layers_chunked

        return maximality_layers_chunked.proof_queries(sem, assumed)
    aligned, stored, whole = _aligned(thm), _stored(thm), _whole(thm)
    names = loop_assumes(sem.reround_mamba, sem.reround_rerun, aligned, stored)
    # the per-group environment and start-up admit accepted layouts (proofs.pinned_chunked)
    out: list[Query] = [(pinned_chunked.NAME, partial(pinned_chunked.query, sem.name))]
    if thm in pinned_violation_chunked.PINNED:  # the property step's violation is not
        # vacuous: it holds on the committed counterexamples (proofs.pinned_violation_chunked)
        out.append((pinned_violation_chunked.name(thm),
                    partial(pinned_violation_chunked.query, thm)))
    loop = obligations(sem.reround_mamba, sem.reround_rerun, aligned, stored, whole)
    # every fact the loop assumes is one of the lemmas below (down: full attention's);
    # asked first: it is cheap
    only = {(lemmas_chunked.WHERE, "down"): abstract_chunked.full_attention}
    out.append((assume.AUDIT,
                partial(assume.audit_query, loop, {lemmas_chunked.WHERE: names}, only)))
    if thm in turn_chunked.VIOLATIONS:  # what the engine loads of the proved answer
        # (cheap, no precondition: asked before the costly queries)
        out.append((f"{LOCAL_TAIL}: it loads the connector's answer or nothing",
                    local_tail_rest_query))
        for kind in turn_chunked.KINDS if whole else final_kinds(thm):
            out.append((f"{LOCAL_TAIL}: a kept tail loads nothing ({kind})",
                        partial(local_tail_query, thm, kind)))
    out += list(ARITHMETIC) if stored else []
    for name in names:
        if name == "initial-aligned":
            out.append((f"lemma {name}", partial(lemma_initial, assumed, sem.steps)))
            continue
        for kind in (
            (turn_chunked.FA,) if name == "down" else turn_chunked.KINDS
        ):  # down: full attention's
            out.append((f"lemma {name} ({kind})", partial(proof_lemma, sem, assumed, name, kind)))
    out.append((PREMISES, partial(premises_query, sem, assumed, names)))
    for name, q in loop:
        out.append((name, partial(list, q)))
    if whole:
        for kind in turn_chunked.KINDS:
            for case in WHOLE_CASES if kind == turn_chunked.FA else (None,):
                where = f"{kind}, {case}" if case else kind
                out.append(
                    (
                        f"property from the summary ({where})",
                        partial(whole_query, assumed, kind, case, sem.steps),
                    )
                )
    elif thm != "termination":
        for kind in final_kinds(thm):  # a property of the Mamba groups / of the layout
            out.append(
                (
                    f"property from the summary ({kind})",
                    partial(final_query, thm, assumed, kind, sem.steps),
                )
            )
    return out


_PROVED: set[tuple[object, ...]] = set()
# the queries proved in this process, keyed by ``query_key``: about half the queries of
# the four 0.33.0 semantics are the same terms (a lemma or step the semantics'
# differences do not reach); the same terms have the same answer, so they are not asked
# again. Each key maps to the query itself: holding its terms keeps their ids from being
# reused by other terms.
_PROVED_TEXT: dict[tuple[int, ...], list[z3.BoolRef]] = {}
# likewise the queries answered sat in this process (a refuted statement's layered proof
# asked again by another check of the same process: the guard, the accepted layouts)
_REFUTED_TEXT: dict[tuple[int, ...], list[z3.BoolRef]] = {}


def query_key(q: Sequence[z3.BoolRef]) -> tuple[int, ...]:
    """The query's terms by identity: Z3 hash-conses the terms of a context, so two
    structurally equal terms alive at once have one id (and so one key), and two
    different terms never share one; the context's own id comes first. (The key was the
    SHA-1 of the terms' text: same answers, ~8 s of Z3_ast_to_string per run.)"""
    ctx = q[0].ctx if q else z3.main_ctx()
    assert all(x.ctx is ctx for x in q), "a query in one Z3 context"
    return (id(ctx), *(x.get_id() for x in q))


def prove(
    thm: str, sem: Semantics, assumed: Sequence[str], timeout_ms: int
) -> tuple[str, str, float]:
    """('PROVED' | 'FAILED' | 'UNKNOWN', which query, seconds). A lemma proved once in
    this process (same semantics and preconditions) is not asked again."""
    _PROVING.append(True)
    try:
        if thm == "maximality":  # proofs/maximality_layers_chunked.py
            from proofs import maximality_layers_chunked

            return maximality_layers_chunked.prove(sem, assumed, timeout_ms)
        return _prove(thm, sem, assumed, timeout_ms)
    finally:
        _PROVING.pop()
        if not _PROVING:
            _PARTS.clear()


def _prove(
    thm: str, sem: Semantics, assumed: Sequence[str], timeout_ms: int
) -> tuple[str, str, float]:
    t0 = time.monotonic()
    deadline = t0 + timeout_ms / 1000
    for name, build in proof_queries(thm, sem, assumed):
        key = (
            (sem.name, tuple(sorted(assumed)), name)
            if name.startswith("lemma")
            else (thm, sem.name, tuple(sorted(assumed)), name)
        )
        if key in _PROVED:
            continue
        failed = ask_unsat(name, build(), t0, deadline)
        if failed is not None:
            return failed
        _PROVED.add(key)
    return "PROVED", "", time.monotonic() - t0


# Z3's nonlinear arithmetic without its Groebner-basis and tangent-plane lemmas, for the
# nonlinear lemmas post and keeps (every kind): over every lemma query of the four 0.33.0
# semantics and Z3 seeds 0..5 it answered unsat everywhere and took 41% less CPU in all
# (post sliding-window mean 3.76 -> 2.20 s, keeps sliding-window 3.13 -> 1.74 s, max
# 14.76 -> 4.04 s); elsewhere it gains nothing measurable, and on one satisfiable query
# (chunk-in-align, Mamba, 0.33.0 without align-divides-blocks) it answered unknown on a
# seed, so the other queries keep Z3's defaults (bench/params_all_chunked.py,
# bench/results/params_chunked.txt). A setting changes how Z3 searches, never what a query
# means: unsat under any setting proves the lemma, so ``query_key`` needs no setting.
LIGHT_NL = (("smt.arith.nl.grobner", False), ("smt.arith.nl.tangents", False))
LIGHT_NL_LEMMAS = ("lemma post (", "lemma keeps (")


def settings(name: str) -> tuple[tuple[str, bool], ...]:
    """The Z3 settings for the query called ``name`` (a lemma and its kind)."""
    return LIGHT_NL if name.startswith(LIGHT_NL_LEMMAS) else ()


def solver_with(params: Sequence[tuple[str, bool]]) -> z3.Solver:
    """A ``z3.Solver`` with these parameters set."""
    s = z3.Solver()
    for key, value in params:
        s.set(key, value)
    return s


def new_solver(name: str = "") -> z3.Solver:
    """The solver ``ask_unsat`` asks for query ``name``."""
    return solver_with(settings(name))


def ask_unsat(
    name: str, q: list[z3.BoolRef], t0: float, deadline: float
) -> tuple[str, str, float] | None:
    """None when query ``name`` is unsatisfiable (proved now, or its text proved before in
    this process), else ('FAILED' | 'UNKNOWN', why, seconds since t0)."""
    key = query_key(q)
    if key in _PROVED_TEXT:
        return None
    if key in _REFUTED_TEXT:
        res = z3.sat
    else:
        left = int((deadline - time.monotonic()) * 1000)
        if left <= 0:
            return "UNKNOWN", f"{name}: out of time", time.monotonic() - t0
        s = new_solver(name)
        s.set("timeout", left)
        s.add(*q)
        res = memo.check(s, "z3.Solver", settings(name))  # answered once per run
    if res == z3.sat:
        _REFUTED_TEXT[key] = list(q)
        if name.startswith(LOCAL_TAIL):  # no precondition: never expected to fail
            import sys

            print(f"{name}: FAILED: a kept tail loads what violates it", file=sys.stderr,
                  flush=True)
        return "FAILED", name, time.monotonic() - t0
    if res == z3.unknown:
        return "UNKNOWN", f"{name}: solver returned unknown", time.monotonic() - t0
    _PROVED_TEXT[key] = list(q)
    return None


# --- witnesses: the premises hold on a run with a hit that restores a Mamba state -------

WITNESS_LAYOUTS: tuple[tuple[str, ...], ...] = (
    (turn_chunked.MAMBA,),
    (turn_chunked.FA, turn_chunked.MAMBA),
    (turn_chunked.FA, turn_chunked.SW, turn_chunked.MAMBA),
)
WITNESS_CHUNKS = 4


def _witness_query(
    sem: Semantics, assumed: Sequence[str], kinds: tuple[str, ...], gpu: int, bpc: int, passes: int
) -> tuple[z3.Solver, turn_chunked.Cfg, z3.ArithRef]:
    """A run of the whole loop composed of exact turns (``turn_chunked.run_loop``) under
    the layered proof's premises (start-up, request rules, preconditions), with a
    non-zero hit that restores a Mamba state; block sizes fixed, at most
    ``WITNESS_CHUNKS`` chunks per group."""
    enc = Enc(bound=WITNESS_CHUNKS + 2)
    cfg = replace(
        turn_chunked.symbolic_config(kinds, steps=sem.steps),  # the release's caps, modes
        gpu=tuple(z3.IntVal(gpu) for _ in kinds),
        bpc=z3.IntVal(bpc),
        window=tuple(None if k != turn_chunked.SW else z3.IntVal(2 * gpu * bpc) for k in kinds),
    )
    d = turn_chunked.derive(enc, cfg)
    cons = [turn_chunked.startup(enc, cfg)] + [
        turn_chunked.precondition(p, enc, cfg, d) for p in assumed
    ]
    cons += [k <= WITNESS_CHUNKS for k in d.keys]
    st = turn_chunked.run_loop(enc, cfg, d, sem, passes)
    r = turn_chunked.result_of(enc, cfg, d, st)
    mamba = [g for g, k in enumerate(kinds) if k == turn_chunked.MAMBA]
    loads = turn_chunked.load_plan(enc, cfg, d, r.hit, mamba)
    cons += [
        turn_chunked.finished(st),
        turn_chunked.active(r),
        cfg.prefix_caching,
        z3.Or([loads[g].pending > 0 for g in mamba]),
    ]
    s = z3.Solver()
    s.add(*(cons + enc.cons))
    return s, cfg, r.hit


def scenario_of(
    m: z3.ModelRef, cfg: turn_chunked.Cfg, sem: Semantics, bound: int
) -> dict[str, Any]:
    def b(e: z3.BoolRef) -> bool:
        return bool(z3.is_true(m.eval(e, model_completion=True)))

    def i(e: z3.ArithRef) -> int:
        return int(m.eval(e, model_completion=True).as_long())

    prompt, bpc = i(cfg.prompt), i(cfg.bpc)
    groups = []
    for g, kind in enumerate(cfg.kinds):
        gpu = i(cfg.gpu[g])
        n = min(prompt // (gpu * bpc), bound)
        st = cfg.stores[g]
        idx = [z3.IntVal(c) for c in range(n)]
        hit = [c for c in range(n) if b(st.stored(idx[c])) and not b(st.deferred(idx[c]))]
        grp: dict[str, Any] = {
            "kind": kind,
            "gpu_block_size": gpu,
            "stored": "all" if len(hit) == n else hit,
        }
        w = cfg.window[g]
        if w is not None:
            grp["sliding_window"] = i(w)
        if kind == turn_chunked.MAMBA:
            grp["mamba_cache_mode"] = (
                ("all" if b(cfg.mamba_all) else "align") if b(cfg.prefix_caching) else "none")
        if b(cfg.eagle[g]):
            grp["eagle"] = True
        pending = [c for c in range(n) if b(st.stored(idx[c])) and b(st.deferred(idx[c]))]
        retry = [c for c in range(n) if not b(st.stored(idx[c])) and b(st.deferred(idx[c]))]
        loading = [c for c in range(n) if b(st.loading(idx[c]))]
        for name, chunks in (("pending", pending), ("deferred", retry), ("being_loaded", loading)):
            if chunks:
                grp[name] = chunks
        groups.append(grp)
    out: dict[str, Any] = {"semantics": sem.name, "block_size_factor": 1}
    if bpc != 1:
        out["blocks_per_chunk"] = bpc
    out |= {"prompt_tokens": prompt, "num_computed_tokens": i(cfg.computed), "groups": groups}
    if not b(cfg.prefix_caching):
        out["enable_prefix_caching"] = False
    if b(cfg.skip_reading):
        out["skip_reading_prefix_cache"] = True
    if b(cfg.in_flight):
        out["in_flight_transfers"] = True
    if b(cfg.has_new_cap):
        out["max_num_new_tokens"] = i(cfg.new_cap)
    if b(cfg.has_load_cap):
        out["max_load_tokens"] = i(cfg.load_cap)
    return out


# the witnesses found in this process, by (semantics, preconditions) and the functions
# that build the query (a test may replace one): the query reads nothing else (not the
# theorem: theorems with the same premises ask the same one) and each is solved alone
# (proofs.witness._solve_alone), so a found witness is the one a new search would find;
# a search that found none is not kept
_FOUND: dict[tuple[object, ...], Witness] = {}


def witness(thm: str, sem: Semantics, assumed: Sequence[str],
            timeout_ms: int = BACKSTOP_MS) -> Witness:
    """A run the layered proof's premises admit, with a non-zero hit that restores a
    Mamba state, replayed through model/ (same hit, a Mamba load)."""
    if thm == "maximality":  # proofs/maximality_layers_chunked.py
        from proofs import maximality_layers_chunked

        return maximality_layers_chunked.witness(sem, assumed, timeout_ms)

    t0 = time.monotonic()
    deadline = t0 + timeout_ms / 1000
    key = (
        sem,
        tuple(assumed),
        _witness_query,
        turn_chunked.symbolic_config,
        turn_chunked.derive,
        turn_chunked.startup,
        turn_chunked.precondition,
        turn_chunked.run_loop,
        turn_chunked.result_of,
        turn_chunked.load_plan,
    )
    w = replace(_FOUND[key], seconds=0.0) if key in _FOUND else _witness(sem, assumed, deadline)
    if not w.found:
        return w
    _FOUND.setdefault(key, w)
    return _tail_witness(thm, sem, assumed, w, deadline)


def _witness(sem: Semantics, assumed: Sequence[str], deadline: float) -> Witness:
    from proofs.witness import _solve_alone

    t0 = time.monotonic()
    for kinds in WITNESS_LAYOUTS:
        for gpu, bpc, passes in ((1, 1, 1), (2, 1, 1), (1, 2, 1), (2, 2, 2)):
            left = int((deadline - time.monotonic()) * 1000)
            if left <= 0:
                break
            s, cfg, hit = _witness_query(sem, assumed, kinds, gpu, bpc, passes)
            m = _solve_alone(s, left)
            if m is None:
                continue
            scen = scenario_of(m, cfg, sem, WITNESS_CHUNKS + 2)
            z_hit = int(m.eval(hit, model_completion=True).as_long())
            o = evaluate(parse_scenario(scen))
            mamba_load = any(ld.blocks and ld.state_position is not None for ld in o.loads)
            if o.refused or o.hit_tokens != z_hit or not mamba_load:
                return Witness(
                    False,
                    time.monotonic() - t0,
                    scen,
                    z_hit,
                    note=f"witness not reproduced by model/ (hit {o.hit_tokens}, "
                    f"Z3 {z_hit}; refused: {o.refused}): encoding bug",
                )
            return Witness(True, time.monotonic() - t0, scen, z_hit)
    return Witness(
        False,
        time.monotonic() - t0,
        note="no run with a non-zero hit and a Mamba load satisfies the layered "
        "proof's premises (small layouts): the proof may be vacuous",
    )


def _tail_witness(
    thm: str, sem: Semantics, assumed: Sequence[str], w: Witness, deadline: float
) -> Witness:
    """With the tail proof covering ``thm``: its premises too must admit a run, with a
    partial-tail hit that restores a Mamba state (``tail_layers_chunked.witness``; for
    maximality with a valid hit too)."""
    if not tail_layers_chunked.covers(thm):
        return w
    left = max(1000, int((deadline - time.monotonic()) * 1000))
    tw = tail_layers_chunked.witness(thm, sem, assumed, left)
    if not tw.found:
        return replace(tw, seconds=w.seconds + tw.seconds)
    valid = "" if tw.valid_hit is None else f" beside a valid hit of {tw.valid_hit}"
    return replace(
        w,
        seconds=w.seconds + tw.seconds,
        note=f"With partial tails on, a partial-tail hit of {tw.hit}{valid} "
        "that restores a Mamba state, replayed through model/ (`"
        f"{json.dumps(tw.scenario, sort_keys=True)}`).",
    )


def check(thm: str, sem: Semantics, assumed: Sequence[str], timeout_ms: int) -> Verdict | None:
    """A verdict from the layered proof (partial tails off) and, for the layouts with
    partial tails on, the layered tail proof (``proofs.tail_layers_chunked``) or, where that
    does not close, the bounded check; None when the layered proof does not close (the
    caller then runs the bounded check, which finds any counterexample). A bounded
    PROVED verdict with partial tails on carries its own pass bound over the same layouts
    (``check_chunked.check``)."""
    from proofs import check_chunked
    from proofs.check import Verdict
    from proofs.encoding_chunked import SCOPE

    t0 = time.monotonic()
    status, where, _ = prove(thm, sem, assumed, timeout_ms // 2)
    if status != "PROVED":
        return None
    left = max(1000, timeout_ms - int((time.monotonic() - t0) * 1000))
    # partial tails on: the layered tail proof (proofs/tail_layers_chunked.py), else bounded
    tail_status = (
        tail_layers_chunked.prove(thm, sem, assumed, left // 2)[:2]
        if (tail_layers_chunked.covers(thm))
        else ("UNKNOWN", "not covered")
    )
    if tail_status[0] == "PROVED":
        return _with_tails(thm, sem, t0)
    left = max(1000, timeout_ms - int((time.monotonic() - t0) * 1000))
    bounded = check_chunked.check(thm, sem.name, assumed, left, tails_only=True)
    # why a bound remains for partial tails on: the tail proof did not close
    why = (
        "bounded because the layered tail proof (proofs/tail_layers_chunked.py) did not "
        f"close: {tail_status[0]}, {tail_status[1]}"
    )
    scope = (
        f"{scope_words(sem)}; with partial tails on ({why}), within the bounded scope of "
        f"proofs/encoding_chunked.py ({SCOPE.words()})"
    )
    where = (
        "proofs/maximality_layers_chunked.py" if thm == "maximality" else "proofs/layers_chunked.py"
    )
    note = f"layered proof ({where}): {scope_words(sem)}"
    if bounded.status != "PROVED":
        return Verdict(
            bounded.status,
            time.monotonic() - t0,
            bounded.counterexample,
            f"{note}; but partial tails on: {bounded.note}",
        )
    return Verdict(
        "PROVED",
        time.monotonic() - t0,
        note=f"{note}; with partial tails on: {bounded.note}",
        scope=scope,
        tails_bounded=SCOPE.words(),
    )


def _with_tails(thm: str, sem: Semantics, t0: float) -> Verdict:
    """The verdict when the tails-off and the tail layered proofs both close: every
    layout ``sem``'s release accepts, partial tails on or off."""
    from proofs.check import Verdict

    words = tail_layers_chunked.scope_words(sem)
    note = (
        "layered proof (proofs/layers_chunked.py: the complete chunks; "
        f"proofs/tail_layers_chunked.py: the partial tail): {words}"
    )
    return Verdict("PROVED", time.monotonic() - t0, note=note, scope=words)
