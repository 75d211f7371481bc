"""An encoding idea for the round-down fix's nonlinear lemmas, measured and not adopted:
the Mamba align size ``blocks_per_chunk * mamba_gpu_block_size`` named by one symbol
with its defining equation (as ``tokens_per_chunk`` is), so ``align * quotient`` is a
product of two symbols instead of three. A definitional extension: exactly as strong.
Each query built both ways, asked with ``proofs.layers_chunked``'s post/keeps settings,
seeds 0..5, the two encodings back to back per seed (order alternating); process CPU
seconds of check() (bench/results/params_chunked.txt).

    python bench/named_align_chunked.py [--queries post-sw-rm,keeps-sw-rm,...]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import z3

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.params_chunked import CONFIGS, QUERIES, ask, build  # noqa: E402
from proofs import turn_chunked  # noqa: E402
from proofs.encoding import Enc  # noqa: E402

ORIGINAL = turn_chunked.derive


def named_align(
    enc: Enc, cfg: turn_chunked.Cfg, env: turn_chunked.Env | None = None
) -> turn_chunked.D:
    d = ORIGINAL(enc, cfg, env)
    if env is None:
        return d
    a = z3.Int("mamba_align_size")
    enc.add(a == d.align)
    return replace(d, align=a)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", default="post-sw-rm,keeps-sw-rm,post-sw-rr,post-mamba-rm")
    args = ap.parse_args()
    ok = True
    for short in args.queries.split(","):
        if short not in QUERIES:
            print(f"--queries: unknown {short!r}", file=sys.stderr)
            return 2
        qs = {}
        for v in ("enc", "named-align"):
            turn_chunked.derive = named_align if v == "named-align" else ORIGINAL
            try:
                qs[v] = build(short)
            finally:
                turn_chunked.derive = ORIGINAL
        got: dict[str, list[tuple[float, str]]] = {v: [] for v in qs}
        for k in range(6):
            for v in list(qs) if k % 2 == 0 else list(qs)[::-1]:
                got[v].append(ask(qs[v], CONFIGS["grobner-tangents-off"], k, 30_000))
        for v, res in got.items():
            ok = ok and all(r == "unsat" for _, r in res)
            secs = [s for s, _ in res]
            each = " ".join(f"{s:5.2f}" + ("" if r == "unsat" else f"({r})") for s, r in res)
            print(
                f"{short:14} {v:12} {each} mean {sum(secs) / 6:5.2f} max {max(secs):5.2f}",
                flush=True,
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
