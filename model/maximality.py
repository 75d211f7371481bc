"""Maximality: is there a larger hit than the lookup's that keeps every invariant?

A hit ``h`` is *valid* for a scenario when a load of ``h`` tokens beyond the GPU hit
would keep all four invariants, reads only keys the request has, and reads no block the
store deferred or is already loading (with prefix caching on). A lookup that returns
less than the largest valid hit gives hits away: safe, but a performance bug.
"""

from __future__ import annotations

from model.invariants import check_all
from model.layout import Layout, cdiv
from model.load_plan import load_plan
from model.scenario import Scenario
from model.semantics import Semantics


def is_valid_hit(s: Scenario, layout: Layout, sem: Semantics, hit: int) -> bool:
    if hit <= 0 or s.num_computed_tokens + hit > s.num_tokens:
        return False
    if (sem.skip_reading_check and s.skip_reading_prefix_cache) or (
        sem.in_flight_check and s.in_flight_transfers
    ):
        return False
    end = s.num_computed_tokens + hit
    if any(cdiv(end, c.offloaded_block_size) > s.num_tokens // c.offloaded_block_size
           for c in layout.groups):
        return False  # the request has no key for a block it would load
    plan = load_plan(layout, s, hit, sem.load_window_slack)
    if plan.assertion or check_all(s, layout, hit, plan):
        return False
    for load in plan.loads:
        g = s.groups[load.group]
        if any(b in load.blocks for b in g.deferred):
            return False
        if s.enable_prefix_caching and any(b in load.blocks for b in g.being_loaded):
            return False
    return True


def larger_valid_hit(s: Scenario, layout: Layout, sem: Semantics, hit: int | None) -> int | None:
    """The largest valid hit above ``hit`` (None if there is none, or the lookup deferred)."""
    if hit is None:
        return None
    for h in range(s.num_tokens - s.num_computed_tokens, hit, -1):
        if is_valid_hit(s, layout, sem, h):
            return h
    return None
