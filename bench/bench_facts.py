"""The spec's facts (``publish.facts.collect_facts``), old tree against this one, side by side:
CPU seconds per fact part and whether every part's result is the same, byte for byte.

    python bench/bench_facts.py [--base REF | --base-dir DIR] [--reps N] [--parts sim|all]
                                [--fresh]

The base tree is ``git archive REF`` (default ``main``) unpacked in a temporary folder, or
the folder ``--base-dir``.
Each repetition runs the base, then this tree (interleaved A/B), each in a fresh process
that computes every part with ``publish.facts.fact_part`` (``proofs.spec`` in a tree from
before ``publish/``) and times it with
``time.process_time``. ``--parts sim`` (the default) takes the simulator parts (``sim:*``
and ``rerun``); ``all`` adds the two Z3 counterexample searches; ``collect`` times one
whole ``collect_facts()`` call and also compares its output, serialized as the proofs
write it, with this tree's ``docs/spec-facts.json``. ``--fresh`` runs each part in a
process of its own (its cost without what earlier parts left in per-process caches: the
figure for ``FACT_PARTS``, since the proofs' pool may run a part anywhere). Prints each part's mean
and max over the repetitions for both trees, the totals, and exit 1 if any part's
serialized result differs between the trees (or between two repetitions of one tree).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from releases import alt_round_num_hit, vllm_0_23_0, vllm_0_24_0  # noqa: E402

# the parts of publish.facts.FACT_PARTS (listed here so that either tree's names are run;
# the simulated semantics are publish.names.SIM_SEMANTICS)
SIM_SEMANTICS = tuple(m.SEMANTICS.name for m in (vllm_0_23_0, vllm_0_24_0, alt_round_num_hit))
PART_NAMES = ["seed_counterexample", "alt_round_num_hit_counterexample",
              *(f"sim:{label}:{sem}" for label in ("chat", "chat-hybrid")
                for sem in SIM_SEMANTICS), "rerun"]

CHILD = """
import json, sys, time
try:
    from publish.facts import FACT_PARTS, collect_facts, fact_part
except ImportError:  # a tree from before publish/
    from proofs.spec import FACT_PARTS, collect_facts, fact_part
out = {}
if sys.argv[1] == "collect":  # the whole call, serialized as spec-facts.json is written
    t0 = time.process_time()
    got = collect_facts()
    out["collect_facts"] = [time.process_time() - t0,
                            json.dumps(got, indent=1, sort_keys=True) + "\\n"]
for name in [] if sys.argv[1] == "collect" else FACT_PARTS:
    if len(sys.argv) > 2 and name != sys.argv[2]:
        continue
    if sys.argv[1] == "all" or name.startswith("sim:") or name == "rerun":
        t0 = time.process_time()
        got = fact_part(name)
        out[name] = [time.process_time() - t0, json.dumps(got, indent=1, sort_keys=True)]
print(json.dumps(out))
"""


def run_tree(tree: Path, parts: str, fresh: bool) -> dict[str, tuple[float, str]]:
    names: list[str | None] = [None]
    if fresh and parts != "collect":  # each part in a process of its own
        names = [n for n in PART_NAMES if parts == "all" or n.startswith("sim:") or n == "rerun"]
    out = {}
    for name in names:
        res = subprocess.run([sys.executable, "-c", CHILD, parts, *([name] if name else [])],
                             cwd=tree, check=True, capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(tree)})
        out.update({k: (v[0], v[1]) for k, v in json.loads(res.stdout).items()})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="main", help="git ref of the old tree (default main)")
    ap.add_argument("--base-dir", help="the old tree, already unpacked (instead of --base)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--parts", choices=("sim", "all", "collect"), default="sim")
    ap.add_argument("--fresh", action="store_true",
                    help="each part in a fresh process of its own (as the proofs' pool may "
                         "run it: no cache shared with the parts before it)")
    args = ap.parse_args()
    if not 1 <= args.reps <= 20:
        print("--reps: expected 1..20", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(args.base_dir) if args.base_dir else Path(tmp)
        if not args.base_dir:
            archive = subprocess.run(["git", "archive", args.base], cwd=ROOT, check=True,
                                     capture_output=True).stdout
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                tar.extractall(base, filter="data")
        times: dict[str, dict[str, list[float]]] = {"base": {}, "new": {}}
        results: dict[str, dict[str, set[str]]] = {"base": {}, "new": {}}
        for _ in range(args.reps):
            for label, tree in (("base", base), ("new", ROOT)):
                for name, (sec, text) in run_tree(tree, args.parts, args.fresh).items():
                    times[label].setdefault(name, []).append(sec)
                    results[label].setdefault(name, set()).add(text)
    same = True
    print(f"{'part':40} {'base mean':>9} {'max':>6} {'new mean':>9} {'max':>6}  result")
    for name in times["base"]:
        b, n = times["base"][name], times["new"].get(name, [float("nan")])
        rb, rn = results["base"][name], results["new"].get(name, set())
        ok = len(rb) == 1 and rb == rn
        same &= ok
        print(f"{name:40} {statistics.mean(b):9.3f} {max(b):6.3f} {statistics.mean(n):9.3f} "
              f"{max(n):6.3f}  {'identical' if ok else 'DIFFERS'}")
    if args.parts == "collect":
        docs = (ROOT / "docs" / "spec-facts.json").read_text()
        fresh = results["new"]["collect_facts"] == {docs}
        same &= fresh
        print(f"collect_facts() of this tree {'is' if fresh else 'is NOT'} byte-identical to "
              "docs/spec-facts.json")
    tb = sum(statistics.mean(v) for v in times["base"].values())
    tn = sum(statistics.mean(v) for v in times["new"].values())
    print(f"{'total (sum of means)':40} {tb:9.3f} {'':6} {tn:9.3f} {'':6}  "
          f"{'all identical' if same else 'SOME DIFFER'} ({args.reps} reps, base {args.base})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
