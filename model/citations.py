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
        "gpu_hit_none": (KVM, 212),
        "hybrid_no_cp": (UTILS, 620),
        "num_tokens": (SCHED, 397),
        "load_block_indices": (SCHED, 639),
        "worker_skip": ("v1/kv_offload/cpu/gpu_worker.py", 321),
        "sub_block_ptrs": ("v1/kv_offload/cpu/gpu_worker.py", 123),
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
        "gpu_hit_none": (KVM, 218),
        "hybrid_no_cp": (UTILS, 634),
        "num_tokens": (SCHED, 462),
        "load_block_indices": (SCHED, 749),
        "worker_skip": ("v1/kv_offload/cpu/gpu_worker.py", 321),
        "sub_block_ptrs": ("v1/kv_offload/cpu/gpu_worker.py", 123),
    },
}


def cite(version: str, key: str) -> str:
    """``vllm/<path>:<line>`` of step ``key`` in release ``version`` (falls back to 0.24.0)."""
    table = _LINES.get(version, _LINES["0.24.0"])
    path, line = table.get(key) or _LINES["0.24.0"][key]
    return f"vllm/{path}:{line}"
