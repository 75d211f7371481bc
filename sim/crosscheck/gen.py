"""Hypothesis strategy for scenarios the cross-check feeds to both sides.

Covers every group kind (full attention, sliding window, Mamba in modes align / none /
all), 1-4 groups with block sizes that share a common unit (1-64 tokens), offloaded
block size factors 1-4, prompts up to ~300 tokens, GPU prefix hits, stores with holes,
deferred lookups, blocks being loaded, EAGLE groups, GPU prefix hits at
hash-block granularity (``_fine_gpu_hit``), the request flags, resumed requests
(output tokens) and context parallelism (refused with more than one group).  For
vllm-0.33.0 also: blocks_per_chunk 1-3 (with per-group block sizes), HIT_PENDING and
RETRY answers, partial-tail layouts (one block size, attention + Mamba align, a finer
hash size) with stored / pending / retried tail keys, EAGLE attention groups with proof
margins, the max_num_new_tokens / max_load_tokens caps, and attention chunks that are not
a multiple of the Mamba chunk; evictions are arbitrary missing keys (holes in stores).  Layouts a
release refuses at start-up are generated on purpose (mixed block sizes with a factor,
Mamba groups of different sizes, hash_block_size overrides).
"""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hseed
from hypothesis import strategies as st

import releases
from model.scenario import Scenario, parse_scenario, scenario_to_json
from model.semantics import get_semantics

# the default: the newest release of the block lookup (PR #44599's fix)
BLOCK_RELEASE = releases.newest("block").name

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


def _tails(draw: st.DrawFn, prompt: int, step: int, p: float) -> list[int]:
    """Partial-tail keys (0.33.0): token positions, multiples of the hash size ``step``."""
    ends = list(range(step, prompt + 1, step))
    if not ends or not _chance(draw, p):
        return []
    if _chance(draw, 0.7):  # dense: most boundaries stored, a few evicted
        return [e for e in ends if not _chance(draw, 0.2)]
    return sorted(set(draw(st.lists(st.sampled_from(ends), min_size=1, max_size=4))))


def _tail_layout(draw: st.DrawFn, semantics: str) -> dict[str, Any]:
    """0.33.0: a layout that supports partial tails (scheduler.py:283): one block size,
    full attention plus Mamba align groups, a hash size finer than the block."""
    unit = draw(st.sampled_from((1, 2, 4, 8)))
    size = unit * draw(st.sampled_from((2, 3, 4)))
    tph = unit if _chance(draw, 0.8) else size  # sometimes no finer hash: no tails
    n_groups = 1 if _chance(draw, 0.1) else draw(st.integers(2, 3))
    kinds = [draw(st.sampled_from(["full_attention", "mamba"])) for _ in range(n_groups)]
    if "mamba" not in kinds:
        kinds[-1] = "mamba"
    if _chance(draw, 0.1):  # now and then a group that rules partial tails out
        kinds[0] = draw(st.sampled_from(["sliding_window", "mamba_none"]))
    if _chance(draw, 0.5):
        prompt = size * draw(st.integers(1, max(1, 120 // size)))
        prompt = max(1, prompt + draw(st.sampled_from([0, 1, -1, 2, unit, -unit, tph + 1])))
    else:
        prompt = draw(st.integers(1, 120))
    computed = 0
    if prompt > size and _chance(draw, 0.3):
        computed = size * draw(st.integers(0, (prompt - 1) // size))
    shared = _tails(draw, prompt, tph, 0.9)  # tail keys every group stored at once
    groups = []
    for kind in kinds:
        n_blocks = prompt // size + 1
        g: dict[str, Any] = {"gpu_block_size": size}
        if kind == "mamba_none":
            g.update(kind="mamba", mamba_cache_mode="none")
        elif kind == "mamba":
            g.update(kind="mamba", mamba_cache_mode="align")
        elif kind == "sliding_window":
            g.update(kind=kind, sliding_window=draw(st.integers(1, 3 * size)))
        else:
            g["kind"] = kind
            if _chance(draw, 0.3):
                g["eagle"] = True
        g["stored"] = _blocks(draw, n_blocks, 0.4)
        g["deferred"] = _few(draw, n_blocks, 0.05)
        g["pending"] = _few(draw, n_blocks, 0.05)
        g["being_loaded"] = _few(draw, n_blocks, 0.05)
        evicted = set(_tails(draw, prompt, tph, 0.3))
        g["stored_tails"] = sorted(set(shared) - evicted)
        g["pending_tails"] = _tails(draw, prompt, tph, 0.08)
        g["deferred_tails"] = _tails(draw, prompt, tph, 0.08)
        groups.append(g)
    out: dict[str, Any] = {
        "semantics": semantics, "block_size_factor": 1, "prompt_tokens": prompt,
        "num_computed_tokens": computed, "groups": groups,
    }
    if n_groups > 1 and (tph != size or _chance(draw, 0.2)):
        out["hash_block_size"] = tph
    return out


def _chunked_extras(draw: st.DrawFn, out: dict[str, Any], chunks: bool = True
                 ) -> dict[str, Any]:
    """0.33.0's new dimensions on a drawn scenario: chunking, answers, tails, caps."""
    prompt = out["prompt_tokens"]
    if _chance(draw, 0.25 if chunks else 0.05):
        out["blocks_per_chunk"] = draw(st.sampled_from([1, 2, 3]))
        if _chance(draw, 0.8):
            out["block_size_factor"] = 1  # both set is refused (config.py:126)
    for g in out["groups"]:
        n = prompt // g["gpu_block_size"] + 1
        if "pending" not in g:
            g["pending"] = _few(draw, n, 0.1)
        if "stored_tails" not in g:
            g["stored_tails"] = _tails(draw, prompt, g["gpu_block_size"], 0.05)
        if g["kind"] == "mamba" and _chance(draw, 0.1):
            g["eagle"] = True  # real layouts have none; 0.33.0 does not forbid it
        if g["kind"] == "mamba" and _chance(draw, 0.9):
            # 0.33.0 ties the mode to prefix caching (models/config.py:764, 781)
            on = out.get("enable_prefix_caching", True)
            g["mamba_cache_mode"] = "align" if on else "none"
    if (releases.get(out["semantics"]).steps.mamba_all
            and out.get("enable_prefix_caching", True) and _chance(draw, 0.5)):
        for g in out["groups"]:  # 0.28.0-0.31.0 keep mode "all" (one mode per engine)
            if g["kind"] == "mamba":
                g["mamba_cache_mode"] = "all"
    if not out.get("enable_prefix_caching", True) and _chance(draw, 0.9):
        out["num_computed_tokens"] = 0  # no GPU prefix hit without prefix caching
    caps = releases.get(out["semantics"]).steps  # only the caps the release has
    if caps.cap_new_tokens and _chance(draw, 0.15):
        out["max_num_new_tokens"] = draw(st.integers(0, prompt))
    if caps.cap_load_tokens and _chance(draw, 0.15):
        out["max_load_tokens"] = draw(st.integers(0, prompt))
    return out


def _uneven_layout(draw: st.DrawFn, semantics: str) -> dict[str, Any]:
    """0.33.0: full attention whose chunk is not a multiple of the Mamba align chunk,
    with an attention store that may stop the hit inside a Mamba chunk (the class that
    breaks no-partial-state; tests/scenarios/vllm-0.33.0-breaks/)."""
    unit = draw(st.sampled_from((1, 2, 4, 8, 16)))
    attn, mamba = draw(st.sampled_from([(3, 2), (2, 3), (3, 4), (4, 3), (5, 2), (6, 4)]))
    prompt = draw(st.integers(1, 240))
    k = draw(st.integers(0, prompt // (attn * unit) + 1))
    groups: list[dict[str, Any]] = [
        {"kind": "full_attention", "gpu_block_size": attn * unit, "stored": list(range(k))},
        {"kind": "mamba", "gpu_block_size": mamba * unit, "mamba_cache_mode": "align",
         "stored": _blocks(draw, prompt // (mamba * unit) + 1, 0.6)},
    ]
    if _chance(draw, 0.5):
        groups.reverse()
    return {"semantics": semantics, "block_size_factor": 1, "prompt_tokens": prompt,
            "num_computed_tokens": 0, "groups": groups}


def _real_layout(draw: st.DrawFn, semantics: str) -> dict[str, Any]:
    """0.33.0: a layout real model configurations produce (docs/layouts-vllm-0.33.0.json,
    ``sim.layouts.strategy``), with partial-tail keys where the layout has them."""
    from sim.layouts.strategy import real_layout_scenarios

    out = scenario_to_json(draw(real_layout_scenarios(semantics)))
    tph = out.get("hash_block_size")
    if tph:
        shared = _tails(draw, out["prompt_tokens"], tph, 0.7)
        for g in out["groups"]:
            g["stored_tails"] = shared
    return out


@st.composite
def scenario_dicts(draw: st.DrawFn, semantics: str = BLOCK_RELEASE) -> dict[str, Any]:
    sem = releases.all_semantics().get(semantics)
    if sem is not None and sem.kind == "release" and sem.chunked:
        if _chance(draw, 0.15):
            out = _real_layout(draw, semantics)
        elif _chance(draw, 0.1):
            out = _chunked_extras(draw, _uneven_layout(draw, semantics))
        elif _chance(draw, 0.5):
            out = _chunked_extras(draw, _tail_layout(draw, semantics), chunks=False)
        else:
            out = _chunked_extras(draw, draw(_classic_dicts(semantics)))
        return _fine_gpu_hit(draw, out)
    return draw(_classic_dicts(semantics))


def _fine_gpu_hit(draw: st.DrawFn, out: dict[str, Any]) -> dict[str, Any]:
    """Now and then a GPU prefix hit at hash-block granularity (0.32.0+: fine-grained
    hits when a Mamba align block is larger than the hash block): a multiple of the
    hash size (the override, else the gcd of the block sizes), usually not of the
    scheduler block. Layouts without fine hits refuse it (the GPU-hit shape is compared
    with what vLLM's own resolve_cache_hit_alignment_tokens allows)."""
    prompt = out["prompt_tokens"]
    if not out.get("enable_prefix_caching", True) or prompt < 2 or not _chance(draw, 0.4):
        return out
    sizes = [g["gpu_block_size"] for g in out["groups"]]
    step = out.get("hash_block_size") or math.gcd(*sizes)
    if step >= prompt:
        return out
    out["num_computed_tokens"] = step * draw(st.integers(1, (prompt - 1) // step))
    return out


@st.composite
def _classic_dicts(draw: st.DrawFn, semantics: str) -> dict[str, Any]:
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
    # resumed requests and context parallelism: modelled for releases before 0.26.0
    sem = get_semantics(semantics)
    fidelity = not sem.chunked and not sem.offloading_config
    cp = 1
    if fidelity and _chance(draw, 0.07 if n_groups > 1 else 0.2):
        cp = draw(st.sampled_from([2, 4]))
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
        if sem.window_pending_hits:  # 0.25.0 on: HIT_PENDING answers
            g["pending"] = _few(draw, n_blocks, 0.1)
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
    if fidelity and _chance(draw, 0.1):  # a resumed request: num_tokens includes output
        out["output_tokens"] = draw(st.integers(1, 2 * max(sizes) * factor + 1))
    if cp != 1:
        out["context_parallel_size"] = cp
    if sem.offloading_config:
        _offloading_config_extras(draw, out)
    return out


def _offloading_config_extras(draw: st.DrawFn, out: dict[str, Any]) -> None:
    """0.26.0's start-up on a drawn block-lookup scenario: blocks_per_chunk (now and then
    beside block_size, which is refused), and mostly the Mamba mode the engine sets from
    prefix caching (models/config.py:559, 596 in 0.26.0)."""
    if _chance(draw, 0.3):
        out["blocks_per_chunk"] = draw(st.sampled_from([1, 2, 3]))
        if _chance(draw, 0.8):
            out["block_size_factor"] = 1
    on = out.get("enable_prefix_caching", True)
    mode = draw(st.sampled_from(["align", "all"])) if on else "none"  # one engine setting
    for g in out["groups"]:
        if g["kind"] == "mamba" and _chance(draw, 0.9):
            g["mamba_cache_mode"] = mode


def scenarios(semantics: str = BLOCK_RELEASE) -> st.SearchStrategy[Scenario]:
    return scenario_dicts(semantics).map(parse_scenario)


def distinct(semantics: str, n: int, seed: int = 0) -> list[Scenario]:
    """``n`` distinct scenarios of ``scenarios(semantics)`` in the order drawn, the same on
    every run: Hypothesis batches seeded ``seed``, ``seed + 1``, ... (100 at most)."""
    out: dict[str, Scenario] = {}
    for batch in range(100):
        if len(out) >= n:
            break

        @settings(max_examples=max(50, (n - len(out)) * 3 // 2), deadline=None,
                  database=None, suppress_health_check=list(HealthCheck),
                  phases=[Phase.generate])
        @given(scenarios(semantics))
        def collect(s: Scenario) -> None:
            if len(out) < n:
                out.setdefault(json.dumps(scenario_to_json(s), sort_keys=True), s)

        hseed(seed + batch)(collect)()
    return list(out.values())
