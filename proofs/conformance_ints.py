"""An encoding module's own source run over Python ints and bools, for the conformance
checks on concrete scenarios (``proofs.conformance_chunked``).

With every input fixed, each Z3 term the bounded encoding builds
(``proofs.encoding_chunked``) folds to a number or a truth value; building the terms in
Python is what a conformance run spends its time on. ``ints_copy(mod)`` executes ``mod``'s
source text (a sabotaged copy's too: ``tests.sabotage.sabotaged_copy`` keeps it) with the
name ``z3`` bound to ``Z3_INTS`` below and ``proofs.arith`` to its own copy over the same,
so every function of the encoding, as written, computes values directly: ``If`` picks a
branch, ``And``/``Or``/``Not``/``Implies``/``Sum`` are Python's, ``IntVal``/``BoolVal``
are the numbers. On integers and truth values these are the operations' values in Z3
(linear integer arithmetic, unbounded ints), so the encoding's answer is the one its Z3
terms simplify to, and a sabotaged line gives its own (wrong) value as it does in Z3.
What is not concrete is refused (``NotConcrete``): a free symbol (``Int``, ``Bool``,
``Const``), an ``If`` or connective over a non-truth value (Z3's sort check). The Z3
path stays (``proofs.conformance_chunked``, ``over="z3"``) and
``tests/test_conformance_chunked.py`` checks that both give the same answers, the
sabotaged copies' included.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from proofs import arith as arith_module


class NotConcrete(AssertionError):
    """A term the encoding builds is not a value on a concrete scenario."""


def _truth(x: Any) -> bool:
    if not isinstance(x, bool):
        raise NotConcrete(f"not a truth value: {x!r}")
    return x


def _num(x: Any) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise NotConcrete(f"not an integer: {x!r}")
    return x


def _args(args: tuple[Any, ...]) -> Iterable[Any]:
    """Z3's connectives take their arguments spread or as one list."""
    if len(args) == 1 and isinstance(args[0], list | tuple):
        return args[0]
    return args


def _if(c: Any, a: Any, b: Any) -> Any:
    # Z3's If needs both branches of one sort: both truth values or both numbers
    if isinstance(a, bool) != isinstance(b, bool):
        raise NotConcrete(f"If over a truth value and a number: {a!r}, {b!r}")
    return a if _truth(c) else b


def _and(*args: Any) -> bool:
    return all([_truth(x) for x in _args(args)])


def _or(*args: Any) -> bool:
    return any([_truth(x) for x in _args(args)])


def _implies(a: Any, b: Any) -> bool:
    return (not _truth(a)) or _truth(b)


def _sum(*args: Any) -> int:
    return sum(_num(x) for x in _args(args))


def _symbol(name: str, *rest: Any) -> Any:
    raise NotConcrete(f"a free symbol on a concrete scenario: {name}")


def _is_int_value(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


# the part of z3's module the encodings use, over ints and bools
Z3_INTS = SimpleNamespace(
    If=_if, And=_and, Or=_or, Not=lambda a: not _truth(a), Implies=_implies, Sum=_sum,
    IntVal=lambda x: _num(int(x)), BoolVal=lambda b: bool(b),
    Int=_symbol, Bool=_symbol, Const=_symbol,
    simplify=lambda e: e, is_int_value=_is_int_value,
    is_true=lambda e: e is True, is_false=lambda e: e is False, is_const=lambda e: False,
    # annotations only (no value of these types exists here)
    ArithRef=object, BoolRef=object, ExprRef=object,
)


def _run(source: str, name: str, filename: str, extra: dict[str, ModuleType]) -> ModuleType:
    """``source`` executed as module ``name`` with ``z3`` (and ``extra``'s modules) bound
    to their ints copies: swapped in ``sys.modules`` only while its imports run."""
    mod = ModuleType(name)
    mod.__file__ = filename
    swapped = {"z3": Z3_INTS, **extra, name: mod}
    saved = {k: sys.modules.get(k) for k in swapped}
    sys.modules.update(swapped)  # type: ignore[arg-type]
    try:
        exec(compile(source, filename, "exec"), mod.__dict__)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return mod


_ARITH: list[ModuleType] = []
_COPIES: dict[tuple[str, str], ModuleType] = {}


def source_of(mod: ModuleType) -> str:
    """``mod``'s source: a sabotaged copy's own text, else its file's."""
    own = getattr(mod, "__source__", None)
    return own if isinstance(own, str) else Path(str(mod.__file__)).read_text()


def ints_copy(mod: ModuleType) -> ModuleType:
    """``mod`` (an encoding module, or a sabotaged copy of one) run over ints and bools:
    built once per source text. Its own imports must be loaded already (``mod`` is)."""
    if not _ARITH:
        _ARITH.append(_run(source_of(arith_module), "ints_proofs_arith",
                           str(arith_module.__file__), {}))
    source = source_of(mod)
    key = (mod.__name__, hashlib.sha256(source.encode()).hexdigest())
    if key not in _COPIES:
        _COPIES[key] = _run(source, f"ints_{mod.__name__.replace('.', '_')}",
                            str(getattr(mod, "__file__", None) or f"<{mod.__name__}>"),
                            {"proofs.arith": _ARITH[0]})
    return _COPIES[key]
