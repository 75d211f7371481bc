"""The 0.33.0 family's bounded counterexample searches (``proofs.check_chunked``), as
``python -m proofs`` runs them (the 13 searches of the 0.33.0 family's necessity checks
and checks over accepted layouts), each over several z3 random seeds, with the prompt
and the other fields pinned upward (``check_chunked.Least``, what the proofs use) and by
bisection (``proofs.check``'s Pinner), interleaved: CPU seconds, mean and max over the
seeds, per search and in total. Each counterexample must be the same under both and
equal the file under docs/counterexamples/ (exit 1 if not).

    python bench/bench_cex_chunked.py [--seeds 0,1,2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import z3

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import releases  # noqa: E402
from model.semantics import get_semantics  # noqa: E402
from proofs import check_chunked, encoding_chunked  # noqa: E402
from proofs.check import _Pinner as Bisect  # noqa: E402

STOCK, FIX, RERUN, CAP_MIN = (releases.newest("chunked").name, releases.fix_for("001").name,
                              releases.fix_for("001", completed=True).name,
                              releases.fix_for("003").name)
# (theorem, semantics, preconditions assumed, the files under docs/counterexamples/)
SEARCHES: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("no-partial-state", STOCK, (), ("accepted", "without-align-divides-blocks")),
    ("no-partial-state", CAP_MIN, (), ("accepted",)),
    ("loads-stored-only", FIX, (), ("accepted",)),
    ("whole-blocks", STOCK, (), ("accepted", "without-full-chunk-within-windowed")),
    ("whole-blocks", FIX, (), ("accepted",)),
    ("whole-blocks", RERUN, (), ("accepted",)),
    ("whole-blocks", CAP_MIN, (), ("accepted",)),
    ("maximality", STOCK, ("caps-reach-prompt",), ("without-no-eagle",)),
    ("maximality", STOCK, ("no-eagle",), ("without-caps-reach-prompt",)),
    ("maximality", STOCK, (), ("accepted",)),
    ("maximality", FIX, (), ("accepted",)),
    ("maximality", RERUN, (), ("accepted",)),
    ("maximality", CAP_MIN, (), ("accepted",)),
)
VARIANTS: dict[str, type[Bisect]] = {"upward": check_chunked.Least, "bisect": Bisect}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0,1,2", help="z3 random seeds (comma-separated)")
    seeds = [int(x) for x in p.parse_args().seeds.split(",")]
    make = check_chunked.new_solver
    seed = [0]

    def seeded() -> z3.Solver:
        s = make()
        s.set("random_seed", seed[0])
        return s

    check_chunked.new_solver = seeded
    for _, sem, _, _ in SEARCHES:  # the unrolled loops, built once (as in a run)
        for t in check_chunked.TEMPLATES:
            check_chunked._loop(
                get_semantics(sem), t, encoding_chunked.SCOPE, encoding_chunked.SCOPE.passes
            )
    total: dict[str, list[float]] = {v: [0.0] * len(seeds) for v in VARIANTS}
    bad = 0
    for thm, sem, assumed, files in SEARCHES:
        times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for i, seed[0] in enumerate(seeds):
            for name, cls in VARIANTS.items():
                check_chunked.Least = cls  # type: ignore[assignment,misc]
                t0 = time.process_time()
                v = check_chunked.counterexample(thm, get_semantics(sem), assumed, 300_000)
                dt = time.process_time() - t0
                times[name].append(dt)
                total[name][i] += dt
                for f in files:
                    want = json.loads(
                        (ROOT / "docs" / "counterexamples" / f"{thm}--{sem}--{f}.json").read_text()
                    )
                    if v.status != "COUNTEREXAMPLE" or v.counterexample != want:
                        print(f"  {name} seed {seed[0]}: {v.status}, not the file {f}")
                        bad += 1
        print(
            f"{thm:<18} {sem:<29} {','.join(assumed) or '-':<18} "
            + "  ".join(
                f"{n} mean {sum(t) / len(t):5.2f} max {max(t):5.2f}" for n, t in times.items()
            ),
            flush=True,
        )
    print(
        f"{'total':<67}"
        + "  ".join(f"{n} mean {sum(t) / len(t):5.2f} max {max(t):5.2f}" for n, t in total.items())
    )
    check_chunked.Least = VARIANTS["upward"]  # type: ignore[assignment,misc]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
