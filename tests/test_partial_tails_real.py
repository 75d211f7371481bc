"""The real 0.33.0 layouts with partial tails on (docs/layouts-vllm-0.33.0.md: falcon-h1,
granite-4.0-h, jamba, nemotron-h, qwen3-next with prefix_match_unit 16 or 48) lie outside
the bounded proof's scope (``proofs.encoding_chunked.Scope``: one group of each kind, at most
4 hash blocks per block; these have up to 7 Mamba groups, 2 attention groups and 33 to
195 hash blocks per block). On them the model (``model/*_v033.py``, pinned to the real
scheduler by the cross-check) runs seeded random stores built to reach partial-tail hits
(each group holds its keys up to a random hash position, a few more and fewer), with GPU
hits, pending tail keys and caps, and must keep every invariant."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from model.evaluate import evaluate
from model.real_layouts import LayoutTemplate, load_templates
from model.scenario import parse_scenario
from releases import vllm_0_33_0

V033 = vllm_0_33_0.SEMANTICS.name

PER_ROW = 60


def _scenario(t: LayoutTemplate, rng: random.Random) -> dict[str, Any]:
    block = t.groups[0].block_size
    tph = t.hash_block_size
    assert tph is not None
    prompt = rng.randint(tph, 3 * block + block // 2)
    n = prompt // block
    computed = block * rng.randint(0, (prompt - 1) // block) if rng.random() < 0.3 else 0
    stored, tails = [], []
    for _ in t.groups:
        upto = rng.randint(0, prompt // tph) * tph
        stored.append([i for i in range(n) if (i + 1) * block <= upto or rng.random() < 0.1])
        tails.append([p for p in range(tph, prompt + 1, tph) if p % block and (
            (p <= upto and rng.random() < 0.9) or rng.random() < 0.05)])
    raw = t.scenario_json(semantics=V033, prompt_tokens=prompt,
                          num_computed_tokens=computed, stored=stored)
    for g, ends in zip(raw["groups"], tails, strict=True):
        if ends:
            g["stored_tails"] = ends
            if rng.random() < 0.1:
                g["pending_tails"] = rng.sample(ends, 1)
    if rng.random() < 0.15:
        raw["max_num_new_tokens"] = rng.randint(0, prompt)
    if rng.random() < 0.15:
        raw["max_load_tokens"] = rng.randint(0, prompt)
    return raw


ROWS = [t for t in load_templates() if t.accepted and t.supports_partial_tail]


@pytest.mark.parametrize("row", ROWS, ids=[t.key for t in ROWS])
def test_real_partial_tail_layouts_keep_the_invariants(row: LayoutTemplate) -> None:
    rng = random.Random(row.key)
    seen: Counter[str] = Counter()
    for _ in range(PER_ROW):
        raw = _scenario(row, rng)
        o = evaluate(parse_scenario(raw))
        assert o.refused is None, (o.refused, raw)
        assert not o.violations and o.assertion is None, (o.violations, o.assertion, raw)
        seen["tail hit"] += o.tail_boundary is not None
    assert seen["tail hit"] >= 5, seen


def test_the_real_table_has_partial_tail_rows() -> None:
    assert len(ROWS) >= 10 and all(t.hash_block_size for t in ROWS)
