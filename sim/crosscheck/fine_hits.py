"""A corpus of 0.33.0 requests whose GPU prefix hit ends on a hash block but not on the
scheduler block (issue 23, item 5), for ``python -m sim.crosscheck --scenarios DIR``.

```
python -m sim.crosscheck.fine_hits --out DIR [--n 2200] [--seed 5000]
python -m sim.crosscheck --vllm 0.33.0 --examples 0 --scenarios DIR
```

It draws the cross-check's own scenarios (``gen.distinct``, batches of 3000 seeded
``seed``, ``seed + 100``, ...) and, for each one whose layout allows fine-grained hits
(the model's ``cache_hit_alignment_tokens`` below the scheduler block, prefix caching
on), writes a copy whose ``num_computed_tokens`` is a seeded multiple of that alignment
that is not a multiple of the scheduler block and that the model accepts. The real side
judges the hit's shape on its own (``gpu_hit_real`` from vLLM's
``resolve_cache_hit_alignment_tokens``), so a model that accepted a hit vLLM cannot
produce would show as a disagreement. Deterministic: the same arguments write the same
files.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import replace
from pathlib import Path

import releases
from model import layout_chunked
from model.evaluate import evaluate
from model.layout import Refused
from model.scenario import Scenario, scenario_to_json
from sim.crosscheck.gen import distinct

BATCH = 3000


def fine_variant(s: Scenario, rng: random.Random) -> Scenario | None:
    """``s`` with a GPU hit on a hash block inside a scheduler block, or None when its
    layout has no fine-grained hits (or the model refuses the result)."""
    sem = releases.reference("chunked")
    try:
        lay = layout_chunked.resolve_layout(s, sem.steps, sem.base_version)
    except Refused:
        return None
    unit, block = lay.cache_hit_alignment_tokens, lay.scheduler_block_size
    if unit >= block or not s.enable_prefix_caching:
        return None
    hits = [k for k in range(unit, s.prompt_tokens, unit) if k % block]
    if not hits:
        return None
    out = replace(s, num_computed_tokens=rng.choice(hits))
    return out if evaluate(out).refused is None else None


def write_corpus(out: Path, n: int, seed: int) -> int:
    sem = releases.reference("chunked")
    rng = random.Random(seed)
    seen: set[str] = set()
    for batch in range(100):
        for s in distinct(sem.name, BATCH, seed=seed + 100 * batch):
            if len(seen) >= n:
                return len(seen)
            f = fine_variant(s, rng)
            if f is None:
                continue
            text = json.dumps(scenario_to_json(f), sort_keys=True)
            if text in seen:
                continue
            (out / f"fine-{len(seen):05d}.json").write_text(text)
            seen.add(text)
    return len(seen)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.crosscheck.fine_hits",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="directory to write into")
    ap.add_argument("--n", type=int, default=2200, help="scenarios to write")
    ap.add_argument("--seed", type=int, default=5000)
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error("argument --n: must be at least 1")
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"wrote {write_corpus(args.out, args.n, args.seed)} scenarios to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
