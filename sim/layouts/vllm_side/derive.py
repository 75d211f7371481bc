"""Derive the KV-cache group layouts real model configurations produce (runs inside vLLM's env).

Only this file imports vLLM; the project never imports it. See ../README.md for what is
real and what is a stand-in. Prints one JSON object (the rows) on stdout.
"""
# ruff: noqa: E402
from __future__ import annotations

import os
import sys
import types

# --- stand-ins for the CUDA device (no GPU here), as /work/shared/vllm-offline does -------
sys.modules.setdefault("vllm._C_stable_libtorch", types.ModuleType("vllm._C_stable_libtorch"))
sys.modules.setdefault("vllm._C", types.ModuleType("vllm._C"))
# the real 0.33.0 wheel ships both FlashAttention extensions (.so, CUDA only); empty
# modules stand in so that vllm.vllm_flash_attn reports FA2/FA3 available as on an H200
for _fa in ("_vllm_fa2_C", "_vllm_fa3_C"):
    sys.modules.setdefault(f"vllm.vllm_flash_attn.{_fa}", types.ModuleType(_fa))

# the shared-experts MoE runner would make a second CUDA stream and events at
# construction (model_executor/layers/fused_moe/runner/shared_experts.py:74-83); a
# runtime overlap only, switched off by vLLM's own switch
os.environ["VLLM_DISABLE_SHARED_EXPERTS_STREAM"] = "1"

import torch
import vllm.platforms as _platforms
from vllm.platforms.cuda import CudaPlatform
from vllm.platforms.interface import DeviceCapability

CudaPlatform.get_device_capability = classmethod(  # type: ignore[method-assign]
    lambda cls, device_id=0: DeviceCapability(9, 0))
CudaPlatform.get_device_name = classmethod(lambda cls, device_id=0: "NVIDIA H200")
CudaPlatform.get_device_total_memory = classmethod(lambda cls, device_id=0: 140 << 30)
# layers that place a parameter on "the current device" get the meta device
CudaPlatform.current_device = classmethod(lambda cls: torch.device("meta"))
_platforms._current_platform = CudaPlatform()


def _probed_op_names() -> frozenset[str]:
    """The torch.ops._C names vLLM tests with ``hasattr`` (to register fake kernels or
    pick a path only when the compiled op exists), read from vLLM's own sources."""
    import re

    import vllm

    pattern = re.compile(r'hasattr\(\s*torch\.ops\._C\s*,\s*"(\w+)"')
    names: set[str] = set()
    for dirpath, _, files in os.walk(os.path.dirname(vllm.__file__)):
        for f in files:
            if f.endswith(".py"):
                with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                    names.update(pattern.findall(fh.read()))
    return frozenset(names)


class _FakeC:
    """torch.ops._C stand-in (the compiled ops are CUDA-only): answers the capability
    queries vLLM makes at import time; the names vLLM probes with ``hasattr`` are absent
    (as in a build without those kernels); any other op is a function that refuses to
    run (nothing here runs a forward), looked up by layers and compilation passes."""

    _vals = {"cutlass_scaled_mm_supports_fp8": True,
             "cutlass_scaled_mm_supports_block_fp8": True,
             "cutlass_group_gemm_supported": True,
             "cutlass_scaled_mm_supports_fp4": False}
    _probed = _probed_op_names()

    def __getattr__(self, n):
        if n in self._vals:
            v = self._vals[n]
            return lambda *a, **k: v
        if n in self._probed or n.startswith("__"):
            raise AttributeError(f"torch.ops._C.{n} is not in this stand-in")

        def _not_run(*a, **k):
            raise RuntimeError(f"torch.ops._C.{n} is a stand-in: no kernels run here")

        _not_run.default = _not_run
        _not_run.out = _not_run
        return _not_run


torch.ops.__dict__["_C"] = _FakeC()

import contextlib
import json
import os
import tempfile
import traceback
from types import SimpleNamespace

from vllm.config import set_current_vllm_config
from vllm.engine.arg_utils import EngineArgs


def _distributed() -> None:
    """One CPU process group (gloo): the model's parallel layers ask for TP rank 0 of 1.
    The model-parallel groups are made afresh for each row, under that row's config
    (which groups exist depends on it, e.g. the expert-parallel group for MoE models)."""
    from vllm.distributed import parallel_state as ps

    if ps._WORLD is None:
        port = 29000 + os.getpid() % 1000
        ps.init_distributed_environment(
            world_size=1, rank=0, local_rank=0,
            distributed_init_method=f"tcp://127.0.0.1:{port}", backend="gloo")
    ps.destroy_model_parallel()
    ps.initialize_model_parallel(tensor_model_parallel_size=1, backend="gloo")


def _meta_get_model(*, vllm_config, model_config=None, load_config=None, prefix=""):
    """``get_model`` as the proposers call it, without weights: the configured loader's
    ``create_model`` under the model dtype, as ``BaseModelLoader.load_model`` does
    (model_loader/base_loader.py:72-79), on the meta device instead of the GPU."""
    from vllm.model_executor.model_loader import get_model_loader
    from vllm.utils.torch_utils import set_default_torch_dtype

    model_config = model_config or vllm_config.model_config
    loader = get_model_loader(load_config or vllm_config.load_config)
    with set_current_vllm_config(vllm_config), set_default_torch_dtype(model_config.dtype):
        with torch.device("meta"):
            return loader.create_model(vllm_config=vllm_config, model_config=model_config,
                                       prefix=prefix)


def _build_draft(vllm_config) -> None:
    """The drafter as its proposer loads it: the proposer's own ``_get_model`` (draft
    config, prefix) with ``get_model`` on the meta device; then the attention layers
    the draft added are draft layers (v1/spec_decode/llm_base_proposer.py:1317-1335)."""
    import vllm.v1.spec_decode.draft_model as dm
    import vllm.v1.spec_decode.llm_base_proposer as base
    from vllm.config.vllm import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    from vllm.v1.spec_decode.eagle import EagleProposer

    sc = vllm_config.speculative_config
    cls = dm.DraftModelProposer if sc.method == "draft_model" else EagleProposer
    proposer = cls.__new__(cls)  # only the two fields _get_model reads
    proposer.vllm_config = vllm_config
    proposer.speculative_config = sc
    before = set(get_layers_from_vllm_config(vllm_config, AttentionLayerBase))
    saved = dm.get_model, base.get_model
    dm.get_model = base.get_model = _meta_get_model
    try:
        proposer._get_model()
    finally:
        dm.get_model, base.get_model = saved
    layers = get_layers_from_vllm_config(vllm_config, AttentionLayerBase)
    for name in set(layers) - before:
        layers[name].is_draft_layer = True


class _Executor:
    """The executor calls EngineCore._initialize_kv_caches makes, answered in-process by
    vLLM's own worker-side functions (no GPU: the memory is a fixed stand-in figure)."""

    def __init__(self, vllm_config, available_bytes: int) -> None:
        self.vllm_config = vllm_config
        self.available_bytes = available_bytes
        self.shared_kv_cache_layers: dict[str, str] = {}
        self.kv_cache_configs = None

    def get_kv_cache_specs(self):
        if self.vllm_config.use_v2_model_runner:
            from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

            return [get_kv_cache_spec(self.vllm_config)]
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        return [GPUModelRunner.get_kv_cache_spec(self)]

    def get_supported_kv_cache_layouts(self):
        from vllm.v1.worker.worker_base import WorkerBase

        return [WorkerBase.get_supported_kv_cache_layouts(self)]

    def set_kv_cache_layout(self, layout_name, interleave):
        from vllm.v1.worker.worker_base import WorkerBase

        WorkerBase.set_kv_cache_layout(self, layout_name, interleave)

    def determine_available_memory(self):
        return [self.available_bytes]

    def initialize_from_config(self, kv_cache_configs):
        self.kv_cache_configs = kv_cache_configs

    def compile_or_warm_up_model(self):
        return None

    def collective_rpc(self, *args, **kwargs):
        return []


def _flashinfer_device_stand_ins() -> None:
    """FlashInferImpl.__init__ sizes a scratch buffer from the SM count and allocates it
    on "cuda" (v1/attention/backends/flashinfer.py:2093-2102): give it an H200's 132 SMs
    and a meta tensor. Neither enters a KV-cache spec."""
    try:
        import vllm.v1.attention.backends.flashinfer as fi
    except ImportError:  # flashinfer missing: the backend is then refused, as on a GPU
        return
    fi.get_device_sm_count = lambda device=None: 132
    fi._get_multi_ctas_kv_counter_buffer = (
        lambda min_bytes, device: torch.empty(min_bytes, dtype=torch.uint8, device="meta"))


def _write_config(root: str, name: str, hf: dict) -> str:
    path = os.path.join(root, name)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(hf, f, indent=1, sort_keys=True)
    return path


def derive_row(root: str, model: dict, backend: str | None, drafter: dict | None,
               blocks_per_chunk: int | None, prefix_match_unit: int | None) -> dict:
    """Start the engine's configuration and KV-cache planning for one (model, backend,
    drafter) and the offloading connector's scheduler side; return what comes out."""
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import (
        OffloadingConnector,
    )
    from vllm.platforms import current_platform
    from vllm.v1.engine.core import EngineCore

    _flashinfer_device_stand_ins()
    path = _write_config(root, model["name"], model["hf_config"])
    spec_cfg = None
    if drafter is not None:
        spec_cfg = dict(drafter["speculative_config"])
        if "hf_config" in drafter:
            spec_cfg["model"] = _write_config(root, model["name"] + "-" + drafter["name"],
                                              drafter["hf_config"])
    extra: dict = {"cpu_bytes_to_use": 1 << 30}
    if blocks_per_chunk is not None:
        extra["blocks_per_chunk"] = blocks_per_chunk
    args = EngineArgs(
        model=path, skip_tokenizer_init=True, load_format="dummy", dtype="bfloat16",
        max_model_len=4096, enforce_eager=True, enable_prefix_caching=True,
        attention_backend=backend, prefix_match_unit=prefix_match_unit,
        speculative_config=spec_cfg,
        kv_transfer_config={"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                            "kv_connector_extra_config": extra},
    )
    vc = args.create_engine_config()
    with set_current_vllm_config(vc):
        _distributed()
    _meta_get_model(vllm_config=vc)
    if vc.speculative_config is not None:
        _build_draft(vc)
    current_platform.update_block_size_for_backend(vc)
    executor = _Executor(vc, available_bytes=8 << 30)
    core = SimpleNamespace(model_executor=executor, vllm_config=vc,
                           available_gpu_memory_for_kv_cache=0,
                           collective_rpc=lambda *a, **k: None)
    kv_cache_config = EngineCore._initialize_kv_caches(core, vc)
    connector = OffloadingConnector(vc, KVConnectorRole.SCHEDULER, kv_cache_config)
    return _describe(vc, kv_cache_config, connector.scheduler)


def _describe(vc, kv_cache_config, scheduler) -> dict:
    from vllm.v1.kv_cache_interface import MambaSpec, SlidingWindowSpec

    groups = []
    for i, g in enumerate(kv_cache_config.kv_cache_groups):
        spec = g.kv_cache_spec
        d = {"index": i, "spec": type(spec).__name__, "block_size": spec.block_size,
             "num_layers": len(g.layer_names), "eagle": bool(g.is_eagle_group)}
        if isinstance(spec, MambaSpec):
            d.update(kind="mamba", mamba_cache_mode=spec.mamba_cache_mode,
                     mamba_type=str(getattr(spec.mamba_type, "value", spec.mamba_type)))
        elif isinstance(spec, SlidingWindowSpec):
            d.update(kind="sliding_window", sliding_window=spec.sliding_window)
        else:
            d.update(kind="full_attention")
        groups.append(d)
    cfg = scheduler.config
    return {
        "groups": groups,
        "cache_block_size": vc.cache_config.block_size,
        "mamba_block_size": vc.cache_config.mamba_block_size,
        "hash_block_size": kv_cache_config.hash_block_size,
        "cache_hit_alignment_tokens": kv_cache_config.cache_hit_alignment_tokens,
        "tokens_per_hash": cfg.tokens_per_hash,
        "blocks_per_chunk": cfg.blocks_per_chunk,
        "supports_partial_tail": cfg.supports_partial_tail,
        "mamba_align_size": scheduler._mamba_align_size,
        "offload_groups": [
            {"group": c.group_idx, "tokens_per_block": c.tokens_per_block,
             "tokens_per_chunk": c.tokens_per_chunk,
             "sliding_window_size_in_chunks": c.sliding_window_size_in_chunks,
             "is_eagle_group": c.is_eagle_group,
             "requires_cow_source": c.requires_cow_source}
            for c in cfg.kv_group_configs],
    }


_HARNESS_PROBLEMS = ("Torch not compiled with CUDA", "stand-in", "No module named",
                     "requires CUDA",
                     "CUDA driver", "libcuda")


def _where(exc: BaseException) -> str:
    """The innermost vLLM frame the exception passed through: ``vllm/path.py:line``."""
    where = "?"
    for frame, line in traceback.walk_tb(exc.__traceback__):
        path = frame.f_code.co_filename.replace(os.sep, "/")
        if "/site-packages/vllm/" in path:
            where = "vllm/" + path.split("/site-packages/vllm/", 1)[1] + f":{line}"
    return where


def run_row(root: str, model: tuple, backend: str | None, drafter: str,
            blocks_per_chunk: int | None, prefix_match_unit: int | None) -> dict:
    import catalogue

    name, like, hf = model
    d = catalogue.DRAFTERS[drafter]
    draft = None
    if d is not None:
        draft = {"name": drafter, "speculative_config": d[0]}
        if d[1] is not None:
            draft["hf_config"] = d[1]
    row = {"model": name, "like": like, "architecture": hf["architectures"][0],
           "backend": backend or "none", "drafter": drafter,
           "blocks_per_chunk_config": blocks_per_chunk,
           "prefix_match_unit": prefix_match_unit}
    try:
        with contextlib.redirect_stdout(sys.stderr):
            out = derive_row(root, {"name": name, "hf_config": hf}, backend, draft,
                             blocks_per_chunk, prefix_match_unit)
    except Exception as e:  # a refusal by vLLM, or a problem of this harness
        msg = " ".join(str(e).replace(root, "<configs>").split())[:300]
        # vLLM refuses a configuration with ValueError (pydantic's ValidationError is
        # one), AssertionError or NotImplementedError; anything else is this harness
        deliberate = isinstance(e, (ValueError, AssertionError, NotImplementedError))
        harness = not deliberate or any(p in msg for p in _HARNESS_PROBLEMS)
        status = "harness_error" if harness else "refused"
        row.update(status=status, refused_by=_where(e),
                   error=f"{type(e).__name__}: {msg}")
        traceback.print_exc(file=sys.stderr)
        return row
    row.update(status="accepted", **out)
    return row


def all_rows() -> list[tuple]:
    """(model, backend, drafter, blocks_per_chunk, prefix_match_unit) for every row."""
    import catalogue

    rows = []
    for model in catalogue.MODELS:
        hybrid = model[0] not in ("mamba1", "mamba2")
        backends = catalogue.ATTENTION_BACKENDS if hybrid else (None,)
        drafters = catalogue.MODEL_DRAFTERS.get(model[0], ("none",))
        for backend in backends:
            for drafter in drafters:
                rows.append((model, backend, drafter, None, None))
        # an offloaded block of two GPU blocks (kv_connector_extra_config blocks_per_chunk)
        rows.append((model, backends[0], "none", 2, None))
        if hybrid:
            # --prefix-match-unit finer than the block: hash block < Mamba block
            for drafter in drafters:
                rows.append((model, backends[0], drafter, None,
                             catalogue.PREFIX_MATCH_UNIT))
            rows.append((model, backends[0], "none", None, catalogue.PREFIX_MATCH_UNIT_ODD))
        for name, backend, drafter, bpc in catalogue.EXTRA_CHUNKED:
            if name == model[0]:
                rows.append((model, backend, drafter, bpc, None))
    return rows


def main(argv: list[str]) -> int:
    import vllm

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    only = set(argv)
    results = []
    with tempfile.TemporaryDirectory() as root:
        for model, backend, drafter, bpc, pmu in all_rows():
            if only and model[0] not in only:
                continue
            print(f"[layouts] {model[0]} {backend} {drafter} bpc={bpc} pmu={pmu}",
                  file=sys.stderr, flush=True)
            results.append(run_row(root, model, backend, drafter, bpc, pmu))
    results.sort(key=lambda r: (r["model"], r["backend"], r["drafter"],
                                r["blocks_per_chunk_config"] or 0,
                                r["prefix_match_unit"] or 0))
    json.dump({"vllm": vllm.__version__, "rows": results}, sys.stdout, indent=1,
              sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
