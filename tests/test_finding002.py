"""Finding 002 (not a bug): a vLLM 0.33.0 hit that ends inside a full-attention chunk.

Model side, fast: the whole-blocks counterexample's scenario files load the chunk that
holds the hit's end (GPU blocks up to ``cdiv(hit, block)``) and break nothing but
``whole-blocks``; the precondition under which the bounded proof of ``whole-blocks``
holds on 0.33.0 (``full-chunk-within-windowed``) holds for every accepted row of the
real-layout table. The real engine-core run is ``tests/test_findings.py`` (crosscheck).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import z3

from model.evaluate import evaluate
from model.layout import cdiv
from model.real_layouts import load_templates
from model.scenario import Scenario, load_scenario_file, parse_scenario
from proofs import check_chunked, encoding_chunked
from proofs.conformance import preconditions_holding
from proofs.conformance_chunked import concrete, release_layout
from releases import vllm_0_24_0
from tests.test_conformance_chunked import scenarios

V024 = vllm_0_24_0.SEMANTICS.name

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted((ROOT / "tests" / "scenarios" / "finding-002").glob("*.json"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_the_chunk_holding_the_hit_end_is_loaded(path: Path) -> None:
    s = load_scenario_file(path)
    o = evaluate(s)
    assert o.hit_tokens and [v.invariant for v in o.violations] == ["whole-blocks"]
    end = s.num_computed_tokens + o.hit_tokens
    for load, g in zip(o.loads, s.groups, strict=True):
        assert load.gpu_block_index is not None
        # the GPU blocks the worker writes reach past every token below the hit
        assert load.gpu_block_index + load.gpu_blocks == cdiv(end, g.gpu_block_size)
        if g.kind == "mamba":
            assert load.state_position == end
    attn = o.loads[0]
    assert len(attn.blocks) == 1 and attn.blocks[0] > end  # the chunk holding the hit's end


def test_every_real_layout_keeps_full_chunks_within_a_windowed_chunk() -> None:
    rows = [t for t in load_templates() if t.accepted]
    assert len(rows) > 50
    for t in rows:
        bpc = t.blocks_per_chunk or 1
        windowed = [g.block_size * bpc for g in t.groups if g.kind != "full_attention"]
        full = [g.block_size * bpc for g in t.groups if g.kind == "full_attention"]
        if windowed:
            assert all(f <= max(windowed) for f in full), t.key
        else:  # full attention alone: one chunk size
            assert len(set(full)) <= 1, t.key


def _full_chunk_within_windowed(s: Scenario) -> bool:
    chunks = release_layout(s).groups
    windowed = [c.tokens_per_chunk for c, g in zip(chunks, s.groups, strict=True)
                if g.kind != "full_attention"]
    full = [c.tokens_per_chunk for c, g in zip(chunks, s.groups, strict=True)
            if g.kind == "full_attention"]
    if not windowed:
        return len(set(full)) <= 1
    return all(f <= max(windowed) for f in full)


def test_precondition_formula_v033_conforms() -> None:
    """proofs/check_chunked.py's formula of full-chunk-within-windowed says what the plain
    predicate says on generated 0.33.0 scenarios; both values occur."""
    seen = set()
    for s in scenarios(80, seed=12):
        scope, cfg, order = concrete(s)
        enc = encoding_chunked.ChunkEnc(scope)
        d = encoding_chunked.derive(enc, cfg, order)
        got = z3.is_true(z3.simplify(check_chunked.precondition(
            "full-chunk-within-windowed", enc, cfg, d)))
        assert got == _full_chunk_within_windowed(s), s
        seen.add(got)
    assert seen == {True, False}, seen


@pytest.mark.parametrize("sizes", [(4, 2), (2, 4), (2, 2)])
def test_precondition_formulas_conform_on_full_attention_alone(sizes: tuple[int, int]) -> None:
    """The clause for a layout of full-attention groups alone (one chunk size), outside
    the generated scenarios' scope: the bounded formula and the older releases' formula
    (``proofs.theorems``) say what the plain predicate says."""
    raw = json.loads((ROOT / "tests/scenarios/vllm-0.33.0-whole-blocks/"
                      "two-full-attention-groups.json").read_text())
    for g, b in zip(raw["groups"], sizes, strict=True):
        g["gpu_block_size"] = b
    s = parse_scenario(raw)
    want = _full_chunk_within_windowed(s)
    assert want == (sizes[0] == sizes[1])
    scope, cfg, order = concrete(s)
    enc = encoding_chunked.ChunkEnc(scope)
    d = encoding_chunked.derive(enc, cfg, order)
    assert z3.is_true(z3.simplify(check_chunked.precondition(
        "full-chunk-within-windowed", enc, cfg, d))) == want
    old = parse_scenario(raw | {"semantics": V024})
    assert preconditions_holding(old, ["full-chunk-within-windowed"]) == {
        "full-chunk-within-windowed": want}
