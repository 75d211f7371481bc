"""proofs.terms builds the very terms z3's Python operators build (same id, same text),
and proofs.encoding's fast instantiation leaves the grounded queries unchanged."""

from __future__ import annotations

import z3

from proofs import terms as zt
from proofs.encoding import Enc, Store


def test_each_constructor_is_its_z3_operator() -> None:
    x, y = z3.Ints("terms_x terms_y")
    p, q = z3.Bools("terms_p terms_q")
    pairs = [(zt.and_(p, q, x <= y), z3.And(p, q, x <= y)), (zt.or_(p, q), z3.Or(p, q)),
             (zt.implies(p, q), z3.Implies(p, q)), (zt.not_(p), z3.Not(p)),
             (zt.le(x, y), x <= y), (zt.lt(x, y), x < y), (zt.add(x, y), x + y)]
    for fast, slow in pairs:
        assert fast.get_id() == slow.get_id() and fast.sexpr() == slow.sexpr()
    assert zt.is_int_term(x) and not zt.is_int_term(z3.Real("terms_r"))
    assert not zt.is_int_term(3) and zt.is_bool_term(p) and not zt.is_bool_term(True)


def _grounded(fast: bool) -> list[str]:
    enc = Enc()
    f = z3.Function("storedT", z3.IntSort(), z3.BoolSort())
    st = Store(f, z3.Function("deferredT", z3.IntSort(), z3.BoolSort()),
               z3.Function("loadingT", z3.IntSort(), z3.BoolSort()))
    lo, hi, v = z3.Ints("terms_lo terms_hi terms_v")
    gap = z3.Function("terms_gap", z3.IntSort(), z3.IntSort())
    q = [enc.forall(lo, hi, st.confirmed),
         enc.forall(lo, hi - v + 1, lambda p: enc.exists_gap(p, v, st.stored, gap)),
         z3.Not(f(hi - 1)), f(lo + 2)]
    if not fast:  # the same query through z3's operators alone
        import proofs.encoding as E
        saved = E.is_int_term
        E.is_int_term = lambda e: False  # type: ignore[assignment]
        try:
            return [c.sexpr() for c in q + enc.grounded(q)]
        finally:
            E.is_int_term = saved
    return [c.sexpr() for c in q + enc.grounded(q)]


def test_fast_grounding_builds_the_same_query() -> None:
    assert _grounded(True) == _grounded(False)
