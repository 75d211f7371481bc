"""Not adopted: pinning a field's least value with range queries instead of
``check_chunked.Least``'s one value at a time. ``ranged(width, eqs)`` asks ``x == lo``,
... for the first ``eqs`` values, then ``k <= x <= k + width - 1`` ranges upward; a
satisfiable range with model value ``v`` is shrunk (``k <= x <= v - 1``) until unsat,
so the least value (and each counterexample) is the same. Run through
``bench/bench_cex_chunked.py`` (every search over the seeds, interleaved; each
counterexample compared with docs/counterexamples/). Results: bench/results/cex_chunked.txt.

    python bench/cex_ranges_chunked.py [--seeds 0,1,2]
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import z3

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from proofs import check_chunked  # noqa: E402
from proofs.check import _check as check_with  # noqa: E402
from proofs.check import _Pinner as Bisect  # noqa: E402


def ranged(width: int, eqs: int = 1) -> type[check_chunked.Least]:
    class Ranged(check_chunked.Least):
        def smallest(self, x: z3.ArithRef, lo: int) -> None:
            top_all = min(check_chunked._int(self.model, x), lo + check_chunked.UPWARD)
            k = lo
            while k < top_all:
                top = k if k < lo + eqs else min(k + width - 1, top_all - 1)
                m = check_with(self.solver, x == k if top == k else z3.And(k <= x, x <= top))
                if m is None:
                    k = top + 1
                    continue
                self.model, v = m, check_chunked._int(m, x)
                while v > k:  # the least value is in [k, v]
                    m = check_with(self.solver, x == k if v - 1 == k
                                   else z3.And(k <= x, x <= v - 1))
                    if m is None:
                        break
                    self.model, v = m, check_chunked._int(m, x)
                self.solver.add(x == v)
                return
            Bisect.smallest(self, x, top_all)
    return Ranged


def main() -> int:
    spec = importlib.util.spec_from_file_location("bench_cex_chunked",
                                                  ROOT / "bench" / "bench_cex_chunked.py")
    assert spec is not None and spec.loader is not None
    bench: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.VARIANTS.clear()
    bench.VARIANTS.update({"upward": check_chunked.Least, "r4": ranged(4), "r4e2": ranged(4, 2)})
    return int(bench.main())


if __name__ == "__main__":
    sys.exit(main())
