"""The KV-cache layout vLLM 0.33.0's own start-up code gives a Mamba2 hybrid whose
attention layers use a sliding window, per attention backend (finding 001).

Runs INSIDE the vLLM 0.33.0 environment, CPU only; prints one JSON object.  For each
model config (NemotronH, ``sliding_window`` set, prefix caching on so Mamba runs in
``align`` mode) and each backend's declared kernel block sizes it calls, in order:

1. ``Platform._align_hybrid_block_size`` (vllm/platforms/interface.py:940-1140): the
   attention block size that makes the attention page cover the Mamba page; in align
   mode ``mamba_block_size`` is set to it (interface.py:1114-1115);
2. ``_largest_kernel_block_within`` as ``Attention.get_kv_cache_spec`` calls it for a
   sliding-window layer (model_executor/layers/attention/attention.py:624-666): the
   largest declared kernel block within the primary block;
3. ``unify_kv_cache_spec_page_size`` (v1/core/kv_cache_planning.py:346-406): a
   sliding-window page that does not divide the Mamba page is padded, its block kept;
4. ``resolve_kv_cache_block_sizes`` (v1/core/kv_cache_utils.py:816-917) and the
   ``OffloadingConnector`` constructor (``build_offloading_config``,
   ``SchedulerOffloadConfig.from_spec``): the start-up checks, which accept the layout.

Stand-in: none of the model's layers are built (no GPU); the backends' declared kernel
block sizes are read from the backend classes (FlashInfer's from its own method, which
reports 16/32/64 outside Blackwell; ``flashinfer`` must import).
"""
# ruff: noqa: E402
from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any

_OUT = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import transformers
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    KVTransferConfig,
    ModelConfig,
    VllmConfig,
)
from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import (
    OffloadingConnector,
)
from vllm.model_executor.layers.attention.attention import _largest_kernel_block_within
from vllm.model_executor.models.nemotron_h import NemotronHForCausalLM
from vllm.platforms.interface import Platform
from vllm.v1.attention.backends.flashinfer import FlashInferBackend
from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend
from vllm.v1.core.kv_cache_planning import unify_kv_cache_spec_page_size
from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes
from vllm.v1.kv_cache_interface import (
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
    SlidingWindowSpec,
)

# NemotronH configs: Nemotron-H-8B-Base-8K's KV-relevant sizes (published config, as in
# the layout table's catalogue) with a 1024-token window, and the tiny GPU check model.
MODELS: dict[str, dict[str, Any]] = {
    "nemotron-h-8b-swa1024": dict(
        hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        mamba_num_heads=128, mamba_head_dim=64, ssm_state_size=128, n_groups=8,
        conv_kernel=4, sliding_window=1024, dtype="bfloat16"),
    "tiny-gpu-check": dict(
        hidden_size=64, num_attention_heads=2, num_key_value_heads=2, head_dim=32,
        mamba_num_heads=4, mamba_head_dim=32, ssm_state_size=32, n_groups=1,
        conv_kernel=4, sliding_window=64, dtype="float32"),
}
BACKENDS = {"FLASHINFER": FlashInferBackend, "TRITON_ATTN": TritonAttentionBackend}


def vllm_config_for(cfg: dict[str, Any]) -> VllmConfig:
    d = tempfile.mkdtemp()
    hf = {k: v for k, v in cfg.items() if k != "dtype"}
    transformers.NemotronHConfig(
        vocab_size=512, num_hidden_layers=4, hybrid_override_pattern="M*M*",
        intermediate_size=128, architectures=["NemotronHForCausalLM"],
        max_position_embeddings=4096, **hf).save_pretrained(d)
    return VllmConfig(
        model_config=ModelConfig(model=d, skip_tokenizer_init=True, max_model_len=4096,
                                 dtype=cfg["dtype"]),
        device_config=DeviceConfig("cpu"),
        cache_config=CacheConfig(block_size=16, enable_prefix_caching=True),
        kv_transfer_config=KVTransferConfig(
            kv_connector="OffloadingConnector", kv_role="kv_both",
            kv_connector_extra_config={"cpu_bytes_to_use": 1 << 30}),
    )


def derive(name: str, cfg: dict[str, Any], backend_name: str) -> dict[str, Any]:
    backend = BACKENDS[backend_name]
    vc = vllm_config_for(cfg)
    cache = vc.cache_config
    Platform._align_hybrid_block_size(vc, backend)
    primary = cache.block_size
    dtype = vc.model_config.dtype
    sw_probe = SlidingWindowSpec(block_size=1, num_kv_heads=cfg["num_key_value_heads"],
                                 head_size=cfg["head_dim"], dtype=dtype,
                                 sliding_window=cfg["sliding_window"])
    per_token = sw_probe.real_page_size_bytes
    sw_block = _largest_kernel_block_within(backend, per_token, per_token * primary, primary,
                                            sw_probe)
    mamba = MambaSpec(
        shapes=tuple(NemotronHForCausalLM.get_mamba_state_shape_from_config(vc)),
        dtypes=NemotronHForCausalLM.get_mamba_state_dtype_from_config(vc),
        block_size=cache.mamba_block_size, page_size_padded=cache.mamba_page_size_padded,
        mamba_cache_mode=cache.mamba_cache_mode)
    swa = SlidingWindowSpec(block_size=sw_block, num_kv_heads=cfg["num_key_value_heads"],
                            head_size=cfg["head_dim"], dtype=dtype,
                            sliding_window=cfg["sliding_window"])
    unified = unify_kv_cache_spec_page_size({"swa": swa, "mamba": mamba})
    kcc = KVCacheConfig(num_blocks=64, kv_cache_tensors=[], kv_cache_groups=[
        KVCacheGroupSpec(["model.layers.1.mixer.attn"], unified["swa"]),
        KVCacheGroupSpec(["model.layers.0.mixer"], unified["mamba"])])
    sched_block, hash_block = resolve_kv_cache_block_sizes(kcc, vc)
    conn = OffloadingConnector(vc, KVConnectorRole.SCHEDULER, kcc).connector_scheduler
    chunks = [g.tokens_per_chunk for g in conn.config.kv_group_configs]
    return {
        "model": name, "backend": backend_name,
        "declared_kernel_block_sizes": [str(s) for s in
                                        backend.get_supported_kernel_block_sizes(sw_probe)],
        "cache_block_size": primary, "mamba_cache_mode": cache.mamba_cache_mode,
        "mamba_block_size": cache.mamba_block_size,
        "sliding_window_block_size": unified["swa"].block_size,
        "sliding_window_page_padded": unified["swa"].page_size_padded is not None,
        "scheduler_block_size": sched_block, "hash_block_size": hash_block,
        "offload_tokens_per_chunk": chunks, "mamba_align_size": conn._mamba_align_size,
        "mamba_chunk_divides_every_chunk": all(c % conn._mamba_align_size == 0
                                               for c in chunks),
    }


def main() -> None:
    rows = []
    for name, cfg in MODELS.items():
        for backend_name in BACKENDS:
            rows.append(derive(name, cfg, backend_name))
    json.dump({"rows": rows}, _OUT, indent=1, sort_keys=True)
    _OUT.write("\n")
    _OUT.flush()


if __name__ == "__main__":
    main()
