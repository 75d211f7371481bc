"""What one group's turn of vLLM 0.33.0's loop guarantees: the single definition of every
fact the abstract loop (``proofs.abstract_chunked``) assumes and of the lemma
(``proofs.layers_chunked``) that proves it on the exact unbounded turn
(``proofs.turn_chunked.group_step``), the 0.33.0 twin of ``proofs.lemmas``.

The abstract loop calls ``fact`` on its own symbols; each lemma query calls the same
``fact`` on the exact turn's terms and asks for its negation (unsatisfiable: proved).
``MA(y)`` says "y is a multiple of the Mamba align size" (``mamba_align_size``,
scheduler.py:154); the exact side writes it as ``y == A * (y // A)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import z3

from proofs.turn_chunked import Step


@dataclass(frozen=True)
class Lemma:
    name: str
    words: str
    fact: Callable[..., z3.BoolRef]


def _positive(tpc: z3.ArithRef) -> z3.BoolRef:
    return tpc >= 1


def _pre_below(t: Step) -> z3.BoolRef:
    return t.m1 <= t.m


def _cut_below(t: Step) -> z3.BoolRef:
    return z3.And(t.m2 <= t.m1, z3.Implies(t.deferred, t.m2 == t.m1))


def _no_hit_not_deferred(t: Step) -> z3.BoolRef:
    return z3.Implies(t.no_hit, z3.Not(t.deferred))


def _lowered_below(t: Step) -> z3.BoolRef:
    return z3.Implies(t.lowered, z3.And(z3.Not(t.deferred), t.m2 < t.m1))


def _cut_on_chunk(t: Step, on_chunk: Callable[[z3.ArithRef], z3.BoolRef]) -> z3.BoolRef:
    """``on_chunk(y)``: y is a multiple of the group's tokens_per_chunk (``MUL(g, y)`` in
    the abstract loop; on the exact turn, one of its chunk counts times the chunk)."""
    return z3.Or(t.m2 == t.m, on_chunk(t.m2))


def _chunk_in_align(align_on: z3.BoolRef, on_chunk: z3.BoolRef, ma: z3.BoolRef
                    ) -> z3.BoolRef:
    return z3.Implies(z3.And(align_on, on_chunk), ma)


def _align_after(t: Step, align_on: z3.BoolRef, ma_m2: z3.BoolRef) -> z3.BoolRef:
    return z3.Implies(z3.And(align_on, z3.Not(t.deferred)), ma_m2)


def _initial_aligned(align_on: z3.BoolRef, ma_m0: z3.BoolRef) -> z3.BoolRef:
    return z3.Implies(align_on, ma_m0)


def _post(t: Step, ok_m2: z3.BoolRef) -> z3.BoolRef:
    """``ok_m2``: OK_g at the turn's new bound (``OK(g, y)`` in the abstract loop: every
    chunk the group loads for a hit ending at ``y`` answers HIT)."""
    return z3.Implies(z3.And(z3.Not(t.too_short), z3.Not(t.deferred), z3.Not(t.no_hit),
                             z3.Not(t.lowered)), ok_m2)


def _down(lower: z3.ArithRef, upper: z3.ArithRef, ok_lower: z3.BoolRef,
          ok_upper: z3.BoolRef) -> z3.BoolRef:
    return z3.Implies(z3.And(lower <= upper, ok_upper), ok_lower)


LEMMAS: dict[str, Lemma] = {
    lem.name: lem
    for lem in (
        Lemma("chunk-positive", "every group's tokens_per_chunk is at least 1", _positive),
        Lemma("pre-below", "the caps before a group's lookup (:914, the fix's round-down, "
              ":917) never raise max_hit_size_tokens", _pre_below),
        Lemma("cut-below", "the lookup's cut never raises it, and a deferred lookup leaves "
              "it as it is", _cut_below),
        Lemma("no-hit-not-deferred", "a turn with no hit was not deferred",
              _no_hit_not_deferred),
        Lemma("lowered-below", "a turn whose round-down cuts a confirmed window (the "
              "completed fix reruns the windows) was not deferred and lowered the bound",
              _lowered_below),
        Lemma("cut-on-chunk", "without the fix, a turn leaves max_hit_size_tokens as it "
              "was or on one of the group's chunks", _cut_on_chunk),
        Lemma("chunk-in-align", "with every chunk a multiple of the Mamba chunk "
              "(align-divides-blocks), a multiple of a group's chunk is on the Mamba align "
              "size", _chunk_in_align),
        Lemma("align-after", "with the fix's round-down, a turn that is not deferred "
              "leaves max_hit_size_tokens on the Mamba align size", _align_after),
        Lemma("post", "a turn that neither stops, defers nor has its confirmed window cut "
              "by the round-down leaves every chunk the group would load for the new "
              "max_hit_size_tokens a HIT", _post),
        Lemma("down", "a full-attention group's loads are downward closed: what it loads "
              "for a smaller hit it loads for a larger one", _down),
        Lemma("initial-aligned", "the initial max_hit_size_tokens is on the Mamba align "
              "size (scheduler.py:877)", _initial_aligned),
    )
}


def fact(name: str, *args: object) -> z3.BoolRef:
    """The fact ``name`` on the given terms (abstract symbols or the exact turn's)."""
    return LEMMAS[name].fact(*args)


def assumed(reround: bool, rerun: bool, aligned: bool, stored: bool = False
            ) -> tuple[str, ...]:
    """The facts the abstract loop assumes for a semantics (``reround``: finding 001's
    fix; ``rerun``: its completed form), a theorem that needs the align size
    (``aligned``) and one about what the groups load (``stored``)."""
    out = ["chunk-positive", "pre-below", "cut-below", "no-hit-not-deferred"]
    if rerun:
        out.append("lowered-below")
    if stored:
        out += ["post", "down"]
    if aligned:
        out += (["align-after"] if reround else ["cut-on-chunk", "chunk-in-align"])
        out.append("initial-aligned")
    return tuple(out)
