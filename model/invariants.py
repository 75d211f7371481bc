"""The invariants a lookup and its load must keep, each a pure checker.

Numbered as in the reviewers' spec (docs/spec.md):
  I1 no-partial-state   a restored Mamba state sits exactly where the hit ends (and is
                        one the store surely holds: its offloaded block's last sub-block)
  I2 loads-stored-only  the load reads only blocks the store holds
  I3 leaves-last-token  with sliding-window or Mamba groups the last prompt token is recomputed
  I4 whole-blocks       a non-zero hit covers at least one offloaded block of every group
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from model.layout import Layout
from model.load_plan import LoadPlan
from model.scenario import Scenario

INVARIANTS = ("no-partial-state", "loads-stored-only", "leaves-last-token", "whole-blocks")


@dataclass(frozen=True)
class Violation:
    invariant: str
    message: str


Checker = Callable[[Scenario, Layout, int, LoadPlan], list[Violation]]


def no_partial_state(s: Scenario, layout: Layout, hit: int, plan: LoadPlan) -> list[Violation]:
    end = s.num_computed_tokens + hit
    out = []
    for load in plan.loads:
        g = s.groups[load.group]
        if not g.restores_state or load.state_position is None:
            continue
        if load.state_position != end:
            out.append(Violation(
                "no-partial-state",
                f"group {load.group} (Mamba {g.mamba_cache_mode}) loads the state saved at "
                f"token {load.state_position} but the hit ends at token {end}",
            ))
        elif not load.state_in_last_sub_block:
            blk, sub, _ = load.copies[-1]
            out.append(Violation(
                "no-partial-state",
                f"group {load.group} (Mamba {g.mamba_cache_mode}) restores sub-block {sub} of "
                f"offloaded block {blk}: it holds the state at token {end} only if a prefill "
                "chunk ended there when the block was stored (scheduler.py:960 stores only "
                "GPU blocks still held); the store surely holds only the state at the "
                "block's end",
            ))
    return out


def loads_stored_only(s: Scenario, layout: Layout, hit: int, plan: LoadPlan) -> list[Violation]:
    out = []
    for load in plan.loads:
        missing = [b for b in load.blocks if not s.groups[load.group].holds(b)]
        if missing:
            out.append(Violation(
                "loads-stored-only",
                f"group {load.group} loads block(s) {missing} that the store does not hold",
            ))
    return out


def leaves_last_token(s: Scenario, layout: Layout, hit: int, plan: LoadPlan) -> list[Violation]:
    end = s.num_computed_tokens + hit
    if hit and layout.sliding_window_groups and end > s.num_tokens - 1:
        return [Violation(
            "leaves-last-token",
            f"the hit ends at token {end} of {s.num_tokens}: the last token is not "
            "recomputed although sliding-window or Mamba groups need it",
        )]
    return []


def whole_blocks(s: Scenario, layout: Layout, hit: int, plan: LoadPlan) -> list[Violation]:
    if not hit:
        return []
    return [
        Violation(
            "whole-blocks",
            f"the hit of {hit} tokens is shorter than group {c.group_idx}'s offloaded block "
            f"of {c.offloaded_block_size} tokens",
        )
        for c in layout.groups
        if hit < c.offloaded_block_size
    ]


CHECKERS: dict[str, Checker] = {
    "no-partial-state": no_partial_state,
    "loads-stored-only": loads_stored_only,
    "leaves-last-token": leaves_last_token,
    "whole-blocks": whole_blocks,
}


def check_all(s: Scenario, layout: Layout, hit: int | None, plan: LoadPlan) -> list[Violation]:
    if hit is None:
        return []
    return [v for name in INVARIANTS for v in CHECKERS[name](s, layout, hit, plan)]
