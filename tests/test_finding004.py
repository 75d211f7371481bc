"""Finding 004 (docs/findings/004-eagle-gives-a-chunk-back.md) on the model: on the real
jamba / FLASH_ATTN / EAGLE row with every chunk stored, the EAGLE pop gives exactly one
chunk back where the prompt is not a multiple of the chunk, and nothing where it is or
without the EAGLE flag; no other invariant breaks."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from eagle_pop_loss import compare  # noqa: E402

from model.real_layouts import load_templates  # noqa: E402
from model.scenario import scenario_to_json  # noqa: E402
from releases import vllm_0_33_0  # noqa: E402

V033 = vllm_0_33_0.SEMANTICS.name


def test_eagle_pop_gives_one_chunk_back_exactly_off_chunk_multiples() -> None:
    row = next(t for t in load_templates() if t.key == "jamba/FLASH_ATTN/eagle")
    assert [g.eagle for g in row.groups] == [False] * 4 + [True]
    for prompt in (81, 120, 159, 160, 161, 200, 239, 240, 241):
        s = row.scenario(semantics=V033, prompt_tokens=prompt)
        assert all(g.get("stored") == "all" for g in scenario_to_json(s)["groups"])
        r = compare(s)
        assert r is not None
        assert r["other_violations"] == []
        assert r["plain"] == r["valid"] == (prompt - 1) // 80 * 80
        assert r["lost"] == (0 if prompt % 80 == 0 else 80), prompt
