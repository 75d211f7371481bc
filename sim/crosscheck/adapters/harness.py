"""Drives one vLLM release's real ``OffloadingConnectorScheduler``; runs INSIDE that
release's virtual environment (``.venvs/vllm-X``), never in the project's Python.

Protocol: one JSON object per line on stdin, one reply per line on the original stdout
(vLLM's own logging is moved to stderr).  Requests:

  {"op": "info"}                       -> {"version": "0.24.0"}
  {"op": "run", "case": CASE}          -> RESULT (see ``run_case``)
  {"op": "bench", "case": CASE, "n": N}-> {"seconds": s, "calls": N, "hit": h}
  {"op": "quit"}

CASE is built by ``sim.crosscheck.mapping.to_case`` from a scenario: explicit group
specs, the offload store's answers per (group, offloaded block index), the flags.

Real objects: VllmConfig/CacheConfig/DeviceConfig/KVTransferConfig, KVCacheConfig with
FullAttentionSpec/SlidingWindowSpec/MambaSpec groups, Request with block hashes from
vLLM's own block hasher, OffloadingSpec.__init__ (its assertions run), the scheduler,
KVCacheManager.allocate_slots, the load's transfer spec (``GPULoadStoreSpec``) and the
CPU worker's sub-block pointer arithmetic (``compute_sub_block_ptrs``, called on small
CPU tensors whose addresses name the block and sub-block).  Stand-ins: the
OffloadingManager (answers from the scenario, records keys) and the worker side (never
called), shared with ``harness_chunked.py`` (``standins.py``; the request, the load's
allocation, the timing and the protocol loop are ``harness_core.py``'s); the worker's
per-group loop around
``compute_sub_block_ptrs`` (``worker_copies``, written after gpu_worker.py:315-360: it
needs CUDA streams), and ``decode_context_parallel_size`` set on the built config (its
validation needs a tensor-parallel group).

Version differences are feature-detected in ``Adapter`` (one small class), so the same
file serves 0.23.0, 0.24.0 and 0.25.x (0.25.0: the manager answers ``LookupResult``,
``OffloadingSpec.get_handlers`` became ``get_worker``, a load job names its
``dst_spec``; docs/releases.md § Adapters).  From 0.26.0 on ``harness_chunked.py``.
"""

from __future__ import annotations

from typing import Any

# harness_core first (this folder): it moves stdout away before vLLM is imported
import harness_core as core
import torch
from harness_protocol import err
from standins import ScenarioManager, ScenarioSpec, hit, kv_spec
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    KVTransferConfig,
    VllmConfig,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading import (
    scheduler as sched_mod,
)
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes
from vllm.v1.kv_cache_interface import (
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.kv_offload import base as offload_base
from vllm.v1.kv_offload.cpu.gpu_worker import compute_sub_block_ptrs

VERSION = core.VERSION


class Adapter:
    """The per-version differences, found by feature detection (thin on purpose)."""

    # 0.24.0 added OffloadingConnectorScheduler.on_new_request's callers' twin checks
    # (in-flight transfers, skip_reading_prefix_cache; scheduler.py:662, 673); both
    # versions have on_new_request and RequestOffloadState.transfer_jobs.
    has_on_new_request = hasattr(sched_mod.OffloadingConnectorScheduler, "on_new_request")
    # KVCacheGroupSpec.is_eagle_group exists in both pinned versions, but only the
    # 0.24.0 scheduler reads it (scheduler.py:169).
    has_eagle_field = "is_eagle_group" in getattr(KVCacheGroupSpec, "__dataclass_fields__", {})
    # 0.25.0: OffloadingManager.lookup answers LookupResult (v1/kv_offload/base.py:56)
    # instead of True / None / False
    lookup_result = getattr(offload_base, "LookupResult", None)


def _answer(store: dict[str, Any], i: int) -> Any:
    """The stand-in manager's answer for offloaded block ``i`` of a group."""
    stored = store["stored"] is None or i in store["stored"]
    LR = Adapter.lookup_result
    if LR is None:
        # a pending block (a 0.33.0 field) is not ready yet: None, as the model answers it
        # for releases before 0.33.0 (model/scenario.py Group.answer)
        if i in store["deferred"] or i in store.get("pending", ()):
            return None
        return stored
    if i in store["deferred"]:
        return LR.RETRY
    if i in store.get("pending", ()):
        return LR.HIT_PENDING
    return LR.HIT if stored else LR.MISS


def build_configs(case: dict[str, Any]) -> tuple[Any, Any]:
    groups = case["groups"]
    sizes = [g["block_size"] for g in groups]
    cache_kwargs: dict[str, Any] = dict(
        block_size=min(sizes),  # v1/engine/core.py:309 (0.24.0)
        enable_prefix_caching=case["enable_prefix_caching"],
    )
    if case.get("hash_block_size") is not None:
        cache_kwargs["hash_block_size"] = case["hash_block_size"]
    if case.get("mamba_block_size") is not None:
        cache_kwargs["mamba_block_size"] = case["mamba_block_size"]
    cache_config = CacheConfig(**cache_kwargs)
    vllm_config = VllmConfig(
        device_config=DeviceConfig("cpu"),
        cache_config=cache_config,
        kv_transfer_config=KVTransferConfig(
            kv_connector="OffloadingConnector",
            kv_role="kv_both",
            kv_connector_extra_config=dict(case["extra_config"]),
        ),
    )
    # the engine sets this after building the KV-cache config (v1/engine/core.py:309)
    vllm_config.cache_config.block_size = min(sizes)
    # context parallelism: ParallelConfig validates it against a tensor-parallel group
    # this process does not have, so it is set on the built config
    vllm_config.parallel_config.decode_context_parallel_size = case.get(
        "context_parallel_size", 1)
    group_specs = []
    for i, g in enumerate(groups):
        kw: dict[str, Any] = dict(layer_names=[f"layer.{i}"], kv_cache_spec=kv_spec(g, i))
        if Adapter.has_eagle_field:
            kw["is_eagle_group"] = bool(g.get("eagle", False))
        group_specs.append(KVCacheGroupSpec(**kw))
    num_tokens = case["prompt_tokens"] + case.get("output_tokens", 0)
    num_blocks = 16 + sum(-(-num_tokens // s) + 2 for s in sizes)
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=group_specs
    )
    return vllm_config, kv_cache_config


def make_request(case: dict[str, Any], vllm_config: Any, kv_cache_config: Any,
                 req_id: str = "req-0") -> Any:
    return core.make_request(case, vllm_config, kv_cache_config, req_id,
                             output_tokens=case.get("output_tokens", 0))


def setup(case: dict[str, Any]) -> tuple[Any, Any, Any, ScenarioManager, Any]:
    """Config, spec and scheduler; raises on a start-up refusal."""
    vllm_config, kv_cache_config = build_configs(case)
    spec = ScenarioSpec(vllm_config, kv_cache_config)
    manager = ScenarioManager()
    spec.manager = manager
    scheduler = sched_mod.OffloadingConnectorScheduler(spec)
    return vllm_config, kv_cache_config, spec, manager, scheduler


def offload_keys(spec: Any, request: Any) -> dict[bytes, tuple[int, int]]:
    """Our own offload keys: the block hash at the end of each offloaded block + group."""
    names: dict[bytes, tuple[int, int]] = {}
    for g, gpu_bs in enumerate(spec.gpu_block_size):
        factor = gpu_bs * spec.block_size_factor // spec.hash_block_size
        for i, h in enumerate(request.block_hashes[factor - 1 :: factor]):
            names[offload_base.make_offload_key(h, g)] = (g, i)
    return names


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"version": VERSION, "refused": None}
    try:
        vllm_config, kv_cache_config, spec, manager, scheduler = setup(case)
    except (AssertionError, ValueError, TypeError) as e:
        out["refused"] = err(e)
        return out
    request = make_request(case, vllm_config, kv_cache_config)
    names = offload_keys(spec, request)
    manager.names = names
    for key, (g, i) in names.items():
        manager.answers[key] = _answer(case["store"][g], i)
    if Adapter.has_on_new_request:
        scheduler.on_new_request(request)
    if case["being_loaded"] and scheduler._blocks_being_loaded is not None:
        inv = {v: k for k, v in names.items()}
        for g, i in case["being_loaded"]:
            if (g, i) in inv:
                scheduler._blocks_being_loaded.add(inv[(g, i)])
    if case["in_flight_transfers"]:
        scheduler._req_status[request.request_id].transfer_jobs.add(core.FAKE_JOB_ID)
    num_computed = case["num_computed_tokens"]

    def spare(j: int) -> Any:  # the case again, on a new request (harness_core.TIMED_CALLS)
        r = make_request(case, vllm_config, kv_cache_config, f"spare-{j}")
        if Adapter.has_on_new_request:
            scheduler.on_new_request(r)
        if case["in_flight_transfers"]:
            scheduler._req_status[r.request_id].transfer_jobs.add(core.FAKE_JOB_ID)
        return lambda: scheduler.get_num_new_matched_tokens(r, num_computed)

    best = core.spare_lookups(spare)
    manager.looked_up.clear()  # the case's own lookup is reported
    hit_tokens = core.timed_lookup(
        lambda: scheduler.get_num_new_matched_tokens(request, num_computed), out, best)
    out["lookups"] = [list(names.get(k, (-1, -1))) for k in manager.looked_up]
    # cross-check our keys against the scheduler's own (RequestOffloadState.offload_keys)
    state = scheduler._req_status[request.request_id]
    if not any(gs.offload_keys for gs in state.group_states):
        # an early return (in-flight transfers) skipped it; run the real method ourselves
        state.update_offload_keys()
    own = [list(gs.offload_keys) for gs in state.group_states]
    mine = [[k for k, v in sorted(names.items(), key=lambda kv: kv[1][1]) if v[0] == g]
            for g in range(len(own))]
    out["keys_ok"] = own == mine
    out["loads"] = None
    if hit_tokens:
        out.update(load_plan(case, kv_cache_config, spec, manager, scheduler, request,
                             hit_tokens))
    return out


def load_plan(case: dict[str, Any], kv_cache_config: Any, spec: Any, manager: ScenarioManager,
              scheduler: Any, request: Any, hit_tokens: int) -> dict[str, Any]:
    """Allocate as Scheduler.schedule does for an async load (v1/core/sched/scheduler.py
    around 874 in 0.24.0) and read the keys update_state_after_alloc passes to
    prepare_load."""
    num_computed = case["num_computed_tokens"]
    vc = spec.vllm_config
    sched_bs, hash_bs = resolve_kv_cache_block_sizes(kv_cache_config, vc)
    cp = case.get("context_parallel_size", 1)
    try:
        # Caching is on so that the scenario's GPU prefix hit can be represented by cached
        # blocks; with delay_cache_blocks=True (the async-load path) it has no other effect.
        kvm = KVCacheManager(
            kv_cache_config,
            max_model_len=request.num_tokens + 64,
            scheduler_block_size=sched_bs,
            hash_block_size=hash_bs,
            enable_caching=True,
            dcp_world_size=cp,
        )
        blocks = core.allocate_load(kvm, kv_cache_config, request, num_computed, hit_tokens,
                                    cp)
        if blocks is None:
            return {"load_error": "allocate_slots returned None (pool too small)"}
        before = set(scheduler._current_batch_load_jobs)
        scheduler.update_state_after_alloc(request, kvm.get_blocks(request.request_id),
                                           hit_tokens)
    except AssertionError as e:
        return {"load_error": err(e)}
    new_jobs = [j for j in scheduler._current_batch_load_jobs if j not in before]
    copies: list[list[list[int]]] | None = None
    if len(new_jobs) == 1:
        job = scheduler._current_batch_load_jobs[new_jobs[0]]
        # 0.25.0: TransferJob(src_spec=, dst_spec=) replaced transfer_spec
        dst_spec = job.dst_spec if hasattr(job, "dst_spec") else job.transfer_spec[1]
        table = [[b.block_id for b in blocks]
                 for blocks in kvm.get_blocks(request.request_id).blocks]
        try:
            copies = worker_copies(dst_spec, manager, spec.block_size_factor, table)
        except AssertionError as e:
            return {"load_error": "worker: " + err(e)}
    loads, unknown = core.loads_by_group(manager, len(case["groups"]))
    return {"loads": loads, "unknown_load_keys": unknown, "copies": copies}


def _ptrs(block_ids: Any, factor: int, count: int, skip: int) -> list[tuple[int, int]]:
    """(block, sub-block) of each pointer vLLM's ``compute_sub_block_ptrs`` computes for
    ``count`` sub-blocks of ``block_ids`` (skipping ``skip``), read back from the
    addresses of a small CPU tensor with one byte per sub-block."""
    import numpy as np

    rows = int(max(block_ids)) + 1 if len(block_ids) else 1
    tensor = torch.zeros((rows, factor), dtype=torch.uint8)
    out = np.zeros(count, dtype=np.uint64)
    compute_sub_block_ptrs(np.asarray(block_ids), factor, out, tensor, skip_count=skip)
    base, stride = tensor.data_ptr(), tensor.stride(0)
    return [(int(p - base) // stride, int(p - base) % stride) for p in out.tolist()]


def worker_copies(dst_spec: Any, manager: ScenarioManager, factor: int,
                  table: list[list[int]]) -> list[list[list[int]]]:
    """What the CPU-to-GPU worker copies for this load, per group: [offloaded block index,
    sub-block, GPU block position in the request's block table].  The per-group loop
    follows ``CpuGpuOffloadingHandler.transfer_async`` (gpu_worker.py:315-360 in 0.24.0):
    the source (CPU) side has ``factor`` sub-blocks per block and skips
    ``block_idx % factor`` of the group's first one; the GPU side has one."""
    keys = manager.loaded or []
    src_blocks = list(range(len(keys)))  # CPU block i holds keys_to_load[i]
    dst_blocks = [int(b) for b in dst_spec.block_ids]
    out: list[list[list[int]]] = []
    src_off = dst_off = 0
    for g, (size, block_idx) in enumerate(zip(dst_spec.group_sizes, dst_spec.block_indices,
                                              strict=True)):
        group: list[list[int]] = []
        out.append(group)
        if size == 0:
            continue
        skip = block_idx % factor
        src_count = -(-(size + skip) // factor)
        group_src = src_blocks[src_off:src_off + src_count]
        group_dst = dst_blocks[dst_off:dst_off + size]
        assert len(group_src) == src_count and len(group_dst) == size, "spec too short"
        src = _ptrs(group_src, factor, size, skip)
        dst = _ptrs(group_dst, 1, size, 0)
        for (cpu, sub), (gpu, _) in zip(src, dst, strict=True):
            name = manager.names.get(keys[cpu], (-1, -1))
            assert name[0] == g, f"group {g} copies a key of group {name[0]}"
            group.append([name[1], sub, table[g].index(gpu)])
        src_off += src_count
        dst_off += size
    assert src_off == len(src_blocks) and dst_off == len(dst_blocks), "spec not consumed"
    return out


def bench(case: dict[str, Any], n: int) -> dict[str, Any]:
    """A new request per call; building the Request is excluded from the time."""
    vllm_config, kv_cache_config, spec, manager, scheduler = setup(case)
    requests = [make_request(case, vllm_config, kv_cache_config, f"b{i}") for i in range(n)]
    for key in offload_keys(spec, requests[0]):
        manager.answers[key] = hit()
    num_computed = case["num_computed_tokens"]

    def call(r: Any) -> Any:
        if Adapter.has_on_new_request:
            scheduler.on_new_request(r)
        return scheduler.get_num_new_matched_tokens(r, num_computed)[0]

    return core.bench_calls(requests, call)


def main() -> None:
    core.main({"version": VERSION, "scheduler_file": sched_mod.__file__}, run_case, bench)


if __name__ == "__main__":
    main()
