# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""A CPU-offload hit that ends inside an attention group's offload chunk loses nothing.

Written for vLLM 0.33.0's ``tests/v1/kv_connector/unit/`` (self-contained: vLLM and
transformers only, CPU only, no model execution).  These tests PIN today's behaviour
(they pass on 0.33.0); see ``docs/findings/002-hit-inside-a-chunk.md`` in
offload-lookup-check.

The ``OffloadingConnector`` lookup can return a hit that is shorter than, or not a
multiple of, a full-attention group's chunk: full-attention groups are looked up once,
before the sliding-window and Mamba groups, and only those are looked up again when a
later group lowers the hit.  The tests check what the engine then does with such a hit:

- every attention token below the hit lies in a GPU block the load writes, copied from
  a key the store holds (``update_state_after_alloc`` loads the chunk that contains the
  hit's end, ``cdiv``; the worker copies the GPU blocks up to ``cdiv(hit, block)``);
- the engine-core ``Scheduler`` computes from the hit on (``num_computed_tokens`` is the
  hit), so the loaded tokens past the hit are recomputed, not read;
- the Mamba state restored is the one saved at the hit's end.

Layouts (forced: one full-attention group and one Mamba group in
``mamba_cache_mode="align"``, hash block 1; no start-up of vLLM 0.33.0 produces a
full-attention chunk larger than the Mamba chunk):

- ``BPC1``: full attention block 2, Mamba block 1, one block per chunk; prompt of 3
  tokens; the store lacks the Mamba chunk ending at token 2 (the ``whole-blocks``
  counterexample of offload-lookup-check on vLLM 0.33.0): hit 1, inside the
  full-attention chunk [0, 2);
- ``BPC2``: the same blocks, two blocks per chunk (full-attention chunk 4 tokens, Mamba
  chunk 2); prompt of 7 tokens; the store lacks the Mamba chunk ending at token 4: hit 2,
  inside the full-attention chunk [0, 4), of which the worker copies one GPU block.

The engine-core ``Scheduler`` runs with the real ``OffloadingConnector``; the offloading
manager is a stand-in that answers lookups from a set of keys (the engine's own store
path does not write a Mamba state at an odd token on these layouts), and the model
runner output is faked, every transfer reported done one step later.

Run as a script (``python THIS_FILE``) it prints what the real scheduler did as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any, NamedTuple

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
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (  # noqa: E402
    OffloadingWorkerMetadata,
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
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402


class Case(NamedTuple):
    attn_block: int
    mamba_block: int
    blocks_per_chunk: int
    prompt_len: int
    missing: tuple[tuple[str, int], ...]  # (group label, chunk index) the store lacks


BPC1 = Case(2, 1, 1, 3, (("mamba", 1),))
BPC2 = Case(2, 1, 2, 7, (("mamba", 1),))
GROUPS = ("attn", "mamba")  # vLLM's group order in the counterexample
BYTES_PER_TOKEN = 128  # 2 (K, V) * 1 head * 16 dims * 4 bytes
NUM_GPU_BLOCKS = 64
JAMBA = dict(
    vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=4, attn_layer_period=2,
    attn_layer_offset=1, num_experts=1, num_experts_per_tok=1, expert_layer_period=1,
    expert_layer_offset=0, mamba_d_state=16, mamba_d_conv=4, mamba_expand=1,
    mamba_dt_rank=8, use_mamba_kernels=False, max_position_embeddings=1024,
    architectures=["JambaForCausalLM"],
)


def _configs(case: Case, model_dir: str) -> tuple[VllmConfig, KVCacheConfig]:
    transformers.JambaConfig(**JAMBA).save_pretrained(model_dir)
    page = case.attn_block * BYTES_PER_TOKEN  # the larger page; Mamba's is padded to it
    attn = FullAttentionSpec(block_size=case.attn_block, num_kv_heads=1, head_size=16,
                             dtype=torch.float32)
    mamba = MambaSpec(block_size=case.mamba_block, shapes=((8, page // 64),),
                      dtypes=(torch.float32,), mamba_cache_mode="align",
                      page_size_padded=page)
    assert attn.page_size_bytes == mamba.page_size_bytes == page
    vllm_config = VllmConfig(
        model_config=ModelConfig(model=model_dir, skip_tokenizer_init=True,
                                 max_model_len=256, dtype="float32"),
        device_config=DeviceConfig("cpu"),
        cache_config=CacheConfig(block_size=case.attn_block, enable_prefix_caching=True,
                                 mamba_cache_mode="align"),
        scheduler_config=SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=4,
                                         max_model_len=256, is_encoder_decoder=False),
        kv_transfer_config=KVTransferConfig(
            kv_connector="OffloadingConnector", kv_role="kv_both",
            kv_connector_extra_config={"cpu_bytes_to_use": 1 << 20,
                                       "blocks_per_chunk": case.blocks_per_chunk},
        ),
    )
    vllm_config.cache_config.num_gpu_blocks = NUM_GPU_BLOCKS
    kv_cache_config = KVCacheConfig(
        num_blocks=NUM_GPU_BLOCKS, kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["model.layers.1.self_attn.attn"], attn),
                         KVCacheGroupSpec(["model.layers.0.mamba"], mamba)],
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


def _chunk_keys(request: Request, case: Case, hash_block: int) -> dict[bytes, tuple[str, int]]:
    """Every offload key of the request: (group label, chunk index)."""
    out = {}
    for group, (label, block) in enumerate(zip(GROUPS, (case.attn_block, case.mamba_block),
                                               strict=True)):
        step = block * case.blocks_per_chunk // hash_block
        for i, h in enumerate(request.block_hashes[step - 1 :: step]):
            out[offload_base.make_offload_key(h, group)] = (label, i)
    return out


def run(case: Case) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as model_dir:
        return _run(case, model_dir)


def _run(case: Case, model_dir: str) -> dict[str, Any]:
    vllm_config, kv_cache_config = _configs(case, model_dir)
    block, hash_block = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
    scheduler = Scheduler(
        vllm_config=vllm_config, kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=block, hash_block_size=hash_block,
    )
    assert scheduler.connector is not None
    connector = scheduler.connector.connector_scheduler
    hash_fn = get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    prompt = [(5 * t + 11) % 500 + 3 for t in range(case.prompt_len)]
    req = Request(request_id="C", prompt_token_ids=prompt,
                  sampling_params=SamplingParams(max_tokens=1, ignore_eos=True),
                  pooling_params=None,
                  block_hasher=get_request_block_hasher(hash_block, hash_fn))
    names = _chunk_keys(req, case, hash_block)
    connector.manager = _StandInManager(
        {k for k, name in names.items() if name not in case.missing})
    hits: list[Any] = []
    lookup = connector.get_num_new_matched_tokens

    def recorded(request: Request, *args: Any, **kwargs: Any) -> Any:
        answer = lookup(request, *args, **kwargs)
        hits.append(answer[0])
        return answer

    connector.get_num_new_matched_tokens = recorded
    scheduler.add_request(req)
    steps: list[dict[str, Any]] = []
    loads: list[dict[str, Any]] = []
    mamba_states: list[dict[str, Any]] = []
    pending: dict[int, Any] = {}  # job id -> TransferJob, reported done one step later
    for _ in range(4):
        out = scheduler.schedule()
        meta = out.kv_connector_metadata
        for job_id, job in meta.load_jobs.items():
            spec = job.dst_spec
            loads.append({
                "keys": sorted("{}{}".format(*names[k]) for k in connector._jobs[job_id].keys),
                # per group: [first, stop) GPU block positions the worker writes
                "gpu_blocks": {label: [spec.block_indices[g],
                                       spec.block_indices[g] + spec.group_sizes[g]]
                               for g, label in enumerate(GROUPS)},
            })
            # the Mamba state the worker restores: the one stored for the last GPU block
            # it writes (the key holds one state per GPU block), i.e. at that block's end
            last = spec.block_indices[GROUPS.index("mamba")] + spec.group_sizes[
                GROUPS.index("mamba")]
            status = connector._req_status[job.req_id]
            mamba_states = [
                {"serves": [start, end], "state_at": last * case.mamba_block,
                 "key_ends_at": (names[key][1] + 1) * case.mamba_block * case.blocks_per_chunk}
                for start, end, key in status.load_key_ranges if names[key][0] == "mamba"]
        done, recved = dict.fromkeys(pending, 1), {
            j.req_id for i, j in pending.items() if i not in meta.store_jobs
            and isinstance(j.dst_spec, offload_base.GPULoadStoreSpec)}
        pending = {**meta.store_jobs, **meta.load_jobs}
        ids = list(out.num_scheduled_tokens)
        if "C" in ids:  # schedule() has advanced num_computed_tokens past the chunk
            n = out.num_scheduled_tokens["C"]
            steps.append({"from": req.num_computed_tokens - n, "tokens": n})
        sampled = [[7] if scheduler.requests[r].num_computed_tokens
                   >= scheduler.requests[r].num_tokens else [] for r in ids]
        scheduler.update_from_output(out, ModelRunnerOutput(
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=sampled,
            kv_connector_output=KVConnectorOutput(
                finished_recving=recved or None,
                kv_connector_worker_meta=OffloadingWorkerMetadata(completed_jobs=done)),
        ))
        if req.is_finished():
            break
    return {"hit": hits[0], "loads": loads, "computed": steps,
            "mamba_states": mamba_states, "prompt": case.prompt_len}


def _assert_nothing_lost(result: dict[str, Any], case: Case) -> None:
    hit = result["hit"]
    assert hit, result
    (load,) = result["loads"]
    # full attention: the GPU blocks the load writes cover every token below the hit
    first, stop = load["gpu_blocks"]["attn"]
    assert first * case.attn_block <= 0 and stop * case.attn_block >= hit, result
    tokens_per_chunk = case.attn_block * case.blocks_per_chunk
    attn_keys = [k for k in load["keys"] if k.startswith("attn")]
    assert attn_keys == [f"attn{c}" for c in range(-(-hit // tokens_per_chunk))], result
    # the engine computes from the hit on, in contiguous chunks, to the end of the
    # prompt: the loaded tokens past the hit are recomputed, none below it
    position = hit
    for step in result["computed"]:
        assert step["from"] == position, result
        position += step["tokens"]
    assert position >= case.prompt_len, result
    # the Mamba state restored is the one at the hit's end
    assert [s["state_at"] for s in result["mamba_states"]] == [hit], result


def test_engine_core_hit_inside_full_attention_chunk() -> None:
    _assert_nothing_lost(run(BPC1), BPC1)


def test_engine_core_hit_inside_full_attention_chunk_two_blocks_per_chunk() -> None:
    _assert_nothing_lost(run(BPC2), BPC2)


if __name__ == "__main__":
    json.dump({"bpc1": run(BPC1), "bpc2": run(BPC2)}, sys.stdout, indent=1,
              sort_keys=True)
    sys.stdout.write("\n")
