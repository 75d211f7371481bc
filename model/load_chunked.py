"""vLLM 0.33.0's ``update_state_after_alloc`` (offloading/scheduler.py:1351): the keys a
hit hands to ``prepare_load`` per group, and the recurrent state a Mamba group receives.

The load starts, per group, at the first GPU block past the GPU prefix hit that is not a
null placeholder (scheduler.py:1401-1410; the allocator pads blocks outside a sliding
window and every Mamba block but the running one with nulls, ``get_num_skipped_tokens``
in v1/core/single_type_kv_cache_manager.py). Its keys are the chunks from that block's
chunk to the hit's last chunk; a partial-tail hit replaces the last chunk by the
boundary key (scheduler.py:1428-1440).

What the worker copies (v1/kv_offload/cpu/gpu_worker.py:629-660): per group, the pending
GPU blocks in order, from the loaded chunks starting at sub-block ``block_index %
blocks_per_chunk``. A Mamba group's running state is its last pending GPU block; from a
chunk it is the state stored for that block, which ends at ``num_gpu_blocks *
tokens_per_block``; from a partial-tail key it is the state at the key's boundary
(``_build_partial_tail_store_jobs`` stores the CoW copy made there, scheduler.py:1626).
``GroupLoad.blocks`` lists the keys by the token position where each ends.
"""

from __future__ import annotations

from model.layout import cdiv
from model.layout_chunked import ChunkGroup, ChunkLayout
from model.load_plan import GroupLoad, LoadPlan, num_skipped_tokens
from model.scenario import Group, Scenario


def _group_load(cfg: ChunkGroup, g: Group, layout: ChunkLayout, s: Scenario,
                num_cached_tokens: int, boundary: int | None
                ) -> tuple[GroupLoad, str | None]:
    local = s.num_computed_tokens
    tpb = cfg.tokens_per_block
    tpc = cfg.tokens_per_chunk
    bpc = layout.blocks_per_chunk
    num_gpu_blocks = cdiv(num_cached_tokens, tpb)  # scheduler.py:1393
    first_fresh = cdiv(local, tpb)  # scheduler.py:1401
    # scheduler.py:1406: the first non-null block without a hash at or past first_fresh
    first_real = num_skipped_tokens(g, num_cached_tokens) // tpb
    load_start = min(max(first_fresh, first_real), num_gpu_blocks)
    assertion = None
    if local % tpb:  # scheduler.py:1412
        assertion = (f"group {cfg.group_idx}: the GPU hit {local} is not a multiple of the "
                     f"block size {tpb} (scheduler.py:1412)")
    num_pending = num_gpu_blocks - load_start
    window = cfg.sliding_window_size_in_chunks
    if window is not None and num_pending > window * bpc + 1:  # scheduler.py:1416
        assertion = assertion or (
            f"group {cfg.group_idx}: {num_pending} pending GPU blocks exceed the window of "
            f"{window * bpc + 1} (scheduler.py:1416)")
    num_chunks = cdiv(num_cached_tokens, tpc)  # scheduler.py:1423
    keys: list[int] = []
    state = None
    if num_pending:
        start_chunk = load_start // bpc  # scheduler.py:1425
        end_chunk = num_chunks - (boundary is not None)  # scheduler.py:1428
        keys = [(c + 1) * tpc for c in range(start_chunk, end_chunk)]
        if boundary is not None:  # scheduler.py:1431: the partial-tail key
            keys.append(layout.partial_tail_key_tokens(cfg.group_idx, boundary))
        if g.kind == "mamba":
            state = boundary if boundary is not None else num_gpu_blocks * tpb
    # scheduler.py:1465-1466: group_sizes / block_indices of the GPU spec
    return GroupLoad(cfg.group_idx, tuple(keys), state, load_start, num_pending), assertion


def load_plan(layout: ChunkLayout, s: Scenario, num_external_tokens: int | None,
              boundary: int | None) -> LoadPlan:
    """The load a hit of ``num_external_tokens`` issues (none for 0 or a deferral)."""
    if not num_external_tokens:  # scheduler.py:1362
        return LoadPlan(())
    num_cached_tokens = s.num_computed_tokens + num_external_tokens
    if boundary is not None:  # scheduler.py:1377
        assert boundary == num_cached_tokens
    loads = []
    assertion = None
    for cfg, g in zip(layout.groups, s.groups, strict=True):
        load, failed = _group_load(cfg, g, layout, s, num_cached_tokens, boundary)
        loads.append(load)
        assertion = assertion or failed
    return LoadPlan(tuple(loads), assertion, boundary)
