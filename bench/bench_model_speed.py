"""The model's lookups per second by prompt size, this tree against a base revision and
against the real scheduler, side by side in one run (issue 27 items 1 and 4).

For every modelled release (``releases.releases()``) and prompt size (64 to 65,536 tokens
by default) the scenario is the cross-check's fixed benchmark (``sim/crosscheck/cli.py``
``BENCH``: two 16-token groups, full attention and Mamba align, nothing on the GPU) with
that prompt: ``stored: "all"``, and (shape ``list``) every block listed by index, which
is the same store spelled out (the model then works from the set). One call is what the
cross-check times (``sim.crosscheck.compare.timed_lookup``: the lookup alone, the layout
resolved before; wall time, as the cross-check's benchmark line); each tree runs in its
own worker process (the base tree from ``git archive``), and the rounds alternate base,
this tree, real, so that the load on the machine falls on all three alike. Figures are
the median call over all rounds.

The ``generated`` row is the cross-check's other figure (``python -m sim.crosscheck``'s
``lookups/s real .. vs model ..``): the same ``--examples`` scenarios it draws (its
Hypothesis strategy, seeds 0, 1, ... as ``run_hypothesis``), each timed as ``check_one``
times it (``sim.crosscheck.compare.model_view``: the model's answer, whose lookup is the
warm-up, then the best of ``TIMED_CALLS`` lookups by CPU time, both trees alike; the real
harness's ``t_lookup``: a warm-up lookup, then the best of as many, also CPU time); the
figure is the scenarios timed on all three sides over the sum of their times, per round,
and the median round.

The real scheduler runs where its environment is ready (``sim.crosscheck.envs.is_ready``
under ``$CROSSCHECK_VENVS``): ``RealScheduler.bench``, a new request per call as the
cross-check's benchmark line. An environment that is not ready is never built here.

    python bench/bench_model_speed.py [--base-rev main] [--examples 300]
        [--out bench/results/model_speed.txt]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import releases  # noqa: E402

SIZES = (64, 256, 1024, 4096, 16384, 65536)
SHAPES = ("all", "list")

# Runs inside a worker: argv[1] is the tree; one JSON request per line on stdin, one JSON
# answer (the per-call seconds) per line on stdout.
WORKER = r"""
import inspect, json, sys, time
sys.path.insert(0, sys.argv[1])
from model.evaluate import evaluate
from model.scenario import parse_scenario
from sim.crosscheck.cli import BENCH
from sim.crosscheck.compare import timed_lookup
# wall time as the cross-check's fixed benchmark (a tree whose timed_lookup takes no
# clock times wall time anyway)
wall = ({"clock": time.perf_counter}
        if "clock" in inspect.signature(timed_lookup).parameters else {})
cache = {}
for line in sys.stdin:
    req = json.loads(line)
    if "generated" in req:  # as check_one: the model's answer (its lookup the warm-up),
        # then the best of `timed_calls` timed lookups (compare.TIMED_CALLS), whatever the
        # tree's own check_one does, so that both trees are timed alike
        secs = []
        for raw in req["generated"]:
            s = parse_scenario(raw)
            out = evaluate(s, req["semantics"])
            if out.refused is not None:  # a model precondition: compared without it
                out = evaluate(s, req["semantics"], enforce=False)
            best = None
            if out.refused is None and out.layout is not None:
                best = min(timed_lookup(s, req["semantics"], out.layout)
                           for _ in range(req["timed_calls"])) or None
            secs.append(best)
        print(json.dumps({"seconds": secs}), flush=True)
        continue
    key = (req["semantics"], req["tokens"], req["shape"])
    if key not in cache:
        raw = dict(BENCH, semantics=req["semantics"], prompt_tokens=req["tokens"])
        if req["shape"] == "list":
            raw["groups"] = [dict(g, stored=list(range(req["tokens"] // g["gpu_block_size"])))
                             for g in raw["groups"]]
        s = parse_scenario(raw)
        out = evaluate(s, req["semantics"])
        cache[key] = (s, out.layout, out.hit_tokens)
    s, layout, hit = cache[key]
    times = [timed_lookup(s, req["semantics"], layout, **wall) for _ in range(req["calls"])]
    print(json.dumps({"times": times, "hit": hit}), flush=True)
"""


class Worker:
    """One tree's model in its own process."""

    def __init__(self, tree: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(tree)], cwd=tree, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ,
                                                                  PYTHONHASHSEED="0"))

    def times(self, semantics: str, tokens: int, shape: str, calls: int) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"semantics": semantics, "tokens": tokens,
                                          "shape": shape, "calls": calls}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker for {semantics} at {tokens} tokens died")
        got: dict[str, Any] = json.loads(line)
        return got

    def generated(self, semantics: str, scenarios: list[dict[str, Any]]) -> list[float | None]:
        """Each scenario's lookup seconds as the cross-check times it (None: not timed)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        from sim.crosscheck.compare import TIMED_CALLS

        self.proc.stdin.write(json.dumps({"semantics": semantics, "generated": scenarios,
                                          "timed_calls": TIMED_CALLS}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker for {semantics} died on the generated scenarios")
        secs: list[float | None] = json.loads(line)["seconds"]
        return secs

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def base_tree(rev: str, into: Path) -> Path:
    """The base revision's files (``git archive``), unpacked under ``into``."""
    data = subprocess.run(["git", "archive", "--format=tar", rev], cwd=ROOT, check=True,
                          capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def real_scheduler(version: str, light: bool = False) -> Any:
    """The real scheduler for ``version``, or None where its environment is not ready
    (``light``: its light env too, as ``python -m sim.crosscheck --light``; that env is
    made from the shared base if it is not ready)."""
    from sim.crosscheck.envs import is_ready

    if not (light or is_ready(version)):
        return None
    from sim.crosscheck.client import RealScheduler

    return RealScheduler(version)


def drawn(semantics: str, n: int) -> list[dict[str, Any]]:
    """The cross-check's first ``n`` distinct generated scenarios for ``semantics`` (its
    strategy and seeds, as ``sim.crosscheck.cli.run_hypothesis``), as JSON objects."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    from model.scenario import Scenario, scenario_to_json
    from sim.crosscheck.gen import scenarios

    seen: dict[str, dict[str, Any]] = {}
    for batch in range(100):
        if len(seen) >= n:
            break

        @settings(max_examples=max(50, (n - len(seen)) * 3 // 2), deadline=None,
                  database=None, suppress_health_check=list(HealthCheck),
                  phases=[Phase.generate])
        @given(scenarios(semantics))
        def prop(s: Scenario) -> None:
            if len(seen) < n:
                raw = scenario_to_json(s.with_semantics(semantics))
                seen.setdefault(json.dumps(raw, sort_keys=True), raw)

        hseed(batch)(prop)()
    return list(seen.values())


def real_generated(real: Any, scenarios: list[dict[str, Any]]) -> list[float | None]:
    """The real lookup's CPU seconds per scenario (``t_lookup``; None: refused)."""
    from model.scenario import parse_scenario
    from sim.crosscheck.mapping import to_case

    out: list[float | None] = []
    for raw in scenarios:
        result = real.run(to_case(parse_scenario(raw)))
        ok = result.get("refused") is None and "t_lookup" in result
        out.append(result["t_lookup"] if ok else None)
    return out


def median(xs: list[float]) -> float:
    ys = sorted(xs)
    return ys[len(ys) // 2]


def _rate(seconds: float | None) -> str:
    return "-" if not seconds else f"{1 / seconds:,.0f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if not a or not b else f"{a / b:.1f}x"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-rev", default="main", help="git revision to compare against")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="prompt tokens")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="store shapes: all, list")
    ap.add_argument("--releases", default=",".join(releases.releases()),
                    help="semantics names (default: every modelled release)")
    ap.add_argument("--calls", type=int, default=30, help="calls per side per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--examples", type=int, default=300,
                    help="generated scenarios per release, as the cross-check's --examples "
                    "(0: no generated row)")
    ap.add_argument("--no-real", action="store_true", help="the model only")
    ap.add_argument("--light", action="store_true",
                    help="run a release without a ready full env in its light env (as the "
                    "cross-check's --light; set CROSSCHECK_VENVS, CROSSCHECK_LIGHT_BASE)")
    ap.add_argument("--out", type=Path, help="also write the table here")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    shapes = args.shapes.split(",")
    rev = subprocess.run(["git", "rev-parse", "--short", args.base_rev], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.strip()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    lines: list[str] = []

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    say(f"# model lookups/s: base {args.base_rev} ({rev}) vs this tree ({head}"
        f"{', modified' if dirty else ''}) vs the real scheduler")
    say(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, load {load:.1f}; median call "
        f"of {args.rounds} rounds x {args.calls} calls per side, rounds alternating")
    with tempfile.TemporaryDirectory(prefix="bench-model-speed-") as tmp:
        base = Worker(base_tree(args.base_rev, Path(tmp)))
        this = Worker(ROOT)
        try:
            for name in args.releases.split(","):
                sem = releases.get(name)
                real = None if args.no_real else real_scheduler(sem.base_version, args.light)
                say("")
                say(f"## {name} ({sem.family} family); real scheduler: "
                    f"{'vLLM ' + sem.base_version if real else 'no ready environment'}")
                say(f"{'tokens':>7} {'store':>5} | {'base/s':>9} {'this/s':>9} {'this/base':>9}"
                    f" | {'real/s':>7} {'base/real':>9} {'this/real':>9}")
                try:
                    if args.examples:
                        say(_generated_row(name, args.examples, args.rounds, base, this,
                                           real))
                    for tokens in sizes:
                        for shape in shapes:
                            b_t: list[float] = []
                            t_t: list[float] = []
                            r_t: list[float] = []
                            hits = set()
                            for _ in range(args.rounds):
                                got = base.times(name, tokens, shape, args.calls)
                                b_t += got["times"]
                                hits.add(got["hit"])
                                got = this.times(name, tokens, shape, args.calls)
                                t_t += got["times"]
                                hits.add(got["hit"])
                                if real is not None and shape == "all":
                                    r_t.append(real.bench(_case(name, tokens),
                                                          args.calls)["median"])
                            if len(hits) != 1:
                                raise SystemExit(f"{name} {tokens} {shape}: hits differ: {hits}")
                            b, t = median(b_t), median(t_t)
                            r = median(r_t) if r_t else None
                            say(f"{tokens:>7} {shape:>5} | {_rate(b):>9} {_rate(t):>9} "
                                f"{_ratio(b, t):>9} | {_rate(r):>7} {_ratio(r, b):>9} "
                                f"{_ratio(r, t):>9}")
                finally:
                    if real is not None:
                        real.close()
                say(f"# load {os.getloadavg()[0]:.1f} at "
                    f"{time.strftime('%H:%M UTC', time.gmtime())}, after {name}")
        finally:
            base.close()
            this.close()
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


def _generated_row(name: str, examples: int, rounds: int, base: Worker, this: Worker,
                   real: Any) -> str:
    """The ``generated`` row: per round, the scenarios every side timed over the sum of
    their seconds on each side; the median round."""
    scenarios = drawn(name, examples)
    rates: dict[str, list[float]] = {"base": [], "this": [], "real": []}
    timed = 0
    for _ in range(rounds):
        got = {"base": base.generated(name, scenarios), "this": this.generated(name, scenarios)}
        if real is not None:
            got["real"] = real_generated(real, scenarios)
        both = [i for i in range(len(scenarios))
                if all(side[i] is not None for side in got.values())]
        timed = len(both)
        for side, secs in got.items():
            total = sum(secs[i] or 0.0 for i in both)
            if total:
                rates[side].append(timed / total)
    b, t, r = (median(rates[k]) if rates[k] else None for k in ("base", "this", "real"))
    inv = [None if x is None else 1 / x for x in (b, t, r)]
    return (f"{'gen':>7} {timed:>5} | {_rate(inv[0]):>9} {_rate(inv[1]):>9} "
            f"{_ratio(inv[0], inv[1]):>9} | {_rate(inv[2]):>7} {_ratio(inv[2], inv[0]):>9} "
            f"{_ratio(inv[2], inv[1]):>9}")


def _case(name: str, tokens: int) -> dict[str, Any]:
    from model.scenario import parse_scenario
    from sim.crosscheck.cli import BENCH
    from sim.crosscheck.mapping import to_case

    return to_case(parse_scenario(dict(BENCH, semantics=name, prompt_tokens=tokens)))


if __name__ == "__main__":
    raise SystemExit(main())
