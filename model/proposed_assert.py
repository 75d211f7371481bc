"""A runtime assertion proposed for vLLM's ``update_state_after_alloc`` that would have
caught #44599 before any output went wrong.

In vLLM's terms: for every group whose ``kv_cache_spec`` is a ``MambaSpec`` in
``mamba_cache_mode`` "align" or "all" and that has GPU blocks to load
(``num_pending_gpu_blocks > 0``), the tokens the request will hold after the load,
``num_cached_tokens = num_locally_computed_tokens + num_external_tokens``, must be a multiple
of the group's ``offloaded_block_size``: the one offloaded Mamba block the load reads holds
the state saved at its end. This module states the same check on the model's load plan, so
that ``tests/test_proposed_assert.py`` can show it fires on every no-partial-state violation
and never on a valid hit.
"""

from __future__ import annotations

from collections.abc import Sequence

from model.layout import Layout
from model.layout_chunked import ChunkGroup, ChunkLayout
from model.load_plan import GroupLoad
from model.scenario import Scenario

# where the assertion goes, and the names it uses (vLLM 0.24.0)
FIRES_IN = "OffloadingConnectorScheduler.update_state_after_alloc"


def proposed_assertion_fires(s: Scenario, layout: Layout | ChunkLayout, hit: int | None,
                             loads: Sequence[GroupLoad]) -> bool:
    """True when the proposed assertion would stop the load of ``hit`` tokens."""
    if not hit:
        return False  # update_state_after_alloc returns early without external tokens
    num_cached_tokens = s.num_computed_tokens + hit
    for load in loads:
        if not load.blocks:  # num_pending_gpu_blocks == 0
            continue
        g = s.groups[load.group]
        if g.kind != "mamba" or g.mamba_cache_mode not in ("align", "all"):
            continue
        cfg = layout.groups[load.group]
        size = cfg.tokens_per_chunk if isinstance(cfg, ChunkGroup) else cfg.offloaded_block_size
        if num_cached_tokens % size != 0:
            return True
    return False
