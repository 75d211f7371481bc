"""CPU time of the 0.33.0 layered proofs, one process, grouped as the report runs them:
per semantics and theorem, ``proofs.layers_chunked.prove`` (maximality:
``proofs.maximality_layers_chunked.prove``) under the theorem's preconditions, then the
partial-tail proof (``proofs.tail_layers_chunked.prove``) where it covers the theorem; and
the slowest queries ``layers_chunked.ask_unsat`` answered (the in-process cache included:
a query whose text was proved before costs only its key).

    python bench/bench_layers_chunked.py [--semantics NAME ...] [--top N] [--ab]

``--ab``: every query ``ask_unsat`` solves (not a cache hit) is also asked, back to back
and in alternating order, of a plain ``z3.Solver()`` (the solver before
``layers_chunked.new_solver`` chose settings per query): both totals and the slowest
queries side by side; any plain answer other than unsat is printed. Every figure is
process CPU time (time.process_time), not wall time. Exit 1 if a proof does not close.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import z3

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import releases  # noqa: E402
from model.semantics import get_semantics  # noqa: E402
from proofs import (
    layers_chunked,  # noqa: E402
    tail_layers_chunked,  # noqa: E402
)
from proofs.theorems import THEOREMS  # noqa: E402

# the chunked semantics the encodings model (releases.proved)
SEMANTICS = releases.proved("chunked")
TIMEOUT_MS = 600_000
SOLVERS = {
    "plain": z3.Solver,
    "tactics": lambda: z3.Then("simplify", "propagate-values", "solve-eqs", "smt").solver(),
    "tactics-ite": lambda: z3.Then(
        "simplify", "propagate-values", "solve-eqs", "elim-term-ite", "smt"
    ).solver(),
}
asked: list[tuple[float, str, str]] = []  # (seconds, semantics/theorem, query)
plain: dict[tuple[str, str], float] = {}  # --ab: (semantics/theorem, query) -> seconds
where = [""]


def _plain(name: str, q: Any) -> float:
    s = z3.Solver()
    s.set("timeout", TIMEOUT_MS)
    s.add(*q)
    c0 = time.process_time()
    res = s.check()
    sec = time.process_time() - c0
    if res != z3.unsat:
        print(f"  plain solver: {res} on {where[0]}: {name}", flush=True)
    return sec


def _timed_ask(real: Any, ab: bool) -> Any:
    def ask(name: str, q: Any, t0: float, deadline: float) -> Any:
        fresh = ab and layers_chunked.query_key(q) not in layers_chunked._PROVED_TEXT
        first = fresh and len(plain) % 2 == 0  # alternate which solver goes first
        if first:
            plain[where[0], name] = _plain(name, q)
        c0 = time.process_time()
        out = real(name, q, t0, deadline)
        asked.append((time.process_time() - c0, where[0], name))
        if fresh and not first:
            plain[where[0], name] = _plain(name, q)
        return out

    return ask


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--semantics", nargs="*", default=list(SEMANTICS))
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument(
        "--solver", choices=sorted(SOLVERS), help="ask the layered queries with this solver instead"
    )
    ap.add_argument(
        "--ab",
        action="store_true",
        help="also ask each solved query of a plain z3.Solver, side by side",
    )
    args = ap.parse_args()
    if args.solver:
        make = SOLVERS[args.solver]
        layers_chunked.new_solver = lambda name="": make()
    layers_chunked.ask_unsat = _timed_ask(
        layers_chunked.ask_unsat, args.ab
    )  # maximality_layers_chunked calls layers_chunked.ask_unsat
    ok = True
    total = 0.0
    for name in args.semantics:
        sem = get_semantics(name)
        for thm, t in THEOREMS.items():
            pre = t.pre(name)
            if not t.covers(name) or not layers_chunked.covers(thm, pre):
                continue
            where[0] = f"{name} {thm}"
            c0 = time.process_time()
            status, why, _ = layers_chunked.prove(thm, sem, pre, TIMEOUT_MS)
            c1 = time.process_time()
            tail = ("-", "")
            if status == "PROVED" and tail_layers_chunked.covers(thm):
                tail = tail_layers_chunked.prove(thm, sem, pre, TIMEOUT_MS)[:2]
            c2 = time.process_time()
            ok = ok and status == "PROVED" and tail[0] in ("-", "PROVED")
            total += c2 - c0
            print(
                f"{name:30} {thm:18} layered {status} {c1 - c0:6.2f} s  tails "
                f"{tail[0]} {c2 - c1:6.2f} s {why or tail[1]}",
                flush=True,
            )
    solve = sum(sec for sec, _, _ in asked)
    total -= sum(plain.values())  # --ab: the plain solver's side is not the proofs' cost
    print(
        f"total {total:.2f} s CPU: {solve:.2f} s in ask_unsat (solving, cache keys), "
        f"{total - solve:.2f} s building the queries and the tail proof"
    )
    if args.ab:
        print(
            f"--ab, the same queries: new_solver {solve:.2f} s, plain z3.Solver() "
            f"{sum(plain.values()):.2f} s ({len(plain)} queries solved)"
        )
    print(
        f"slowest {args.top} ask_unsat calls (CPU s"
        + (", then the plain solver's" if args.ab else "")
        + "):"
    )
    for sec, at, q in sorted(asked, reverse=True)[: args.top]:
        other = f"  plain {plain[at, q]:6.2f}" if (at, q) in plain else ""
        print(f"  {sec:6.2f}{other}  {at}: {q}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
