"""Hypothesis strategy for scenarios the cross-check feeds to both sides.

Covers every group kind (full attention, sliding window, Mamba in modes align / none /
all), 1-4 groups with block sizes that share a common unit (1-64 tokens), offloaded
block size factors 1-4, prompts up to ~300 tokens, GPU prefix hits, stores with holes,
deferred lookups, blocks being loaded, EAGLE groups, the request flags, resumed requests
(output tokens) and context parallelism (refused with more than one group).  Layouts a
release refuses at start-up are generated on purpose (mixed block sizes with a factor,
Mamba groups of different sizes, hash_block_size overrides).
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

from model.scenario import Scenario, parse_scenario

UNITS = (1, 2, 4, 8, 16)
MULTIPLES = (1, 2, 3, 4)


_PERCENT = st.sampled_from(range(100))


def _chance(draw: st.DrawFn, p: float) -> bool:
    """True with probability about ``p``; Hypothesis's simplest draw (0) gives False.
    (``st.floats`` favours edge values, which made rare flags common.)"""
    return bool(draw(_PERCENT) >= 100 - p * 100)


def _blocks(draw: st.DrawFn, n: int, p_all: float) -> Any:
    """A store: "all", or a subset of 0..n-1 with holes (as a sorted list)."""
    if _chance(draw, p_all):
        return "all"
    mode = draw(st.sampled_from(["dense", "dense", "sparse", "prefix", "suffix", "range"]))
    if mode == "prefix":
        k = draw(st.integers(0, n))
        return list(range(k))
    if mode == "suffix":
        k = draw(st.integers(0, n))
        return list(range(k, n))
    if mode == "range":
        a = draw(st.integers(0, n))
        b = draw(st.integers(a, n))
        return list(range(a, b))
    keep = 0.9 if mode == "dense" else 0.4
    return [i for i in range(n) if not _chance(draw, 1 - keep)]


def _few(draw: st.DrawFn, n: int, p: float) -> list[int]:
    if n == 0 or not _chance(draw, p):
        return []
    return sorted(set(draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3))))


@st.composite
def scenario_dicts(draw: st.DrawFn, semantics: str = "vllm-0.24.0") -> dict[str, Any]:
    unit = draw(st.sampled_from(UNITS))
    n_groups = draw(st.integers(1, 4))
    same = _chance(draw, 0.6)
    first = draw(st.sampled_from(MULTIPLES))
    multiples = [first if same else draw(st.sampled_from(MULTIPLES)) for _ in range(n_groups)]
    factor = draw(st.sampled_from([1, 1, 1, 1, 2, 3, 4]))
    sizes = [unit * m for m in multiples]
    if _chance(draw, 0.5):
        # near a multiple of an offloaded block: the boundary cases (the seed is one)
        step = max(sizes) * factor
        prompt = step * draw(st.integers(1, max(1, 300 // step)))
        prompt = max(1, prompt + draw(st.sampled_from([0, 1, -1, 2, unit, -unit])))
    else:
        prompt = draw(st.integers(1, 300))
    cp = draw(st.sampled_from([2, 4])) if _chance(draw, 0.07 if n_groups > 1 else 0.2) else 1
    lcm = math.lcm(*sizes) * cp  # the scheduler block size (kv_cache_utils.py:630, 641)
    computed = 0
    if prompt > lcm and _chance(draw, 0.3):
        computed = lcm * draw(st.integers(0, (prompt - 1) // lcm))
    groups = []
    for size in sizes:
        kind = draw(st.sampled_from(["full_attention", "sliding_window", "mamba"]))
        obs = size * cp * factor
        n_blocks = prompt // obs + 1
        g: dict[str, Any] = {"kind": kind, "gpu_block_size": size}
        if kind == "sliding_window":
            g["sliding_window"] = draw(st.integers(1, 4 * obs))
        if kind == "mamba":
            g["mamba_cache_mode"] = draw(st.sampled_from(["align", "align", "none", "all"]))
        g["stored"] = _blocks(draw, n_blocks, 0.4)
        g["deferred"] = _few(draw, n_blocks, 0.1)
        g["being_loaded"] = _few(draw, n_blocks, 0.1)
        if kind != "mamba" and _chance(draw, 0.15):
            g["eagle"] = True
        groups.append(g)
    out: dict[str, Any] = {
        "semantics": semantics,
        "block_size_factor": factor,
        "prompt_tokens": prompt,
        "num_computed_tokens": computed,
        "groups": groups,
    }
    if _chance(draw, 0.1):
        out["enable_prefix_caching"] = False
    if _chance(draw, 0.07):
        out["skip_reading_prefix_cache"] = True
    if _chance(draw, 0.07):
        out["in_flight_transfers"] = True
    if n_groups > 1 and _chance(draw, 0.05):
        out["hash_block_size"] = draw(st.sampled_from([1, unit, 2 * unit]))
    if _chance(draw, 0.1):  # a resumed (preempted) request: num_tokens includes output
        out["output_tokens"] = draw(st.integers(1, 2 * max(sizes) * factor + 1))
    if cp != 1:
        out["context_parallel_size"] = cp
    return out


def scenarios(semantics: str = "vllm-0.24.0") -> st.SearchStrategy[Scenario]:
    return scenario_dicts(semantics).map(parse_scenario)
