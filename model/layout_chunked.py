"""vLLM 0.33.0 start-up: the offloading configuration and the checks that refuse layouts.

0.33.0 moved the start-up work: ``build_offloading_config`` (offloading/config.py) resolves
the hash size (``tokens_per_hash``) and ``blocks_per_chunk``; ``SchedulerOffloadConfig.
from_spec`` (offloading/scheduler.py) builds the per-group chunk sizes, whether partial
tails are supported and the EAGLE proof margins; ``resolve_kv_cache_block_sizes`` and
``resolve_cache_hit_alignment_tokens`` (v1/core/kv_cache_utils.py) give the hash size and
the granularity of GPU prefix-cache hits. A chunk is ``blocks_per_chunk`` GPU blocks of a
group, so groups with different block sizes have different chunk sizes. Every step cites
its 0.33.0 line (``model.citations``, version "0.33.0").

Scope: what the scenario format can express: full attention, sliding window (without
``extra_retained_tokens``), Mamba in modes none/align/all; every group prefix-cacheable
and offloaded; no decode context parallelism (``context_parallel_size`` is refused); no
prefix_cache_retention_interval, ChunkedLocalAttention or hisparse groups. GPU prefix
hits: any the engine produces (``check_request``), hash-block ones included; the
connector sees them rounded down to the scheduler block (``connector_tokens``).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from functools import cached_property

from model.citations import cite, cited_lines
from model.layout import Refused, cdiv
from model.scenario import Scenario
from releases.base import ChunkSteps

V = "0.33.0"


def _cite(version: str, key: str) -> str:
    """``cite`` in ``version`` where that release's table has the step, else in 0.33.0 (the
    release this module follows), never in the block lookup's 0.24.0."""
    return cite(version if key in cited_lines(version) else V, key)


@dataclass(frozen=True)
class ChunkGroup:
    """One group's ``GroupOffloadConfig`` (scheduler.py:96) as the model needs it."""

    group_idx: int
    kind: str
    mamba_cache_mode: str | None
    tokens_per_block: int
    tokens_per_chunk: int
    hashes_per_chunk: int
    sliding_window: int | None  # the spec's window in tokens (sliding-window groups)
    sliding_window_size_in_chunks: int | None  # None: full attention; Mamba: 1
    is_eagle_group: bool
    requires_cow_source: bool  # Mamba align: partial-tail data comes from a CoW copy

    def load_window_size_in_chunks(self, num_tokens: int) -> int | None:
        """scheduler.py:117: a sliding window may need one more chunk when the hit's
        right edge is not chunk-aligned (the allocator keeps the window ending there)."""
        window = self.sliding_window_size_in_chunks
        if self.kind == "sliding_window":
            assert window is not None and self.sliding_window is not None
            right_padding = -num_tokens % self.tokens_per_chunk  # scheduler.py:123
            window = max(window, cdiv(self.sliding_window - 1 + right_padding,
                                      self.tokens_per_chunk))
        return window


@dataclass(frozen=True)
class ChunkLayout:
    groups: tuple[ChunkGroup, ...]
    blocks_per_chunk: int
    tokens_per_hash: int
    scheduler_block_size: int
    cache_hit_alignment_tokens: int
    sliding_window_groups: tuple[int, ...]
    lookup_groups: tuple[int, ...]
    mamba_align_size: int | None
    supports_partial_tail: bool
    partial_tail_block_size: int  # 0 without partial tails
    eagle_proof_margins: dict[int, int]

    @cached_property
    def max_eagle_proof_margin(self) -> int:
        return max(self.eagle_proof_margins.values(), default=0)

    @cached_property
    def chunk_tokens(self) -> tuple[int, ...]:
        """Each group's ``tokens_per_chunk``, by group index (kept with the layout: a
        lookup reads it per key it records)."""
        return tuple(c.tokens_per_chunk for c in self.groups)

    def partial_tail_key_tokens(self, group: int, boundary: int) -> int:
        """scheduler.py:1158: the token position whose hash keys a group's tail block."""
        return boundary + self.eagle_proof_margins.get(group, 0)


def resolve_block_sizes(s: Scenario, version: str = V,
                        single_group_check: bool = True) -> tuple[int, int]:
    """``resolve_kv_cache_block_sizes`` (kv_cache_utils.py:816): (scheduler block size,
    tokens_per_hash) for a connector-enabled engine; the scenario's ``hash_block_size``
    is ``cache_config.prefix_match_unit`` (``single_group_check``: a single group
    refuses another one, ``ChunkSteps.single_group_hash_check``)."""
    sizes = [g.gpu_block_size for g in s.groups]
    if len(sizes) <= 1:  # kv_cache_utils.py:840
        bs = sizes[0]
        if single_group_check and s.hash_block_size not in (None, bs):  # :847-853
            raise Refused(_cite(version, "hash_single_group"),
                          f"prefix_match_unit (hash_block_size) {s.hash_block_size} differs "
                          f"from the single group's block size {bs}")
        return bs, bs
    scheduler_block_size = math.lcm(*sizes)  # kv_cache_utils.py:863
    # kv_cache_utils.py:878: a Mamba group outside align mode backs off to the lcm
    if any(g.kind == "mamba" and g.mamba_cache_mode != "align" for g in s.groups):
        return scheduler_block_size, scheduler_block_size
    requested = s.hash_block_size  # kv_cache_utils.py:891: the override, else the gcd
    tokens_per_hash = requested if requested is not None else math.gcd(*sizes)
    if any(bs % tokens_per_hash for bs in sizes):  # kv_cache_utils.py:892
        raise Refused(_cite(version, "hash_invalid"),
                      f"prefix_match_unit (hash_block_size) {tokens_per_hash} does not "
                      f"divide every group block size {sizes}")
    return scheduler_block_size, tokens_per_hash


def _partial_hash_hits(s: Scenario, tokens_per_hash: int, with_managers: bool) -> bool:
    """``partial_hash_hits_enabled`` (kv_cache_utils.py:762)."""
    if not any(g.kind == "mamba" and g.mamba_cache_mode == "align"
               and g.gpu_block_size > tokens_per_hash for g in s.groups):
        return False
    if not with_managers:
        return True
    # kv_cache_utils.py:786: SlidingWindowManager cannot look up below its block size
    # (FullAttentionManager and MambaManager can: single_type_kv_cache_manager.py:740, 1429)
    return not any(g.kind == "sliding_window" and g.gpu_block_size != tokens_per_hash
                   for g in s.groups)


def _blocks_per_chunk(s: Scenario, version: str = V) -> int:
    """config.py:121-158: ``blocks_per_chunk`` or a token ``block_size`` (our factor)."""
    factor_set = s.block_size_factor != 1
    if s.blocks_per_chunk is not None and factor_set:
        raise Refused(_cite(version, "chunk_both"),
                      "blocks_per_chunk and block_size (block_size_factor) are both set")
    if s.blocks_per_chunk is not None:
        return s.blocks_per_chunk  # config.py:132
    if factor_set and len({g.gpu_block_size for g in s.groups}) != 1:
        raise Refused(_cite(version, "same_block_size"),
                      "block_size (block_size_factor != 1) needs every group to have the "
                      "same gpu_block_size; blocks_per_chunk has no such rule")
    return s.block_size_factor  # config.py:150


def check_mamba_modes(s: Scenario, version: str = V, mode_all: bool = False) -> None:
    """0.33.0 ties the Mamba cache mode to prefix caching: mode "all" is gone
    (``MambaCacheMode``, config/cache.py:176); ``MambaModelConfig`` turns "none" into
    "align" when prefix caching is on and "align" into "none" when it is off
    (model_executor/models/config.py:764, 781), and ``MambaManager`` asserts align
    whenever caching is on (v1/core/single_type_kv_cache_manager.py:1442). With
    ``mode_all`` (0.28.0-0.31.0, ``ChunkSteps.mamba_all``) "all" is a mode, kept with
    prefix caching on (0.31.0's models/config.py:649: the cross-check's model supports
    Mamba prefix caching) and turned into "none" with it off."""
    on_modes = ("align", "all") if mode_all else ("align",)
    modes = [g.mamba_cache_mode for g in s.groups if g.kind == "mamba"]
    if mode_all and len(set(modes)) > 1:  # one CacheConfig.mamba_cache_mode (cache.py:190)
        raise Refused(_cite(version, "mamba_mode_field"),
                      f"groups[*].mamba_cache_mode: {version} runs every Mamba group in "
                      f"the one mode of cache_config.mamba_cache_mode, not {modes}")
    for i, g in enumerate(s.groups):
        if g.kind != "mamba":
            continue
        if g.mamba_cache_mode == "all" and not mode_all:
            raise Refused(_cite(version, "mamba_modes"),
                          f"groups[{i}].mamba_cache_mode: 'all' is not a mode of {version}")
        if s.enable_prefix_caching and g.mamba_cache_mode not in on_modes:
            raise Refused(_cite(version, "mamba_mode_align_on"),
                          f"groups[{i}].mamba_cache_mode: with prefix caching on {version} "
                          "runs Mamba in mode 'align'")
        if not s.enable_prefix_caching and g.mamba_cache_mode != "none":
            raise Refused(_cite(version, "mamba_mode_none_off"),
                          f"groups[{i}].mamba_cache_mode: with prefix caching off {version} "
                          "runs Mamba in mode 'none'")


def resolve_layout(s: Scenario, steps: ChunkSteps | None = None,
                   version: str = V) -> ChunkLayout:
    """Build what 0.33.0's start-up builds, or raise ``Refused`` naming the check.

    ``steps``: the release's overridable steps (``tail_eagle``: whether EAGLE groups keep
    partial tails); ``version``: the release whose lines the refusals cite."""
    steps = steps or ChunkSteps()
    check_mamba_modes(s, version, steps.mamba_all)
    scheduler_block_size, tph = resolve_block_sizes(s, version,
                                                    steps.single_group_hash_check)
    for g in s.groups:  # config.py:113
        if g.gpu_block_size % tph:
            raise Refused(_cite(version, "hash_divides"),
                          f"gpu_block_size {g.gpu_block_size} is not divisible by "
                          f"tokens_per_hash {tph}")
    bpc = _blocks_per_chunk(s, version)
    groups = []
    for i, g in enumerate(s.groups):
        tpc = g.gpu_block_size * bpc  # scheduler.py:256
        window: int | None = None
        if g.kind == "sliding_window":  # config.py:64 (extra_retained_tokens = 0)
            assert g.sliding_window is not None
            window = cdiv(g.sliding_window, tpc)
        elif g.kind == "mamba":
            window = 1  # config.py:81: Mamba depends on a single state
        groups.append(ChunkGroup(
            group_idx=i, kind=g.kind, mamba_cache_mode=g.mamba_cache_mode,
            tokens_per_block=g.gpu_block_size, tokens_per_chunk=tpc,
            hashes_per_chunk=tpc // tph,  # scheduler.py:257
            sliding_window=g.sliding_window, sliding_window_size_in_chunks=window,
            is_eagle_group=g.eagle,  # scheduler.py:265 (KVCacheGroupSpec.is_eagle_group)
            requires_cow_source=g.kind == "mamba" and g.mamba_cache_mode == "align",  # :266
        ))
    full = [c.group_idx for c in groups if c.sliding_window_size_in_chunks is None]
    windowed = [c.group_idx for c in groups if c.sliding_window_size_in_chunks is not None]
    # scheduler.py:588: windowed groups by window size, largest first (stable sort)
    windowed.sort(key=lambda i: groups[i].sliding_window_size_in_chunks or 0, reverse=True)
    # scheduler.py:151: Mamba groups in mode "align" (0.31.0 :167-170: "align" or "all")
    align = [c for c in groups if c.requires_cow_source
             or (steps.mamba_all and c.mamba_cache_mode == "all")]
    if len({c.tokens_per_chunk for c in align}) > 1:  # scheduler.py:153
        raise Refused(_cite(version, "mamba_align_assert"),
                      "Mamba align groups disagree on the offloaded chunk size "
                      f"{sorted({c.tokens_per_chunk for c in align})}")
    mamba_align_size = align[-1].tokens_per_chunk if align else None  # scheduler.py:154
    # scheduler.py:274-292: partial tails need one block per chunk, one block size, a
    # Mamba align group whose block is finer than the hash, no windowed attention
    supports_partial_tail = (
        bpc == 1
        and len({c.tokens_per_block for c in groups}) == 1
        and any(c.requires_cow_source and c.tokens_per_block > tph for c in groups)
        and all(c.sliding_window_size_in_chunks is None or c.requires_cow_source
                for c in groups)
        # 0.28.0-0.32.0 (0.32.0's scheduler.py:313): no partial tails with an EAGLE group
        and (steps.tail_eagle or not any(c.is_eagle_group for c in groups))
    )
    ptbs = groups[0].tokens_per_block if supports_partial_tail else 0  # scheduler.py:597
    # core.py:359 / kv_cache_utils.py:921: the granularity of GPU prefix-cache hits
    # (``steps.fine_gpu_hits``: a release before 0.32.0 has no fine-grained hits)
    alignment = scheduler_block_size
    if (steps.fine_gpu_hits and s.enable_prefix_caching and len(groups) > 1
            and _partial_hash_hits(s, tph, True)):
        alignment = tph
    margins: dict[int, int] = {}
    if supports_partial_tail:  # scheduler.py:610: EAGLE proof margin per attention group
        fine = alignment < ptbs  # scheduler.py:608 (full attention looks up finely)
        for c in groups:
            if c.is_eagle_group and not c.requires_cow_source:
                # eagle_proof_margin (kv_cache_utils.py:804)
                margins[c.group_idx] = tph if fine and ptbs > tph else ptbs
    return ChunkLayout(
        groups=tuple(groups), blocks_per_chunk=bpc, tokens_per_hash=tph,
        scheduler_block_size=scheduler_block_size, cache_hit_alignment_tokens=alignment,
        sliding_window_groups=tuple(windowed),
        lookup_groups=tuple(full) + tuple(windowed),  # scheduler.py:593
        mamba_align_size=mamba_align_size, supports_partial_tail=supports_partial_tail,
        partial_tail_block_size=ptbs, eagle_proof_margins=margins,
    )


# ``resolve_layout`` per (steps, release, start-up fields): the simulator, the golden tests
# and every cross-check resolve one layout many times. The key is every field
# resolve_layout reads (tests/test_layout_memo.py checks it against what it reads);
# refusals are not kept. Bounded: cleared when full (and by ``proofs.mutants``).
STARTUP_GROUP_FIELDS = ("kind", "gpu_block_size", "sliding_window", "mamba_cache_mode", "eagle")
STARTUP_FIELDS = ("block_size_factor", "blocks_per_chunk", "hash_block_size",
                  "enable_prefix_caching")
_startup_fields = operator.attrgetter(*STARTUP_FIELDS)
_startup_group_fields = operator.attrgetter(*STARTUP_GROUP_FIELDS)
_LAYOUTS: dict[tuple[object, ...], ChunkLayout] = {}


def startup_layout(s: Scenario, steps: ChunkSteps | None = None,
                   version: str = V) -> ChunkLayout:
    """``resolve_layout(s, steps, version)``, kept per steps, release and start-up fields."""
    key = (steps, version, _startup_fields(s), tuple(map(_startup_group_fields, s.groups)))
    layout = _LAYOUTS.get(key)
    if layout is None:
        layout = resolve_layout(s, steps, version)
        if len(_LAYOUTS) >= 1024:
            _LAYOUTS.clear()
        _LAYOUTS[key] = layout
    return layout


def check_request(s: Scenario, layout: ChunkLayout, version: str = V,
                  fine_gpu_hits: bool = True) -> None:
    """Refuse requests a real 0.33.0 engine cannot produce (the GPU prefix hit's shape).

    ``num_computed_tokens`` is the GPU prefix hit the KV-cache manager finds: a multiple
    of ``cache_hit_alignment_tokens`` (the coordinator's alignment,
    kv_cache_coordinator.py:709): the hash block when fine-grained hits are on
    (``partial_hash_hits_enabled``, kv_cache_utils.py:762, 921), else the scheduler
    block. The connector sees it rounded down to the scheduler block (``connector_view``)."""
    if s.num_computed_tokens and s.skip_reading_prefix_cache:
        # get_computed_blocks looks nothing up for a request that skips reading the cache
        # (kv_cache_manager.py:292 of 0.33.0)
        raise Refused(
            _cite(version, "gpu_hit_none"),
            f"num_computed_tokens {s.num_computed_tokens} must be 0: there is no GPU prefix "
            "hit for a request with skip_reading_prefix_cache on")
    unit = layout.cache_hit_alignment_tokens
    if s.num_computed_tokens % unit and not fine_gpu_hits:
        # a release before 0.32.0: GPU hits are whole scheduler blocks (the lcm of the
        # groups' blocks), no fine-grained hits exist
        raise Refused(
            _cite(version, "hash_lcm"),
            f"num_computed_tokens {s.num_computed_tokens} is not a multiple of the "
            f"scheduler block size {unit} (vLLM {version} has no fine-grained GPU hits)")
    if s.num_computed_tokens % unit:
        fine = "" if unit < layout.scheduler_block_size else (
            "; fine-grained hits at the hash block need a Mamba align group whose block "
            "is larger than the hash block, prefix caching on and no sliding-window group "
            "with another block size")
        raise Refused(
            _cite(version, "gpu_hit_alignment"),
            f"num_computed_tokens {s.num_computed_tokens} is not a multiple of the GPU "
            f"hit alignment {unit} (cache_hit_alignment_tokens{fine})")
    if s.num_computed_tokens and not s.enable_prefix_caching:
        raise Refused(
            _cite(version, "gpu_hit_cap"),
            f"num_computed_tokens {s.num_computed_tokens}: no GPU prefix-cache hit exists "
            "with prefix caching off")
    if s.num_computed_tokens >= s.prompt_tokens:
        raise Refused(
            _cite(version, "gpu_hit_cap"),
            f"num_computed_tokens {s.num_computed_tokens} must be < prompt_tokens "
            f"{s.prompt_tokens}: the GPU prefix hit always leaves the last prompt token")


def connector_tokens(layout: ChunkLayout, num_computed_tokens: int) -> int:
    """The local hit the engine scheduler passes to ``get_num_new_matched_tokens``:
    rounded down to the scheduler block (v1/core/sched/scheduler.py:1134-1140 of 0.33.0),
    so the connector's lookup and load start on a block boundary of every group."""
    return num_computed_tokens - num_computed_tokens % layout.scheduler_block_size


def keeps_local_tail(num_computed_tokens: int, connector_from: int,
                     connector_hit: int | None) -> bool:
    """The engine scheduler keeps a fine GPU hit's sub-block tail and loads nothing
    unless the connector's hit is longer than that tail (v1/core/sched/scheduler.py:1167,
    1179 of 0.33.0); a deferred answer (None) defers the request either way."""
    tail = num_computed_tokens - connector_from
    return bool(tail) and connector_hit is not None and connector_hit <= tail
