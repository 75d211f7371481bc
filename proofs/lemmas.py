"""What one group's turn guarantees: the single definition of every fact the abstract
loop (``proofs.abstract``) assumes, and the lemma (``proofs.layers``) that proves it.

The abstract loop builds its assumptions by calling ``fact`` on its own symbols; the
lemma queries call the same ``fact`` on the exact encoding of one turn and ask for its
negation (unsatisfiable: proved). An assumption therefore cannot enter the abstract loop
without its lemma: changing a fact here changes the lemma that must prove it, and
``ASSUMED`` lists exactly the facts the loop uses (a test checks both directions).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import z3

from proofs import assume as _assume


@dataclass(frozen=True)
class Turn:
    """One group's turn (``proofs.encoding.group_step``), as the loop sees it."""

    m1: z3.ArithRef  # max_hit_size_tokens after the cap to the group's keys
    too_short: z3.BoolRef  # less than one block left: return 0
    deferred: z3.BoolRef  # the lookup was deferred (num_hit_blocks is None)
    no_hit: z3.BoolRef  # num_hit_blocks == 0: return 0
    cut: z3.ArithRef  # offloaded_block_size * (start_block_idx + num_hit_blocks)
    m2: z3.ArithRef  # max_hit_size_tokens after the turn


@dataclass(frozen=True)
class Lemma:
    name: str
    words: str
    fact: Callable[..., z3.BoolRef]


def _post(t: Turn, ok_m2: z3.BoolRef) -> z3.BoolRef:
    return z3.Implies(z3.And(z3.Not(t.too_short), z3.Not(t.deferred), z3.Not(t.no_hit)), ok_m2)


def _keeps(t: Turn, target: z3.ArithRef) -> z3.BoolRef:
    return z3.Implies(t.m1 >= target, z3.And(z3.Not(t.no_hit), z3.Or(t.deferred, t.cut >= target)))


def _no_hit_not_deferred(t: Turn) -> z3.BoolRef:
    return z3.Implies(t.no_hit, z3.Not(t.deferred))


def _on_block(end: z3.ArithRef, on_block: Callable[[z3.ArithRef], z3.BoolRef]) -> z3.BoolRef:
    """``on_block(y)``: y is a multiple of the group's offloaded block size (``MUL_g``
    in the abstract loop, an explicit multiple in the exact encoding)."""
    return on_block(end)


def _down(lower: z3.ArithRef, upper: z3.ArithRef, ok_lower: z3.BoolRef, ok_upper: z3.BoolRef
          ) -> z3.BoolRef:
    return z3.Implies(z3.And(lower <= upper, ok_upper), ok_lower)


def _bounds(hit_end: z3.ArithRef, computed: z3.ArithRef, obs: z3.ArithRef, cap: z3.ArithRef
            ) -> z3.BoolRef:
    return z3.And(hit_end - computed >= obs, hit_end <= cap)


def _below_m0(hit_end: z3.ArithRef, m0: z3.ArithRef) -> z3.BoolRef:
    return hit_end <= m0


def _positive(obs: z3.ArithRef) -> z3.BoolRef:
    return obs >= 1


LEMMAS: dict[str, Lemma] = {
    lem.name: lem
    for lem in (
        Lemma("block-positive", "every group's offloaded block size is at least 1",
              _positive),
        Lemma("post", "a turn that neither defers nor stops leaves OK_g at the new max hit",
              _post),
        Lemma("keeps", "a turn never takes max_hit_size_tokens below a valid larger hit, "
              "and finds a hit when one is valid", _keeps),
        Lemma("no-hit-not-deferred", "a turn with no hit was not deferred",
              _no_hit_not_deferred),
        Lemma("cut-on-block", "a turn's cut ends on one of the group's offloaded blocks",
              _on_block),
        Lemma("cap-on-block", "the cap to the group's keys ends on one of its offloaded "
              "blocks", _on_block),
        Lemma("down", "a full-attention group's OK facts are downward closed", _down),
        Lemma("valid-bounds", "a valid hit covers a block of every group and stays within "
              "every group's keys", _bounds),
        Lemma("valid-below-m0", "a valid hit ends at or below the initial max hit",
              _below_m0),
    )
}

# the facts proofs.abstract assumes (each proved by proofs.layers on the exact encoding)
ASSUMED = tuple(LEMMAS)


WHERE = "proofs.lemmas"  # the key proofs.assume knows these definitions by
_assume.register(WHERE, LEMMAS)


def fact(name: str, *args: z3.ExprRef) -> z3.BoolRef:
    """The fact ``name`` on the given terms (the exact encoding's: a lemma query's
    claim)."""
    return LEMMAS[name].fact(*args)


def use(name: str, *args: object, when: z3.BoolRef | None = None,
        group: z3.ArithRef | None = None) -> _assume.Use:
    """The abstract loop's use of lemma ``name`` on ``args`` (``proofs.assume``), about
    ``group`` (for a lemma proved for some kinds of group only)."""
    if name not in LEMMAS:
        raise KeyError(f"lemma {name!r}: not defined in {WHERE}")
    return _assume.Use(WHERE, name, args, when, group)
