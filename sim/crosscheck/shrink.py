"""Greedy shrinking of a disagreeing scenario (pure; the check is passed in).

Hypothesis stops a run at its first failure; the cross-check instead runs every
generated scenario, groups the disagreements by kind, and shrinks one of each kind here:
repeatedly try a smaller variant (fewer groups, shorter prompt, simpler store, flags
off, factor 1, smaller blocks) and keep it while it still disagrees the same way.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from typing import Any

from model.scenario import ScenarioError, parse_scenario

Check = Callable[[dict[str, Any]], str | None]  # scenario JSON -> signature, None if agree


def signature(diffs: list[str]) -> str:
    """The kind of a disagreement: which fields differ and the vLLM line, if any."""
    parts = []
    for d in diffs:
        field_name = d.split(":", 1)[0]
        where = re.search(r"at (vllm/[\w/.]+:\d+)", d)
        parts.append(field_name + (f"@{where.group(1)}" if where else ""))
    return " + ".join(sorted(set(parts)))


def _variants(raw: dict[str, Any]) -> Iterator[dict[str, Any]]:
    groups = raw["groups"]
    if len(groups) > 1:
        for i in range(len(groups)):
            v = copy.deepcopy(raw)
            del v["groups"][i]
            yield v
    for key in ("in_flight_transfers", "skip_reading_prefix_cache", "hash_block_size",
                "output_tokens", "context_parallel_size"):
        if key in raw:
            v = copy.deepcopy(raw)
            del v[key]
            yield v
    if raw.get("enable_prefix_caching") is False:
        v = copy.deepcopy(raw)
        del v["enable_prefix_caching"]
        yield v
    if raw["block_size_factor"] != 1:
        v = copy.deepcopy(raw)
        v["block_size_factor"] = 1
        yield v
    if raw["num_computed_tokens"]:
        v = copy.deepcopy(raw)
        v["num_computed_tokens"] = 0
        yield v
    p = raw["prompt_tokens"]
    for q in sorted({p // 2, p - 16, p - 4, p - 1}):
        if 1 <= q < p:
            v = copy.deepcopy(raw)
            v["prompt_tokens"] = q
            yield v
    for i, g in enumerate(groups):
        for key in ("deferred", "being_loaded", "eagle", "pending", "stored_tails",
                    "pending_tails", "deferred_tails"):
            if g.get(key):
                v = copy.deepcopy(raw)
                del v["groups"][i][key]
                yield v
        if g["stored"] != "all":
            v = copy.deepcopy(raw)
            v["groups"][i]["stored"] = "all"
            yield v
            for b in g["stored"]:
                v = copy.deepcopy(raw)
                v["groups"][i]["stored"] = [x for x in g["stored"] if x != b]
                yield v
        if g["kind"] != "full_attention":
            v = copy.deepcopy(raw)
            for key in ("sliding_window", "mamba_cache_mode"):
                v["groups"][i].pop(key, None)
            v["groups"][i]["kind"] = "full_attention"
            yield v
        if g["kind"] == "sliding_window" and g["sliding_window"] > 1:
            v = copy.deepcopy(raw)
            v["groups"][i]["sliding_window"] = g["sliding_window"] // 2
            yield v
        if g["gpu_block_size"] > 1:
            v = copy.deepcopy(raw)
            v["groups"][i]["gpu_block_size"] = g["gpu_block_size"] // 2
            yield v


def shrink(raw: dict[str, Any], check: Check, budget: int = 400) -> dict[str, Any]:
    """The smallest variant of ``raw`` found that disagrees the same way as ``raw``."""
    target = check(raw)
    if target is None:
        return raw
    best = raw
    improved = True
    while improved and budget > 0:
        improved = False
        for v in _variants(best):
            try:
                parse_scenario(v)
            except ScenarioError:
                continue
            budget -= 1
            if check(v) == target:
                best = v
                improved = True
                break
            if budget <= 0:
                break
    return best
