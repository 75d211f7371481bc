# SPDX-License-Identifier: Apache-2.0
"""A CPU-offload hit must restore the Mamba state saved at the hit's end.

Written for vLLM 0.33.0's ``tests/v1/kv_connector/unit/`` (self-contained: vLLM and
transformers only, CPU only, no model execution).  The tests assert the CORRECT
behaviour, so on 0.33.0 they FAIL; see
``docs/findings/001-mamba-state-past-hit-end.md`` in offload-lookup-check.

Layouts (one attention group and one Mamba group in ``mamba_cache_mode="align"``,
hash block 16, one block per offload chunk):

- ``SLIDING``: Mamba block 48 (group 0) and a sliding-window group with window 64 and
  block 32 (group 1): what vLLM 0.33.0's start-up makes of a tiny NemotronH whose
  attention layers use a sliding window when the backend declares FlashInfer's kernel
  block sizes (16, 32, 64);
- ``FORCED_FULL``: full attention block 16, Mamba block 32; no start-up produces it.

``test_engine_core_sliding_window_block_below_mamba_block`` drives the real engine-core
``Scheduler`` with the real ``OffloadingConnector`` and the real CPU offloading manager
(LRU policy, 7 chunks); the model runner output is faked, as vLLM's own scheduler tests
do: request A (200 tokens) fills the tier and ends; request B (40 tokens) stores one
chunk, and the LRU evicts A's sliding-window chunk ending at token 192 but keeps the
Mamba chunk ending there; A's prompt again, after the GPU prefix cache is reset, gets a
160-token hit that restores the Mamba state saved at token 192.

``test_engine_core_cpu_tier_lru`` (FORCED_FULL, 8-chunk tier): request A (100 tokens)
fills the tier; while A decodes, request B (50 tokens) stores 4 chunks and the LRU evicts
A's tail (attention chunks ending at 96, 80, 64 and the Mamba chunk ending at 96); A's
prompt again gets a 48-token hit that restores the Mamba state saved at token 64.

``test_connector_lookup_stand_in_store`` is that lookup on the real
``OffloadingConnectorScheduler`` with a stand-in manager that answers from a set of keys
(attention chunk 3 missing, everything else stored).

Run as a script (``python THIS_FILE``) it prints the three results as JSON instead.
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
from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (  # noqa: E402
    OffloadingWorkerMetadata,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import (  # noqa: E402
    OffloadingConnector,
)
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.core.kv_cache_manager import KVCacheManager  # noqa: E402
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
    SlidingWindowSpec,
)
from vllm.v1.kv_offload import base as offload_base  # noqa: E402
from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec  # noqa: E402
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402


class Layout(NamedTuple):
    """One attention group and one Mamba (align) group; one block per offload chunk."""

    attn_kind: str  # "full" or "sliding"
    attn_block: int
    mamba_block: int
    sliding_window: int | None
    tier_chunks: int
    max_num_batched_tokens: int
    long_prefill_token_threshold: int
    mamba_first: bool = False  # group order; vLLM put the Mamba group first on the H200

    def labelled_blocks(self) -> tuple[tuple[str, int], ...]:
        attn, mamba = ("attn", self.attn_block), ("mamba", self.mamba_block)
        return (mamba, attn) if self.mamba_first else (attn, mamba)


# Forced: vLLM's start-up never gives a full-attention group a block that the Mamba
# block does not divide (see the finding).
FORCED_FULL = Layout("full", 16, 32, None, 8, 64, 32)
# What a Mamba2 hybrid whose attention layers use a sliding window gets when the
# attention backend advertises fixed kernel block sizes (FlashInfer: 16, 32, 64):
# Attention.get_kv_cache_spec picks the largest of them within the Mamba-aligned
# block for the sliding-window layers, and page unification pads their page.
SLIDING = Layout("sliding", 32, 48, 64, 7, 512, 0, mamba_first=True)

PROMPT = [(5 * t + 11) % 500 + 3 for t in range(100)]
OTHER_PROMPT = [(3 * t + 1) % 500 + 3 for t in range(50)]
SLIDING_PROMPT = [(7 * t + 5) % 500 + 3 for t in range(200)]
SLIDING_OTHER_PROMPT = [(11 * t + 2) % 500 + 3 for t in range(40)]
BYTES_PER_TOKEN = 128  # 2 (K, V) * 1 head * 16 dims * 4 bytes

# A tiny Jamba config: the engine needs a real ModelConfig; no weights are loaded.
JAMBA = dict(
    vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=4, attn_layer_period=2,
    attn_layer_offset=1, num_experts=1, num_experts_per_tok=1, expert_layer_period=1,
    expert_layer_offset=0, mamba_d_state=16, mamba_d_conv=4, mamba_expand=1,
    mamba_dt_rank=8, use_mamba_kernels=False, max_position_embeddings=1024,
    architectures=["JambaForCausalLM"],
)
NUM_GPU_BLOCKS = 200


def _specs(layout: Layout) -> tuple[Any, MambaSpec]:
    # one page size for every group, as vLLM's page-size unification leaves it
    page = max(layout.attn_block, layout.mamba_block) * BYTES_PER_TOKEN
    padded = page if layout.attn_block * BYTES_PER_TOKEN != page else None
    common = dict(block_size=layout.attn_block, num_kv_heads=1, head_size=16,
                  dtype=torch.float32, page_size_padded=padded)
    attn: Any
    if layout.attn_kind == "sliding":
        attn = SlidingWindowSpec(**common, sliding_window=layout.sliding_window)
    else:
        attn = FullAttentionSpec(**common)
    mamba = MambaSpec(
        block_size=layout.mamba_block,
        shapes=((8, page // 32),),
        dtypes=(torch.float32,),
        mamba_cache_mode="align",
    )
    assert attn.page_size_bytes == mamba.page_size_bytes == page
    return attn, mamba


def _configs(layout: Layout) -> tuple[VllmConfig, KVCacheConfig]:
    model_dir = tempfile.mkdtemp()
    transformers.JambaConfig(**JAMBA).save_pretrained(model_dir)
    attn, mamba = _specs(layout)
    page = attn.page_size_bytes * 2  # both groups, one block each per chunk
    align = CPUOffloadingSpec.BLOCK_SIZE_ALIGNMENT
    chunk_bytes = -(-page // align) * align
    vllm_config = VllmConfig(
        model_config=ModelConfig(
            model=model_dir, skip_tokenizer_init=True, max_model_len=512, dtype="float32"
        ),
        device_config=DeviceConfig("cpu"),
        cache_config=CacheConfig(
            # the block the platform chose; a sliding-window layer picks its own below it
            block_size=(layout.mamba_block if layout.attn_kind == "sliding"
                        else layout.attn_block),
            enable_prefix_caching=True,
            mamba_cache_mode="align",
        ),
        scheduler_config=SchedulerConfig(
            max_num_batched_tokens=layout.max_num_batched_tokens,
            max_num_seqs=8,
            max_model_len=512,
            long_prefill_token_threshold=layout.long_prefill_token_threshold,
            is_encoder_decoder=False,
        ),
        kv_transfer_config=KVTransferConfig(
            kv_connector="OffloadingConnector",
            kv_role="kv_both",
            kv_connector_extra_config={
                "cpu_bytes_to_use": layout.tier_chunks * chunk_bytes
            },
        ),
    )
    vllm_config.cache_config.num_gpu_blocks = NUM_GPU_BLOCKS
    kv_cache_config = KVCacheConfig(
        num_blocks=NUM_GPU_BLOCKS,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(["model.layers.0.mamba"], mamba),
            KVCacheGroupSpec(["model.layers.1.self_attn.attn"], attn),
        ][:: 1 if layout.mamba_first else -1],
    )
    return vllm_config, kv_cache_config


def _request(req_id: str, prompt: list[int], max_tokens: int, hash_block: int,
             vllm_config: VllmConfig) -> Request:
    hash_fn = get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    return Request(
        request_id=req_id,
        prompt_token_ids=prompt,
        sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True),
        pooling_params=None,
        block_hasher=get_request_block_hasher(hash_block, hash_fn),
    )


def _key_name(request: Request, key: bytes, hash_block: int, layout: Layout) -> str:
    """'attn3@64': group, chunk index and the token position its state/KV ends at."""
    for group, (label, block) in enumerate(layout.labelled_blocks()):
        step = block // hash_block
        for i, h in enumerate(request.block_hashes[step - 1 :: step]):
            if offload_base.make_offload_key(h, group) == key:
                return f"{label}{i}@{(i + 1) * block}"
    return "?"


def _mamba_loads(connector_scheduler: Any, request: Request, hash_block: int,
                 layout: Layout) -> list[dict[str, Any]]:
    """The Mamba keys a load restores: the range they serve and where their state ends."""
    status = connector_scheduler._req_status[request.request_id]
    ctx = status.req_context
    out = []
    for start, end, key in status.load_key_ranges:
        name = _key_name(request, key, hash_block, layout)
        if name.startswith("mamba"):
            out.append({"serves": [start, end], "key": name,
                        "state_at": ctx.get_offload_key_position(key)})
    return out


class _Engine:
    """The real engine-core Scheduler; the worker side is faked: every store or load
    job the connector emits is reported complete one step later."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.vllm_config, self.kv_cache_config = _configs(layout)
        block, self.hash_block = resolve_kv_cache_block_sizes(
            self.kv_cache_config, self.vllm_config
        )
        self.scheduler = Scheduler(
            vllm_config=self.vllm_config,
            kv_cache_config=self.kv_cache_config,
            structured_output_manager=StructuredOutputManager(self.vllm_config),
            block_size=block,
            hash_block_size=self.hash_block,
        )
        assert self.scheduler.connector is not None
        self.connector = self.scheduler.connector.connector_scheduler
        self.manager = self.connector.manager
        self._pending: set[int] = set()
        # the connector's answers, recorded on the way through (behaviour unchanged)
        self.hits: dict[str, int | None] = {}
        lookup = self.connector.get_num_new_matched_tokens

        def recorded(request: Request, *args: Any, **kwargs: Any) -> Any:
            hit, load_async = lookup(request, *args, **kwargs)
            self.hits[request.request_id] = hit
            return hit, load_async

        self.connector.get_num_new_matched_tokens = recorded

    def request(self, req_id: str, prompt: list[int], max_tokens: int) -> Request:
        req = _request(req_id, prompt, max_tokens, self.hash_block, self.vllm_config)
        self.scheduler.add_request(req)
        return req

    def step(self) -> Any:
        out = self.scheduler.schedule()
        done = dict.fromkeys(self._pending, 1)
        self._pending = set()
        meta = out.kv_connector_metadata
        if meta is not None:
            self._pending.update(meta.store_jobs)
            self._pending.update(meta.load_jobs)
        ids = list(out.num_scheduled_tokens)
        sampled = []
        for req_id in ids:
            req = self.scheduler.requests[req_id]
            # schedule() has advanced num_computed_tokens: a finished prefill samples
            sampled.append([7] if req.num_computed_tokens >= req.num_tokens else [])
        self.scheduler.update_from_output(out, ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=sampled,
            kv_connector_output=KVConnectorOutput(
                kv_connector_worker_meta=OffloadingWorkerMetadata(completed_jobs=done)
            ),
        ))
        return out

    def tier(self, request: Request) -> list[str]:
        names = (_key_name(request, k, self.hash_block, self.layout)
                 for k in self.manager._policy.chunks)
        return sorted(n for n in names if n != "?")


def run_engine_core() -> dict[str, Any]:
    """FORCED_FULL: a 48-token hit after the LRU evicted attention chunk 3."""
    eng = _Engine(FORCED_FULL)
    a = eng.request("A", PROMPT, max_tokens=12)
    for _ in range(5):  # prefill (64 + 32 + 4 tokens) and two decode steps
        eng.step()
    tier_after_a = eng.tier(a)
    eng.request("B", OTHER_PROMPT, max_tokens=1)
    for _ in range(4):  # A keeps decoding while B's chunks are stored
        eng.step()
    tier_after_b = eng.tier(a)
    while eng.scheduler.requests:
        eng.step()
    assert eng.scheduler.reset_prefix_cache()  # GPU prefix cache only; CPU tier kept
    c = eng.request("C", PROMPT, max_tokens=1)
    eng.step()
    return {
        "tier_after_A": tier_after_a,
        "tier_after_B_holds_of_A": tier_after_b,
        "hit": eng.hits["C"],
        "mamba_loads": _mamba_loads(eng.connector, c, eng.hash_block, eng.layout),
    }


def run_engine_core_sliding() -> dict[str, Any]:
    """SLIDING (group order as vLLM made it on the H200: Mamba first): request A (200
    tokens) fills the 7-chunk CPU tier and finishes; the LRU then ranks A's keys tail
    first, at equal positions the sliding-window chunk before the Mamba chunk; request B
    (40 tokens) stores one chunk, which evicts A's sliding-window chunk ending at token
    192 and keeps the Mamba chunk ending there; then A's prompt again, from the tier."""
    eng = _Engine(SLIDING)
    a = eng.request("A", SLIDING_PROMPT, max_tokens=10)
    while eng.scheduler.requests:
        eng.step()
    # the next step (other traffic, here none) signals A's end to the manager
    # (OffloadingConnectorScheduler.build_connector_meta), which re-ranks A's keys
    eng.step()
    tier_after_a = eng.tier(a)
    eng.request("B", SLIDING_OTHER_PROMPT, max_tokens=1)
    while eng.scheduler.requests:
        eng.step()
    tier_after_b = eng.tier(a)
    assert eng.scheduler.reset_prefix_cache()
    c = eng.request("C", SLIDING_PROMPT, max_tokens=1)
    eng.step()
    return {
        "tier_after_A": tier_after_a,
        "tier_after_B_holds_of_A": tier_after_b,
        "hit": eng.hits["C"],
        "mamba_loads": _mamba_loads(eng.connector, c, eng.hash_block, eng.layout),
    }


class _StandInManager(offload_base.OffloadingManager):
    """Answers lookups from a set of stored keys; records what a load asks for."""

    def __init__(self, stored: set[bytes]) -> None:
        self.stored = stored

    def lookup(self, key, req_context):  # type: ignore[no-untyped-def]
        return (offload_base.LookupResult.HIT if key in self.stored
                else offload_base.LookupResult.MISS)

    def prepare_load(self, keys, req_context):  # type: ignore[no-untyped-def]
        return None

    def prepare_store(self, keys, req_context):  # type: ignore[no-untyped-def]
        return None

    def on_new_request(self, req_context):  # type: ignore[no-untyped-def]
        return offload_base.RequestOffloadingContext()


def run_connector_lookup() -> dict[str, Any]:
    layout = FORCED_FULL
    vllm_config, kv_cache_config = _configs(layout)
    block, hash_block = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
    connector = OffloadingConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    sched = connector.connector_scheduler
    req = _request("C", PROMPT, 1, hash_block, vllm_config)
    stored = set()
    for group, (label, size) in enumerate(layout.labelled_blocks()):
        step = size // hash_block
        for i, h in enumerate(req.block_hashes[step - 1 :: step]):
            if (label, i) != ("attn", 3):  # attention chunk 3 (tokens 48-63) evicted
                stored.add(offload_base.make_offload_key(h, group))
    sched.manager = _StandInManager(stored)
    sched.on_new_request(req)
    hit, _ = sched.get_num_new_matched_tokens(req, 0)
    assert hit is not None
    kv_manager = KVCacheManager(
        kv_cache_config, max_model_len=512, scheduler_block_size=block,
        hash_block_size=hash_block, enable_caching=True,
    )
    assert kv_manager.allocate_slots(
        req, 0, num_external_computed_tokens=hit, delay_cache_blocks=True
    ) is not None
    sched.update_state_after_alloc(req, kv_manager.get_blocks(req.request_id), hit)
    return {"hit": hit, "mamba_loads": _mamba_loads(sched, req, hash_block, layout)}


def _assert_state_at_hit_end(result: dict[str, Any]) -> None:
    assert result["mamba_loads"], result
    for load in result["mamba_loads"]:
        assert load["state_at"] == load["serves"][1], (
            f"a {result['hit']}-token hit restores the Mamba state saved at token "
            f"{load['state_at']} ({load['key']}): {result}"
        )


def test_engine_core_cpu_tier_lru() -> None:
    _assert_state_at_hit_end(run_engine_core())


def test_connector_lookup_stand_in_store() -> None:
    _assert_state_at_hit_end(run_connector_lookup())


def test_engine_core_sliding_window_block_below_mamba_block() -> None:
    _assert_state_at_hit_end(run_engine_core_sliding())


if __name__ == "__main__":
    json.dump({"engine_core": run_engine_core(), "connector": run_connector_lookup(),
               "engine_core_sliding": run_engine_core_sliding()},
              sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
