# SPDX-License-Identifier: Apache-2.0
"""An EAGLE/MTP draft group gives the trailing stored chunk back: intended behaviour.

Written for vLLM 0.33.0's ``tests/v1/kv_connector/unit/`` (self-contained: vLLM and
transformers only, CPU only, no model execution).  It DOCUMENTS the behaviour and PASSES
on 0.33.0 as released: the pop is deliberate (the drafter's KV at a chunk's last
position depends on the token after the chunk, which the chunk's key does not cover), so
these tests pin it rather than ask for a change; see
``docs/findings/004-eagle-gives-a-chunk-back.md`` in offload-lookup-check.

Layout: the jamba / FLASH_ATTN / EAGLE row of offload-lookup-check's layout table: four
Mamba groups in ``mamba_cache_mode="align"`` and one full-attention group marked
``is_eagle_group`` (the drafter's layers, as the model runner tags them), block 80 each,
one block per chunk, hash block 80.  The drafter itself is not built: the connector
reads only the group's ``is_eagle_group`` flag.  A stand-in manager holds every chunk
the prompt wrote, for every group.

``_lookup_complete_chunks`` (``offloading/scheduler.py``): the bound is 161 - 1 rounded
down to the Mamba chunk, 160 (``:876-881``).  The EAGLE group may query one chunk past
the bound (``:935-940``), but the prompt has only two complete chunks, so it queries
chunks [0, 80) and [80, 160), finds both, and pops the last one as volatile (``:984-986``):
the bound becomes 80 and the Mamba groups follow.  A 161-token prompt thus gets 80 where
160 has every chunk stored.  Controls: the same layout without the EAGLE flag gets 160;
a 240-token prompt (a third chunk exists and is stored) gets 160, the popped chunk being
the extra one queried.

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
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
)
from vllm.v1.kv_offload import base as offload_base  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

BLOCK = 80
NUM_MAMBA_GROUPS = 4
BYTES_PER_TOKEN = 128  # 2 (K, V) * 1 head * 16 dims * 4 bytes
NUM_GPU_BLOCKS = 64
JAMBA = dict(
    vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=8,
    num_attention_heads=4, num_key_value_heads=4, attn_layer_period=8,
    attn_layer_offset=7, num_experts=1, num_experts_per_tok=1, expert_layer_period=1,
    expert_layer_offset=0, mamba_d_state=16, mamba_d_conv=4, mamba_expand=1,
    mamba_dt_rank=8, use_mamba_kernels=False, max_position_embeddings=1024,
    architectures=["JambaForCausalLM"],
)


def _configs(eagle: bool) -> tuple[VllmConfig, KVCacheConfig]:
    model_dir = tempfile.mkdtemp()
    transformers.JambaConfig(**JAMBA).save_pretrained(model_dir)
    page = BLOCK * BYTES_PER_TOKEN
    attn = FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=16,
                             dtype=torch.float32)
    mamba = MambaSpec(block_size=BLOCK, shapes=((8, page // 64),), dtypes=(torch.float32,),
                      mamba_cache_mode="align", page_size_padded=page)
    assert attn.page_size_bytes == mamba.page_size_bytes == page
    vllm_config = VllmConfig(
        model_config=ModelConfig(model=model_dir, skip_tokenizer_init=True,
                                 max_model_len=512, dtype="float32"),
        device_config=DeviceConfig("cpu"),
        cache_config=CacheConfig(block_size=BLOCK, enable_prefix_caching=True,
                                 mamba_cache_mode="align"),
        scheduler_config=SchedulerConfig(max_num_batched_tokens=512, max_num_seqs=4,
                                         max_model_len=512, is_encoder_decoder=False),
        kv_transfer_config=KVTransferConfig(
            kv_connector="OffloadingConnector", kv_role="kv_both",
            kv_connector_extra_config={"cpu_bytes_to_use": 1 << 22},
        ),
    )
    vllm_config.cache_config.num_gpu_blocks = NUM_GPU_BLOCKS
    groups = [KVCacheGroupSpec([f"model.layers.{i}.mamba"], mamba)
              for i in range(NUM_MAMBA_GROUPS)]
    groups.append(KVCacheGroupSpec(["model.layers.7.self_attn.attn"], attn,
                                   is_eagle_group=eagle))
    kv_cache_config = KVCacheConfig(num_blocks=NUM_GPU_BLOCKS, kv_cache_tensors=[],
                                    kv_cache_groups=groups)
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


def run(prompt: int, eagle: bool) -> int:
    """The CPU hit the real scheduler gets for a prompt, every chunk of every group stored."""
    vllm_config, kv_cache_config = _configs(eagle)
    block, hash_block = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
    assert (block, hash_block) == (BLOCK, BLOCK)
    scheduler = Scheduler(
        vllm_config=vllm_config, kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=block, hash_block_size=hash_block,
    )
    assert scheduler.connector is not None
    connector = scheduler.connector.connector_scheduler
    assert ([c.is_eagle_group for c in connector.config.kv_group_configs]
            == [False] * NUM_MAMBA_GROUPS + [eagle])
    hash_fn = get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    req = Request(request_id="R", prompt_token_ids=[(5 * t + 11) % 500 + 3
                                                    for t in range(prompt)],
                  sampling_params=SamplingParams(max_tokens=1, ignore_eos=True),
                  pooling_params=None,
                  block_hasher=get_request_block_hasher(hash_block, hash_fn))
    # every complete chunk the prompt wrote, in every group
    connector.manager = _StandInManager(
        {offload_base.make_offload_key(h, g) for h in req.block_hashes
         for g in range(NUM_MAMBA_GROUPS + 1)})
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


def test_eagle_group_gives_the_trailing_chunk_back() -> None:
    # chunks [0, 80) and [80, 160) are stored in every group; the EAGLE group cannot
    # look past 160 (the prompt has no third complete chunk) and pops [80, 160)
    assert run(161, eagle=True) == 80


def test_without_eagle_or_with_the_next_chunk_stored_the_hit_is_160() -> None:
    assert run(161, eagle=False) == 160
    # a third chunk [160, 240) exists and is stored: it is the one popped
    assert run(240, eagle=True) == 160


if __name__ == "__main__":
    out = {f"{'eagle' if e else 'plain'}/{p}": run(p, e)
           for p, e in ((161, True), (161, False), (240, True))}
    json.dump(out, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
