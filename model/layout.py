"""Start-up: the per-group offload configuration and the checks a release runs on it.

Mirrors ``SchedulerOffloadConfig.from_spec`` / ``OffloadingConnectorScheduler.__init__``
(scheduler.py) and ``OffloadingSpec.__init__`` (v1/kv_offload/base.py), and the
``hash_block_size`` resolution in ``resolve_kv_cache_block_sizes`` (v1/core/kv_cache_utils.py).
A layout the named release refuses at start-up raises ``Refused``, naming the vLLM check.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

from model.citations import cite
from model.scenario import Scenario, ScenarioError
from model.semantics import Semantics
from releases import steps
from releases.arith import INT


class Refused(Exception):
    """The named vLLM release would refuse this scenario; ``str()`` is one line."""

    def __init__(self, check: str, message: str) -> None:
        super().__init__(f"refused by {check}: {message}")
        self.check = check


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def round_down(a: int, b: int) -> int:
    return a // b * b


@dataclass(frozen=True)
class GroupConfig:
    """One group's offload configuration (``GroupOffloadConfig`` in scheduler.py)."""

    group_idx: int
    kind: str
    gpu_block_size: int
    offloaded_block_size: int
    hash_block_size_factor: int
    # None means full attention; Mamba groups use a window of one block
    sliding_window_size_in_blocks: int | None
    is_eagle_group: bool


@dataclass(frozen=True)
class Layout:
    groups: tuple[GroupConfig, ...]
    block_size_factor: int
    hash_block_size: int
    sliding_window_groups: tuple[int, ...]
    lookup_groups: tuple[int, ...]
    # the size max_hit_size_tokens (or num_hit_tokens) is rounded down to; None: no rounding
    mamba_align_size: int | None


def gpu_block_sizes(s: Scenario) -> list[int]:
    """The offloading spec's ``gpu_block_size`` per group: the group's block size times
    the context-parallel factor (v1/kv_offload/base.py:481 (408))."""
    return [g.gpu_block_size * s.context_parallel_size for g in s.groups]


def resolve_hash_block_size(s: Scenario, version: str) -> int:
    """``resolve_kv_cache_block_sizes``' hash block size, for a connector-enabled engine."""
    sizes = [g.gpu_block_size for g in s.groups]
    # the engine sets cache_config.block_size to the smallest group block size
    cache_block_size = min(sizes)  # v1/engine/core.py:309
    if len(sizes) <= 1:  # kv_cache_utils.py:630 (single group: block size * dcp * pcp)
        return cache_block_size * s.context_parallel_size
    if s.context_parallel_size != 1:  # kv_cache_utils.py:634 (620)
        raise Refused(
            cite(version, "hybrid_no_cp"),
            f"context_parallel_size {s.context_parallel_size} with {len(sizes)} KV-cache "
            "groups: hybrid layouts do not support context parallelism",
        )
    # kv_cache_utils.py:655: a Mamba group whose block size differs from the cache block
    # size backs the hash block size off to the scheduler block size (the lcm)
    if any(g.kind == "mamba" and g.gpu_block_size != cache_block_size for g in s.groups):
        return math.lcm(*sizes)
    # kv_cache_utils.py:662: the cache_config override, else the gcd of the block sizes
    hash_block_size = s.hash_block_size if s.hash_block_size is not None else math.gcd(*sizes)
    if any(bs % hash_block_size for bs in sizes):  # kv_cache_utils.py:665
        raise Refused(
            cite(version, "hash_invalid"),
            f"hash_block_size {hash_block_size} does not divide every group block size {sizes}",
        )
    return hash_block_size


def _window_in_blocks(kind: str, window: int | None, offloaded_block_size: int) -> int | None:
    # get_sliding_window_size_in_blocks (scheduler.py:93)
    if kind == "sliding_window":
        assert window is not None and window > 0  # scheduler.py:97 (the parser refuses 0)
        return cdiv(window, offloaded_block_size)  # scheduler.py:98
    if kind == "mamba":
        return 1  # scheduler.py:102: Mamba depends on a single state
    return None


def _chunk_factor(s: Scenario, sem: Semantics) -> int:
    """GPU blocks per offloaded block: the extra config's ``block_size`` factor, or from
    0.26.0 its ``blocks_per_chunk`` (offloading/config.py:64-73 in 0.26.0)."""
    has_bpc = s.blocks_per_chunk is not None
    if has_bpc and s.block_size_factor != 1:
        raise Refused(
            cite(sem.base_version, "chunk_both"),
            "blocks_per_chunk with block_size_factor != 1: specify only one of "
            "'block_size' or 'blocks_per_chunk'",
        )
    # the step proofs/encoding.py reads too (releases.steps)
    factor: int = steps.chunk_blocks(INT, s.block_size_factor, s.blocks_per_chunk or 0,
                                     has_bpc)
    return factor


def check_mamba_modes(s: Scenario, sem: Semantics) -> None:
    """0.26.0 on (``offloading_config``): the engine's ``MambaModelConfig`` sets the Mamba
    cache mode from prefix caching (for a model that supports Mamba prefix caching):
    "none" becomes "all" with caching on, any other mode "none" with it off
    (model_executor/models/config.py:559-561, 596 in 0.26.0). The mode is one engine
    setting (``CacheConfig.mamba_cache_mode``, config/cache.py:139), so every Mamba group
    has the same."""
    modes = sorted({str(g.mamba_cache_mode) for g in s.groups if g.kind == "mamba"})
    if len(modes) > 1:
        raise Refused(cite(sem.base_version, "mamba_mode_one"),
                      f"groups: Mamba groups in modes {modes}; {sem.base_version} runs every "
                      "Mamba group in the engine's one mamba_cache_mode")
    for i, g in enumerate(s.groups):
        if g.kind != "mamba":
            continue
        if s.enable_prefix_caching and g.mamba_cache_mode == "none":
            raise Refused(cite(sem.base_version, "mamba_all_default"),
                          f"groups[{i}].mamba_cache_mode: with prefix caching on "
                          f"{sem.base_version} runs Mamba in mode 'all', not 'none'")
        if not s.enable_prefix_caching and g.mamba_cache_mode != "none":
            raise Refused(cite(sem.base_version, "mamba_mode_none_off"),
                          f"groups[{i}].mamba_cache_mode: with prefix caching off "
                          f"{sem.base_version} runs Mamba in mode 'none'")


def _mamba_align_size(s: Scenario, sem: Semantics, factor: int) -> int | None:
    align_groups = [
        g for g in s.groups if g.kind == "mamba" and g.mamba_cache_mode == "align"
    ]
    if sem.align_at == "none" or not align_groups:
        return None
    if sem.align_from == "cache_config":
        if s.mamba_block_size is None:
            raise ScenarioError(
                f"mamba_block_size: required by semantics {sem.name} when a Mamba align "
                "group is present"
            )
        return s.mamba_block_size
    # resolve_mamba_align_size (scheduler.py:108): every align group's offloaded size
    cp = s.context_parallel_size
    sizes = {g.gpu_block_size * cp * factor for g in align_groups}
    if sem.align_assert and len(sizes) > 1:
        raise Refused(
            cite(sem.base_version, "mamba_align_assert"),
            f"Mamba align groups disagree on the offloaded block size {sorted(sizes)}",
        )
    # the last one, as vLLM
    return align_groups[-1].gpu_block_size * cp * factor


def resolve_layout(s: Scenario, sem: Semantics) -> Layout:
    """Build the layout the release's start-up code builds, or raise ``Refused``."""
    version = sem.base_version
    if sem.offloading_config:
        check_mamba_modes(s, sem)
    hash_block_size = resolve_hash_block_size(s, version)
    gpu_sizes = gpu_block_sizes(s)
    for bs in gpu_sizes:  # base.py:493
        if bs % hash_block_size:
            raise Refused(
                cite(version, "hash_divides"),
                f"gpu_block_size {bs} is not divisible by hash_block_size "
                f"{hash_block_size}",
            )
    factor = _chunk_factor(s, sem)
    if s.block_size_factor != 1 and len(set(gpu_sizes)) != 1:
        # base.py:507: an offloaded 'block_size' needs one GPU block size for all groups
        raise Refused(
            cite(version, "same_block_size"),
            "block_size_factor != 1 needs every group to have the same gpu_block_size",
        )
    groups = []
    for i, (g, bs) in enumerate(zip(s.groups, gpu_sizes, strict=True)):
        obs = bs * factor
        groups.append(
            GroupConfig(
                group_idx=i,
                kind=g.kind,
                gpu_block_size=bs,
                offloaded_block_size=obs,
                hash_block_size_factor=obs // hash_block_size,
                sliding_window_size_in_blocks=_window_in_blocks(g.kind, g.sliding_window, obs),
                # 0.23.0 has no EAGLE handling in the offloading scheduler
                is_eagle_group=g.eagle and sem.eagle,
            )
        )
    full = [c.group_idx for c in groups if c.sliding_window_size_in_blocks is None]
    windowed = [c.group_idx for c in groups if c.sliding_window_size_in_blocks is not None]
    # scheduler.py:342: sliding-window groups by window size, largest first (stable sort)
    windowed.sort(key=lambda i: groups[i].sliding_window_size_in_blocks or 0, reverse=True)
    return Layout(
        groups=tuple(groups),
        block_size_factor=factor,
        hash_block_size=hash_block_size,
        sliding_window_groups=tuple(windowed),
        lookup_groups=tuple(full) + tuple(windowed),  # scheduler.py:346
        mamba_align_size=_mamba_align_size(s, sem, factor),
    )


# ``resolve_layout`` per (release, start-up fields): a simulator run looks up one layout
# thousands of times. The key is every field resolve_layout reads (tests/test_layout_memo.py
# checks that against what it reads); refusals are not kept. Bounded: cleared when full.
STARTUP_GROUP_FIELDS = ("kind", "gpu_block_size", "sliding_window", "mamba_cache_mode", "eagle")
STARTUP_FIELDS = ("block_size_factor", "context_parallel_size", "hash_block_size",
                  "mamba_block_size", "blocks_per_chunk", "enable_prefix_caching")
_startup_fields = operator.attrgetter(*STARTUP_FIELDS)
_startup_group_fields = operator.attrgetter(*STARTUP_GROUP_FIELDS)
_LAYOUTS: dict[tuple[object, ...], Layout] = {}


def startup_layout(s: Scenario, sem: Semantics) -> Layout:
    """``resolve_layout(s, sem)``, kept per release and start-up fields."""
    key = (sem, _startup_fields(s), tuple(map(_startup_group_fields, s.groups)))
    layout = _LAYOUTS.get(key)
    if layout is None:
        layout = resolve_layout(s, sem)
        if len(_LAYOUTS) >= 1024:
            _LAYOUTS.clear()
        _LAYOUTS[key] = layout
    return layout


def check_request(s: Scenario, version: str) -> None:
    """Refuse requests a real engine cannot produce (the GPU prefix hit's shape)."""
    # the scheduler block size: one group's block size * dcp * pcp, else the lcm
    # (kv_cache_utils.py:630, 641); a multi-group layout with cp > 1 is refused before
    scheduler_block_size = math.lcm(*gpu_block_sizes(s))
    if s.num_computed_tokens and (
            not s.enable_prefix_caching or s.skip_reading_prefix_cache):
        # get_computed_blocks finds no GPU hit without prefix caching, or for a request
        # that skips reading the cache (kv_cache_manager.py:218 (212))
        raise Refused(
            cite(version, "gpu_hit_none"),
            f"num_computed_tokens {s.num_computed_tokens} must be 0: there is no GPU prefix "
            "hit with enable_prefix_caching off or skip_reading_prefix_cache on",
        )
    if s.num_computed_tokens % scheduler_block_size:
        raise Refused(
            cite(version, "hash_lcm"),
            f"num_computed_tokens {s.num_computed_tokens} is not a multiple of the scheduler "
            f"block size {scheduler_block_size}: GPU prefix-cache hits are aligned to it",
        )
    if s.num_computed_tokens >= s.num_tokens:
        raise Refused(
            cite(version, "gpu_hit_cap"),
            f"num_computed_tokens {s.num_computed_tokens} must be < num_tokens "
            f"{s.num_tokens}: the GPU prefix hit always leaves the last token",
        )
