"""Every distinct lemma query of the 0.33.0 layered proofs (the queries
``bench/bench_layers_chunked.py`` asks through ``proofs.layers_chunked.ask_unsat``: all four
0.33.0 semantics, every theorem the layered proofs cover, under the theorem's
preconditions, and the aligned loop summary the partial-tail proof takes), each asked
under every configuration and Z3 random seed, side by side (per query and seed the
configurations run back to back, their order alternating with the seed). Prints process
CPU seconds of ``check()`` per query, then per query class (the query's name: lemma and
kind) the mean and max per configuration and every non-unsat answer. ``--sat``: instead
satisfiable queries (a precondition dropped or a guard removed, as the necessity and
sabotage tests do): post and keeps, and chunk-in-align and valid-below-m0 as the tests
ask them through ``prove``; each must answer sat, so the layered proof reports FAILED,
not UNKNOWN. Measures only
(bench/results/params_chunked.txt).

    python bench/params_all_chunked.py [--configs base,grobner-tangents-off] [--sat]
                                    [--seeds 0,1,2,3,4,5] [--timeout S] [--only SUBSTR]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import z3

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import releases  # noqa: E402
from bench.params_chunked import CONFIGS, ask  # noqa: E402
from model.semantics import get_semantics  # noqa: E402
from proofs import (
    layers_chunked,  # noqa: E402
    lemmas_chunked,  # noqa: E402
    maximality_layers_chunked,  # noqa: E402
    tail_layers_chunked,  # noqa: E402
)
from proofs.theorems import THEOREMS  # noqa: E402

# the chunked semantics the encodings model (releases.proved)
SEMANTICS = releases.proved("chunked")


def queries(only: str = "") -> list[tuple[str, str, list[z3.BoolRef]]]:
    """(where, name, query) for every distinct query (by ``layers_chunked.query_key``), in the order
    the proofs ask them."""
    seen: dict[tuple[int, ...], None] = {}
    out = []
    for sem_name in SEMANTICS:
        sem = get_semantics(sem_name)
        for thm, t in THEOREMS.items():
            pre = t.pre(sem_name)
            if not t.covers(sem_name) or not layers_chunked.covers(thm, pre):
                continue
            runs = [(thm, pre)]
            if thm == "loads-stored-only" and tail_layers_chunked.covers(thm):
                runs.append(("no-partial-state", ("align-divides-blocks",)))
            for th, pr in runs:
                for name, build in layers_chunked.proof_queries(th, sem, pr):
                    if only not in name:
                        continue
                    q = build()
                    key = layers_chunked.query_key(q)
                    if key not in seen:
                        seen[key] = None
                        out.append((f"{sem_name} {th}", name, q))
    return out


def sat_queries() -> list[tuple[str, str, list[z3.BoolRef]]]:
    """Satisfiable post and keeps queries: a precondition dropped (same-block-size on the
    round-down fix: post, sliding window; no-eagle on 0.33.0: keeps), and post without its
    not-deferred guard (tests/test_proof_layers_chunked.py's sabotage), unpinned."""
    v, rm = releases.newest("chunked"), releases.fix_for("001")
    out = [
        (
            f"{rm.name}, no same-block-size",
            "lemma post (sliding_window)",
            layers_chunked.lemma_turn(rm, (), "post", "sliding_window"),
        )
    ]
    for kind in ("full_attention", "sliding_window"):
        out.append(
            (
                f"{v.name}, no no-eagle",
                f"lemma keeps ({kind})",
                maximality_layers_chunked.lemma_query(v, ("caps-reach-prompt",), "keeps", kind),
            )
        )
    post = lemmas_chunked.LEMMAS["post"]

    def unguarded(t: Any, ok_m2: z3.BoolRef) -> z3.BoolRef:
        return z3.Implies(z3.And(z3.Not(t.too_short), z3.Not(t.no_hit)), ok_m2)

    lemmas_chunked.LEMMAS["post"] = replace(post, fact=unguarded)
    try:
        for kind in ("full_attention", "sliding_window", "mamba"):
            out.append(
                (
                    f"{v.name}, post unguarded (sabotage)",
                    f"lemma post ({kind})",
                    layers_chunked.lemma_turn(v, (), "post", kind),
                )
            )
    finally:
        lemmas_chunked.LEMMAS["post"] = post
    # the satisfiable queries the tests ask through prove() (default settings there)
    for name, build in layers_chunked.proof_queries("no-partial-state", v, ()):
        if "chunk-in-align" in name:
            out.append((f"{v.name}, no align-divides-blocks", name, build()))
    for name, build in layers_chunked.proof_queries("maximality", v, ("no-eagle",)):
        if "valid-below-m0" in name:
            out.append((f"{v.name}, no caps-reach-prompt", name, build()))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="base,grobner-tangents-off")
    ap.add_argument("--seeds", default="0,1,2,3,4,5")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--only", default="", help="only queries whose name contains this")
    ap.add_argument("--sat", action="store_true", help="the satisfiable post/keeps queries")
    args = ap.parse_args()
    configs, seeds = args.configs.split(","), [int(x) for x in args.seeds.split(",")]
    if any(c not in CONFIGS for c in configs):
        print(f"--configs: unknown {[c for c in configs if c not in CONFIGS]}", file=sys.stderr)
        return 2
    qs = [x for x in sat_queries() if args.only in x[1]] if args.sat else queries(args.only)
    want = "sat" if args.sat else "unsat"
    print(f"{len(qs)} distinct queries; seeds {seeds}; timeout {args.timeout} s", flush=True)
    # class -> config -> list of seconds; class -> config -> non-unsat answers
    secs: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    bad: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    total: dict[str, float] = defaultdict(float)
    for where, name, q in qs:
        got: dict[str, list[tuple[float, str]]] = defaultdict(list)
        for i, k in enumerate(seeds):
            order = configs if i % 2 == 0 else configs[::-1]
            for c in order:
                make: Callable[[], z3.Solver] = CONFIGS[c]
                got[c].append(ask(q, make, k, int(args.timeout * 1000)))
        for c in configs:
            for sec, res in got[c]:
                secs[name][c].append(sec)
                total[c] += sec
                if res != want:
                    bad[name][c].append(f"{where} {res}")
            each = " ".join(f"{s:5.2f}" + ("" if r == want else f"({r})") for s, r in got[c])
            print(f"{where:50} {name[:44]:44} {c:22} {each}", flush=True)
    print("\nper query class (all its queries x seeds): mean / max CPU s per config")
    for name, by in secs.items():
        cells = "  ".join(
            f"{c} {sum(v) / len(v):5.2f}/{max(v):5.2f}"
            + (f" NOT {want} x{len(bad[name][c])}" if bad[name][c] else "")
            for c, v in by.items()
        )
        print(f"  {name[:60]:60} n={len(by[configs[0]]):3}  {cells}")
    print(
        "totals over all queries and seeds: " + ", ".join(f"{c} {total[c]:.1f} s" for c in configs)
    )
    return 1 if any(v for by in bad.values() for v in by.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
