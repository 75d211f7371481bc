"""Benchmark: the pytest-xdist speed-up, side by side, on this machine.

    python bench/bench_xdist.py [--workers 2] [--repeat 1] [--json FILE]

Runs each suite serially and with ``-n WORKERS`` (pytest-xdist), one after the other,
and prints wall and CPU seconds (CPU: the children's user + system time) and the
speed-up (serial wall / parallel wall):

- the default suite (``python -m pytest``: the README's test command);
- the Hypothesis property suites (``tests/test_invariant_properties.py``,
  ``tests/test_hostile_input.py``), the ones HypoFuzz fuzzes for long campaigns.

Every run uses the fixed Hypothesis seed (tests/conftest.py), so serial and parallel
runs draw the same examples; the load average before each run is printed, since on a
shared machine other work takes cores away.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITES = {
    "default suite": [],
    "Hypothesis property suites": ["tests/test_invariant_properties.py",
                                   "tests/test_hostile_input.py"],
}


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(args: list[str]) -> dict[str, float | int]:
    load = os.getloadavg()[0]
    cpu0, t0 = _children_cpu(), time.monotonic()
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                       cwd=ROOT, capture_output=True, text=True, check=False)
    wall, cpu = time.monotonic() - t0, _children_cpu() - cpu0
    if r.returncode != 0:
        sys.exit(f"pytest {' '.join(args)} failed (exit {r.returncode}):\n{r.stdout[-2000:]}")
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "load_before": round(load, 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeat", type=int, default=1, help="runs of each (the best is kept)")
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args()
    if not 1 <= a.workers <= 64 or not 1 <= a.repeat <= 10:
        print("--workers: 1..64, --repeat: 1..10", file=sys.stderr)
        return 2
    out = {"cores": os.cpu_count(), "workers": a.workers, "suites": {}}
    print(f"{'suite':30} {'serial wall/CPU s':>18} {f'-n {a.workers} wall/CPU s':>18} "
          f"{'speed-up':>9}")
    for name, files in SUITES.items():
        best: dict[str, dict[str, float | int]] = {}
        for _ in range(a.repeat):
            for mode, extra in (("serial", []), ("xdist", ["-n", str(a.workers)])):
                r = timed(files + extra)
                if mode not in best or r["wall_s"] < best[mode]["wall_s"]:
                    best[mode] = r
        s, x = best["serial"], best["xdist"]
        speedup = float(s["wall_s"]) / float(x["wall_s"])
        out["suites"][name] = {"files": files or ["(default)"], **best,
                               "speedup": round(speedup, 2)}
        print(f"{name:30} {s['wall_s']:>8} / {s['cpu_s']:<8} {x['wall_s']:>8} / "
              f"{x['cpu_s']:<8} {speedup:>8.2f}x  (load before: {s['load_before']}, "
              f"{x['load_before']})", flush=True)
    if a.json is not None:
        a.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
