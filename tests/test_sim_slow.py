"""The long run: 100,000 chat requests under 0.23.0 and 0.24.0 (marked slow)."""

from __future__ import annotations

import os
import time

import pytest

from releases import vllm_0_23_0, vllm_0_24_0
from sim.config import EngineConfig
from sim.runner import RunSpec, run_side_by_side

V023 = vllm_0_23_0.SEMANTICS.name
V024 = vllm_0_24_0.SEMANTICS.name


@pytest.mark.slow
def test_100k_chat_requests_in_a_few_minutes() -> None:
    spec = RunSpec("chat", 100_000, 0, (V023, V024), EngineConfig())
    t0 = time.perf_counter()
    old, new = run_side_by_side(spec, jobs=min(2, os.cpu_count() or 1), show_progress=False)
    wall = time.perf_counter() - t0
    print(f"\n100k chat requests x2 semantics: {wall:.1f}s wall; "
          f"{old.requests_per_s:,.0f} / {new.requests_per_s:,.0f} requests/s, "
          f"{old.lookups_per_s:,.0f} / {new.lookups_per_s:,.0f} lookups/s; "
          f"corrupted {old.corrupted} / {new.corrupted}")
    assert old.requests == new.requests == 100_000
    assert old.corrupted > 0 and new.corrupted == 0
    assert old.model_disagreements == new.model_disagreements == 0
    assert wall < 300
