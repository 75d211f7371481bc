# SPDX-License-Identifier: Apache-2.0
"""Regression test for vLLM PR #44599 (Mamba mamba_cache_mode="align" with KV offloading).

Ready for tests/v1/kv_connector/unit/. It drives the real OffloadingConnectorScheduler
(real VllmConfig, KVCacheConfig and group specs, the real OffloadingSpec constructor, a
Request hashed by vLLM's own block hasher) with a stub store that answers lookups from the
scenario, and checks that a hit restoring a Mamba state ends on the Mamba offloaded block
boundary. vLLM 0.23.0 answers 31 tokens for a 32-token prompt with block 16 and fails;
0.24.0 answers 16 and passes. Written by offload-lookup-check (docs/spec/for-vllm.md);
its tests/test_vllm_artefacts.py runs this file against both releases.
"""

import torch

from vllm.config import CacheConfig, DeviceConfig, KVTransferConfig, VllmConfig
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
    OffloadingConnectorScheduler,
)
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import (
    get_request_block_hasher,
    init_none_hash,
    resolve_kv_cache_block_sizes,
)
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
    SlidingWindowSpec,
)
from vllm.v1.kv_offload import base
from vllm.v1.request import Request

MAMBA_ONLY = {"prompt_tokens": 32, "num_computed_tokens": 0, "block_size_factor": 1,
              "groups": [{"kind": "mamba", "gpu_block_size": 16, "mode": "align"}]}
HYBRID = {"prompt_tokens": 32, "num_computed_tokens": 0, "block_size_factor": 1,
          "groups": [{"kind": "full_attention", "gpu_block_size": 16},
                     {"kind": "sliding_window", "gpu_block_size": 16, "sliding_window": 33},
                     {"kind": "mamba", "gpu_block_size": 16, "mode": "align"}]}


class _Loaded(base.LoadStoreSpec):
    @staticmethod
    def medium() -> str:
        return "CPU"


class _Store(base.OffloadingManager):
    """Holds every block of the prompt."""

    def __init__(self):
        self.held = set()

    def lookup(self, key, req_context):
        return key in self.held

    def prepare_load(self, keys, req_context):
        return _Loaded()

    def prepare_store(self, keys, req_context):
        return None

    def on_new_request(self, req_context):
        return base.RequestOffloadingContext()


class _Spec(base.OffloadingSpec):
    store = _Store()

    def get_manager(self):
        return _Spec.store

    def get_handlers(self, kv_caches):
        raise NotImplementedError


def _group_spec(group, i):
    # distinct head counts keep the groups apart
    if group["kind"] == "mamba":
        return MambaSpec(block_size=group["gpu_block_size"], shapes=((4, 8 * (i + 1)),),
                         dtypes=(torch.float16,), mamba_cache_mode=group["mode"])
    kw = dict(block_size=group["gpu_block_size"], num_kv_heads=i + 1, head_size=8,
              dtype=torch.float16)
    if group["kind"] == "sliding_window":
        return SlidingWindowSpec(**kw, sliding_window=group["sliding_window"])
    return FullAttentionSpec(**kw)


def _cpu_hit(case):
    """The scheduler's CPU hit for the case, with every offloaded block stored."""
    sizes = [g["gpu_block_size"] for g in case["groups"]]
    factor = case["block_size_factor"]
    extra = {} if factor == 1 else {"block_size": sizes[0] * factor}
    vllm_config = VllmConfig(
        device_config=DeviceConfig("cpu"),
        cache_config=CacheConfig(block_size=min(sizes), enable_prefix_caching=True),
        kv_transfer_config=KVTransferConfig(kv_connector="OffloadingConnector",
                                            kv_role="kv_both",
                                            kv_connector_extra_config=extra),
    )
    kv_cache_config = KVCacheConfig(
        num_blocks=1024, kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(layer_names=[f"layer.{i}"],
                                          kv_cache_spec=_group_spec(g, i))
                         for i, g in enumerate(case["groups"])])
    _Spec.store = _Store()
    spec = _Spec(vllm_config, kv_cache_config)
    scheduler = OffloadingConnectorScheduler(spec)

    _, hash_block_size = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
    hash_fn = get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    request = Request(request_id="r0",
                      prompt_token_ids=[(7 * t + 3) % 30000
                                        for t in range(case["prompt_tokens"])],
                      sampling_params=SamplingParams(max_tokens=1), pooling_params=None,
                      block_hasher=get_request_block_hasher(hash_block_size, hash_fn))
    # offloaded block i of group g is keyed by the block hash at its end
    for g, group in enumerate(case["groups"]):
        per_block = group["gpu_block_size"] * factor // spec.hash_block_size
        for h in request.block_hashes[per_block - 1::per_block]:
            _Spec.store.held.add(base.make_offload_key(h, g))
    scheduler.on_new_request(request)
    hit, _ = scheduler.get_num_new_matched_tokens(request, case["num_computed_tokens"])
    return hit


def _check_mamba_boundary(case, expected_hit):
    hit = _cpu_hit(case)
    end = case["num_computed_tokens"] + (hit or 0)
    for group in case["groups"]:
        if group["kind"] == "mamba" and hit:
            # the restored state is the one saved at an offloaded block's end
            block = group["gpu_block_size"] * case["block_size_factor"]
            assert end % block == 0, f"hit {hit} ends at {end}, not on a multiple of {block}"
    assert hit == expected_hit


def test_mamba_align_hit_ends_on_a_block_boundary():
    _check_mamba_boundary(MAMBA_ONLY, 16)


def test_hybrid_mamba_align_hit_ends_on_a_block_boundary():
    _check_mamba_boundary(HYBRID, 16)
