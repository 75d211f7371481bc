"""``update_state_after_alloc``: which offloaded blocks a hit loads, per group, and
what the worker copies out of them.

The GPU blocks a request holds after ``KVCacheManager.allocate_slots`` decide where the
load starts: ``update_state_after_alloc`` (scheduler.py:683 (573)) loads from the first
GPU block that is neither a null placeholder nor already cached. Blocks outside a
sliding window, and every Mamba block but the one holding the running state, are null
placeholders (``get_num_skipped_tokens`` in v1/core/single_type_kv_cache_manager.py).

The transfer spec names the pending GPU blocks and, per group, the index of the first
one (``block_indices``, scheduler.py:749 (639)). The CPU worker skips
``block_idx % block_size_factor`` GPU-sized sub-blocks of the first offloaded block
(v1/kv_offload/cpu/gpu_worker.py:321) and copies the pending ones in order
(``compute_sub_block_ptrs``, gpu_worker.py:123): GPU block ``p`` receives sub-block
``p % factor`` of offloaded block ``p // factor``. A Mamba group's sub-block ``j`` of
offloaded block ``k`` holds the state saved at the end of GPU block ``k * factor + j``
(the store copies GPU blocks into sub-blocks the same way, scheduler.py:958), so the
restored state is the one at the end of the last GPU block filled. The store copies
only the GPU blocks that are not null placeholders when it runs (scheduler.py:960): a
Mamba group's last sub-block (the running state at the offloaded block's end) is always
among them, an earlier sub-block only if a prefill chunk ended there and its GPU block
was still held. ``state_in_last_sub_block`` says whether the restored state is the sure
one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from model.layout import GroupConfig, Layout, cdiv
from model.scenario import Group, Scenario
from releases import steps


@dataclass(frozen=True)
class GroupLoad:
    group: int
    blocks: Sequence[int]  # offloaded block indices (a range) whose keys go to prepare_load
    # Mamba groups: the token position of the recurrent state the load restores, the
    # end of the last GPU block the worker fills
    state_position: int | None
    # vLLM 0.33.0: the GPU side the worker copies into (GPULoadStoreSpec, scheduler.py:1475):
    # the first pending GPU block's index and how many blocks follow it
    gpu_block_index: int | None = None
    gpu_blocks: int = 0
    # the restored Mamba state comes from the last sub-block of its offloaded block
    # (the state every store of that block writes)
    state_in_last_sub_block: bool = True
    # releases before 0.33.0: the worker fills GPU blocks copy_start .. copy_end - 1 of the
    # request's block table, GPU block p from sub-block p % factor of offloaded block
    # p // factor (``copies`` lists them; kept as bounds so a long prompt costs no memory)
    copy_start: int = 0
    copy_end: int = 0
    factor: int = 1

    @property
    def copies(self) -> tuple[tuple[int, int, int], ...]:
        """What the worker copies: (offloaded block, sub-block, GPU block position in the
        request's block table), in copy order."""
        f = self.factor
        return tuple((p // f, p % f, p) for p in range(self.copy_start, self.copy_end))

    @property
    def last_copy(self) -> tuple[int, int, int] | None:
        if self.copy_end <= self.copy_start:
            return None
        p = self.copy_end - 1
        return (p // self.factor, p % self.factor, p)


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
                factor: int, slack: int) -> tuple[GroupLoad, str | None]:
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
    # scheduler.py:728; 0.27.0 accepts ``slack`` (one) more block (its scheduler.py:918)
    limit = None if window is None else steps.load_window_limit(window, factor, slack)
    if limit is not None and num_pending_gpu_blocks > limit:
        assertion = (f"group {cfg.group_idx}: {num_pending_gpu_blocks} pending GPU blocks "
                     f"exceed the window of {limit} (scheduler.py:728)")
    num_blocks = cdiv(num_cached_tokens, cfg.offloaded_block_size)  # scheduler.py:734
    blocks = range(0)
    if num_pending_gpu_blocks:
        start_block_idx = first_pending // factor  # scheduler.py:737 (627)
        blocks = range(start_block_idx, num_blocks)  # scheduler.py:740 (630)
    state = None
    copy_end = first_pending
    if blocks:
        # gpu_worker.py:321: skip first_pending % factor sub-blocks of the first
        # offloaded block, then one sub-block per pending GPU block
        copy_end = num_gpu_blocks
        if g.kind == "mamba":
            state = num_gpu_blocks * gpu_bs  # the end of GPU block num_gpu_blocks - 1
    last_sub_block = num_gpu_blocks % factor == 0  # GPU block num_gpu_blocks - 1
    return GroupLoad(cfg.group_idx, blocks, state, state_in_last_sub_block=last_sub_block,
                     copy_start=first_pending, copy_end=copy_end, factor=factor), assertion


def load_plan(layout: Layout, s: Scenario, num_external_tokens: int | None,
              window_slack: int = 0) -> LoadPlan:
    """The load a hit of ``num_external_tokens`` issues (none for 0 or a deferral);
    ``window_slack``: pending GPU blocks a window group accepts beyond its window
    (``Semantics.load_window_slack``)."""
    if not num_external_tokens:  # scheduler.py:686: nothing to load
        return LoadPlan(())
    loads = []
    assertion = None
    for cfg, g in zip(layout.groups, s.groups, strict=True):
        load, failed = _group_load(cfg, g, s, num_external_tokens, layout.block_size_factor,
                                   window_slack)
        loads.append(load)
        assertion = assertion or failed
    return LoadPlan(tuple(loads), assertion)
