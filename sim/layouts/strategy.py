"""Hypothesis strategy: scenarios on the layouts real model configurations produce.

Draws an accepted row of ``docs/layouts-vllm-0.33.0.json`` (``model.real_layouts``) and
fills in what the table leaves open: the prompt length (up to three scheduler blocks of
offloaded size plus a remainder), the GPU prefix hit (whole scheduler blocks, leaving the
last prompt token) and the store: what an earlier request wrote (every group's blocks
within the first T <= prompt tokens, as one engine stores them), sometimes with some of one
group's blocks evicted (holes).
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

import releases
from model.real_layouts import LayoutTemplate, load_templates
from model.scenario import Scenario

# the default: the newest release of the block lookup
BLOCK_RELEASE = releases.newest("block").name


def _accepted() -> tuple[LayoutTemplate, ...]:
    return tuple(t for t in load_templates() if t.accepted)


@st.composite
def real_layout_scenarios(draw: st.DrawFn, semantics: str = BLOCK_RELEASE) -> Scenario:
    t = draw(st.sampled_from(_accepted()))
    bpc = t.blocks_per_chunk or 1
    scheduler_block = math.lcm(*(g.block_size for g in t.groups))
    unit = t.hash_block_size or scheduler_block
    prompt = draw(st.integers(1, 3 * scheduler_block * bpc // unit)) * unit
    prompt += draw(st.integers(0, unit - 1))
    prompt = max(prompt, 1)
    gpu_hit_blocks = draw(st.integers(0, (prompt - 1) // scheduler_block))
    most = prompt + scheduler_block * bpc
    stored_tokens = most - draw(st.integers(0, most))  # small draws: much stored
    # keys exist only for the prompt's chunks: a longer earlier request stored no more
    # of this prompt than its own chunks (and the loader refuses blocks past the prompt)
    stored: list[Any] = [
        list(range(min(stored_tokens, prompt) // (g.block_size * bpc))) for g in t.groups]
    if draw(st.booleans()):
        victim = draw(st.integers(0, len(t.groups) - 1))
        evicted = draw(st.sets(st.sampled_from(stored[victim]))) if stored[victim] else set()
        stored[victim] = [b for b in stored[victim] if b not in evicted]
    return t.scenario(semantics=semantics, prompt_tokens=prompt,
                      num_computed_tokens=gpu_hit_blocks * scheduler_block, stored=stored)
