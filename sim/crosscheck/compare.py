"""Compare the model's ``Outcome`` with the real scheduler's result (pure)."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from model.evaluate import Outcome, evaluate
from model.layout import Layout
from model.scenario import Scenario
from model.semantics import get_semantics

# How a scenario's lookup is timed, alike on both sides (the real harness's TIMED_CALLS,
# adapters/harness_core.py): after one untimed lookup of the scenario, the best of
# TIMED_CALLS timed ones. (A single call timed right after start-up costs the real
# scheduler about twice its next one, on a new scheduler object; the model's timed call
# came after its own answer's lookup: not alike.)
TIMED_CALLS = 3


@dataclass(frozen=True)
class ModelView:
    """The model's answer in the harness's terms."""

    refused: str | None
    hit: int | None
    lookups: tuple[tuple[int, int], ...]
    loads: dict[int, tuple[int, ...]] | None  # None: no load (hit 0, deferred, refused)
    assertion: str | None
    # what the worker copies per group: (offloaded block, sub-block, GPU block position)
    copies: dict[int, tuple[tuple[int, int, int], ...]] | None = None
    # the model refused the request only for a precondition a real engine always meets
    # (GPU hit shape); the comparison then uses the model run without it (enforce=False)
    precondition: str | None = None
    seconds: float = 0.0  # the model's lookup time (start-up excluded, as for the real;
    # the best of TIMED_CALLS after a warm-up, as the real's ``t_lookup``)
    violations: tuple[str, ...] = ()  # the invariants the model finds broken
    # 0.33.0: the GPU spec of the load (blocks per group, first block index per group)
    gpu: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    # 0.33.0: a fine GPU hit's sub-block tail kept by the engine scheduler (no load)
    local_tail_kept: bool = False


def model_view(s: Scenario, semantics: str) -> ModelView:
    out: Outcome = evaluate(s, semantics)
    precondition = None
    if out.refused is not None:
        relaxed = evaluate(s, semantics, enforce=False)
        if relaxed.refused is None:
            precondition, out = out.refused, relaxed
    seconds = 0.0
    if out.refused is None and out.layout is not None:
        # evaluate's own lookup was the warm-up (as the harness's spare_lookups)
        seconds = min(timed_lookup(s, semantics, out.layout) for _ in range(TIMED_CALLS))
    loads = copies = None
    chunked = get_semantics(semantics).chunked
    if out.refused is None and out.hit_tokens and not out.local_tail_kept:
        loads = {gl.group: tuple(gl.blocks) for gl in out.loads}
        if not chunked:  # the sub-block copy of releases before 0.33.0
            copies = {gl.group: gl.copies for gl in out.loads}
    gpu = None
    if loads is not None and chunked:
        gpu = (tuple(gl.gpu_blocks for gl in out.loads),
               tuple(gl.gpu_block_index or 0 for gl in out.loads))
    lookups = tuple(out.lookups)
    if not chunked and keys_by_end_token(semantics) and isinstance(out.layout, Layout):
        # the block lookup from 0.26.0 on runs in harness_chunked.py, which names a key
        # by the token its chunk ends at and reports the load's GPU side, not the copies
        obs = [c.offloaded_block_size for c in out.layout.groups]
        lookups = tuple((g, (b + 1) * obs[g]) for g, b in lookups)
        if loads is not None:
            loads = {g: tuple((b + 1) * obs[g] for b in blocks) for g, blocks in loads.items()}
            gpu = (tuple(gl.copy_end - gl.copy_start for gl in out.loads),
                   tuple(gl.copy_start for gl in out.loads))
        copies = None
    return ModelView(out.refused, out.hit_tokens, lookups, loads,
                     out.assertion, copies=copies, precondition=precondition,
                     seconds=seconds,
                     violations=tuple(sorted({v.invariant for v in out.violations})), gpu=gpu,
                     local_tail_kept=out.local_tail_kept)


def keys_by_end_token(semantics: str) -> bool:
    """Whether the real side of ``semantics`` names keys by end token (its release runs
    in ``adapters/harness_chunked.py``: 0.26.0 on)."""
    from sim.crosscheck.client import HARNESS_V033, harness_for

    return harness_for(get_semantics(semantics).base_version) == HARNESS_V033


@contextmanager
def _no_gc() -> Iterator[None]:
    """No garbage collection inside a timed call (as ``timeit``): a collection of the
    harness's own objects (Hypothesis's, every scenario's) is not the lookup's work."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def timed_lookup(s: Scenario, semantics: str, layout: Any = None,
                 clock: Callable[[], float] = time.thread_time) -> float:
    """Seconds one model lookup takes (the layout, start-up work, resolved outside).

    ``clock``: by default this thread's CPU time, as the harness times the real lookup
    (``t_lookup``): on a loaded machine a call's wall time is mostly waiting for a core,
    which would swamp the model's sum of short calls; the fixed benchmark passes
    ``time.perf_counter`` (its median call on both sides)."""
    from model import layout_chunked, lookup_chunked
    from model.layout import resolve_layout
    from model.lookup import get_num_new_matched_tokens
    from model.semantics import get_semantics

    sem = get_semantics(semantics)
    if sem.chunked:
        lay = layout or layout_chunked.resolve_layout(s, sem.steps, sem.base_version)
        if s.num_computed_tokens % lay.cache_hit_alignment_tokens == 0:  # as evaluate
            s = replace(s, num_computed_tokens=layout_chunked.connector_tokens(
                lay, s.num_computed_tokens))
        with _no_gc():
            t0 = clock()
            lookup_chunked.get_num_new_matched_tokens(lay, s, sem)
            return clock() - t0
    lay = layout or resolve_layout(s, sem)
    with _no_gc():
        t0 = clock()
        get_num_new_matched_tokens(lay, s, sem)
        return clock() - t0


@dataclass
class Verdict:
    agree: bool
    diffs: list[str] = field(default_factory=list)
    harness_problem: str | None = None


def compare(model: ModelView, real: dict[str, Any], *, check_lookups: bool = True) -> Verdict:
    diffs: list[str] = []
    if not real.get("keys_ok", True) or real.get("unknown_load_keys"):
        return Verdict(False, ["offload keys differ from the scheduler's own"],
                       "the harness's offload keys do not match RequestOffloadState's")
    real_refused = real.get("refused")
    if (model.refused is None) != (real_refused is None):
        diffs.append(f"refused: model {model.refused!r} vs real {real_refused!r}")
        return Verdict(False, diffs)
    if real_refused is not None:
        return Verdict(True)
    if real.get("lookup_error"):
        diffs.append(f"real lookup tripped {real['lookup_error']}")
    if model.hit != real["hit"]:
        diffs.append(f"hit: model {model.hit} vs real {real['hit']}")
    if "gpu_hit_real" in real and (model.precondition is None) != real["gpu_hit_real"]:
        # which GPU hits an engine produces: the model's check_request against vLLM's own
        # resolve_cache_hit_alignment_tokens (the harness)
        diffs.append(f"GPU hit shape: model {model.precondition or 'accepts'!r} vs real "
                     f"{'produces' if real['gpu_hit_real'] else 'cannot produce'} it")
    if model.local_tail_kept != real.get("local_tail_kept", False):
        diffs.append(f"local GPU tail kept: model {model.local_tail_kept} vs real "
                     f"{real.get('local_tail_kept')}")
    if check_lookups:
        real_lookups = tuple(tuple(x) for x in real["lookups"])
        if model.lookups != real_lookups:
            diffs.append(f"lookups: model {list(model.lookups)} vs real "
                         f"{[list(x) for x in real_lookups]}")
    if model.precondition is not None:
        # A GPU hit that no real engine produces (not block-aligned, or the whole prompt):
        # the harness's stand-in for it decides the load, so only the lookup is compared.
        return Verdict(not diffs, diffs)
    real_error = real.get("load_error")
    if (model.assertion is None) != (real_error is None):
        diffs.append(f"load assertion: model {model.assertion!r} vs real {real_error!r}")
    elif real_error is None and model.hit == real["hit"]:
        real_loads = (None if real["loads"] is None
                      else {g: tuple(blocks) for g, blocks in real["loads"]})
        if model.loads != real_loads:
            diffs.append(f"load plan: model {model.loads} vs real {real_loads}")
        real_gpu = real.get("gpu")
        if model.gpu is not None and real_gpu is not None:
            rg = (tuple(real_gpu[0]), tuple(real_gpu[1]))
            if model.gpu != rg:
                diffs.append(f"GPU blocks loaded (per group: count, first index): "
                             f"model {model.gpu} vs real {rg}")
        if model.copies is not None and model.loads == real_loads:
            # what the worker copies: GPU block positions and sub-block offsets
            real_copies = {g: tuple(tuple(c) for c in group)
                           for g, group in enumerate(real.get("copies") or [])}
            if real.get("copies") is None or model.copies != real_copies:
                diffs.append(f"worker copies: model {model.copies} vs real {real_copies}")
    return Verdict(not diffs, diffs)
