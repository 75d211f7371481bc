"""Boolean and integer terms built through Z3's C API (as z3's Python module exports
it): the very terms z3's Python operators build (Z3 hash-conses a context's terms, so
they have the same ids and the same text), without the per-call argument checks and
coercions that cost ~100 us a term. For the hot loops that instantiate store facts
(``proofs.encoding.Enc.grounded``, ``Enc.exists_gap``): every argument is an expression of
Z3's main context, Boolean for the connectives and of sort Int for the comparisons
(callers check ``is_int_term``, else they use z3's operators). tests/test_terms.py pins
each to its z3 operator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import z3

_CTX = z3.main_ctx()
_INT = z3.Z3_INT_SORT


def _ref() -> z3.ContextObj:
    return _CTX.ref()


def is_int_term(e: object) -> bool:
    """``e`` is an integer expression of the main context (a Python int is not)."""
    return (isinstance(e, z3.ArithRef) and e.ctx is _CTX
            and z3.Z3_get_sort_kind(_ref(), z3.Z3_get_sort(_ref(), e.as_ast())) == _INT)


def is_bool_term(e: object) -> bool:
    """``e`` is a Boolean expression of the main context (a Python bool is not)."""
    return isinstance(e, z3.BoolRef) and e.ctx is _CTX


def _array(args: Sequence[z3.ExprRef]) -> Any:
    arr = (z3.Ast * len(args))()
    for i, a in enumerate(args):
        arr[i] = a.as_ast()
    return arr


def and_(*args: z3.BoolRef) -> z3.BoolRef:
    """``z3.And(*args)`` (two or more Boolean terms)."""
    return z3.BoolRef(z3.Z3_mk_and(_ref(), len(args), _array(args)), _CTX)


def or_(*args: z3.BoolRef) -> z3.BoolRef:
    """``z3.Or(*args)`` (two or more Boolean terms)."""
    return z3.BoolRef(z3.Z3_mk_or(_ref(), len(args), _array(args)), _CTX)


def implies(a: z3.BoolRef, b: z3.BoolRef) -> z3.BoolRef:
    """``z3.Implies(a, b)``."""
    return z3.BoolRef(z3.Z3_mk_implies(_ref(), a.as_ast(), b.as_ast()), _CTX)


def not_(a: z3.BoolRef) -> z3.BoolRef:
    """``z3.Not(a)``."""
    return z3.BoolRef(z3.Z3_mk_not(_ref(), a.as_ast()), _CTX)


def le(a: z3.ArithRef, b: z3.ArithRef) -> z3.BoolRef:
    """``a <= b`` (two Int terms)."""
    return z3.BoolRef(z3.Z3_mk_le(_ref(), a.as_ast(), b.as_ast()), _CTX)


def lt(a: z3.ArithRef, b: z3.ArithRef) -> z3.BoolRef:
    """``a < b`` (two Int terms)."""
    return z3.BoolRef(z3.Z3_mk_lt(_ref(), a.as_ast(), b.as_ast()), _CTX)


def add(a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
    """``a + b`` (two Int terms)."""
    return z3.ArithRef(z3.Z3_mk_add(_ref(), 2, _array((a, b))), _CTX)
