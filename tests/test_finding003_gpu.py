"""Finding 003 on the H200 (``sim/gpu/finding_cap.py``, results in
``sim/gpu/results/findings/vllm-0.33.0-mamba-cap32-{stock,fix003}.json``), replayed on the
model: the store the CPU tier held after the cold run, the 33-token prompt and the cap of
32 give the hits the real engine answered, on 0.33.0 and with the fix; every hot output
equals the cold one (the cap changes what is loaded, not the text).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model.evaluate import evaluate
from model.scenario import parse_scenario
from releases import fix_003_cap_min, vllm_0_33_0

V033 = vllm_0_33_0.SEMANTICS.name
CAP_MIN = fix_003_cap_min.SEMANTICS.name

RESULTS = Path(__file__).resolve().parents[1] / "sim" / "gpu" / "results" / "findings"


@pytest.mark.parametrize(("side", "semantics", "cap_hit"),
                         [("stock", V033, 0), ("fix003", CAP_MIN, 32)])
def test_gpu_hits_are_the_models(side: str, semantics: str, cap_hit: int) -> None:
    r = json.loads((RESULTS / f"vllm-0.33.0-mamba-cap32-{side}.json").read_text())
    assert r["error"] is None and r["vllm_version"] == "0.33.0"
    assert r["layout"] == {"offload_groups": [{"group": 0, "tokens_per_chunk": 16,
                                               "mamba": True}],
                           "tokens_per_hash": 16, "mamba_align_size": 16}
    held = [int(k.split(":")[1]) // 16 - 1 for k in r["tier_held_after_cold"]]
    assert held == [1]  # the Mamba state at 32 only: a prefill saves its last boundary
    steps = r["steps"]
    for name, cap in (("cap32", r["cap"]), ("nocap", None)):
        raw = {"semantics": semantics, "block_size_factor": 1,
               "prompt_tokens": len(r["prompt"]), "num_computed_tokens": 0,
               "groups": [{"kind": "mamba", "gpu_block_size": 16,
                           "mamba_cache_mode": "align", "stored": held}]}
        if cap is not None:
            raw["max_load_tokens"] = cap
        o = evaluate(parse_scenario(raw))
        real = steps[name]
        assert [x["hit"] for x in real["lookups"]] == [o.hit_tokens], name
        assert real["loaded_tokens"] == o.hit_tokens and real["equal_to_cold"] is True
    assert steps["cap32"]["loaded_tokens"] == cap_hit
    assert steps["cap32"]["tokens"] == steps["cold"]["tokens"]
