"""Finding 001's proposed fix, applied to the real vLLM 0.33.0 scheduler and checked.

Runs INSIDE the vLLM 0.33.0 environment.  ``python fix_check_chunked.py --diff`` prints the
fix as a unified diff against the installed
``vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py``;
``python fix_check_chunked.py --check`` applies it in this process
(``fix001_chunked.apply_fix``: the patched source of
``OffloadingConnectorScheduler._lookup_complete_chunks`` is compiled in the module's own
namespace and replaces the method) and prints JSON: the random searches of
``state_search_chunked.py`` (both families), on the unfixed and on the fixed method.  The
reproductions of ``docs/findings/vllm_tests/`` run with a fix through
``python -m sim.crosscheck.vllm_tests FILE --fix 001b`` (pytest, vLLM's own test tree).

The fix: after each group tightens ``max_hit_size_tokens`` (the per-group clamp to the
group's keyed length, and the clamp to the group's confirmed chunks), round it down to
the Mamba align size again, as the code already does once before the loop.  A lowered
boundary then re-runs the sliding-window and Mamba lookups through the loop's existing
convergence path, so the Mamba chunk confirmed is the one that ends at the hit.
"""
# ruff: noqa: E402
from __future__ import annotations

import argparse
import difflib
import importlib.util
import inspect
import json
import os
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

_OUT = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from vllm.distributed.kv_transfer.kv_connector.v1.offloading import scheduler as sched_mod

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fix001_chunked import apply_fix, patched_source  # the fix itself

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]


def diff(fix: str = "001") -> str:
    path = Path(inspect.getsourcefile(sched_mod) or "")
    old = path.read_text()
    new = patched_source(old, fix)
    rel = "vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py"
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                        f"a/{rel}", f"b/{rel}"))


def load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def search(search_mod: Any, family: str, cases: int, seed: int) -> dict[str, Any]:
    import transformers

    rng = random.Random(seed)
    tmp = tempfile.TemporaryDirectory(prefix="fix-check-")
    model_dir = tmp.name
    transformers.JambaConfig(**search_mod.JAMBA).save_pretrained(model_dir)
    out = {"family": family, "cases": 0, "hits": 0, "hit_tokens": 0, "violations": 0,
           "examples": []}
    with tmp:
        _search_into(out, search_mod, family, cases, rng, model_dir)
    return out


def _search_into(out: dict[str, Any], search_mod: Any, family: str, cases: int,
                 rng: random.Random, model_dir: str) -> None:
    while out["cases"] < cases:
        lay = search_mod.Layout(search_mod.draw_layout(rng, family), model_dir)
        for _ in range(50):
            kind, found, hit = search_mod.run_case(lay, rng, out["cases"])
            out["hit_tokens"] += hit
            lay.sched._release_step()
            out["cases"] += 1
            out["hits"] += kind != "miss"
            if found is not None:
                out["violations"] += 1
                out["examples"] = (out["examples"] + [found])[:5]
            if out["cases"] >= cases:
                break


def check(cases: int) -> dict[str, Any]:
    search_mod = load(HERE / "state_search_chunked.py", "state_search")
    # the same searches on the unfixed method first: what the fix costs in hit tokens
    before = {family: search(search_mod, family, cases, 1)
              for family in ("forced", "reachable")}
    apply_fix()
    return {
        "unfixed_search_forced": before["forced"],
        "unfixed_search_reachable": before["reachable"],
        "search_forced": search(search_mod, "forced", cases, 1),
        "search_reachable": search(search_mod, "reachable", cases, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--diff", action="store_true")
    ap.add_argument("--fix", default="001", help="001 (001-fix.diff), 001b (the completed "
                    "fix, 001-fix-rerun.diff) or 003 (003-fix.diff); --diff prints it")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--cases", type=int, default=1000)
    args = ap.parse_args()
    if args.diff:
        _OUT.write(diff(args.fix))
    if args.check:
        json.dump(check(args.cases), _OUT, sort_keys=True)
        _OUT.write("\n")
    _OUT.flush()


if __name__ == "__main__":
    main()
