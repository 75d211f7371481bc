"""``releases.arith.Arith`` over Z3 terms: the steps of ``releases.steps`` as the encodings
read them.

A step a release or fix overrides (``releases.base.ChunkSteps``) is written once; the model
runs it with ``releases.arith.INT``, the encodings with one of these, bound to their
encoder so that a quotient is the encoder's own:

* ``TurnArith`` (``proofs.turn_chunked``, the layered proof's unbounded turn): a
  round-down is ``unit * enc.floordiv(x, unit, label)``, one fresh quotient named
  ``label`` per distinct ``x`` and ``unit`` (``proofs.encoding.Enc.floordiv``);
* ``BoundedArith`` (``proofs.encoding_chunked``, the bounded exact encoding): a round-down
  is ``enc.round_down(x, unit, hi)``, a sum over the ``hi + 1`` possible quotients (no
  fresh symbol; ``label`` is not needed).

Both take ``min`` as ``If(a <= b, a, b)`` and ``ite`` as ``If``: the terms are the ones the
encodings wrote by hand before the steps moved to ``releases.steps``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import z3

if TYPE_CHECKING:
    from proofs.encoding import Enc
    from proofs.encoding_chunked import ChunkEnc


def _min(a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
    return z3.If(a <= b, a, b)  # proofs.encoding.zmin, proofs.encoding_chunked.zmin


@dataclass(frozen=True)
class TurnArith:
    """The layered turn's arithmetic (``proofs.turn_chunked``)."""

    enc: Enc

    def min(self, a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
        return _min(a, b)

    def ite(self, cond: z3.BoolRef, then: z3.ArithRef, other: z3.ArithRef) -> z3.ArithRef:
        return z3.If(cond, then, other)

    def round_down(self, x: z3.ArithRef, unit: z3.ArithRef, label: str) -> z3.ArithRef:
        return unit * self.enc.floordiv(x, unit, label)


@dataclass(frozen=True)
class BoundedArith:
    """The bounded encoding's arithmetic (``proofs.encoding_chunked``): every round-down
    has at most ``hi`` as its quotient (the scope's chunk count plus one)."""

    enc: ChunkEnc
    hi: int

    def min(self, a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
        return _min(a, b)

    def ite(self, cond: z3.BoolRef, then: z3.ArithRef, other: z3.ArithRef) -> z3.ArithRef:
        return z3.If(cond, then, other)

    def round_down(self, x: z3.ArithRef, unit: z3.ArithRef, label: str) -> z3.ArithRef:
        return self.enc.round_down(x, unit, self.hi)
