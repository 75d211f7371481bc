"""The layered tail proof's queries (``proofs.tail_layers_chunked.proof_queries``: every
distinct query of the six theorems it covers over the four 0.33.0 semantics, as one
``python -m proofs`` process asks them, each once), solved with Z3's defaults and with
the solver ``tail_layers_chunked.new_solver`` gives it, back to back per query and seed:
CPU seconds of check(), mean and max over the seeds, per query and in total. Every
answer must be unsat (exit 1 if not).

    python bench/bench_tail_chunked.py [--seeds 0,1,2]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import z3

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import releases  # noqa: E402
from model.semantics import get_semantics  # noqa: E402
from proofs import tail_layers_chunked  # noqa: E402

# the chunked semantics the encodings model (releases.proved)
SEMANTICS = releases.proved("chunked")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0,1,2", help="z3 random seeds (comma-separated)")
    seeds = [int(x) for x in p.parse_args().seeds.split(",")]
    queries: dict[str, Callable[[], list[z3.BoolRef]]] = {}
    for thm in tail_layers_chunked.COVERED:
        for sem in SEMANTICS:
            for name, build in tail_layers_chunked.proof_queries(thm, get_semantics(sem)):
                queries.setdefault(name, build)
    solvers: dict[str, Callable[[str], z3.Solver]] = {
        "default": lambda name: z3.Solver(), "new_solver": tail_layers_chunked.new_solver}
    total = {k: 0.0 for k in solvers}
    bad = 0
    for name, build in queries.items():
        q = build()
        times: dict[str, list[float]] = {k: [] for k in solvers}
        for seed in seeds:
            for label, make in solvers.items():
                s = make(name)
                s.set("random_seed", seed)
                s.set("timeout", 60_000)
                s.add(*q)
                t0 = time.process_time()
                res = s.check()
                times[label].append(time.process_time() - t0)
                if res != z3.unsat:
                    print(f"  {label} seed {seed}: {res} on {name}")
                    bad += 1
        for label, ts in times.items():
            total[label] += sum(ts) / len(ts)
        print(f"{name[:88]:<88} " + "  ".join(
            f"{k} mean {sum(t) / len(t):5.2f} max {max(t):5.2f}" for k, t in times.items()),
            flush=True)
    print(f"{len(queries)} queries, sum of means: " + "  ".join(
        f"{k} {v:.2f}" for k, v in total.items()))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
