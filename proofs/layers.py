"""The per-group lemmas and the final step of a layered proof (see ``proofs.abstract``).

Every query here is about one group of a given kind (and, in the final step, two more
groups of the layout whose block sizes the hit's end depends on), in an unknown layout:
the rest of the layout enters only through ``proofs.encoding.Env`` (whether it has a
windowed group, whether it rounds, the align group's block size), tied to the groups at
hand by the start-up checks. So a query proved for each kind holds for every group of
every layout the release accepts: any number of groups of each kind, each with its own
block size. Each function returns queries that must be unsatisfiable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import z3

from model.semantics import Semantics
from proofs.encoding import (
    FA,
    MAMBA,
    MODE_ALIGN,
    SW,
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
    symbolic_env,
    zmax,
)
from proofs.lemmas import Turn, fact
from proofs.theorems import Context, precondition_formula, valid_hit

KINDS = (FA, SW, MAMBA)
# the final step's groups: the one the property looks at, the group on whose block the
# hit ends, the group of the loop's last turn (their kinds do not matter to the step)
ROLES = ("the group", "where the hit ends", "the last turn")

Query = tuple[str, Callable[[bool], list[z3.BoolRef]]]  # built with or without rich grounding


def _setup(sem: Semantics, assumed: Sequence[str], kinds: Sequence[str], rich: bool = False
           ) -> tuple[Enc, Config, Derived, list[z3.BoolRef]]:
    enc = Enc(rich=rich)
    cfg = symbolic_config(kinds)
    d = derive(enc, cfg, sem, symbolic_env())
    premises = [startup(cfg, sem)] + [precondition_formula(p, enc, cfg, d) for p in assumed]
    return enc, cfg, d, premises


def _finish(enc: Enc, cons: list[z3.BoolRef]) -> list[z3.BoolRef]:
    cons = cons + enc.cons
    return cons + enc.grounded(cons)


def _on_block(enc: Enc, obs: z3.ArithRef, y: z3.ArithRef) -> z3.BoolRef:
    """``y`` is a multiple of ``obs`` (> 0)."""
    return y == obs * enc.floordiv(y, obs, "blocks")


def _turn(sem: Semantics, assumed: Sequence[str], kind: str, rich: bool
          ) -> tuple[Enc, Config, Derived, list[z3.BoolRef], Turn]:
    enc, cfg, d, pre = _setup(sem, assumed, (kind,), rich)
    st = fresh_state(enc, 1, "pre")
    _, info = group_step(enc, cfg, d, st, 0)
    out = info.outcome
    return enc, cfg, d, pre, Turn(info.m1, info.too_short, out.deferred, out.no_hit, out.cut,
                                  info.m2)


def _turn_claim(enc: Enc, cfg: Config, d: Derived, t: Turn, name: str) -> z3.BoolRef:
    """The fact ``name`` of ``proofs.lemmas`` about the turn ``t`` (not keeps)."""
    if name == "post":
        return fact(name, t, ok_facts(enc, cfg, d, 0, t.m2))
    if name == "no-hit-not-deferred":
        return fact(name, t)
    if name == "cut-on-block":
        return fact(name, t.cut, partial(_on_block, enc, d.obs[0]))
    if name == "block-positive":
        return fact(name, d.obs[0])
    assert name == "cap-on-block", name
    return fact(name, d.cap[0], partial(_on_block, enc, d.obs[0]))


def lemma_turn(sem: Semantics, assumed: Sequence[str], name: str, kind: str,
               rich: bool = False) -> list[z3.BoolRef]:
    """A fact of ``proofs.lemmas`` about one turn, on the exact encoding."""
    enc, cfg, d, pre, t = _turn(sem, assumed, kind, rich)
    if name != "keeps":
        return _finish(enc, pre + [z3.Not(_turn_claim(enc, cfg, d, t, name))])
    # keeps: with a valid hit h* and max hit >= nc + h*, the turn finds a hit and does
    # not cut below nc + h*
    h = z3.Int("larger_hit")
    ctx = Context(enc, cfg, d, sem, Result(z3.BoolVal(False), h),
                  initial_max_hit(enc, cfg, d, sem))
    ld = load_plan(enc, cfg, d, h, [0])[0]
    # the run the lookup must find starts where the valid hit's load starts
    enc.hints.setdefault("0", []).extend([ld.lo, ld.hi - 1])
    pre.append(valid_hit(ctx, h))
    window = cfg.window[0]
    if window is not None and "window-not-one-past-blocks" in assumed:
        # lemma window-span, at the valid hit's load
        pre.append(window_span(enc, cfg.computed + h, window, d.obs[0]))
    claim = fact(name, t, cfg.computed + h)
    return _finish(enc, pre + [z3.Not(claim)])


# the turn facts ``lemma_turns`` asks together (keeps has premises of its own)
TURN_FACTS = ("post", "no-hit-not-deferred", "cut-on-block", "cap-on-block", "block-positive")


def lemma_turns(sem: Semantics, assumed: Sequence[str], names: Sequence[str], kind: str,
                rich: bool = False) -> list[z3.BoolRef]:
    """Several facts of ``TURN_FACTS`` about one turn in one query: unsatisfiable only if
    each fact's own query (``lemma_turn``) is, since its premises are theirs and its
    claim their conjunction (one encoding of the turn and one grounding instead of one
    per fact: measured 4 times cheaper to build on the older family)."""
    enc, cfg, d, pre, t = _turn(sem, assumed, kind, rich)
    claims = [_turn_claim(enc, cfg, d, t, name) for name in names]
    return _finish(enc, pre + [z3.Not(z3.And(claims))])


def lemma_down(sem: Semantics, assumed: Sequence[str], rich: bool = False) -> list[z3.BoolRef]:
    """down: a full-attention group's OK facts are downward closed."""
    enc, cfg, d, pre = _setup(sem, assumed, (FA,), rich)
    a, b = z3.Int("lower"), z3.Int("upper")
    return _finish(enc, pre + [z3.Not(fact("down", a, b, ok_facts(enc, cfg, d, 0, a),
                                            ok_facts(enc, cfg, d, 0, b)))])


def lemma_valid(sem: Semantics, assumed: Sequence[str], kind: str, part: int,
                rich: bool = False) -> list[z3.BoolRef]:
    """valid-bounds (part 0) for a group of ``kind``: a valid hit covers a block of the
    group and stays within its keys. valid-below-m0 (parts 1-3): a valid hit ends at or
    below the initial max hit; part 1 without rounding; with rounding, part 2 shows the
    hit ends where the Mamba align group's loaded block ends (``kind`` is that group)
    when that group loads, and part 4 when it does not; part 3 that such an end is at
    most the rounded max hit."""
    enc, cfg, d, pre = _setup(sem, assumed, (kind,), rich)
    h = z3.Int("larger_hit")
    m0 = initial_max_hit(enc, cfg, d, sem)
    ctx = Context(enc, cfg, d, sem, Result(z3.BoolVal(False), h), m0)
    nc = cfg.computed
    end = nc + h
    aligned_end = end == enc.cdiv(end, d.align, "end_blocks") * d.align
    if part == 0:
        claim = [z3.Not(fact("valid-bounds", end, nc, d.obs[0], d.cap[0]))]
    elif part == 1:
        claim = [z3.Not(d.align_on), z3.Not(fact("valid-below-m0", end, m0))]
    elif part in (2, 4):  # split by whether the group's load is empty (4: it is)
        mode = cfg.mode[0]
        assert mode is not None
        ld = load_plan(enc, cfg, d, h, [0])[0]
        claim = [d.align_on, mode == MODE_ALIGN, z3.Not(aligned_end),
                 ld.lo >= ld.hi if part == 4 else ld.lo < ld.hi,
                 # the align size is the group's offloaded block size: one quotient
                 _congruent(enc, end, d.align, d.obs[0], "end_blocks", "load_end0")]
    else:  # arithmetic: a multiple of A below prompt - 1 is below round_down(prompt - 1, A)
        return _finish(enc, pre + [d.align_on, aligned_end, h > 0, end <= cfg.prompt - 1,
                                   z3.Not(fact("valid-below-m0", end, m0))])
    return _finish(enc, pre + [valid_hit(ctx, h)] + claim)


def nested_division(ceiling: bool, rich: bool = False) -> list[z3.BoolRef]:
    """(x // a) // b == x // (a * b), or the same with cdiv, for a, b > 0: the identity
    the encoding's load plan states for its own terms."""
    x, a, b = z3.Ints("x a b")
    enc = Enc()
    div = enc.cdiv if ceiling else enc.floordiv
    return enc.cons + [a > 0, b > 0, div(div(x, a), b) != div(x, a * b)]


def congruent_division(rich: bool = False) -> list[z3.BoolRef]:
    """cdiv(x, a) == cdiv(x, b) for a == b > 0: the quotient does not depend on how the
    divisor is written (the encoding names one symbol per distinct term)."""
    x, a, b = z3.Ints("x a b")
    enc = Enc()
    qa, qb = enc.cdiv(x, a), enc.cdiv(x, b)
    return enc.cons + [a > 0, a == b, qa != qb]


def _congruent(enc: Enc, x: z3.ArithRef, a: z3.ArithRef, b: z3.ArithRef,
               a_name: str, b_name: str) -> z3.BoolRef:
    """An instance of lemma congruent-division."""
    return z3.Implies(a == b, enc.cdiv(x, a, a_name) == enc.cdiv(x, b, b_name))


def _monotone(x: z3.ArithRef, y: z3.ArithRef, b: z3.ArithRef) -> z3.BoolRef:
    return z3.Implies(z3.And(b >= 1, x <= y), x * b <= y * b)


def window_start(enc: Enc, end: z3.ArithRef, window: z3.ArithRef, obs: z3.ArithRef,
                 k: z3.ArithRef) -> z3.BoolRef:
    """A hit ending on a block end or one token before it: the first block a window of
    ``window`` tokens needs (single_type_kv_cache_manager.py:796) is no earlier than the
    first of the ``cdiv(window, obs)`` blocks the lookup confirms (scheduler.py:98)."""
    skipped = zmax(z3.IntVal(0), end - window + 1)
    return z3.Implies(
        z3.And(obs >= 1, window >= 1, z3.Or(end == k * obs, end == k * obs - 1)),
        enc.floordiv(skipped, obs, "window_first") >= enc.cdiv(end, obs, "window_end")
        - enc.cdiv(window, obs, "window_blocks"))


def window_start_lemma(rich: bool = False) -> list[z3.BoolRef]:
    """Proved with instances of lemma monotone (multiplication by a positive size)."""
    end, window, obs, k = z3.Ints("end window obs k")
    enc = Enc()
    claim = window_start(enc, end, window, obs, k)
    q = enc.floordiv(zmax(z3.IntVal(0), end - window + 1), obs, "window_first")
    c, d = enc.cdiv(end, obs, "window_end"), enc.cdiv(window, obs, "window_blocks")
    helpers = [_monotone(x, y, obs) for x, y in (
        (q + 1, c - d), (c - d, q + 1), (q, c - d - 1), (c - d - 1, q), (k, c), (c, k),
        (c, k - 1), (k - 1, c), (d - 1, c - k), (q, k - d), (k - d, q), (k - d + 1, q),
        (q, k - d - 1))]
    return enc.cons + helpers + [z3.Not(claim)]


def window_span(enc: Enc, end: z3.ArithRef, window: z3.ArithRef, obs: z3.ArithRef
                ) -> z3.BoolRef:
    """A window that is not one token past whole blocks (precondition
    window-not-one-past-blocks, in its own words): the blocks a hit ending at ``end``
    loads for it (from single_type_kv_cache_manager.py:796's first needed token) are at
    least the ``cdiv(window, obs)`` blocks the lookup's run needs (scheduler.py:98)."""
    skipped = zmax(z3.IntVal(0), end - window + 1)
    return z3.Implies(
        z3.And(obs >= 1, window >= 1, end >= 1,
               window - 1 != obs * ((window - 1) / obs)),
        z3.Or(end - window + 1 <= 0,
              enc.cdiv(end, obs, "window_end") - enc.floordiv(skipped, obs, "window_first")
              >= enc.cdiv(window, obs, "window_blocks")))


def monotone_lemma(rich: bool = False) -> list[z3.BoolRef]:
    x, y, b = z3.Ints("x y b")
    return [z3.Not(_monotone(x, y, b))]


def window_span_lemma(rich: bool = False) -> list[z3.BoolRef]:
    """Proved with instances of lemma monotone (multiplication by a positive size)."""
    end, window, obs = z3.Ints("end window obs")
    enc = Enc()
    claim = window_span(enc, end, window, obs)
    q = enc.floordiv(zmax(z3.IntVal(0), end - window + 1), obs, "window_first")
    c, d = enc.cdiv(end, obs, "window_end"), enc.cdiv(window, obs, "window_blocks")
    p = (window - 1) / obs
    helpers = [_monotone(x, y, obs) for x, y in (
        (c, q + d - 1), (q + d - 1, c), (p, d - 1), (d - 1, p), (p + 1, d - 1),
        (d - 1, p + 1), (p, d - 2), (d, p))]
    return enc.cons + helpers + [z3.Not(claim)]


ARITHMETIC: list[Query] = [
    ("lemma monotone: x <= y and b >= 1 give x * b <= y * b", monotone_lemma),
    ("lemma window-span", window_span_lemma),
    ("lemma (x // a) // b == x // (a * b)", partial(nested_division, False)),
    ("lemma cdiv(cdiv(x, a), b) == cdiv(x, a * b)", partial(nested_division, True)),
    ("lemma window-start", window_start_lemma),
    ("lemma congruent-division: a == b > 0 gives cdiv(x, a) == cdiv(x, b)",
     congruent_division),
]


def lemma_queries(sem: Semantics, assumed: Sequence[str], maximal: bool) -> list[Query]:
    """Every fact of ``proofs.lemmas`` the abstract loop assumes, for every kind."""
    out: list[Query] = list(ARITHMETIC)
    turn_facts = list(TURN_FACTS)
    if maximal:
        turn_facts.append("keeps")
    for k in KINDS:
        for name in turn_facts:
            out.append((f"lemma {name} ({k})", partial(lemma_turn, sem, assumed, name, k)))
        out.append((f"lemma last-token-block ({k})", partial(last_token_block, sem, assumed, k)))
        if maximal:
            out.append((f"lemma valid-bounds ({k})", partial(lemma_valid, sem, assumed, k, 0)))
    out.append(("lemma down (full_attention)", partial(lemma_down, sem, assumed)))
    if maximal:
        out += [("lemma valid-below-m0 (no rounding)",
                 partial(lemma_valid, sem, assumed, FA, 1)),
                ("lemma valid-below-m0 (rounding: the hit ends on an align block)",
                 partial(lemma_valid, sem, assumed, MAMBA, 2)),
                ("lemma valid-below-m0 (rounding: the align group's load is not empty)",
                 partial(lemma_valid, sem, assumed, MAMBA, 4)),
                ("lemma valid-below-m0 (rounding: arithmetic)",
                 partial(lemma_valid, sem, assumed, FA, 3))]
    return out


def _unrounded_m0_near_cap(d: Derived, end: z3.ArithRef, g: int) -> z3.BoolRef:
    return z3.Implies(z3.Not(d.align_on), z3.Or(end == d.cap[g], end == d.cap[g] - 1))


def last_token_block(sem: Semantics, assumed: Sequence[str], kind: str, rich: bool = False
                     ) -> list[z3.BoolRef]:
    """Without rounding the initial max hit is prompt - 1 (or the prompt, with no windowed
    group); if it is within the group's keys, it is that group's last block end or one
    less."""
    enc, cfg, d, pre = _setup(sem, assumed, (kind,))
    end = initial_max_hit(enc, cfg, d, sem)
    return _finish(enc, pre + [end <= d.cap[0], z3.Not(_unrounded_m0_near_cap(d, end, 0))])


def alignment_queries(sem: Semantics, assumed: Sequence[str]) -> list[Query]:
    """The loop's final max hit is a multiple of the Mamba alignment size (when the
    semantics aligns): the cut that ``final_query(aligned=True)`` relies on. One query per
    way the summary says the hit may end (the initial max hit, or a block of some group),
    each with its multiple named."""
    def case(at_m0: bool, rich: bool) -> list[z3.BoolRef]:
        enc, cfg, d, pre = _setup(sem, assumed, (FA,))
        m0, blocks = initial_max_hit_blocks(enc, cfg, d, sem)
        end = z3.Int("final_max_hit")
        if at_m0:
            where = end == m0
            witness = blocks if blocks is not None else z3.Int("no_witness")
        else:
            where = end == d.obs[0] * z3.Int("final_blocks")
            witness = z3.Int("blocks_per_align0") * z3.Int("final_blocks")
        return _finish(enc, pre + [where, d.align_on, end != d.align * witness])

    return [(f"the hit ends on a Mamba alignment boundary ({where})", partial(case, at_m0))
            for at_m0, where in ((True, "M0"), (False, "a block of any group"))]


CASES = ("M0", "own", "other")  # where the hit ends: M0, a block of the group, of another


def final_query(sem: Semantics, assumed: Sequence[str],
                violation: Callable[[Context, z3.ArithRef | None], z3.BoolRef],
                maximal: bool, kind: str, uses_store: bool = True, aligned: bool = False,
                case: str | None = None, subcase: int | None = None, rich: bool = False,
                containment: bool | None = None) -> list[z3.BoolRef]:
    """The property at the loop's end for a group of ``kind``, from the summary
    (``proofs.abstract.summary``) interpreted exactly.

    The query has three groups (``ROLES``): the group the property looks at (its store
    facts, keys), the group on whose block the hit may end and the group of the last
    turn (block sizes only); the last two are full attention, which adds no start-up
    constraint a group of another kind would not.

    With ``aligned``, "the hit ends at the initial max hit or at a multiple of some
    group's block" is replaced by its consequence "the hit ends at a multiple of the
    Mamba alignment size", which ``alignment_queries`` proves.

    ``containment`` splits loads-stored-only in two: True asks, with no store at all,
    that the blocks the group loads lie within the blocks its lookup confirmed
    (``ok_range``); False assumes that and asks the property itself.
    """
    enc, cfg, d, pre = _setup(sem, assumed, (kind, FA, FA), rich)
    if subcase is not None and not subcase & 2:
        m0: z3.ArithRef = z3.If(d.any_windowed, cfg.prompt - 1, cfg.prompt)  # no rounding
    else:
        m0 = initial_max_hit(enc, cfg, d, sem)
    end = z3.Int("final_max_hit")
    nc = cfg.computed
    facts = [end - nc >= 1, end <= m0, end <= d.cap[0], end - nc >= d.obs[2]]
    if uses_store and not containment:
        facts.append(ok_facts(enc, cfg, d, 0, end))
    if case == "M0":
        facts += [end == m0, _unrounded_m0_near_cap(d, end, 0)]  # lemma last-token-block
    elif case == "own":
        facts.append(end == d.obs[0] * z3.Int("final_blocks"))
    elif case == "other":
        facts.append(end == d.obs[1] * z3.Int("final_blocks"))
    elif aligned:
        facts.append(z3.Implies(d.align_on, end == d.align * z3.Int("end_in_align_blocks")))
    else:
        facts.append(z3.Or(end == m0, end == d.obs[1] * z3.Int("final_blocks")))
    hit: z3.ArithRef = end - nc
    if sem.align_at == "num_hit":  # alt-round-num-hit rounds after the loop
        hit = z3.If(d.align_on, d.align * enc.floordiv(hit, d.align, "rounded_hit"), hit)
    deferred: z3.BoolRef = z3.BoolVal(False)
    if sem.skip_reading_check:
        hit = z3.If(cfg.skip_reading, z3.IntVal(0), hit)
    if sem.in_flight_check:
        deferred = cfg.in_flight
    if subcase is not None:  # block_size_factor 1 or more, rounding on or off
        facts.append(d.factor == 1 if subcase & 1 else d.factor > 1)
        facts.append(d.align_on if subcase & 2 else z3.Not(d.align_on))
    ctx = Context(enc, cfg, d, sem, Result(deferred, hit), m0, 0)
    if containment is not None:
        window = cfg.window[0]
        if window is not None:  # lemma window-start, at the load's own terms
            facts.append(window_start(enc, nc + hit, window, d.obs[0], d.keys[0]))
        load = load_plan(enc, cfg, d, hit, [0])[0]
        ok_lo, ok_hi = ok_range(enc, d, 0, end)
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
