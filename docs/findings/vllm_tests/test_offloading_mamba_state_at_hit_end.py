# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""A CPU-offload hit must restore the Mamba state saved at the hit's end.

For ``tests/v1/kv_connector/unit/offloading_connector/``; written against vLLM
0.33.0 (git ``4ba787ec9``), whose test helpers (``MockOffloadingSpec`` in
``utils.py``, ``_make_vllm_config`` in ``test_config.py``, ``create_request`` and
``create_model_runner_output`` in ``tests/v1/kv_connector/unit/utils.py``) were
read in the 0.33.0 source distribution.  ``RequestRunner`` is not used here: its
worker side registers attention caches only, and these layouts have a Mamba group.

The tests assert the intended behaviour, so on 0.33.0 they fail.
``_lookup_complete_chunks`` rounds the hit bound down to the Mamba chunk once,
before the group loop; a group whose chunk is not a multiple of the Mamba chunk
then lowers the bound between two Mamba boundaries, and the Mamba lookup confirms
the chunk that contains the bound, whose state was saved past the hit.

Layouts (Mamba group in ``mamba_cache_mode="align"``, hash block 16, one block
per offload chunk):

- sliding window: Mamba block 48 (group 0) and a sliding-window group with window
  64 and block 32 (group 1).  This is what 0.33.0's start-up builds for a Mamba2
  hybrid whose attention layers get ``sliding_window`` when the attention backend
  declares FlashInfer's kernel block sizes (16, 32, 64).
- full attention: attention block 16 (group 0), Mamba block 32 (group 1).  No
  0.33.0 start-up builds it; it is the smallest shape of the same bug.
"""

import pytest
import torch

from tests.v1.kv_connector.unit.offloading_connector.test_config import (
    _make_vllm_config,
)
from tests.v1.kv_connector.unit.offloading_connector.utils import (
    MockOffloadingSpec,
)
from tests.v1.kv_connector.unit.utils import (
    create_model_runner_output,
    create_request,
)
from vllm import SamplingParams
from vllm.config import KVTransferConfig
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
    OffloadingWorkerMetadata,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import (
    build_offloading_config,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
    OffloadingConnectorScheduler,
)
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import (
    get_request_block_hasher,
    init_none_hash,
    resolve_kv_cache_block_sizes,
)
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
    SlidingWindowSpec,
)
from vllm.v1.kv_offload.base import LookupResult, make_offload_key
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

HASH_BLOCK = 16
BYTES_PER_TOKEN = 128  # K and V, 1 head of 16 float32 values


def _mamba(block_size: int, page_bytes: int) -> MambaSpec:
    return MambaSpec(
        block_size=block_size,
        shapes=((8, page_bytes // 32),),
        dtypes=(torch.float32,),
        mamba_cache_mode="align",
    )


def _attention(block_size: int, page_bytes: int, window: int | None):
    # one page size for every group, as page-size unification leaves it
    kwargs = dict(
        block_size=block_size,
        num_kv_heads=1,
        head_size=16,
        dtype=torch.float32,
        page_size_padded=page_bytes,
    )
    if window is None:
        return FullAttentionSpec(**kwargs)
    return SlidingWindowSpec(**kwargs, sliding_window=window)


def _sliding_window_groups(num_blocks: int = 0) -> KVCacheConfig:
    page = 48 * BYTES_PER_TOKEN
    return KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(["model.layers.0.mamba"], _mamba(48, page)),
            KVCacheGroupSpec(
                ["model.layers.1.self_attn.attn"], _attention(32, page, 64)
            ),
        ],
    )


def _full_attention_groups() -> KVCacheConfig:
    page = 32 * BYTES_PER_TOKEN
    return KVCacheConfig(
        num_blocks=0,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(["full_layer"], _attention(16, page, None)),
            KVCacheGroupSpec(["mamba_layer"], _mamba(32, page)),
        ],
    )


def _lookup_and_load(
    kv_cache_config: KVCacheConfig, num_tokens: int, missing: dict[int, int]
) -> tuple[int, list[tuple[int, int]]]:
    """The connector's hit for a store holding every chunk of the prompt except
    ``missing`` ({group: chunk index}), and, per loaded Mamba key, (the token
    its chunk ends at, the hit it serves)."""
    vllm_config = _make_vllm_config(extra_config={})
    spec = MockOffloadingSpec(build_offloading_config(vllm_config, kv_cache_config))
    scheduler = OffloadingConnectorScheduler(spec, vllm_config, kv_cache_config)
    request = create_request(num_tokens=num_tokens, block_size=HASH_BLOCK)
    scheduler.on_new_request(request)
    req_status = scheduler._req_status[request.request_id]
    req_status.update_offload_keys()
    group_keys = [state.offload_keys for state in req_status.group_states]
    stored = {
        key
        for group, keys in enumerate(group_keys)
        for chunk, key in enumerate(keys)
        if missing.get(group) != chunk
    }
    spec.manager.lookup.side_effect = lambda key, req_context: (
        LookupResult.HIT if key in stored else LookupResult.MISS
    )

    hit, _ = scheduler.get_num_new_matched_tokens(request, 0)
    assert hit is not None, "every chunk is stored or missing: nothing to wait for"
    if hit == 0:
        return 0, []

    scheduler_block_size, hash_block_size = resolve_kv_cache_block_sizes(
        kv_cache_config, vllm_config
    )
    kv_manager = KVCacheManager(
        KVCacheConfig(
            num_blocks=200,
            kv_cache_tensors=[],
            kv_cache_groups=kv_cache_config.kv_cache_groups,
        ),
        max_model_len=1024,
        scheduler_block_size=scheduler_block_size,
        hash_block_size=hash_block_size,
    )
    blocks = kv_manager.allocate_slots(
        request, 0, num_external_computed_tokens=hit, delay_cache_blocks=True
    )
    assert blocks is not None
    scheduler.update_state_after_alloc(
        request, kv_manager.get_blocks(request.request_id), hit
    )
    [load_job] = scheduler._current_batch_load_jobs.values()
    mamba_group = next(
        group
        for group, kv_cache_group in enumerate(kv_cache_config.kv_cache_groups)
        if isinstance(kv_cache_group.kv_cache_spec, MambaSpec)
    )
    mamba_chunk = kv_cache_config.kv_cache_groups[mamba_group].kv_cache_spec.block_size
    return hit, [
        ((group_keys[mamba_group].index(key) + 1) * mamba_chunk, hit)
        for key in load_job.src_spec.offload_keys
        if key in group_keys[mamba_group]
    ]


def _assert_state_at_hit_end(hit: int, mamba_loads: list[tuple[int, int]]) -> None:
    """No hit, or a hit whose Mamba state is the one saved at its end."""
    assert hit == 0 or mamba_loads, f"a {hit}-token hit loads no Mamba state"
    for state_at, serves in mamba_loads:
        assert state_at == serves, (
            f"a {serves}-token hit restores the Mamba state saved at token {state_at}"
        )


def test_sliding_window_block_below_mamba_block():
    # 200 tokens: window chunks end at 32..192, the Mamba chunks at 48..192; the
    # window chunk ending at 192 is missing (the LRU evicts it first, see the
    # engine-core test below)
    hit, mamba_loads = _lookup_and_load(_sliding_window_groups(), 200, {1: 5})
    _assert_state_at_hit_end(hit, mamba_loads)


def test_full_attention_block_below_mamba_block():
    # 100 tokens: attention chunk 3 (tokens 48-63) missing
    hit, mamba_loads = _lookup_and_load(_full_attention_groups(), 100, {0: 3})
    _assert_state_at_hit_end(hit, mamba_loads)


JAMBA = dict(
    vocab_size=512,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=4,
    attn_layer_period=2,
    attn_layer_offset=1,
    num_experts=1,
    num_experts_per_tok=1,
    expert_layer_period=1,
    expert_layer_offset=0,
    mamba_d_state=16,
    mamba_d_conv=4,
    mamba_expand=1,
    mamba_dt_rank=8,
    use_mamba_kernels=False,
    max_position_embeddings=1024,
    architectures=["JambaForCausalLM"],
)


class _EngineCore:
    """The engine-core ``Scheduler`` with the ``OffloadingConnector`` and its CPU
    tier (LRU); the worker is faked: every transfer job is reported done one
    step later, and a request samples a token once its prefill is complete."""

    def __init__(self, model_dir: str, tier_chunks: int) -> None:
        from vllm.config import (
            CacheConfig,
            DeviceConfig,
            ModelConfig,
            SchedulerConfig,
            VllmConfig,
        )
        from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

        self.kv_cache_config = _sliding_window_groups(num_blocks=200)
        page = 2 * 48 * BYTES_PER_TOKEN  # both groups, one block each per chunk
        align = CPUOffloadingSpec.BLOCK_SIZE_ALIGNMENT
        chunk_bytes = -(-page // align) * align
        vllm_config = VllmConfig(
            model_config=ModelConfig(
                model=model_dir,
                skip_tokenizer_init=True,
                max_model_len=512,
                dtype="float32",
            ),
            device_config=DeviceConfig("cpu"),
            # the block the platform chose; the sliding-window layer picked 32
            cache_config=CacheConfig(
                block_size=48, enable_prefix_caching=True, mamba_cache_mode="align"
            ),
            scheduler_config=SchedulerConfig(
                max_num_batched_tokens=512,
                max_num_seqs=8,
                max_model_len=512,
                is_encoder_decoder=False,
            ),
            kv_transfer_config=KVTransferConfig(
                kv_connector="OffloadingConnector",
                kv_role="kv_both",
                kv_connector_extra_config={
                    "cpu_bytes_to_use": tier_chunks * chunk_bytes
                },
            ),
        )
        vllm_config.cache_config.num_gpu_blocks = 200
        self.vllm_config = vllm_config
        block_size, self.hash_block_size = resolve_kv_cache_block_sizes(
            self.kv_cache_config, vllm_config
        )
        self.scheduler = Scheduler(
            vllm_config=vllm_config,
            kv_cache_config=self.kv_cache_config,
            structured_output_manager=StructuredOutputManager(vllm_config),
            block_size=block_size,
            hash_block_size=self.hash_block_size,
        )
        assert self.scheduler.connector is not None
        self.connector = self.scheduler.connector.connector_scheduler
        self.pending_jobs: set[int] = set()
        self.hits: dict[str, int | None] = {}
        lookup = self.connector.get_num_new_matched_tokens

        def recorded(request, *args, **kwargs):
            hit, load_async = lookup(request, *args, **kwargs)
            self.hits[request.request_id] = hit
            return hit, load_async

        self.connector.get_num_new_matched_tokens = recorded
        init_none_hash(sha256)

    def add(self, req_id: str, prompt: list[int], max_tokens: int) -> Request:
        request = Request(
            request_id=req_id,
            prompt_token_ids=prompt,
            sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True),
            pooling_params=None,
            block_hasher=get_request_block_hasher(self.hash_block_size, sha256),
        )
        self.scheduler.add_request(request)
        return request

    def step(self) -> None:
        scheduler_output = self.scheduler.schedule()
        done = dict.fromkeys(self.pending_jobs, 1)
        meta = scheduler_output.kv_connector_metadata
        self.pending_jobs = set()
        if meta is not None:
            self.pending_jobs.update(meta.store_jobs)
            self.pending_jobs.update(meta.load_jobs)
        scheduled = [
            self.scheduler.requests[req_id]
            for req_id in scheduler_output.num_scheduled_tokens
        ]
        output = create_model_runner_output(
            reqs=scheduled,
            token_id=7,
            kv_connector_worker_meta=OffloadingWorkerMetadata(completed_jobs=done),
        )
        for i, request in enumerate(scheduled):
            # schedule() advanced num_computed_tokens: mid-prefill samples nothing
            if request.num_computed_tokens < request.num_tokens:
                output.sampled_token_ids[i] = []
        self.scheduler.update_from_output(scheduler_output, output)

    def run_all(self) -> None:
        while self.scheduler.requests:
            self.step()

    def tier_chunks(self, request: Request) -> list[str]:
        """The tier's chunks of ``request``, as "group@token the chunk ends at"."""
        names = {}
        for group, kv_cache_group in enumerate(self.kv_cache_config.kv_cache_groups):
            block = kv_cache_group.kv_cache_spec.block_size
            step = block // self.hash_block_size
            label = "mamba" if group == 0 else "window"
            for i, block_hash in enumerate(request.block_hashes[step - 1 :: step]):
                key = make_offload_key(block_hash, group)
                names[key] = f"{label}@{(i + 1) * block}"
        policy = self.connector.manager._policy
        return sorted(names[key] for key in policy.chunks if key in names)

    def mamba_loads(self, request: Request) -> list[tuple[int, int]]:
        """(token the restored Mamba state was saved at, hit end it serves)."""
        req_status = self.connector._req_status[request.request_id]
        ctx = req_status.req_context
        mamba_keys = set(req_status.group_states[0].offload_keys)
        return [
            (ctx.get_offload_key_position(key), end)
            for _, end, key in req_status.load_key_ranges
            if key in mamba_keys
        ]


def test_engine_core_lru_tier_sliding_window_block_below_mamba_block(tmp_path):
    """The failing store arises on the real CPU tier: request A (200 tokens)
    fills the 7-chunk tier and ends; the LRU then ranks A's chunks tail first,
    at equal positions the window chunk before the Mamba chunk; request B (40
    tokens) stores one chunk and evicts A's window chunk ending at 192, not the
    Mamba chunk ending there; A's prompt again reads the tier."""
    transformers = pytest.importorskip("transformers")
    transformers.JambaConfig(**JAMBA).save_pretrained(tmp_path)
    engine = _EngineCore(str(tmp_path), tier_chunks=7)
    prompt = [(7 * t + 5) % 500 + 3 for t in range(200)]
    a = engine.add("A", prompt, max_tokens=10)
    engine.run_all()
    # the next step signals A's end to the tier (build_connector_meta)
    engine.step()
    assert engine.tier_chunks(a) == [
        "mamba@192",
        "window@128",
        "window@160",
        "window@192",
        "window@32",
        "window@64",
        "window@96",
    ]
    engine.add("B", [(11 * t + 2) % 500 + 3 for t in range(40)], max_tokens=1)
    engine.run_all()
    assert "window@192" not in engine.tier_chunks(a)
    assert "mamba@192" in engine.tier_chunks(a)
    assert engine.scheduler.reset_prefix_cache()  # the GPU prefix cache only
    c = engine.add("C", prompt, max_tokens=1)
    engine.step()
    _assert_state_at_hit_end(engine.hits["C"] or 0, engine.mamba_loads(c))
