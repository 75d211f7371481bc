"""Where each modelled step lives in vLLM, per release.

Line numbers were read from the PyPI wheels of each release. Paths are relative to the
``vllm/`` package. ``cite(version, key)`` gives ``"path:line"`` for messages and reports.
"""

from __future__ import annotations

SCHED = "distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py"
BASE = "v1/kv_offload/base.py"
UTILS = "v1/core/kv_cache_utils.py"
SINGLE = "v1/core/single_type_kv_cache_manager.py"
CORE = "v1/engine/core.py"
KVM = "v1/core/kv_cache_manager.py"
CONFIG = "model_executor/models/config.py"

_LINES: dict[str, dict[str, tuple[str, int]]] = {
    "0.23.0": {
        "sw_window_positive": (SCHED, 82),
        "sw_window_blocks": (SCHED, 83),
        "mamba_window": (SCHED, 87),
        "sw_sort": (SCHED, 280),
        "lookup_groups": (SCHED, 284),
        "prefix_lookup": (SCHED, 323),
        "sliding_window_lookup": (SCHED, 342),
        "lookup": (SCHED, 387),
        "leave_last_token": (SCHED, 402),
        "lookup_loop": (SCHED, 405),
        "block_cap": (SCHED, 423),
        "less_than_block_pre": (SCHED, 427),
        "start_block": (SCHED, 434),
        "zero_hit_blocks": (SCHED, 453),
        "hit_min": (SCHED, 459),
        "new_hit": (SCHED, 464),
        "tightened": (SCHED, 469),
        "rerun_all": (SCHED, 474),
        "rerun_sw": (SCHED, 478),
        "deferred": (SCHED, 483),
        "being_loaded": (SCHED, 491),
        "matched_tokens": (SCHED, 537),
        "after_alloc": (SCHED, 573),
        "gpu_blocks": (SCHED, 601),
        "first_pending": (SCHED, 608),
        "sw_pending_assert": (SCHED, 619),
        "keys_to_load": (SCHED, 630),
        "load_needs_no_jobs": (SCHED, 658),
        "gpu_block_size": (BASE, 408),
        "hash_divides": (BASE, 420),
        "same_block_size": (BASE, 434),
        "factor_divides": (BASE, 441),
        "hash_single_group": (UTILS, 616),
        "hash_lcm": (UTILS, 627),
        "hash_mamba_backoff": (UTILS, 641),
        "hash_gcd": (UTILS, 648),
        "hash_invalid": (UTILS, 651),
        "skipped_blocks": (SINGLE, 218),
        "external_alloc": (SINGLE, 249),
        "sw_skipped": (SINGLE, 793),
        "mamba_skipped": (SINGLE, 1209),
        "cache_block_size": (CORE, 283),
        "gpu_hit_cap": (KVM, 221),
        "deepseek_v4": (SCHED, 105),
        "factor_config": (BASE, 430),
        "prefix_defer": (SCHED, 331),
        "mamba_all_default": (CONFIG, 353),
        "mamba_block_size_default": (CONFIG, 386),
    },
    "0.24.0": {
        "sw_window_positive": (SCHED, 97),
        "sw_window_blocks": (SCHED, 98),
        "mamba_window": (SCHED, 102),
        "mamba_align_assert": (SCHED, 121),
        "mamba_align_size": (SCHED, 108),
        "sw_sort": (SCHED, 342),
        "lookup_groups": (SCHED, 346),
        "prefix_lookup": (SCHED, 388),
        "sliding_window_lookup": (SCHED, 407),
        "lookup": (SCHED, 452),
        "leave_last_token": (SCHED, 467),
        "mamba_round_down": (SCHED, 470),
        "lookup_loop": (SCHED, 476),
        "eagle_verified": (SCHED, 481),
        "block_cap": (SCHED, 503),
        "less_than_block_pre": (SCHED, 507),
        "eagle_query": (SCHED, 519),
        "start_block": (SCHED, 527),
        "eagle_window": (SCHED, 540),
        "zero_hit_blocks": (SCHED, 546),
        "eagle_pop": (SCHED, 553),
        "hit_min": (SCHED, 556),
        "new_hit": (SCHED, 561),
        "tightened": (SCHED, 566),
        "eagle_clear": (SCHED, 568),
        "rerun_all": (SCHED, 573),
        "rerun_sw": (SCHED, 577),
        "deferred": (SCHED, 582),
        "being_loaded": (SCHED, 590),
        "matched_tokens": (SCHED, 636),
        "in_flight": (SCHED, 662),
        "skip_reading": (SCHED, 673),
        "after_alloc": (SCHED, 683),
        "gpu_blocks": (SCHED, 711),
        "first_pending": (SCHED, 718),
        "sw_pending_assert": (SCHED, 729),
        "keys_to_load": (SCHED, 740),
        "gpu_block_size": (BASE, 481),
        "hash_divides": (BASE, 493),
        "same_block_size": (BASE, 507),
        "factor_divides": (BASE, 514),
        "hash_single_group": (UTILS, 630),
        "hash_lcm": (UTILS, 641),
        "hash_mamba_backoff": (UTILS, 655),
        "hash_gcd": (UTILS, 662),
        "hash_invalid": (UTILS, 665),
        "skipped_blocks": (SINGLE, 211),
        "external_alloc": (SINGLE, 267),
        "sw_skipped": (SINGLE, 796),
        "mamba_skipped": (SINGLE, 1266),
        "cache_block_size": (CORE, 309),
        "gpu_hit_cap": (KVM, 227),
        "deepseek_v4": (SCHED, 138),
        "factor_config": (BASE, 503),
        "eagle_groups": (SCHED, 169),
        "prefix_defer": (SCHED, 396),
        "mamba_all_default": (CONFIG, 420),
        "mamba_block_size_default": (CONFIG, 453),
    },
}

# The last line of a citation that spans several lines, per release.
_ENDS: dict[str, dict[str, int]] = {
    "0.23.0": {"hit_min": 462, "prefix_defer": 336, "factor_config": 442},
    "0.24.0": {"hit_min": 559, "eagle_groups": 180, "prefix_defer": 401, "factor_config": 515},
}

# What each cited line holds: the first line of a citation contains the first text, the
# last line of a spanning citation the second. tests/test_citations.py checks them against
# the wheels' source, so a line number cannot drift unnoticed.
TOKENS: dict[str, tuple[str, ...]] = {
    "sw_window_positive": ("sliding_window > 0",),
    "sw_window_blocks": ("cdiv(kv_cache_spec.sliding_window",),
    "mamba_window": ("return 1",),
    "mamba_align_assert": ("assert mamba_align_size is None",),
    "mamba_align_size": ("def resolve_mamba_align_size",),
    "deepseek_v4": ("DeepSeek V4",),
    "eagle_groups": ("eagle_groups = {", "eagle_groups = set(range("),
    "sw_sort": ("sliding_window_groups.sort(",),
    "lookup_groups": ("self._lookup_groups =",),
    "prefix_lookup": ("def _maximal_prefix_lookup",),
    "prefix_defer": ("result = self.manager.lookup(", "result = True"),
    "sliding_window_lookup": ("def _sliding_window_lookup",),
    "lookup": ("def _lookup(",),
    "leave_last_token": ("max_hit_size_tokens -= 1",),
    "mamba_round_down": ("max_hit_size_tokens = round_down(",),
    "lookup_loop": ("lookup_groups = self._lookup_groups",),
    "eagle_verified": ("eagle_verified: set[int] = set()",),
    "block_cap": ("block-aligned boundary",),
    "less_than_block_pre": ("max_hit_size_tokens - num_computed_tokens < offloaded_block_size",),
    "eagle_query": ("query_max = min(",),
    "start_block": ("start_block_idx = num_computed_tokens // offloaded_block_size",),
    "eagle_window": ("required_window += 1",),
    "zero_hit_blocks": ("if num_hit_blocks == 0",),
    "eagle_pop": ("num_hit_blocks -= 1",),
    "hit_min": ("max_hit_size_tokens = min(", ")"),
    "new_hit": ("new_num_hit_tokens = max_hit_size_tokens - num_computed_tokens",),
    "tightened": ("if new_num_hit_tokens < num_hit_tokens",),
    "eagle_clear": ("eagle_verified.clear()",),
    "rerun_all": ("lookup_groups = self._lookup_groups",),
    "rerun_sw": ("lookup_groups = self._sliding_window_groups",),
    "deferred": ("if defer_lookup",),
    "being_loaded": ("if self._blocks_being_loaded",),
    "matched_tokens": ("def get_num_new_matched_tokens",),
    "in_flight": ("if req_status.transfer_jobs",),
    "skip_reading": ("skip_reading_prefix_cache",),
    "after_alloc": ("def update_state_after_alloc",),
    "gpu_blocks": ("num_gpu_blocks = cdiv(num_cached_tokens, gpu_block_size)",),
    "first_pending": ("num_locally_computed_gpu_blocks = i",),
    "sw_pending_assert": ("num_pending_gpu_blocks",),
    "keys_to_load": ("keys_to_load.extend(",),
    "load_needs_no_jobs": ("assert not req_status.transfer_jobs",),
    "gpu_block_size": ("self.gpu_block_size",),
    "hash_divides": ("block_size % self.hash_block_size == 0",),
    "same_block_size": ("assert len(gpu_block_sizes) == 1",),
    "factor_config": ('self.extra_config.get("block_size")',
                      "self.block_size_factor = offloaded_block_size_int"),
    "factor_divides": ("offloaded_block_size_int % gpu_block_size == 0",),
    "hash_single_group": ("if len(groups) <= 1",),
    "hash_lcm": ("scheduler_block_size = math.lcm(",),
    "hash_mamba_backoff": ("block_size != cache_config.block_size",),
    "hash_gcd": ("math.gcd(",),
    "hash_invalid": ("raise ValueError(",),
    "skipped_blocks": ("num_skipped_blocks = num_skipped_tokens // self.block_size",),
    "external_alloc": ("cdiv(num_total_computed_tokens, self.block_size)",),
    "sw_skipped": ("num_computed_tokens - self.sliding_window + 1",),
    "mamba_skipped": ("return num_computed_tokens - 1",),
    "cache_block_size": ("cache_config.block_size = min(",),
    "gpu_hit_cap": ("max_cache_hit_length = request.num_tokens - 1",),
    "mamba_all_default": ('"all" if model_config.supports_mamba_prefix_caching',),
    "gpu_hit_none": ("if not self.enable_caching",),
    "hybrid_no_cp": ("if dcp != 1 or pcp != 1",),
    "num_tokens": ("max_hit_size_tokens: int = req_status.req.num_tokens",),
    "load_block_indices": ("block_indices.append(",),
    "worker_skip": ("src_logical_blocks_to_skip = block_idx % self.src_block_size_factor",),
    "sub_block_ptrs": ("flat[skip_count : skip_count + num_sub_blocks]",),
    "mamba_block_size_default": ("cache_config.mamba_block_size = cache_config.block_size",),
}


# Where a release's line reads differently (renamed variables), its own texts.
# (0.33.0: the lines the 0.33.0 semantics cites, where they read otherwise; its lookup
# works in chunks)
RELEASE_TOKENS: dict[str, dict[str, tuple[str, ...]]] = {
    "0.33.0": {
        "mamba_modes": ("MambaCacheMode = Literal[\"align\", \"none\"]",),
        "mamba_mode_align_on": ("if cache_config.mamba_cache_mode == \"none\":",),
        "mamba_mode_none_off": ("if cache_config.mamba_cache_mode != \"none\":",),
        "mamba_manager_align": ("assert self.mamba_cache_mode == \"align\" or not self.enab",),
        "hash_single_group": ("raise ValueError(",),
        "hash_mamba_backoff": ("if any(",),
        "hash_invalid": ("if any(bs % hash_block_size != 0 for bs in hashing_sizes",),
        "partial_hash_hits": ("def partial_hash_hits_enabled(",),
        "cache_hit_alignment": ("def resolve_cache_hit_alignment_tokens(",),
        "eagle_proof_margin": ("def eagle_proof_margin(",),
        "cache_hit_alignment_set": ("cache_hit_alignment_tokens = resolve_cache_hit_alignment",),
        "hash_divides": ("assert tokens_per_block % tokens_per_hash == 0, (",),
        "chunk_both": ("raise ValueError(",),
        "blocks_per_chunk": ("blocks_per_chunk = int(blocks_per_chunk_config)",),
        "same_block_size": ("assert len(unique_tokens_per_block) == 1, (",),
        "chunk_from_block_size": ("blocks_per_chunk = tokens_per_chunk_int // tokens_per_bl",),
        "sw_window_blocks": ("return max(",),
        "tokens_per_chunk": ("tokens_per_chunk=tokens_per_block * spec.blocks_per_chun",),
        "hashes_per_chunk": ("hashes_per_chunk=(",),
        "eagle_group": ("is_eagle_group=group_id in eagle_groups,",),
        "requires_cow_source": ("requires_cow_source=(",),
        "supports_partial_tail": ("supports_partial_tail = (",),
        "load_window": ("def load_window_size_in_chunks(self, num_tokens: int) ->",),
        "partial_tail_block_size": ("self._partial_tail_block_size = (",),
        "eagle_proof_margins": ("self._eagle_proof_margins: dict[int, int] = {",),
        "chunks_being_loaded_set": ("self._chunks_being_loaded: set[OffloadKey] | None = (",),
        "max_load_tokens_param": ("raw = params.get(\"max_load_tokens\") if params else None",),
        "offload_keys": ("def update_offload_keys(self) -> None:",),
        "prefix_hit_pending": ("case LookupResult.HIT | LookupResult.HIT_PENDING:",),
        "prefix_retry": ("case LookupResult.RETRY:",),
        "window_hit_pending": ("case LookupResult.HIT_PENDING:",),
        "window_retry": ("case LookupResult.RETRY:",),
        "lookup_complete_chunks": ("def _lookup_complete_chunks(",),
        "cap_new_tokens": ("if max_num_new_tokens is not None:",),
        "cap_load_tokens": ("if req_status.max_load_tokens is not None:",),
        "hit_end_reset": ("state.lookup_hit_end_chunk_idx = 0",),
        "lookup_loop": ("while lookup_groups:",),
        "block_cap": ("max_hit_size_tokens = min(",),
        "load_cap_align": ("max_hit_size_tokens = round_down(",),
        "less_than_block_pre": ("if max_hit_size_tokens - num_computed_tokens < tokens_pe",),
        "start_block": ("start_chunk_idx = num_computed_tokens // tokens_per_chun",),
        "hit_end_chunk": ("group_state.lookup_hit_end_chunk_idx = start_chunk_idx +",),
        "initial_window": ("initial_window = group_config.load_window_size_in_chunks",),
        "zero_hit_blocks": ("if num_hit_chunks == 0:",),
        "eagle_pop": ("num_hit_chunks -= 1",),
        "being_loaded": ("if self._chunks_being_loaded:",),
        "boundary_key": ("hash_idx = boundary_tokens // self.config.tokens_per_has",),
        "tail_search": ("num_search_blocks = 2 if self._max_eagle_proof_margin el",),
        "tail_max_boundary": ("max_boundary = min(req_status.req.num_prompt_tokens - 1,",),
        "tail_round": ("max_boundary = round_down(max_boundary, tokens_per_hash)",),
        "bridge": ("bridge_chunk_idx = complete_boundary // block_size",),
        "bridge_miss": ("if result is LookupResult.MISS:",),
        "bridge_lookup": ("result = self.manager.lookup(key, req_status.req_context",),
        "tail_hit": ("if hit:",),
        "load_start": ("load_start_gpu_block_idx = i",),
        "load_chunks": ("num_chunks = cdiv(num_cached_tokens, tokens_per_chunk)",),
        "being_loaded_window": ("sliding_window_size_in_chunks = group_config.load_window",),
        "tail_loop": ("for boundary in range(max_boundary, complete_boundary, -",),
        "tail_pending": ("if pending and complete_hit == 0:",),
        "tail_key_tokens": ("return boundary + self._eagle_proof_margins.get(group_co",),
        "lookup_partial_tail": ("def _lookup_partial_tail(",),
        "tail_is_hit_end": ("assert partial_tail_boundary == num_cached_tokens",),
        "gpu_blocks": ("num_gpu_blocks = cdiv(num_cached_tokens, tokens_per_bloc",),
        "first_pending": ("first_fresh_gpu_block_idx = cdiv(",),
        "local_block_aligned": ("assert num_locally_computed_tokens % tokens_per_block ==",),
        "sw_pending_assert": ("assert (",),
        "keys_to_load": ("end_chunk_idx = num_chunks - (partial_tail_boundary is n",),
        "tail_key_load": ("if partial_tail_boundary is not None:",),
        "worker_group_copy": ("for g_idx, (group_size, block_idx) in enumerate(",),
        "external_alloc": ("def allocate_external_computed_blocks(",),
        "store_jobs": ("def _build_store_jobs(",),
        "store_skips_cow": ("if group_config.requires_cow_source:",),
        "aligned_boundary_store": ("def _build_aligned_boundary_store_jobs(",),
        "partial_tail_store": ("def _build_partial_tail_store_jobs(",),
    },
}


def tokens(version: str, key: str) -> tuple[str, ...] | None:
    """The texts the cited lines of step ``key`` in ``version`` hold (None: none recorded)."""
    return RELEASE_TOKENS.get(version, {}).get(key) or TOKENS.get(key)


def releases() -> tuple[str, ...]:
    return tuple(_LINES)


def span(version: str, key: str) -> tuple[str, int, int] | None:
    """``(path, first line, last line)`` of step ``key`` in ``version``, or None."""
    where = _LINES.get(version, {}).get(key)
    if where is None:
        return None
    path, line = where
    return path, line, _ENDS.get(version, {}).get(key, line)


def cite(version: str, key: str) -> str:
    """``vllm/<path>:<line>`` of step ``key`` in release ``version`` (falls back to 0.24.0)."""
    table = _LINES.get(version, _LINES["0.24.0"])
    path, line = table.get(key) or _LINES["0.24.0"][key]
    return f"vllm/{path}:{line}"
