"""Where the proofs' CPU goes: every pair of one part of the main job (``cluster``: the
processes' split, proofs/results.py) run in this process as the pool runs it, each Z3
``check()`` timed (process CPU) and put in a class by its callers (the layered lemma
queries, the guard against vacuous layered proofs, counterexample searches and their
minimisation, witnesses, the premises and precondition audits, ...); the rest of a pair's
CPU is Python building terms (and model/ replays).

    python bench/profile_proofs.py [--cluster NAME ...] [--cprofile FILE]

Prints per cluster: the pairs' CPU, the solving CPU per class, the pairs (CPU and solving)
and the longest single queries. Measures only; no result is compared (bench_proofs.py
does that). Without --cluster, every cluster in turn (several minutes of CPU: nice it).
"""

from __future__ import annotations

import argparse
import cProfile
import sys
import time
import traceback
from collections import defaultdict
from pathlib import Path
from typing import Any

import z3

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from model.semantics import MODEL_SEMANTICS, get_semantics  # noqa: E402
from proofs import results  # noqa: E402
from proofs.theorems import THEOREMS  # noqa: E402

# (a frame in the caller chain, its class), first match wins
CLASSES = (
    ("layered_proves_false", "guard: a refuted statement's layered proof (must not prove)"),
    ("witness", "witness searches"),
    ("premises_", "premises audits (premises satisfiable, replayed in model/)"),
    ("assume.py", "precondition audits (assume.py)"),
    ("pinned", "pinned checks (pinned_chunked, pinned_violation_chunked)"),
    ("smallest", "counterexample minimisation (least, pins)"),
    ("prefer", "counterexample minimisation (least, pins)"),
    ("_pin", "counterexample minimisation (least, pins)"),
    ("check_chunked.py:counterexample", "bounded counterexample searches"),
    ("bmc", "bounded counterexample searches"),
    ("tail_layers_chunked.py:prove", "partial-tail layered proofs"),
    ("ask_unsat", "layered / abstract proof lemma queries"),
    ("check.py:_answer", "layered / abstract proof lemma queries"),
)

Record = tuple[str, float, str, str]  # pair, CPU seconds, answer, caller chain
RECORDS: list[Record] = []
PAIR = [""]
_CHECK = z3.Solver.check


def _timed(self: z3.Solver, *assumptions: Any) -> z3.CheckSatResult:
    t0 = time.process_time()
    res = _CHECK(self, *assumptions)
    seconds = time.process_time() - t0
    frames = [f"{Path(f.filename).name}:{f.name}" for f in traceback.extract_stack(limit=14)[:-1]
              if "/proofs/" in f.filename and not f.filename.endswith("memo.py")]
    RECORDS.append((PAIR[0], seconds, str(res), " < ".join(reversed(frames[-5:]))))
    return res


def klass(chain: str) -> str:
    return next((c for frame, c in CLASSES if frame in chain), f"other: {chain}")


def run(cluster: str) -> list[tuple[str, str, float]]:
    pairs = [(t, s) for t in THEOREMS for s in MODEL_SEMANTICS
             if THEOREMS[t].covers(s) and results.cluster(s) == cluster]
    groups: dict[str, list[tuple[str, str]]] = {}
    for t, s in pairs:  # group by group, as the pool's processes run them
        groups.setdefault(results.group_of(get_semantics(s).chunked, t), []).append(
            (t, s))
    out = []
    for ps in groups.values():
        for t, s in ps:
            PAIR[0] = f"{t} on {s}"
            t0 = time.process_time()
            row = results.run_one(t, s, 300.0, True)
            out.append((PAIR[0], row.verdict.status, time.process_time() - t0))
            print(f"  {PAIR[0]:50} {row.verdict.status:15} {out[-1][2]:7.2f}s", flush=True)
    return out


def main() -> int:
    clusters = sorted({results.cluster(s) for s in MODEL_SEMANTICS})
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cluster", nargs="+", choices=clusters, default=clusters)
    p.add_argument("--cprofile", type=Path, default=None, metavar="FILE",
                   help="also write cProfile's statistics there (inflates the Python part)")
    args = p.parse_args()
    z3.Solver.check = _timed
    prof = cProfile.Profile() if args.cprofile else None
    for cluster in args.cluster:
        RECORDS.clear()
        print(f"{cluster}:", flush=True)
        if prof is not None:
            prof.enable()
        pairs = run(cluster)
        if prof is not None:
            prof.disable()
        total = sum(s for *_, s in pairs)
        solving = sum(r[1] for r in RECORDS)
        print(f"{cluster}: pairs {total:.1f}s CPU, solving {solving:.1f}s ({len(RECORDS)} "
              f"checks), the rest (Python: terms, replays) {total - solving:.1f}s")
        by: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        for _, s, _, chain in RECORDS:
            by[klass(chain)][0] += 1
            by[klass(chain)][1] += s
        for name, (n, s) in sorted(by.items(), key=lambda x: -x[1][1]):
            print(f"  {s:7.1f}s {int(n):5d} checks  {name}")
        per: dict[str, float] = defaultdict(float)
        for pair, s, _, _ in RECORDS:
            per[pair] += s
        print("  longest single queries:")
        for pair, s, res, chain in sorted(RECORDS, key=lambda r: -r[1])[:8]:
            print(f"    {s:6.2f}s {res:8} {pair}: {chain}")
    if prof is not None:
        prof.dump_stats(args.cprofile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
