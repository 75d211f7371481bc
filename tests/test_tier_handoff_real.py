"""``sim.tier_store.retained_boundary`` against vLLM 0.33.0's real ``KVCacheManager``:
the Mamba boundary states it hands a KV connector after a one-chunk prefill, for every
prompt length up to 999 tokens on three Mamba/window block pairs (the tiny NemotronH's
48/32 among them). Marked ``crosscheck``: makes or reuses the 0.33.0 environment."""

from __future__ import annotations

import json
import math

import pytest

from sim.crosscheck import forkserver
from sim.crosscheck.client import harness_env
from sim.crosscheck.envs import ROOT, ensure_env
from sim.crosscheck.tier import tier_release
from sim.tier_store import retained_boundary

# on the xdist worker of the newest release's files (its fork servers: --dist loadgroup)
pytestmark = [pytest.mark.crosscheck, pytest.mark.xdist_group("newest")]

ADAPTER = ROOT / "sim/crosscheck/adapters/mamba_handoff.py"
MOST = 999


def real_handoffs(mamba_block: int, window_block: int) -> dict[int, list[int]]:
    python = ensure_env(tier_release())
    out = forkserver.run([str(python), str(ADAPTER), str(mamba_block), str(window_block),
                          str(MOST)], env=harness_env(), timeout=900, check=True)
    return {int(p): b for p, b in json.loads(out.stdout).items()}


@pytest.mark.parametrize(("mamba_block", "window_block"), [(48, 32), (64, 48), (80, 32)])
def test_mamba_handoffs_are_the_real_managers(mamba_block: int, window_block: int) -> None:
    real = real_handoffs(mamba_block, window_block)
    align = math.lcm(mamba_block, window_block)
    ours = {p: [b] if (b := retained_boundary(p, 0, 0, p, mamba_block, align)) else []
            for p in range(1, MOST + 1)}
    assert real == ours
    # the sweep reaches both hand-offs (own block, cacheable checkpoint slot) and none
    assert sum(bool(b) for b in real.values()) > MOST // 4
    assert sum(not b for b in real.values()) > MOST // 4
    assert any(p % align == 0 and (p - 1) // mamba_block * mamba_block != b[0]
               for p, b in real.items() if b)
