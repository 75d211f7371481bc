"""CPU time of the costliest 0.33.0 layered lemma queries asked whole and as a both-ways
case split (the case and its negation each added as a premise, two unsat queries that
together cover every case), under several Z3 random seeds: the seeds stand in for the
term-order changes that make these queries fragile across runs.

    python bench/compare_splits_chunked.py [--lemma post|keeps] [--semantics NAME]
                                        [--seeds 0,1,2] [--splits whole,align,...]

Cases: ``align`` (the layout rounds to a Mamba align size or not), ``cleared`` (the
turn clears eagle_verified), ``cut`` (the turn lowers the bound, m2 < m1), ``kept``
(m2 == m); ``conj`` (keeps only) proves each conjunct of the claim by its own query.
Queries are built as ``proofs.layers_chunked.lemma_turn`` (post, under loads-stored-only's
preconditions) and ``proofs.maximality_layers_chunked.lemma_query`` (keeps, under
maximality's) build them, for the sliding-window group. Prints one line per split and
seed: the total process CPU seconds and each part's seconds and answer. Measures only:
the proofs ask the queries whole (see bench/results/splits_chunked.txt).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import z3

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from params_chunked import ask as timed_check  # noqa: E402  (this folder, bench/)

import releases  # noqa: E402
from model.semantics import get_semantics  # noqa: E402
from proofs import (
    layers_chunked,  # noqa: E402
    maximality_layers_chunked,  # noqa: E402
    turn_chunked,  # noqa: E402
)
from proofs.theorems import THEOREMS  # noqa: E402

Case = Callable[[turn_chunked.Cfg, turn_chunked.Step], z3.BoolRef]
CASES: dict[str, Case] = {
    # the same terms as derive's align_on: symbolic_env's names are fixed
    "align": lambda cfg, t: z3.And(cfg.prefix_caching, turn_chunked.symbolic_env().has_mamba),
    "cleared": lambda cfg, t: t.cleared,
    "cut": lambda cfg, t: t.m2 < t.m1,
    "kept": lambda cfg, t: t.m2 == t.m,
}
TIMEOUT_MS = 60_000


def query(
    lemma: str,
    sem_name: str,
    pins: Callable[[turn_chunked.Cfg, turn_chunked.Step], list[z3.BoolRef]] | None,
    negated: bool = True,
) -> list[z3.BoolRef]:
    sem = get_semantics(sem_name)
    pin = None if pins is None else (lambda cfg, st, t: pins(cfg, t))
    if lemma == "post":
        pre = THEOREMS["loads-stored-only"].pre(sem_name)
        return layers_chunked.lemma_turn(
            sem, pre, "post", turn_chunked.SW, pin=pin, negated=negated
        )
    pre = THEOREMS["maximality"].pre(sem_name)
    return maximality_layers_chunked.lemma_query(
        sem, pre, "keeps", turn_chunked.SW, pin=pin, negated=negated
    )


def parts(lemma: str, sem_name: str, split: str) -> list[list[z3.BoolRef]]:
    if split == "whole":
        return [query(lemma, sem_name, None)]
    if split == "conj":  # keeps: m >= c and not (m1 >= c and m2 >= c and a hit)

        def one(i: int) -> list[z3.BoolRef]:
            def pins(cfg: turn_chunked.Cfg, t: turn_chunked.Step) -> list[z3.BoolRef]:
                c = cfg.computed + z3.Int("valid_hit")
                return [t.m >= c, z3.Not([t.m1 >= c, t.m2 >= c, z3.Not(t.no_hit)][i])]

            return query(lemma, sem_name, pins, negated=False)

        return [one(i) for i in range(3)]
    case = CASES[split]
    return [
        query(lemma, sem_name, lambda cfg, t: [case(cfg, t)]),
        query(lemma, sem_name, lambda cfg, t: [z3.Not(case(cfg, t))]),
    ]


def ask(q: list[z3.BoolRef], seed: int) -> tuple[float, str]:
    return timed_check(q, z3.Solver, seed, TIMEOUT_MS)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lemma", choices=("post", "keeps"), default="post")
    ap.add_argument("--semantics", default=releases.fix_for("001").name)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--splits", default="whole,align")
    args = ap.parse_args()
    splits = args.splits.split(",")
    bad = [s for s in splits if s not in ("whole", "conj", *CASES)]
    if bad or (args.lemma == "post" and "conj" in splits):
        print(f"--splits: unknown {bad or ['conj (keeps only)']}", file=sys.stderr)
        return 2
    try:
        get_semantics(args.semantics)
    except ValueError as e:
        print(f"--semantics: {e}", file=sys.stderr)
        return 2
    ok = True
    for split in splits:
        for seed in (int(x) for x in args.seeds.split(",")):
            got = [ask(q, seed) for q in parts(args.lemma, args.semantics, split)]
            ok = ok and all(r == "unsat" for _, r in got)
            each = " + ".join(f"{sec:.2f} {r}" for sec, r in got)
            print(
                f"{args.lemma} (sliding_window) {args.semantics} {split} seed {seed}: "
                f"{sum(sec for sec, _ in got):6.2f} s ({each})",
                flush=True,
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
