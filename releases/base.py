"""What a registered semantics is: a vLLM release or a fix of one, as a frozen record.

A release or fix module (``releases/<name>.py``) builds one ``Semantics`` with ``child``:
it names its parent and states only what differs from it — flags, the steps it
overrides (``ChunkSteps``), the theorems' expectations (``Expect``) — as consensus-specs
builds a fork on its predecessor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal

from releases import steps
from releases.arith import Arith

AlignAt = Literal["none", "max_hit", "num_hit"]
AlignFrom = Literal["groups", "cache_config"]
Kind = Literal["release", "fix", "alternative"]

LastToken = Callable[[Arith, Any, Any], Any]
AfterCut = Callable[[Arith, Any, Any, Any, str], Any]
# (arith, complete boundary, partial-tail block, prompt tokens, hashed tokens, margin,
# whether the margin is on: margin > 0)
TailSearch = Callable[[Arith, Any, Any, Any, Any, Any, Any], Any]


@dataclass(frozen=True)
class ChunkSteps:
    """The chunked lookup's steps a fix may override (``releases.steps``)."""

    # max_hit_size_tokens after the caps, for the recomputed last prompt token (:876)
    last_token: LastToken = steps.last_token_subtract
    # max_hit_size_tokens after each group's cut (:914, :988)
    after_cut: AfterCut = steps.keep_after_cut
    # the partial tail (:1068-1152). Its search end before the caps (:1083-1093)
    tail_search: TailSearch = steps.tail_search_with_proofs
    # whether a boundary past the complete boundary's block first looks that block's
    # complete chunk up (the bridge, :1111-1132); a switch of control flow, not arithmetic
    tail_bridge: bool = True
    # whether EAGLE groups keep partial tails, keyed past the boundary by their proof
    # margins (start-up, :283-293, :610-624); without, any EAGLE group turns tails off
    tail_eagle: bool = True
    # start-up switches of older releases (0.33.0's behaviour by default):
    # Mamba cache mode "all" exists (0.28.0-0.31.0): accepted with prefix caching on, and
    # its groups join the Mamba align size (0.31.0's scheduler.py:167-170)
    mamba_all: bool = False
    # whether GPU prefix hits land at the hash block when fine-grained hits are on
    # (cache_hit_alignment_tokens, kv_cache_utils.py:921; 0.32.0 on, C11 of
    # docs/releases-overrides.md); without, every GPU hit is a multiple of the scheduler
    # block (releases before 0.32.0)
    fine_gpu_hits: bool = True
    # a single group refuses a prefix_match_unit other than its block (kv_cache_utils.py:
    # 847-853; from 0.32.0; before, it is ignored)
    single_group_hash_check: bool = True
    # the request caps exist: the max_num_new_tokens argument (:863, :1095; from 0.30.0)
    # and kv_transfer_params["max_load_tokens"] (:385, :867, :917, :1097; from 0.31.0).
    # A release without one refuses the scenario field (model.evaluate)
    cap_new_tokens: bool = True
    cap_load_tokens: bool = True
    # every unverified EAGLE group queries one more chunk (:936; from 0.30.0); before,
    # only sliding-window groups do (0.29.0's scheduler.py:762)
    eagle_query_all: bool = True
    # sliding windows use the load window (from 0.30.0): the first run's initial window
    # (:964-972), HIT_PENDING defers only in the run that decides (:824-847) and the
    # being-loaded slice (:1027); before, the plain window everywhere and any scanned
    # HIT_PENDING defers (0.29.0's scheduler.py:633-664, :847-849)
    load_windows: bool = True


@dataclass(frozen=True)
class Expect:
    """A theorem's expected verdict on one semantics.

    ``holds``: under its preconditions; ``accepted``: over every layout the release's
    start-up checks accept (None: as ``holds``); ``pre``: the preconditions it is checked
    under (None: the theorem's own)."""

    holds: bool
    accepted: bool | None = None
    pre: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Semantics:
    name: str
    # the release whose code (and line numbers) the steps follow; its vLLM pin
    base_version: str
    # where the Mamba alignment is applied: nowhere (0.23.0), to max_hit_size_tokens
    # before the loop (0.24.0, scheduler.py:470), or to num_hit_tokens after it
    align_at: AlignAt
    # where the alignment size comes from: the KV-cache groups (resolve_mamba_align_size,
    # scheduler.py:108) or cache_config.mamba_block_size (the scenario's mamba_block_size)
    align_from: AlignFrom
    # 0.24.0 additions beside the fix
    eagle: bool  # EAGLE groups look up and pop one extra block (scheduler.py:515-554)
    skip_reading_check: bool  # request.skip_reading_prefix_cache gives 0 (scheduler.py:673)
    in_flight_check: bool  # in-flight transfers defer the request (scheduler.py:662)
    align_assert: bool  # Mamba align groups must agree on the size (scheduler.py:121)
    summary: str
    kind: Kind = "release"
    # the semantics this one is built on (None: the first modelled release)
    parent: str | None = None
    # 0.33.0's reworked scheduler: chunks, partial tails, caps, LookupResult answers
    # (model/*_chunked.py instead of the block lookup's modules)
    chunked: bool = False
    # the chunked lookup's overridable steps
    steps: ChunkSteps = ChunkSteps()
    # the block lookup's release steps (0.24.0's behaviour by default):
    # 0.25.0 on: a HIT_PENDING answer extends a sliding-window run (scheduler.py:427 in
    # 0.25.0) instead of breaking it, as a deferred answer (RETRY) still does
    window_pending_hits: bool = False
    # 0.26.0 on: start-up through offloading/config.py's build_offloading_config, with
    # kv_connector_extra_config["blocks_per_chunk"] (:70 in 0.26.0; the offloaded block is
    # blocks_per_chunk GPU blocks; refused beside "block_size", :64) and the engine's
    # Mamba cache mode from prefix caching (model_executor/models/config.py:559, 596)
    offloading_config: bool = False
    # 0.27.0 on: pending GPU blocks a sliding-window group's load accepts beyond
    # window * blocks_per_chunk (scheduler.py:918-922 in 0.27.0: one)
    load_window_slack: int = 0
    # finding 001's completed fix: when the round-down after a cut lowers a sliding-window
    # group's confirmed window, the sliding-window groups are looked up again
    reround_rerun: bool = False
    # the finding a fix answers and its diff against the parent release's source
    finding: str | None = None
    fix_diff: str | None = None
    # theorem name -> expected verdict (a child inherits its parent's and overrides some)
    expect: Mapping[str, Expect] = field(default_factory=lambda: MappingProxyType({}),
                                         hash=False)

    @property
    def family(self) -> str:
        """Which lookup the semantics runs: ``block`` (0.23/0.24) or ``chunked`` (0.33)."""
        return "chunked" if self.chunked else "block"

    @property
    def reround_mamba(self) -> bool:
        """Whether the bound is rounded to the Mamba align size again after each cut (the
        layered proof picks its loop lemmas by it: ``proofs.lemmas_chunked.assumed``)."""
        return self.steps.after_cut is not steps.keep_after_cut

    @property
    def version(self) -> str:
        """The vLLM release whose real scheduler judges it (a fix: with its diff)."""
        return self.base_version


def child(parent: Semantics, *, name: str, summary: str, kind: Kind,
          expect: Mapping[str, Expect] | None = None, inherit_expect: bool = True,
          **changes: Any) -> Semantics:
    """``parent`` with ``changes``, named ``name``: its expectations are the parent's with
    ``expect`` laid over them (without ``inherit_expect``: ``expect`` alone, for a
    semantics whose overridden steps the proofs do not encode)."""
    merged = MappingProxyType({**(parent.expect if inherit_expect else {}), **(expect or {})})
    return replace(parent, name=name, summary=summary, kind=kind, parent=parent.name,
                   expect=merged, **changes)


def root(expect: Mapping[str, Expect], **fields: Any) -> Semantics:
    return Semantics(expect=MappingProxyType(dict(expect)), **fields)
