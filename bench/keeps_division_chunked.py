"""An encoding idea for lemma keeps (sliding window), measured and not adopted: the
query with the division-fact instances ``proofs.layers_chunked.division_facts`` gives lemma
post ("div") against the query as proved ("enc"), under Z3's defaults, Groebner +
tangents off and the nonlinear solver off; seeds 0..5, process CPU seconds of check()
(bench/results/params_chunked.txt).

    python bench/keeps_division_chunked.py
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import z3

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import releases  # noqa: E402
from bench.params_chunked import CONFIGS, ask, seeds_line  # noqa: E402
from model.semantics import get_semantics  # noqa: E402
from proofs import (
    layers_chunked,  # noqa: E402
    maximality_layers_chunked,  # noqa: E402
)
from proofs.encoding import Enc  # noqa: E402
from proofs.theorems import THEOREMS  # noqa: E402

SEMANTICS = (releases.fix_for("001").name, releases.newest("chunked").name,
             releases.fix_for("003").name)


def main() -> int:
    orig = maximality_layers_chunked.monotone_instances

    def with_division(
        enc: Enc, ends: Sequence[z3.ArithRef] = (), tpc: z3.ArithRef | None = None
    ) -> list[z3.BoolRef]:
        return orig(enc, ends, tpc) + layers_chunked.division_facts(enc, ends)

    ok = True
    for sem in SEMANTICS:
        pre = THEOREMS["maximality"].pre(sem)
        for variant in ("enc", "div"):
            maximality_layers_chunked.monotone_instances = (
                with_division if variant == "div" else orig
            )  # type: ignore[assignment]
            try:
                q = maximality_layers_chunked.lemma_query(
                    get_semantics(sem), pre, "keeps", "sliding_window"
                )
            finally:
                maximality_layers_chunked.monotone_instances = orig
            for c in ("base", "grobner-tangents-off", "nl-off"):
                got = [ask(q, CONFIGS[c], k, 30_000) for k in range(6)]
                ok = ok and all(r == "unsat" for _, r in got)
                print(f"{sem:24} {variant:4} {c:22} {seeds_line(got)}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
