"""The CPU time of BUILDING the layered proofs' queries (not solving them), old code
against new, side by side, and a check that both build the same queries.

    python bench/bench_build.py [--base REF] [--rounds N]

Each round runs, alternately, this tree and ``REF`` (default ``main``, unpacked by
``git archive`` into a temporary folder) in a fresh process that builds, in the report's
order (a theorem's semantics of one family in one process), every query of
``proofs.layers_chunked.proof_queries`` and ``proofs.maximality_layers_chunked.proof_queries``
(the four 0.33.0 semantics), ``proofs.tail_layers_chunked.proof_queries`` and
``proofs.check.proof_queries`` (the older family), each theorem under the preconditions
the report takes, and nothing is solved. A child prints its process CPU seconds for the
building and two digests of every query it built, in order: of their S-expressions
(the same text) and of their Z3 term ids (the same terms, created in the same order, so
that the solver sees the very same input; a change that skips some building, e.g.
sharing a lemma query across semantics, shifts later ids: the same text, reported, not
an error). Exit 1 if the texts differ or a tree is not deterministic.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child(part: str) -> None:
    """Build every query of ``part`` ('v033' or 'older') here; print a JSON line."""
    sys.path.insert(0, str(Path.cwd()))
    import z3

    # the family's semantics as the tree under test lists them (its registry's views)
    from model.semantics import CHUNKED_SEMANTICS, SEMANTICS, get_semantics
    from proofs import check, layers_chunked, tail_layers_chunked
    from proofs.theorems import THEOREMS

    builds: list[tuple[str, object]] = []
    for thm, t in THEOREMS.items():  # a theorem's semantics of a family together
        for name in CHUNKED_SEMANTICS if part == "v033" else SEMANTICS:
            if not t.covers(name):
                continue
            sem, pre = get_semantics(name), t.pre(name)
            if part == "older":
                builds += [
                    (f"{name} {thm} {q}", (lambda b=b: b(False)))
                    for q, b in check.proof_queries(t, sem, pre)
                ]
                continue
            if not layers_chunked.covers(thm, pre):
                continue
            builds += [
                (f"{name} {thm} {q}", b) for q, b in layers_chunked.proof_queries(thm, sem, pre)
            ]
            if tail_layers_chunked.covers(thm):
                builds += [
                    (f"{name} {thm} {q}", b)
                    for q, b in tail_layers_chunked.proof_queries(thm, sem, pre)
                ]
    built: list[list[z3.BoolRef]] = []
    c0 = time.process_time()
    for _, b in builds:
        built.append(b())  # type: ignore[operator]
    cpu = time.process_time() - c0
    text, ids = hashlib.sha256(), hashlib.sha256()
    for (name, _), q in zip(builds, built, strict=True):
        text.update(name.encode())
        ids.update(name.encode())
        for x in q:
            text.update(x.sexpr().encode())
            ids.update(str(x.get_id()).encode() + b",")
    print(
        json.dumps(
            {"cpu": cpu, "queries": len(built), "text": text.hexdigest(), "ids": ids.hexdigest()}
        )
    )


def run(tree: Path, part: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_build.py"), "--child", part],
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="main")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--part", choices=("v033", "older"), nargs="*", default=["v033", "older"])
    ap.add_argument("--child", choices=("v033", "older"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return 0
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        arc = subprocess.run(
            ["git", "archive", args.base], cwd=ROOT, check=True, capture_output=True
        ).stdout
        with tarfile.open(fileobj=__import__("io").BytesIO(arc)) as tf:
            tf.extractall(base, filter="data")
        for part in args.part:
            cpu: dict[str, list[float]] = {"base": [], "new": []}
            seen: dict[str, set[tuple[object, object]]] = {"base": set(), "new": set()}
            n = 0
            for _ in range(args.rounds):  # interleaved A/B
                for label, tree in (("base", base), ("new", ROOT)):
                    r = run(tree, part)
                    cpu[label].append(float(r["cpu"]))  # type: ignore[arg-type]
                    seen[label].add((r["text"], r["ids"]))
                    n = int(r["queries"])  # type: ignore[call-overload]
            same_text = {t for t, _ in seen["base"]} == {t for t, _ in seen["new"]}
            same_ids = seen["base"] == seen["new"]
            ok = ok and same_text and len(seen["new"]) == 1 and len(seen["base"]) == 1
            for label in ("base", "new"):
                xs = cpu[label]
                print(
                    f"{part:6} {label:5} ({args.base if label == 'base' else 'this tree'}): "
                    f"{n} queries built in {statistics.mean(xs):6.2f} s CPU mean, "
                    f"{max(xs):6.2f} max over {len(xs)} runs"
                )
            print(
                f"{part:6} same S-expressions: {same_text}; same term ids: {same_ids}; "
                f"deterministic: {len(seen['new']) == 1 and len(seen['base']) == 1}"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
