"""Scenario -> the explicit case the in-venv harness runs (pure; no vLLM import).

The harness turns a case into real vLLM objects (``adapters/harness.py``):

- each group -> a ``KVCacheGroupSpec`` with ``FullAttentionSpec`` / ``SlidingWindowSpec`` /
  ``MambaSpec(mamba_cache_mode=...)`` of ``block_size = gpu_block_size`` and
  ``is_eagle_group = eagle``;
- ``block_size_factor != 1`` -> ``kv_connector_extra_config["block_size"] =
  gpu_block_size * block_size_factor`` (``OffloadingSpec.__init__``, v1/kv_offload/base.py:503
  in 0.24.0, derives the factor back from it and asserts one GPU block size);
- ``enable_prefix_caching``, ``hash_block_size`` and ``mamba_block_size`` -> ``CacheConfig``;
  ``cache_config.block_size`` = the smallest group block size (v1/engine/core.py:309);
- ``stored`` / ``deferred`` -> what the stand-in manager's ``lookup`` answers per
  (group, offloaded block index): deferred -> None, stored -> True, else False;
- ``being_loaded`` -> those blocks' offload keys in ``_blocks_being_loaded``;
- ``in_flight_transfers`` -> a fake job id in the request state's ``transfer_jobs``;
- ``skip_reading_prefix_cache`` -> ``SamplingParams(skip_reading_prefix_cache=True)``;
- ``output_tokens`` -> that many output tokens appended to the ``Request``
  (``Request.append_output_token_ids``: a resumed request, ``num_tokens`` = prompt + output);
- ``context_parallel_size`` -> ``parallel_config.decode_context_parallel_size`` (the
  offloading spec multiplies every group's block size by it, base.py:481) and the
  ``KVCacheManager``'s ``dcp_world_size``.
- 0.33.0 (``adapters/harness_chunked.py``): ``blocks_per_chunk`` -> the extra config;
  ``pending`` -> HIT_PENDING, ``deferred`` -> RETRY, ``stored_tails`` / ``pending_tails``
  / ``deferred_tails`` -> the answers for the partial-tail keys ending at those tokens;
  ``max_load_tokens`` -> the request's ``kv_transfer_params``; ``max_num_new_tokens`` ->
  the argument of ``get_num_new_matched_tokens``; ``hash_block_size`` ->
  ``cache_config.prefix_match_unit``.
"""

from __future__ import annotations

from typing import Any

import releases
from model.scenario import Scenario


def offloaded_block_size(s: Scenario, group: int) -> int:
    return s.groups[group].gpu_block_size * s.context_parallel_size * s.block_size_factor


def extra_config(s: Scenario) -> dict[str, Any]:
    if s.blocks_per_chunk is not None:  # 0.33.0 (offloading/config.py:131)
        out: dict[str, Any] = {"blocks_per_chunk": s.blocks_per_chunk}
        if s.block_size_factor != 1:  # both: 0.33.0 refuses (offloading/config.py:126)
            out["block_size"] = s.groups[0].gpu_block_size * s.block_size_factor
        return out
    if s.block_size_factor == 1:
        return {}
    # with several GPU block sizes the spec refuses whatever we pass (base.py:507)
    return {"block_size": offloaded_block_size(s, 0)}


def to_case(s: Scenario) -> dict[str, Any]:
    """The JSON-able case for one scenario (the semantics field is not used here)."""
    groups = []
    store = []
    being_loaded: list[list[int]] = []
    for i, g in enumerate(s.groups):
        groups.append({
            "kind": g.kind,
            "block_size": g.gpu_block_size,
            "sliding_window": g.sliding_window,
            "mamba_cache_mode": g.mamba_cache_mode,
            "eagle": g.eagle,
        })
        store.append({
            "stored": None if g.stored is None else sorted(g.stored),
            "deferred": sorted(g.deferred),
            "pending": sorted(g.pending),
            "stored_tails": sorted(g.stored_tails),
            "pending_tails": sorted(g.pending_tails),
            "deferred_tails": sorted(g.deferred_tails),
        })
        being_loaded.extend([i, b] for b in sorted(g.being_loaded))
    return {
        "groups": groups,
        "extra_config": extra_config(s),
        "enable_prefix_caching": s.enable_prefix_caching,
        "hash_block_size": s.hash_block_size,
        "mamba_block_size": s.mamba_block_size,
        "prompt_tokens": s.prompt_tokens,
        "output_tokens": s.output_tokens,
        "context_parallel_size": s.context_parallel_size,
        "num_computed_tokens": s.num_computed_tokens,
        "store": store,
        "being_loaded": being_loaded,
        "in_flight_transfers": s.in_flight_transfers,
        "skip_reading_prefix_cache": s.skip_reading_prefix_cache,
        "max_num_new_tokens": s.max_num_new_tokens,
        "max_load_tokens": s.max_load_tokens,
    }


def semantics_for(version: str) -> str:
    """The release semantics of vLLM ``version`` (ValueError: not modelled)."""
    return releases.by_version(version).name


# the fix diffs the harness can apply (env CROSSCHECK_FIX; adapters/fix001_chunked.py
# applies them in process), by the id it takes
HARNESS_FIXES = {
    "docs/findings/001-fix.diff": "001",
    "docs/findings/001-fix-rerun.diff": "001b",
    "docs/findings/003-fix.diff": "003",
}
# fixes that have a real counterpart: the release with their diff applied in its harness
REAL_FIXES: dict[str, tuple[str, str]] = {
    name: (sem.base_version, HARNESS_FIXES[sem.fix_diff])
    for name, sem in releases.all_semantics().items()
    if sem.kind == "fix" and sem.fix_diff in HARNESS_FIXES
}


def fix_for(version: str, semantics: str) -> str | None:
    """The fix the harness applies so that the real side runs ``semantics`` (None: the
    release as shipped); ValueError names the field when there is no such counterpart."""
    if semantics == semantics_for(version):
        return None
    if semantics not in REAL_FIXES:
        known = ", ".join(REAL_FIXES)
        raise ValueError(f"--semantics: {semantics!r} has no real counterpart (vllm-X or "
                         f"one of: {known})")
    base, fix = REAL_FIXES[semantics]
    if base != version:
        raise ValueError(f"--semantics: {semantics} is a fix of vLLM {base}, not {version}")
    return fix
