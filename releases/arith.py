"""The arithmetic a lookup step is written in, once for plain integers (the model) and once
for Z3 terms (the encodings).

A step that a vLLM release or fix changes (``releases.steps``) takes an ``Arith`` and its
operands; ``INT`` runs it on Python integers, and ``proofs`` passes an implementation over
Z3 terms (``proofs.arith``), so the model and the proofs read the same function.
"""

from __future__ import annotations

from typing import Any, Protocol


class Arith(Protocol):
    """The operations a step may use. Operands are ints and bools (the model) or Z3 terms
    (the proofs); ``label`` names a fresh quotient where the Z3 side needs one."""

    def min(self, a: Any, b: Any) -> Any: ...

    def ite(self, cond: Any, then: Any, other: Any) -> Any: ...

    def round_down(self, x: Any, unit: Any, label: str) -> Any: ...


class IntArith:
    """Plain integers and bools: what ``model/`` runs."""

    def min(self, a: int, b: int) -> int:
        return min(a, b)

    def ite(self, cond: bool, then: int, other: int) -> int:
        return then if cond else other

    def round_down(self, x: int, unit: int, label: str) -> int:
        return x // unit * unit


INT = IntArith()
