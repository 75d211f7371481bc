"""Z3 parameters, preprocessing tactics and one encoding variant on the costliest 0.33.0
layered lemma queries (issue 12 item 7): each query built as the proof builds it
(``proofs.layers_chunked.proof_queries``, the theorem's preconditions), asked under each
configuration and Z3 random seed; prints process CPU seconds of ``check()`` and the
answer per seed, then mean and max. Measures only (see bench/results/params_chunked.txt).

    python bench/params_chunked.py [--queries post-sw-rm,...] [--configs base,...]
                                [--seeds 0,1,2,3,4,5] [--timeout S] [--dump DIR]

``--dump DIR`` writes each query (default encoding) as SMT-LIB (``Solver.to_smt2``).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import z3

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import releases  # noqa: E402
from model.semantics import get_semantics  # noqa: E402
from proofs import layers_chunked  # noqa: E402
from proofs.encoding import Enc  # noqa: E402
from proofs.theorems import THEOREMS  # noqa: E402

RM, RR, V, CM = (releases.fix_for("001").name, releases.fix_for("001", completed=True).name,
                 releases.newest("chunked").name, releases.fix_for("003").name)
# short name -> (semantics, theorem, query name): the slowest of bench_layers_chunked --top
QUERIES: dict[str, tuple[str, str, str]] = {
    "keeps-sw-rm": (RM, "maximality", "lemma keeps (sliding_window)"),
    "keeps-sw-v": (V, "maximality", "lemma keeps (sliding_window)"),
    "keeps-sw-cm": (CM, "maximality", "lemma keeps (sliding_window)"),
    "keeps-sw-rr": (RR, "maximality", "lemma keeps (sliding_window)"),
    "post-sw-v": (V, "loads-stored-only", "lemma post (sliding_window)"),
    "post-sw-rm": (RM, "loads-stored-only", "lemma post (sliding_window)"),
    "post-sw-rr": (RR, "loads-stored-only", "lemma post (sliding_window)"),
    "post-sw-cm": (CM, "loads-stored-only", "lemma post (sliding_window)"),
    "post-mamba-rm": (RM, "loads-stored-only", "lemma post (mamba)"),
    "post-mamba-rr": (RR, "loads-stored-only", "lemma post (mamba)"),
    "keeps-mamba-off-rm": (RM, "maximality", "lemma keeps (mamba; Mamba align off)"),
    "keeps-fa-rm": (RM, "maximality", "lemma keeps (full_attention)"),
}


def _params(**p: Any) -> Callable[[], z3.Solver]:
    def make() -> z3.Solver:
        s = z3.Solver()
        for k, v in p.items():
            s.set(k.replace("__", "."), v)
        return s
    return make


def _tactics(*names: str) -> Callable[[], z3.Solver]:
    return lambda: z3.Then(*names, "smt").solver()


CONFIGS: dict[str, Callable[[], z3.Solver]] = {
    "base": z3.Solver,
    "nl-off": _params(smt__arith__nl=False),
    "grobner-off": _params(smt__arith__nl__grobner=False),
    "horner-off": _params(smt__arith__nl__horner=False),
    "tangents-off": _params(smt__arith__nl__tangents=False),
    "order-off": _params(smt__arith__nl__order=False),
    "branching-off": _params(smt__arith__nl__branching=False),
    "nra-off": _params(smt__arith__nl__nra=False),
    "simplex-auto": _params(smt__arith__auto_config_simplex=True),
    "relevancy0": _params(smt__relevancy=0),
    "relevancy1": _params(smt__relevancy=1),
    "phase0": _params(smt__phase_selection=0),
    "case-split0": _params(smt__case_split=0),
    "restart0": _params(smt__restart_strategy=0),
    "grobner-tangents-off": _params(smt__arith__nl__grobner=False,
                                    smt__arith__nl__tangents=False),
    "grobner-tangents-order-off": _params(smt__arith__nl__grobner=False,
                                          smt__arith__nl__tangents=False,
                                          smt__arith__nl__order=False),
    "nl-off-restart0": _params(smt__arith__nl=False, smt__restart_strategy=0),
    "purify": _tactics("simplify", "purify-arith", "smt"),
    "ineqs": _tactics("simplify", "propagate-values", "propagate-ineqs"),
    "normalize": _tactics("simplify", "normalize-bounds"),
    "qfnia": lambda: z3.SolverFor("QF_UFNIA"),
}


@contextlib.contextmanager
def _named_products() -> Iterator[None]:
    """Encoding variant: each quotient's product with its divisor named once
    (``p == q * d``; floor ``p <= x < p + d``, cdiv ``p - d < x <= p``) instead of the
    two products ``q * d`` and ``(q + 1) * d`` (``(q - 1) * d``)."""
    floor, ceil = Enc.floordiv, Enc.cdiv

    def floordiv(self: Enc, x: z3.ArithRef, d: z3.ArithRef, name: str = "q"
                 ) -> z3.ArithRef:
        key = ("floor", x.get_id(), d.get_id())
        if key not in self.memo:
            q = self.fresh_int(name)
            p = q * d
            self.add(p <= x, x < p + d)
            self.memo[key] = (x, d, q)
        return self.memo[key][2]

    def cdiv(self: Enc, x: z3.ArithRef, d: z3.ArithRef, name: str = "c") -> z3.ArithRef:
        key = ("ceil", x.get_id(), d.get_id())
        if key not in self.memo:
            q = self.fresh_int(name)
            p = q * d
            self.add(p - d < x, x <= p)
            self.memo[key] = (x, d, q)
        return self.memo[key][2]

    Enc.floordiv, Enc.cdiv = floordiv, cdiv  # type: ignore[method-assign]
    try:
        yield
    finally:
        Enc.floordiv, Enc.cdiv = floor, ceil  # type: ignore[method-assign]


ENCODINGS: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "enc": contextlib.nullcontext,
    "named": _named_products,
}


def build(short: str, encoding: str = "enc") -> list[z3.BoolRef]:
    sem_name, thm, name = QUERIES[short]
    sem = get_semantics(sem_name)
    with ENCODINGS[encoding]():
        for n, b in layers_chunked.proof_queries(thm, sem, THEOREMS[thm].pre(sem_name)):
            if n == name:
                return b()
    raise KeyError(name)


def ask(q: list[z3.BoolRef], make: Callable[[], z3.Solver], seed: int, timeout_ms: int
        ) -> tuple[float, str]:
    s = make()
    s.set("timeout", timeout_ms)
    s.set("random_seed", seed)
    s.add(*q)
    c0 = time.process_time()
    res = s.check()
    return time.process_time() - c0, str(res)


def seeds_line(got: list[tuple[float, str]]) -> str:
    """Each seed's seconds (an answer other than unsat beside it), then mean and max."""
    secs = [sec for sec, _ in got]
    each = " ".join(f"{sec:5.2f}" + ("" if r == "unsat" else f"({r})") for sec, r in got)
    return f"{each}  mean {sum(secs) / len(secs):5.2f} max {max(secs):5.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", default="post-sw-rm,keeps-sw-rm")
    ap.add_argument("--configs", default="base",
                    help="comma-separated; CONFIG or CONFIG+named (encoding variant)")
    ap.add_argument("--seeds", default="0,1,2,3,4,5")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--dump", type=Path)
    args = ap.parse_args()
    queries, seeds = args.queries.split(","), [int(x) for x in args.seeds.split(",")]
    configs = [c.split("+") for c in args.configs.split(",")]
    bad = [q for q in queries if q not in QUERIES] + [
        "+".join(c) for c in configs
        if c[0] not in CONFIGS or any(e not in ENCODINGS for e in c[1:])]
    if bad:
        print(f"unknown: {bad}", file=sys.stderr)
        return 2
    ok = True
    for short in queries:
        if args.dump:
            s = z3.Solver()
            s.add(*build(short))
            args.dump.mkdir(parents=True, exist_ok=True)
            (args.dump / f"{short}.smt2").write_text(s.to_smt2())
        for c in configs:
            q = build(short, c[1] if len(c) > 1 else "enc")
            got = [ask(q, CONFIGS[c[0]], k, int(args.timeout * 1000)) for k in seeds]
            ok = ok and all(r == "unsat" for _, r in got)
            print(f"{short:20} {'+'.join(c):16} {seeds_line(got)}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
