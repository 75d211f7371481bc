"""``update_state_after_alloc``: which offloaded blocks a hit loads, per group.

The GPU blocks a request holds after ``KVCacheManager.allocate_slots`` decide where the
load starts: ``update_state_after_alloc`` (scheduler.py:683 (573)) loads from the first
GPU block that is neither a null placeholder nor already cached. Blocks outside a
sliding window, and every Mamba block but the one holding the running state, are null
placeholders (``get_num_skipped_tokens`` in v1/core/single_type_kv_cache_manager.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from model.layout import GroupConfig, Layout, cdiv
from model.scenario import Group, Scenario


@dataclass(frozen=True)
class GroupLoad:
    group: int
    blocks: Sequence[int]  # offloaded block indices (a range) whose keys go to prepare_load
    # Mamba groups: the token position of the recurrent state the load brings; an
    # offloaded Mamba block carries the state at its end (resolve_mamba_align_size
    # aligns to the offloaded block size, scheduler.py:108)
    state_position: int | None
    # vLLM 0.33.0: the GPU side the worker copies into (GPULoadStoreSpec, scheduler.py:1475):
    # the first pending GPU block's index and how many blocks follow it
    gpu_block_index: int | None = None
    gpu_blocks: int = 0


@dataclass(frozen=True)
class LoadPlan:
    loads: tuple[GroupLoad, ...]
    # a vLLM assertion in update_state_after_alloc that this load would trip, if any
    assertion: str | None = None
    # vLLM 0.33.0: the partial-tail boundary the hit ends at (None: whole chunks)
    tail_boundary: int | None = None


def num_skipped_tokens(group: Group, num_computed_tokens: int) -> int:
    """Tokens whose GPU blocks are null placeholders once this many tokens are computed."""
    if group.kind == "sliding_window":
        assert group.sliding_window is not None
        # single_type_kv_cache_manager.py:796 (793)
        return max(0, num_computed_tokens - group.sliding_window + 1)
    if group.kind == "mamba":
        return num_computed_tokens - 1  # single_type_kv_cache_manager.py:1266 (1209)
    return 0


def _group_load(cfg: GroupConfig, g: Group, s: Scenario, num_external_tokens: int,
                factor: int) -> tuple[GroupLoad, str | None]:
    num_cached_tokens = s.num_computed_tokens + num_external_tokens
    gpu_bs = cfg.gpu_block_size
    num_gpu_blocks = cdiv(num_cached_tokens, gpu_bs)  # scheduler.py:711 (601)
    # add_local_computed_blocks pads skipped blocks with nulls, then the GPU-cached
    # blocks; allocate_external_computed_blocks appends fresh (unhashed) blocks
    # (single_type_kv_cache_manager.py:211, 267)
    skipped_blocks = num_skipped_tokens(g, num_cached_tokens) // gpu_bs
    local_blocks = s.num_computed_tokens // gpu_bs
    # scheduler.py:716 (606): the first block that is not null and has no hash
    first_pending = min(max(skipped_blocks, local_blocks), num_gpu_blocks)
    num_pending_gpu_blocks = num_gpu_blocks - first_pending
    assertion = None
    window = cfg.sliding_window_size_in_blocks
    if window is not None and num_pending_gpu_blocks > window * factor:
        assertion = (f"group {cfg.group_idx}: {num_pending_gpu_blocks} pending GPU blocks "
                     f"exceed the window of {window * factor} (scheduler.py:728)")
    num_blocks = cdiv(num_cached_tokens, cfg.offloaded_block_size)  # scheduler.py:734
    blocks = range(0)
    if num_pending_gpu_blocks:
        start_block_idx = first_pending // factor  # scheduler.py:737 (627)
        blocks = range(start_block_idx, num_blocks)  # scheduler.py:740 (630)
    state = None
    if g.kind == "mamba" and blocks:
        state = (blocks[-1] + 1) * cfg.offloaded_block_size
    return GroupLoad(cfg.group_idx, blocks, state), assertion


def load_plan(layout: Layout, s: Scenario, num_external_tokens: int | None) -> LoadPlan:
    """The load a hit of ``num_external_tokens`` issues (none for 0 or a deferral)."""
    if not num_external_tokens:  # scheduler.py:686: nothing to load
        return LoadPlan(())
    loads = []
    assertion = None
    for cfg, g in zip(layout.groups, s.groups, strict=True):
        load, failed = _group_load(cfg, g, s, num_external_tokens, layout.block_size_factor)
        loads.append(load)
        assertion = assertion or failed
    return LoadPlan(tuple(loads), assertion)
