"""The one way a fact enters an abstract loop's query (issue 23): a loop names the lemma
and its arguments (``Use``), and ``assume`` makes the fact from that lemma's definition
(the ``LEMMAS`` of ``proofs.lemmas``, ``proofs.lemmas_chunked``,
``proofs.maximality_layers_chunked`` or ``proofs.tail_layers_chunked``), recording which
lemma each fact came from. What else a loop query states is its own encoding (the
layout's bounds, the invariant, the goal), marked by ``shape``: proved or checked by the
queries themselves, never assumed about a lookup.

``audit`` reads a query back: every assertion must be a fact ``assume`` made from a lemma
proved for this semantics, or marked by ``shape``. A term appended directly (the fact
without its guard, say), or a fact of a lemma that no query of this proof proves, is
named; the layered proofs ask the audit as one of their queries, so ``python -m proofs``
fails with it. ``premises_hold`` also asks each loop query without its negated goal:
its premises must be satisfiable, so a contradictory assumption in one query cannot make
it vacuously unsatisfiable.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import z3


class LemmaDef(Protocol):
    """A lemma's definition: its name and the fact it states on given terms."""

    @property
    def name(self) -> str: ...

    @property
    def fact(self) -> Callable[..., z3.BoolRef]: ...


@dataclass(frozen=True)
class Use:
    """A fact a loop assumes: lemma ``name`` of the definitions ``where`` (a module name)
    on ``args``, under the hypothesis ``when`` (None: none; a hypothesis only weakens
    the fact)."""

    where: str
    name: str
    args: tuple[object, ...]
    when: z3.BoolRef | None = field(default=None)
    # the group the fact is about, for a lemma proved for some kinds of group only
    group: z3.ArithRef | None = field(default=None)


@dataclass(frozen=True)
class Together:
    """Several uses as one fact, under one hypothesis: ``Implies(when, And(facts))``."""

    uses: tuple[Use, ...]
    when: z3.BoolRef


# the lemma definitions, by the module that defines them
_DEFS: dict[str, Mapping[str, LemmaDef]] = {}
# every fact ``assume`` made in this process, by Z3 id: the term (kept alive, so that its
# id is never another term's) and the (module, lemma) pairs it was made from
_MADE: dict[int, tuple[z3.BoolRef, tuple[Use, ...]]] = {}
# a lemma proved only for some groups, by (module, lemma): where it is proved, of a group
Only = Mapping[tuple[str, str], Callable[[z3.ArithRef], z3.BoolRef]]
# every term ``shape`` marked, by Z3 id (kept alive likewise)
_SHAPE: dict[int, z3.BoolRef] = {}


def register(where: str, lemmas: Mapping[str, LemmaDef]) -> None:
    """The lemma definitions of module ``where``."""
    _DEFS[where] = lemmas


def _fact(u: Use) -> z3.BoolRef:
    f = _DEFS[u.where][u.name].fact(*u.args)
    return f if u.when is None else z3.Implies(u.when, f)


def assume(uses: Iterable[Use | Together]) -> list[z3.BoolRef]:
    """The facts of ``uses``, each made from its lemma's definition and recorded. Anything
    else passes through unrecorded, so that ``audit`` names it."""
    out: list[z3.BoolRef] = []
    src: tuple[Use, ...]
    for u in uses:
        if isinstance(u, Use):
            f, src = _fact(u), (u,)
        elif isinstance(u, Together):
            f = z3.Implies(u.when, z3.And([_fact(v) for v in u.uses]))
            src = tuple(replace(v, when=u.when if v.when is None else z3.And(u.when, v.when))
                        for v in u.uses)
        else:
            out.append(u)  # a stray term: audit reports it
            continue
        _MADE[f.get_id()] = (f, src)
        out.append(f)
    return out


def shape(*terms: z3.BoolRef) -> list[z3.BoolRef]:
    """``terms``, marked as the loop's own encoding (not an assumption)."""
    for t in terms:
        _SHAPE[t.get_id()] = t
    return list(terms)


def made_from(term: z3.BoolRef) -> tuple[tuple[str, str], ...] | None:
    """The (module, lemma) pairs ``term`` was made from by ``assume``, or None."""
    got = _uses(term)
    return None if got is None else tuple((u.where, u.name) for u in got)


def _uses(term: z3.BoolRef) -> tuple[Use, ...] | None:
    got = _MADE.get(term.get_id())
    return None if got is None or not got[0].eq(term) else got[1]


def _beyond(u: Use, only: Callable[[z3.ArithRef], z3.BoolRef]) -> bool:
    """Whether use ``u`` may assume its lemma about a group it is not proved for: no
    group named, no hypothesis, or a hypothesis that admits such a group."""
    if u.group is None or u.when is None:
        return True
    s = z3.Solver()
    s.set("timeout", 10_000)
    s.add(u.when, z3.Not(only(u.group)))
    return bool(s.check() != z3.unsat)


def audit(query: Sequence[z3.BoolRef], proved: Mapping[str, Collection[str]],
          only: Only | None = None) -> str | None:
    """None when every assertion of ``query`` is a fact of lemmas in ``proved`` (by
    module), each about groups it is proved for (``only``), or marked by ``shape``; else
    why not (one line)."""
    for a in query:
        src = _uses(a)
        if src is not None:
            for u in src:
                if u.name not in proved.get(u.where, ()):
                    return (f"assumes lemma {u.name} ({u.where}), which no query of this "
                            "proof proves")
                o = (only or {}).get((u.where, u.name))
                if o is not None and _beyond(u, o):
                    return (f"assumes lemma {u.name} ({u.where}) of a group it is not "
                            "proved for (its hypothesis does not restrict the group)")
            continue
        t = _SHAPE.get(a.get_id())
        if t is None or not t.eq(a):
            text = " ".join(str(a).split())
            return f"a fact not made from a lemma: {text[:100]}"
    return None


def lemmas_used(queries: Iterable[Sequence[z3.BoolRef]]) -> set[tuple[str, str]]:
    """(module, lemma) of every fact ``assume`` made in ``queries``."""
    return {p for q in queries for a in q for p in (made_from(a) or ())}


def premises_hold(query: Sequence[z3.BoolRef], timeout_ms: int = 10_000) -> bool:
    """Whether ``query`` without its last assertion (the negated goal) is satisfiable."""
    s = z3.Solver()
    s.set("timeout", timeout_ms)
    s.add(*query[:-1])
    return bool(s.check() == z3.sat)


# the audits asked in this process: their answer and the queries (kept alive, so that
# their ids are never other terms')
_CHECKED: dict[tuple[object, ...], tuple[str | None, object]] = {}


def check(
    queries: Sequence[tuple[str, Sequence[z3.BoolRef]]], proved: Mapping[str, Collection[str]],
    only: Only | None = None,
) -> str | None:
    """None when every loop query passes ``audit`` and its premises hold; else the first
    failure, named (once per process for the same queries and lemmas)."""
    key = (
        tuple((name, tuple(a.get_id() for a in q)) for name, q in queries),
        tuple(sorted((k, tuple(sorted(v))) for k, v in proved.items())),
        tuple(sorted((only or {}).items())),
    )
    if key in _CHECKED:
        return _CHECKED[key][0]
    why = None
    for name, q in queries:
        why = audit(q, proved, only)
        if why is not None:
            why = f"{name}: {why}"
            break
        if not premises_hold(q):
            why = f"{name}: its premises are not satisfiable (the query is vacuous)"
            break
    _CHECKED[key] = (why, queries)
    return why


AUDIT = "audit: every fact a loop assumes is a lemma this proof proves, its premises hold"


def audit_query(
    queries: Sequence[tuple[str, Sequence[z3.BoolRef]]], proved: Mapping[str, Collection[str]],
    only: Only | None = None,
) -> list[z3.BoolRef]:
    """``check`` as a query of a layered proof (named ``AUDIT``): unsatisfiable exactly
    when it passed; a failure is also printed (stderr), with its reason."""
    why = check(queries, proved, only)
    if why is not None:
        print(f"{AUDIT}: FAILED: {why}", file=sys.stderr, flush=True)
    return [z3.BoolVal(why is not None)]
