# SPDX-License-Identifier: Apache-2.0
"""A ``max_load_tokens`` cap below the prompt end loses a whole Mamba chunk of CPU hit.

Written for vLLM 0.33.0's ``tests/v1/kv_connector/unit/`` (self-contained: vLLM and
transformers only, CPU only, no model execution).  ``test_load_cap_keeps_the_chunk``
asserts the hit a fixed lookup gives (32), so it FAILS on 0.33.0 as released (hit 16) and
PASSES with the proposed fix (``docs/findings/003-fix.diff``: the last-prompt-token rule as
a minimum with ``num_tokens - 1``); see ``docs/findings/003-load-cap-loses-a-chunk.md`` in
offload-lookup-check.

Layout: one Mamba group in ``mamba_cache_mode="align"``, block 16, one block per chunk,
hash block 16 (what vLLM 0.33.0's start-up makes of a small Mamba1 or Mamba2 model).
Every chunk of a 33-token prompt is in the store (a stand-in manager answers lookups from
a set of keys).  The request carries ``kv_transfer_params={"max_load_tokens": 32}``.

``_lookup_complete_chunks`` caps the hit bound at 32 (``offloading/scheduler.py:867``),
then still takes one token off for the last-prompt-token rule (``:876``: 31, although
the cap already leaves token 32 to compute) and rounds down to the Mamba chunk
(``:877-881``: 16).  A hit of 32 keeps every rule: it ends on a Mamba chunk, leaves the
last prompt token to compute, stays within the cap, and its chunks are stored.  The
control cases (no cap; a cap of 33, at the prompt end) get 32.

The engine-core ``Scheduler`` runs with the real ``OffloadingConnector``; the hit is the
one its first ``schedule()`` obtains from ``get_num_new_matched_tokens``.

Run as a script (``python THIS_FILE``) it prints the hits as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import torch  # noqa: E402
import transformers  # noqa: E402
from vllm import SamplingParams  # noqa: E402
from vllm.config import (  # noqa: E402
    CacheConfig,
    DeviceConfig,
    KVTransferConfig,
    ModelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    get_request_block_hasher,
    init_none_hash,
    resolve_kv_cache_block_sizes,
)
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
)
from vllm.v1.kv_offload import base as offload_base  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

BLOCK = 16
PROMPT = 33
NUM_GPU_BLOCKS = 64
JAMBA = dict(
    vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=4, attn_layer_period=2,
    attn_layer_offset=1, num_experts=1, num_experts_per_tok=1, expert_layer_period=1,
    expert_layer_offset=0, mamba_d_state=16, mamba_d_conv=4, mamba_expand=1,
    mamba_dt_rank=8, use_mamba_kernels=False, max_position_embeddings=1024,
    architectures=["JambaForCausalLM"],
)


def _configs() -> tuple[VllmConfig, KVCacheConfig]:
    model_dir = tempfile.mkdtemp()
    transformers.JambaConfig(**JAMBA).save_pretrained(model_dir)
    mamba = MambaSpec(block_size=BLOCK, shapes=((8, 32),), dtypes=(torch.float32,),
                      mamba_cache_mode="align")
    vllm_config = VllmConfig(
        model_config=ModelConfig(model=model_dir, skip_tokenizer_init=True,
                                 max_model_len=256, dtype="float32"),
        device_config=DeviceConfig("cpu"),
        cache_config=CacheConfig(block_size=BLOCK, enable_prefix_caching=True,
                                 mamba_cache_mode="align"),
        scheduler_config=SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=4,
                                         max_model_len=256, is_encoder_decoder=False),
        kv_transfer_config=KVTransferConfig(
            kv_connector="OffloadingConnector", kv_role="kv_both",
            kv_connector_extra_config={"cpu_bytes_to_use": 1 << 20},
        ),
    )
    vllm_config.cache_config.num_gpu_blocks = NUM_GPU_BLOCKS
    kv_cache_config = KVCacheConfig(
        num_blocks=NUM_GPU_BLOCKS, kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["model.layers.0.mamba"], mamba)],
    )
    return vllm_config, kv_cache_config


class _StandInManager(offload_base.OffloadingManager):
    """Holds a fixed set of keys; lookups answer from it, loads and stores are no-ops."""

    def __init__(self, stored: set[bytes]) -> None:
        self.stored = stored

    def lookup(self, key, req_context):  # type: ignore[no-untyped-def]
        return (offload_base.LookupResult.HIT if key in self.stored
                else offload_base.LookupResult.MISS)

    def prepare_load(self, keys, req_context):  # type: ignore[no-untyped-def]
        assert set(keys) <= self.stored, "a load names a key the store lacks"
        return None

    def prepare_store(self, keys, req_context):  # type: ignore[no-untyped-def]
        return None

    def on_new_request(self, req_context):  # type: ignore[no-untyped-def]
        return offload_base.RequestOffloadingContext()


def run(max_load_tokens: int | None) -> int:
    """The CPU hit the real scheduler gets for the 33-token prompt, every chunk stored."""
    vllm_config, kv_cache_config = _configs()
    block, hash_block = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
    assert (block, hash_block) == (BLOCK, BLOCK)
    scheduler = Scheduler(
        vllm_config=vllm_config, kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=block, hash_block_size=hash_block,
    )
    assert scheduler.connector is not None
    connector = scheduler.connector.connector_scheduler
    hash_fn = get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    extra = ({} if max_load_tokens is None
             else {"kv_transfer_params": {"max_load_tokens": max_load_tokens}})
    req = Request(request_id="R", prompt_token_ids=[(5 * t + 11) % 500 + 3
                                                    for t in range(PROMPT)],
                  sampling_params=SamplingParams(max_tokens=1, ignore_eos=True,
                                                 extra_args=extra or None),
                  pooling_params=None,
                  block_hasher=get_request_block_hasher(hash_block, hash_fn))
    # every chunk the prompt wrote (ends at tokens 16 and 32), group 0
    connector.manager = _StandInManager(
        {offload_base.make_offload_key(h, 0) for h in req.block_hashes})
    hits: list[Any] = []
    lookup = connector.get_num_new_matched_tokens

    def recorded(request: Request, *args: Any, **kwargs: Any) -> Any:
        answer = lookup(request, *args, **kwargs)
        hits.append(answer[0])
        return answer

    connector.get_num_new_matched_tokens = recorded
    scheduler.add_request(req)
    scheduler.schedule()
    assert len(hits) == 1, hits
    hit: int = hits[0]
    return hit


def test_load_cap_keeps_the_chunk() -> None:
    # a hit of 32 keeps every rule; 0.33.0 as released answers 16
    hit = run(32)
    assert hit == 32, f"max_load_tokens 32 below the prompt end: hit {hit}, 32 is valid"


def test_without_a_cap_below_the_prompt_the_hit_is_32() -> None:
    assert run(None) == 32
    assert run(33) == 32


if __name__ == "__main__":
    json.dump({str(cap): run(cap) for cap in (None, 33, 32)}, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
