"""Run one trace under several semantics, side by side (in parallel processes if asked).

Every worker regenerates the trace from (workload, requests, seed), so the semantics
see exactly the same requests; results do not depend on the number of processes.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sim.config import EngineConfig
from sim.engine import Engine
from sim.metrics import Summary
from sim.progress import ProgressBar
from sim.workload import Request, make_trace


@dataclass(frozen=True)
class RunSpec:
    workload: str
    requests: int
    seed: int
    semantics: tuple[str, ...]
    config: EngineConfig


@functools.lru_cache(maxsize=1)
def shared_trace(workload: str, requests: int, seed: int, block_size: int) -> list[Request]:
    """``make_trace``, kept for the next run in this process (the spec's facts run one
    trace under several semantics and configurations, as ``run_side_by_side`` does): an
    engine only reads the requests (a ``TokenSeq`` fills its hash chain lazily, the same
    values whoever asks first)."""
    return make_trace(workload, requests, seed, block_size)


def run_one(spec: RunSpec, semantics: str, counter: Any = None) -> Summary:
    trace = shared_trace(spec.workload, spec.requests, spec.seed, spec.config.block_size)
    engine = Engine(spec.config, semantics, workload=spec.workload)

    def progress(done: int) -> None:
        if counter is not None:
            counter.value = done

    summary = engine.run(trace, progress)
    if counter is not None:
        counter.value = spec.requests
    return summary


def _worker(spec: RunSpec, semantics: str, counter: Any, queue: Any) -> None:
    queue.put((semantics, run_one(spec, semantics, counter)))


def _offset(bar: ProgressBar, base: int) -> Callable[[int], None]:
    def update(done: int) -> None:
        bar.update(base + done)
    return update


def run_side_by_side(spec: RunSpec, jobs: int = 1, show_progress: bool = True) -> list[Summary]:
    total = spec.requests * len(spec.semantics)
    bar = ProgressBar(total, f"{spec.workload} x{len(spec.semantics)}", show_progress)
    if jobs <= 1 or len(spec.semantics) == 1:
        out = []
        trace = make_trace(spec.workload, spec.requests, spec.seed, spec.config.block_size)
        for i, name in enumerate(spec.semantics):
            engine = Engine(spec.config, name, workload=spec.workload)
            out.append(engine.run(trace, _offset(bar, i * spec.requests)))
        bar.finish(total)
        return out
    ctx = mp.get_context("fork")
    results: dict[str, Summary] = {}
    pending = list(spec.semantics)
    counters = {name: ctx.Value("q", 0) for name in spec.semantics}
    queue = ctx.Queue()
    running: list[Any] = []
    while pending or running:
        while pending and len(running) < jobs:
            name = pending.pop(0)
            p = ctx.Process(target=_worker, args=(spec, name, counters[name], queue))
            p.start()
            running.append(p)
        while not queue.empty():
            name, summary = queue.get()
            results[name] = summary
        for p in list(running):
            if not p.is_alive() and p.exitcode is not None:
                p.join()
                running.remove(p)
                if p.exitcode != 0:
                    raise RuntimeError(f"a simulation process failed (exit {p.exitcode})")
        bar.update(sum(c.value for c in counters.values()))
        time.sleep(0.05)
    while len(results) < len(spec.semantics):
        name, summary = queue.get()
        results[name] = summary
    bar.finish(total)
    return [results[name] for name in spec.semantics]


def parse_semantics(text: str, known: Sequence[str]) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise ValueError("--semantics: give at least one name")
    for n in names:
        if n not in known:
            raise ValueError(f"--semantics: unknown name {n!r} (known: {', '.join(known)})")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:  # one result per name: a repeated name would wait for a second forever
        raise ValueError(f"--semantics: {twice[0]!r} is named more than once")
    return names
