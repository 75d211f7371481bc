"""Drives the real ``OffloadingConnectorScheduler`` of vLLM 0.26.0 - 0.33.0; runs INSIDE
that release's virtual environment, never in the project's Python. Same protocol as
``harness.py`` (info / run / bench / quit, one JSON object per line).

Written for 0.33.0; the older releases of the same API generation differ in five places,
each a feature check below (docs/releases.md § Adapters): the engine's
``resolve_cache_hit_alignment_tokens`` exists from 0.32.0 (``HAS_ALIGN``);
``get_num_new_matched_tokens`` takes ``max_num_new_tokens`` from 0.30.0 (``HAS_CAP``);
``tokens_per_hash`` is on the spec, not on ``SchedulerOffloadConfig``, in 0.26.0/0.27.0;
``partial_tail_boundary`` exists from 0.28.0; the stand-in ``model_config`` answers what
``build_offloading_config`` / ``MambaModelConfig`` ask in these releases.
``max_load_tokens`` rides on ``kv_transfer_params`` and is ignored before 0.31.0, as it
should be.

0.33.0 reworked the API, hence this separate adapter: the spec is built from an
``OffloadingConfig`` that the real ``build_offloading_config`` (offloading/config.py)
makes; the scheduler takes ``(spec, vllm_config, kv_cache_config)``; the manager's
``lookup`` answers a ``LookupResult``; keys are per chunk and per partial-tail boundary;
the caps ride on the request's ``kv_transfer_params`` (max_load_tokens) and on the
``max_num_new_tokens`` argument.

Real objects: VllmConfig/CacheConfig/DeviceConfig/KVTransferConfig, KVCacheConfig with
FullAttentionSpec/SlidingWindowSpec/MambaSpec groups (``is_eagle_group`` set), the
engine's ``hash_block_size`` and ``cache_hit_alignment_tokens`` resolution (as
v1/engine/core.py:347-370 does), ``build_offloading_config`` and its checks, a real
``OffloadingSpec`` subclass, Request with block hashes from vLLM's own block hasher, the
scheduler, KVCacheManager.allocate_slots for the load. Stand-ins: the OffloadingManager
(answers from the case, records keys) and the worker side (never called), shared with
``harness.py`` (``standins.py``; the request, the load's allocation, the timing and the
protocol loop are ``harness_core.py``'s), and
``model_config``: a namespace with the four fields build_offloading_config reads (name,
dtype, max_model_len, use_mla=False), since a real ModelConfig needs a model on disk.

Keys are named ``(group, end token)``: the block hash at that token position plus the
group (``make_offload_key``), for every hash position of the prompt.
"""

from __future__ import annotations

import inspect
import math
import os
import sys
from types import SimpleNamespace
from typing import Any

# use_v2_model_runner reads model_config fields the stand-in lacks (0.28.0 - 0.32.0)
os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")

# harness_core first (this folder): it moves stdout away before vLLM is imported
import harness_core as core  # noqa: E402
import torch  # noqa: E402
from harness_protocol import err  # noqa: E402
from standins import ScenarioManager, ScenarioSpec, kv_spec  # noqa: E402
from vllm.config import (  # noqa: E402
    CacheConfig,
    DeviceConfig,
    KVTransferConfig,
    VllmConfig,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading import (  # noqa: E402
    scheduler as sched_mod,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import (  # noqa: E402
    build_offloading_config,
)
from vllm.model_executor.models.config import MambaModelConfig  # noqa: E402
from vllm.v1.core import kv_cache_utils as _kcu  # noqa: E402
from vllm.v1.core.kv_cache_manager import KVCacheManager  # noqa: E402
from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes  # noqa: E402
from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec  # noqa: E402
from vllm.v1.kv_offload import base as offload_base  # noqa: E402

# CROSSCHECK_FIX=001: run finding 001's proposed fix (docs/findings/001-fix.diff) instead of
# the release's method; the model's counterpart is semantics alt-v033-reround-mamba
# (001b: the completed fix, docs/findings/001-fix-rerun.diff, alt-v033-reround-mamba-rerun)
FIX = os.environ.get("CROSSCHECK_FIX") or None
if FIX is not None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from fix001_chunked import apply_fix  # noqa: E402

    apply_fix(FIX)  # exits naming an unknown fix

VERSION = core.VERSION
# 0.32.0+: the engine resolves cache_hit_alignment_tokens
HAS_ALIGN = hasattr(_kcu, "resolve_cache_hit_alignment_tokens")
# 0.30.0+: the max_num_new_tokens cap is an argument of the lookup
HAS_CAP = "max_num_new_tokens" in inspect.signature(
    sched_mod.OffloadingConnectorScheduler.get_num_new_matched_tokens).parameters
LR = offload_base.LookupResult


def build_configs(case: dict[str, Any]) -> tuple[Any, Any]:
    groups = case["groups"]
    sizes = [g["block_size"] for g in groups]
    cache_kwargs: dict[str, Any] = dict(
        block_size=min(sizes), enable_prefix_caching=case["enable_prefix_caching"])
    if case.get("hash_block_size") is not None:
        cache_kwargs["prefix_match_unit"] = case["hash_block_size"]
    modes = [g["mamba_cache_mode"] for g in groups if g["kind"] == "mamba"]
    if modes:  # CacheConfig validates the mode (config/cache.py:176: align or none)
        cache_kwargs["mamba_cache_mode"] = modes[0]
    cache_config = CacheConfig(**cache_kwargs)
    vllm_config = VllmConfig(
        device_config=DeviceConfig("cpu"),
        cache_config=cache_config,
        kv_transfer_config=KVTransferConfig(
            kv_connector="OffloadingConnector",
            kv_role="kv_both",
            engine_id="crosscheck",
            kv_connector_extra_config=dict(case["extra_config"]),
        ),
    )
    if modes:
        # the real MambaModelConfig sets the mode from enable_prefix_caching
        # (model_executor/models/config.py:763-785); a model builds its MambaSpec from it
        vllm_config.model_config = _model_config(case)
        MambaModelConfig.verify_and_update_config(vllm_config)
        mode = vllm_config.cache_config.mamba_cache_mode
        if any(m != mode for m in modes):
            raise ValueError(f"MambaModelConfig runs Mamba in mode {mode!r}, the case "
                             f"asks for {modes}")
    # v1/engine/core.py:347: the smallest (prefix-cacheable) group block size
    vllm_config.cache_config.block_size = min(sizes)
    group_specs = [
        KVCacheGroupSpec(layer_names=[f"layer.{i}"], kv_cache_spec=kv_spec(g, i),
                         is_eagle_group=bool(g.get("eagle", False)))
        for i, g in enumerate(groups)
    ]
    num_blocks = 16 + sum(-(-case["prompt_tokens"] // s) + 4 for s in sizes)
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=group_specs)
    # v1/engine/core.py:356-370: the engine resolves these onto the config
    sched_bs, hash_bs = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
    kv_cache_config.hash_block_size = hash_bs
    if HAS_ALIGN:
        kv_cache_config.cache_hit_alignment_tokens = _kcu.resolve_cache_hit_alignment_tokens(
            kv_cache_config, vllm_config, sched_bs, hash_bs)
    return vllm_config, kv_cache_config


def make_request(case: dict[str, Any], vllm_config: Any, kv_cache_config: Any,
                 req_id: str = "req-0") -> Any:
    extra_args = None
    if case.get("max_load_tokens") is not None:
        extra_args = {"kv_transfer_params": {"max_load_tokens": case["max_load_tokens"]}}
    return core.make_request(case, vllm_config, kv_cache_config, req_id,
                             extra_args=extra_args)


# vLLM 0.32.0's build_offloading_config asks a single group's model for its KV heads
# (offloading/config.py:185), and so does 0.33.0 (offloading/config.py:223, a single
# full-attention group); the other stand-in fields are for releases before 0.33.0
ASKS_KV_HEADS = tuple(int(x) for x in VERSION.split(".")[:2]) < (0, 33)


def _model_config(case: dict[str, Any]) -> Any:
    """The stand-in model config (see the module doc)."""
    # before 0.33.0 only (0.33.0 keeps its own stand-in): supports_mamba_prefix_caching so
    # that MambaModelConfig keeps mode "all" (0.26.0 - 0.31.0); is_diffusion for
    # use_v2_model_runner
    extra: dict[str, Any] = {"supports_mamba_prefix_caching": True,
                             "is_diffusion": False} if ASKS_KV_HEADS else {}
    # get_total_num_kv_heads for the single-group parallelism check (0.28.0 - 0.33.0)
    extra["get_total_num_kv_heads"] = lambda: 1
    return SimpleNamespace(model="crosscheck", dtype=torch.float16, use_mla=False,
                           architecture="crosscheck",
                           max_model_len=case["prompt_tokens"] + 64, **extra)


def setup(case: dict[str, Any]) -> tuple[Any, Any, Any, ScenarioManager, Any]:
    vllm_config, kv_cache_config = build_configs(case)
    vllm_config.model_config = _model_config(case)
    config = build_offloading_config(vllm_config, kv_cache_config)
    spec = ScenarioSpec(config)
    manager = ScenarioManager()
    spec.manager = manager
    scheduler = sched_mod.OffloadingConnectorScheduler(spec, vllm_config, kv_cache_config)
    # 0.26.0/0.27.0: tokens_per_hash is the spec's, not SchedulerOffloadConfig's
    scheduler.crosscheck_tph = getattr(scheduler.config, "tokens_per_hash", None) or getattr(
        spec, "tokens_per_hash", None)
    return vllm_config, kv_cache_config, spec, manager, scheduler


def key_names(scheduler: Any, request: Any) -> dict[bytes, tuple[int, int]]:
    """Every key the request could be asked about: each hash position, each group."""
    tph = scheduler.crosscheck_tph
    names: dict[bytes, tuple[int, int]] = {}
    for cfg in scheduler.config.kv_group_configs:
        for i, h in enumerate(request.block_hashes):
            names[offload_base.make_offload_key(h, cfg.group_idx)] = (
                cfg.group_idx, (i + 1) * tph)
    return names


def _answer(store: dict[str, Any], end: int, tpc: int) -> Any:
    chunk = end // tpc - 1 if end % tpc == 0 else None
    if (chunk is not None and chunk in store["deferred"]) or end in store["deferred_tails"]:
        return LR.RETRY
    if (chunk is not None and chunk in store["pending"]) or end in store["pending_tails"]:
        return LR.HIT_PENDING
    stored = chunk is not None and (store["stored"] is None or chunk in store["stored"])
    if stored or end in store["stored_tails"]:
        return LR.HIT
    return LR.MISS


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"version": VERSION, "refused": None}
    try:
        vllm_config, kv_cache_config, spec, manager, scheduler = setup(case)
    except (AssertionError, ValueError, TypeError) as e:
        out["refused"] = err(e)
        return out
    request = make_request(case, vllm_config, kv_cache_config)
    names = key_names(scheduler, request)
    manager.names = names
    tpc = {c.group_idx: c.tokens_per_chunk for c in scheduler.config.kv_group_configs}
    for key, (g, end) in names.items():
        manager.answers[key] = _answer(case["store"][g], end, tpc[g])
    scheduler.on_new_request(request)
    if case["being_loaded"] and scheduler._chunks_being_loaded is not None:
        inv = {v: k for k, v in names.items()}
        for g, i in case["being_loaded"]:
            name = (g, (i + 1) * tpc[g])
            if name in inv:
                scheduler._chunks_being_loaded.add(inv[name])
    state = scheduler._req_status[request.request_id]
    if case["in_flight_transfers"]:
        state.transfer_jobs.add(core.FAKE_JOB_ID)
    num_computed = case["num_computed_tokens"]
    # Which GPU hits an engine produces: multiples of the coordinator's alignment, as
    # vLLM's own resolve_cache_hit_alignment_tokens gives it (the hash block when
    # fine-grained hits are on; before 0.32.0 the scheduler block), below the prompt,
    # none with caching off. The engine scheduler hands the connector such a hit rounded
    # down to its block (v1/core/sched/scheduler.py:1134-1140 of 0.33.0, :974 of 0.32.0);
    # a hit no engine produces goes to the connector as it is (the model's precondition).
    sched_bs, _ = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
    align = getattr(kv_cache_config, "cache_hit_alignment_tokens", None) or sched_bs
    # (and none for a request that skips reading the cache: get_computed_blocks looks
    # nothing up then, kv_cache_manager.py:292 of 0.33.0)
    out["gpu_hit_real"] = (num_computed % align == 0 and num_computed < case["prompt_tokens"]
                           and (num_computed == 0 or (case["enable_prefix_caching"] and
                                                      not case["skip_reading_prefix_cache"])))
    if num_computed % align == 0:
        num_computed -= num_computed % sched_bs
    out["connector_tokens"] = num_computed
    kw = {"max_num_new_tokens": case.get("max_num_new_tokens")} if HAS_CAP else {}

    def spare(j: int) -> Any:  # the case again, on a new request (harness_core.TIMED_CALLS)
        r = make_request(case, vllm_config, kv_cache_config, f"spare-{j}")
        scheduler.on_new_request(r)
        if case["in_flight_transfers"]:
            scheduler._req_status[r.request_id].transfer_jobs.add(core.FAKE_JOB_ID)
        return lambda: scheduler.get_num_new_matched_tokens(r, num_computed, **kw)

    best = core.spare_lookups(spare)
    manager.looked_up.clear()  # the case's own lookup is reported
    hit = core.timed_lookup(
        lambda: scheduler.get_num_new_matched_tokens(request, num_computed, **kw), out, best)
    out["lookups"] = [list(names.get(k, (-1, -1))) for k in manager.looked_up]
    out["tail_boundary"] = getattr(state, "partial_tail_boundary", None)  # 0.28.0+
    if not any(gs.offload_keys for gs in state.group_states):
        state.update_offload_keys()
    # our chunk keys must be the scheduler's own (RequestOffloadState.offload_keys)
    own = [[names.get(k) for k in gs.offload_keys] for gs in state.group_states]
    mine = [[(c.group_idx, (i + 1) * c.tokens_per_chunk)
             for i in range(case["prompt_tokens"] // c.tokens_per_chunk)]
            for c in scheduler.config.kv_group_configs]
    out["keys_ok"] = own == mine
    out["loads"] = None
    # v1/core/sched/scheduler.py:1167-1184 of 0.33.0: the engine keeps the local
    # sub-block tail (and loads nothing) unless the connector's hit is longer than it
    tail = case["num_computed_tokens"] - num_computed
    out["local_tail_kept"] = bool(tail) and hit is not None and hit <= tail
    if hit and not out["local_tail_kept"]:
        out.update(load_plan(case, kv_cache_config, spec, manager, scheduler, request, hit,
                             num_computed))
    return out


def load_plan(case: dict[str, Any], kv_cache_config: Any, spec: Any, manager: ScenarioManager,
              scheduler: Any, request: Any, hit: int, num_computed: int) -> dict[str, Any]:
    """Allocate as Scheduler.schedule does for an async load and read the keys
    update_state_after_alloc passes to prepare_load. ``num_computed``: the local hit the
    connector was asked from (a fine GPU hit's sub-block tail is dropped, scheduler.py
    :1167-1178 of v1/core/sched, ``truncate_computed_blocks``)."""
    # resolve_kv_cache_block_sizes' scheduler block size (the lcm; no DCP here)
    sched_bs = math.lcm(*[g["block_size"] for g in case["groups"]])
    hash_bs = kv_cache_config.hash_block_size
    try:
        kvm = KVCacheManager(
            kv_cache_config,
            max_model_len=case["prompt_tokens"] + 64,
            scheduler_block_size=sched_bs,
            hash_block_size=hash_bs,
            # as the engine: caching follows enable_prefix_caching (with it off there is
            # no GPU prefix hit, and MambaManager asserts mode align whenever it is on)
            enable_caching=case["enable_prefix_caching"],
        )
        blocks = core.allocate_load(kvm, kv_cache_config, request, num_computed, hit)
        if blocks is None:
            return {"load_error": "allocate_slots returned None (pool too small)"}
        scheduler.update_state_after_alloc(request, kvm.get_blocks(request.request_id), hit)
    except AssertionError as e:
        return {"load_error": err(e)}
    # the GPU side the worker copies into (GPULoadStoreSpec: blocks per group, first index)
    jobs = list(scheduler._current_batch_load_jobs.values())
    gpu = None
    if len(jobs) == 1:
        spec_ = jobs[0].dst_spec
        gpu = [list(spec_.group_sizes), list(spec_.block_indices)]
    loads, unknown = core.loads_by_group(manager, len(case["groups"]))
    return {"loads": loads, "unknown_load_keys": unknown, "gpu": gpu}


def bench(case: dict[str, Any], n: int) -> dict[str, Any]:
    vllm_config, kv_cache_config, spec, manager, scheduler = setup(case)
    requests = [make_request(case, vllm_config, kv_cache_config, f"b{i}") for i in range(n)]
    for key in key_names(scheduler, requests[0]):
        manager.answers[key] = LR.HIT
    num_computed = case["num_computed_tokens"]

    def call(r: Any) -> Any:
        scheduler.on_new_request(r)
        return scheduler.get_num_new_matched_tokens(r, num_computed)[0]

    return core.bench_calls(requests, call)


def main() -> None:
    core.main({"version": VERSION, "fix": FIX, "scheduler_file": sched_mod.__file__},
              run_case, bench)


if __name__ == "__main__":
    main()
