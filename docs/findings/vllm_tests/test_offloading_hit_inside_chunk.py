# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""A CPU-offload hit that ends inside an attention group's offload chunk loses nothing.

For ``tests/v1/kv_connector/unit/offloading_connector/``; written against vLLM
0.33.0 (git ``4ba787ec9``), whose test helpers (``MockOffloadingSpec`` in
``utils.py``, ``create_model_runner_output`` in ``tests/v1/kv_connector/unit/
utils.py``) were read in the 0.33.0 source distribution.  The tests pin today's
behaviour: they pass on 0.33.0.

The lookup can return a hit that is shorter than, or not a multiple of, a
full-attention group's chunk: full-attention groups are looked up once, before the
sliding-window and Mamba groups, and only those are looked up again when a later
group lowers the hit.  The tests check what the engine does with such a hit:

- every attention token below the hit lies in a GPU block the load writes, from the
  chunk that contains the hit's end;
- the engine-core ``Scheduler`` computes from the hit on, so the loaded tokens past
  the hit are recomputed, not read;
- the Mamba state restored is the one saved at the hit's end.

Layouts (forced: one full-attention group and one Mamba group in
``mamba_cache_mode="align"``, hash block 1; no 0.33.0 start-up gives a full-attention
chunk larger than the Mamba chunk):

- one block per chunk: attention block 2, Mamba block 1; a 3-token prompt; the store
  lacks the Mamba chunk ending at token 2: hit 1, inside the attention chunk [0, 2);
- two blocks per chunk (attention chunk 4 tokens, Mamba chunk 2); a 7-token prompt;
  the store lacks the Mamba chunk ending at token 4: hit 2, inside the attention
  chunk [0, 4), of which the worker copies one GPU block.

The engine-core ``Scheduler`` runs with the ``OffloadingConnector`` on vLLM's
``MockOffloadingSpec`` (lookups answered from a set of keys: the engine's own store
path writes no Mamba state at an odd token on these layouts); the model runner
output is faked, every transfer reported done one step later.
"""

from typing import Any, NamedTuple

import pytest
import torch

from tests.v1.kv_connector.unit.offloading_connector.utils import (
    generate_store_output,
)
from tests.v1.kv_connector.unit.utils import create_model_runner_output
from vllm import SamplingParams
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    KVTransferConfig,
    ModelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
    OffloadingWorkerMetadata,
)
from vllm.utils.hashing import sha256
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
)
from vllm.v1.kv_offload.base import GPULoadStoreSpec, LookupResult, make_offload_key
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager


class Case(NamedTuple):
    blocks_per_chunk: int
    num_tokens: int
    missing_mamba_chunk: int
    hit: int
    # per group: [first, stop) GPU block positions the load writes
    gpu_blocks: dict[str, list[int]]
    # the engine's steps after the load: (first token, tokens)
    computed: list[tuple[int, int]]


ATTN_BLOCK, MAMBA_BLOCK = 2, 1
GROUPS = ("attn", "mamba")  # vLLM's group order in the counterexample
BYTES_PER_TOKEN = 128  # K and V, 1 head of 16 float32 values
NUM_GPU_BLOCKS = 64
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
CASES = [
    Case(1, 3, 1, 1, {"attn": [0, 1], "mamba": [0, 1]}, [(1, 1), (2, 1)]),
    Case(2, 7, 1, 2, {"attn": [0, 1], "mamba": [1, 2]}, [(2, 4), (6, 1)]),
]


def _configs(case: Case, model_dir: str) -> tuple[VllmConfig, KVCacheConfig]:
    page = ATTN_BLOCK * BYTES_PER_TOKEN  # the larger page; Mamba's is padded to it
    attention = FullAttentionSpec(
        block_size=ATTN_BLOCK, num_kv_heads=1, head_size=16, dtype=torch.float32
    )
    mamba = MambaSpec(
        block_size=MAMBA_BLOCK,
        shapes=((8, page // 64),),
        dtypes=(torch.float32,),
        mamba_cache_mode="align",
        page_size_padded=page,
    )
    vllm_config = VllmConfig(
        model_config=ModelConfig(
            model=model_dir,
            skip_tokenizer_init=True,
            max_model_len=256,
            dtype="float32",
        ),
        device_config=DeviceConfig("cpu"),
        cache_config=CacheConfig(
            block_size=ATTN_BLOCK, enable_prefix_caching=True, mamba_cache_mode="align"
        ),
        scheduler_config=SchedulerConfig(
            max_num_batched_tokens=256,
            max_num_seqs=4,
            max_model_len=256,
            is_encoder_decoder=False,
        ),
        kv_transfer_config=KVTransferConfig(
            kv_connector="OffloadingConnector",
            kv_role="kv_both",
            kv_connector_extra_config={
                "spec_name": "MockOffloadingSpec",
                "spec_module_path": (
                    "tests.v1.kv_connector.unit.offloading_connector.utils"
                ),
                "blocks_per_chunk": case.blocks_per_chunk,
            },
        ),
    )
    vllm_config.cache_config.num_gpu_blocks = NUM_GPU_BLOCKS
    kv_cache_config = KVCacheConfig(
        num_blocks=NUM_GPU_BLOCKS,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(["model.layers.1.self_attn.attn"], attention),
            KVCacheGroupSpec(["model.layers.0.mamba"], mamba),
        ],
    )
    return vllm_config, kv_cache_config


def _run(case: Case, model_dir: str) -> dict[str, Any]:
    vllm_config, kv_cache_config = _configs(case, model_dir)
    block_size, hash_block_size = resolve_kv_cache_block_sizes(
        kv_cache_config, vllm_config
    )
    scheduler = Scheduler(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=block_size,
        hash_block_size=hash_block_size,
    )
    assert scheduler.connector is not None
    connector = scheduler.connector.connector_scheduler
    init_none_hash(sha256)
    request = Request(
        request_id="C",
        prompt_token_ids=[(5 * t + 11) % 500 + 3 for t in range(case.num_tokens)],
        sampling_params=SamplingParams(max_tokens=1, ignore_eos=True),
        pooling_params=None,
        block_hasher=get_request_block_hasher(hash_block_size, sha256),
    )
    # every offload key of the request: (group label, chunk index)
    names = {}
    for group, block in enumerate((ATTN_BLOCK, MAMBA_BLOCK)):
        step = block * case.blocks_per_chunk // hash_block_size
        for i, block_hash in enumerate(request.block_hashes[step - 1 :: step]):
            names[make_offload_key(block_hash, group)] = (GROUPS[group], i)
    stored = {k for k, v in names.items() if v != ("mamba", case.missing_mamba_chunk)}
    connector.manager.lookup.side_effect = lambda key, req_context: (
        LookupResult.HIT if key in stored else LookupResult.MISS
    )
    # nothing new is stored: the store is the fixed set above
    connector.manager.prepare_store.side_effect = lambda keys, req_context: (
        generate_store_output([])
    )
    hits: list[Any] = []
    lookup = connector.get_num_new_matched_tokens

    def recorded(*args, **kwargs):
        answer = lookup(*args, **kwargs)
        hits.append(answer[0])
        return answer

    connector.get_num_new_matched_tokens = recorded
    scheduler.add_request(request)
    computed: list[tuple[int, int]] = []
    loads: list[dict[str, Any]] = []
    mamba_states: list[int] = []
    pending: dict[int, Any] = {}  # job id -> job, reported done one step later
    for _ in range(4):
        output = scheduler.schedule()
        meta = output.kv_connector_metadata
        for job_id, job in meta.load_jobs.items():
            keys = connector._jobs[job_id].keys
            assert keys <= stored, "a load names a key the store lacks"
            spec = job.dst_spec
            loads.append(
                {
                    "keys": sorted("{}{}".format(*names[k]) for k in keys),
                    "gpu_blocks": {
                        label: [
                            spec.block_indices[g],
                            spec.block_indices[g] + spec.group_sizes[g],
                        ]
                        for g, label in enumerate(GROUPS)
                    },
                }
            )
            # the Mamba state the worker restores is the one stored for the last
            # GPU block it writes, i.e. at that block's end
            mamba = GROUPS.index("mamba")
            last = spec.block_indices[mamba] + spec.group_sizes[mamba]
            mamba_states.append(last * MAMBA_BLOCK)
        done = dict.fromkeys(pending, 1)
        received = {
            job.req_id
            for job_id, job in pending.items()
            if job_id not in meta.store_jobs
            and isinstance(job.dst_spec, GPULoadStoreSpec)
        }
        pending = {**meta.store_jobs, **meta.load_jobs}
        scheduled = [
            scheduler.requests[req_id] for req_id in output.num_scheduled_tokens
        ]
        if "C" in output.num_scheduled_tokens:
            # schedule() has advanced num_computed_tokens past the scheduled tokens
            n = output.num_scheduled_tokens["C"]
            computed.append((request.num_computed_tokens - n, n))
        runner_output = create_model_runner_output(
            reqs=scheduled,
            finished_recving=received or None,
            token_id=7,
            kv_connector_worker_meta=OffloadingWorkerMetadata(completed_jobs=done),
        )
        for i, req in enumerate(scheduled):
            if req.num_computed_tokens < req.num_tokens:  # mid-prefill: no sample
                runner_output.sampled_token_ids[i] = []
        scheduler.update_from_output(output, runner_output)
        if request.is_finished():
            break
    return {
        "hit": hits[0],
        "loads": loads,
        "computed": computed,
        "mamba_states": mamba_states,
    }


@pytest.mark.parametrize("case", CASES, ids=["bpc1", "bpc2"])
def test_engine_core_hit_inside_full_attention_chunk(case, tmp_path):
    transformers = pytest.importorskip("transformers")
    transformers.JambaConfig(**JAMBA).save_pretrained(tmp_path)
    result = _run(case, str(tmp_path))
    hit = result["hit"]
    assert hit == case.hit, result
    (load,) = result["loads"]
    # the attention chunk holding the hit's end and the Mamba chunk ending at the hit
    mamba_chunk = MAMBA_BLOCK * case.blocks_per_chunk
    assert load["keys"] == ["attn0", f"mamba{hit // mamba_chunk - 1}"], result
    # full attention: the GPU blocks the load writes cover every token below the hit
    assert load["gpu_blocks"] == case.gpu_blocks, result
    first, stop = load["gpu_blocks"]["attn"]
    assert first == 0 and stop * ATTN_BLOCK >= hit, result
    # the engine computes from the hit on, in contiguous steps, to the prompt's end:
    # the loaded tokens past the hit are recomputed, none below it
    assert result["computed"] == case.computed, result
    position = hit
    for start, tokens in result["computed"]:
        assert start == position, result
        position += tokens
    assert position >= case.num_tokens, result
    # the Mamba state restored is the one at the hit's end
    assert result["mamba_states"] == [hit], result
