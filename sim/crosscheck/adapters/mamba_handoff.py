"""Which Mamba boundary states vLLM 0.33.0's real ``KVCacheManager`` hands a KV connector
when a prompt is prefilled in one chunk; runs INSIDE that release's environment, never
in the project's Python. ``sim.tier_store.retained_boundary`` is checked against it
(``tests/test_tier_handoff_real.py``).

    python mamba_handoff.py MAMBA_BLOCK WINDOW_BLOCK MAX_PROMPT

prints one JSON object: prompt length -> the boundaries (tokens) that
``take_boundary_state_offloads`` (kv_cache_manager.py:880-904) returned after
``allocate_slots`` scheduled the whole prompt, for every length 1..MAX_PROMPT.

Real: ``KVCacheManager`` with a ``KVCacheConfig`` of two groups, a Mamba ``align`` group
(``MambaSpec`` with one prefill checkpoint block, alignment 1, as Mamba2 declares it,
model_executor/layers/mamba/mamba_mixer2.py:1108-1118) and a sliding-window group
(window two blocks); the scheduler block is their LCM, the hash block 16, the retention
interval 0 (``CacheConfig``'s default, config/cache.py:275, which the engine copies onto
the KV-cache config), ``Request`` with block hashes from vLLM's own hasher. Nothing is
stubbed.
"""

from __future__ import annotations

import json
import math
import os
import sys

_PROTO = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import torch  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.core.kv_cache_manager import KVCacheManager  # noqa: E402
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    get_request_block_hasher,
    init_none_hash,
)
from vllm.v1.kv_cache_interface import (  # noqa: E402
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
    SlidingWindowSpec,
)
from vllm.v1.request import Request  # noqa: E402

HASH_BLOCK = 16


def handoffs(mamba_block: int, window_block: int, prompt: int, hasher: object) -> list[int]:
    sched = math.lcm(mamba_block, window_block)
    mamba = MambaSpec(block_size=mamba_block, shapes=((4, 8),), dtypes=(torch.float32,),
                      mamba_cache_mode="align", num_prefill_checkpoint_blocks=1,
                      prefill_checkpoint_alignment=1)
    window = SlidingWindowSpec(block_size=window_block, num_kv_heads=2, head_size=8,
                               dtype=torch.float32, sliding_window=2 * window_block)
    cfg = KVCacheConfig(num_blocks=4 * (prompt // min(mamba_block, window_block) + 8),
                        kv_cache_tensors=[],
                        kv_cache_groups=[KVCacheGroupSpec(["mamba"], mamba),
                                         KVCacheGroupSpec(["window"], window)])
    cfg.hash_block_size = HASH_BLOCK
    cfg.prefix_cache_retention_interval = 0
    cfg.cache_hit_alignment_tokens = sched
    manager = KVCacheManager(cfg, max_model_len=prompt + 64, scheduler_block_size=sched,
                             hash_block_size=HASH_BLOCK)
    req = Request(request_id="r", prompt_token_ids=[(7 * t + 3) % 30000 for t in range(prompt)],
                  sampling_params=SamplingParams(max_tokens=4), pooling_params=None,
                  block_hasher=hasher)
    if manager.allocate_slots(req, prompt) is None:
        raise RuntimeError(f"no blocks for a {prompt}-token prompt")
    return sorted(b for (_, _, b) in manager.take_boundary_state_offloads().get("r", []))


def main() -> None:
    mamba_block, window_block, most = (int(a) for a in sys.argv[1:4])
    hash_fn = get_hash_fn_by_name("sha256")
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(HASH_BLOCK, hash_fn)
    out = {p: handoffs(mamba_block, window_block, p, hasher) for p in range(1, most + 1)}
    _PROTO.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
