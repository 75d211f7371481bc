"""The invariants a lookup and its load must keep, each a pure checker.

Numbered as in the reviewers' spec (docs/spec.md):
  I1 no-partial-state   a restored Mamba state sits exactly where the hit ends, whether
                        it comes from a whole offloaded block (chunk) or, on vLLM 0.33.0,
                        from a partial-tail key (and is one the store surely holds: its
                        offloaded block's last sub-block)
  I2 loads-stored-only  the load reads only blocks (0.33.0: keys) the store holds, ready
  I3 leaves-last-token  with sliding-window or Mamba groups the last prompt token is recomputed
  I4 whole-blocks       a non-zero hit covers at least one offloaded block of every group
                        (0.33.0: a complete-chunk hit; a partial-tail hit ends inside a
                        block by design)

On vLLM 0.33.0 the layout is a ``ChunkLayout`` and a load lists keys by the token position
where each ends (``model.load_chunked``); the checkers read both shapes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from model.layout import Layout
from model.layout_chunked import ChunkLayout
from model.load_plan import LoadPlan
from model.lookup_chunked import HIT, answer
from model.scenario import Scenario

AnyLayout = Layout | ChunkLayout

INVARIANTS = ("no-partial-state", "loads-stored-only", "leaves-last-token", "whole-blocks")


@dataclass(frozen=True)
class Violation:
    invariant: str
    message: str


Checker = Callable[[Scenario, AnyLayout, int, LoadPlan], list[Violation]]


def no_partial_state(s: Scenario, layout: AnyLayout, hit: int, plan: LoadPlan) -> list[Violation]:
    end = s.num_computed_tokens + hit
    source = ""  # 0.33.0: say which key the state came from
    if isinstance(layout, ChunkLayout):
        source = (" (from the partial-tail key)" if plan.tail_boundary is not None
                  else " (from a whole chunk)")
    out = []
    for load in plan.loads:
        g = s.groups[load.group]
        if not g.restores_state or load.state_position is None:
            continue
        if load.state_position != end:
            out.append(Violation(
                "no-partial-state",
                f"group {load.group} (Mamba {g.mamba_cache_mode}) loads the state saved at "
                f"token {load.state_position}{source} but the hit ends at token {end}",
            ))
        elif not load.state_in_last_sub_block:
            assert load.last_copy is not None
            blk, sub, _ = load.last_copy
            out.append(Violation(
                "no-partial-state",
                f"group {load.group} (Mamba {g.mamba_cache_mode}) restores sub-block {sub} of "
                f"offloaded block {blk}: it holds the state at token {end} only if a prefill "
                "chunk ended there when the block was stored (scheduler.py:960 stores only "
                "GPU blocks still held); the store surely holds only the state at the "
                "block's end",
            ))
    return out


def _holds(s: Scenario, layout: AnyLayout, group: int, unit: int) -> bool:
    g = s.groups[group]
    if isinstance(layout, ChunkLayout):  # unit: a key's end token; ready means HIT
        return answer(g, unit, layout.groups[group].tokens_per_chunk) == HIT
    return g.holds(unit)


def loads_stored_only(s: Scenario, layout: AnyLayout, hit: int,
                      plan: LoadPlan) -> list[Violation]:
    out = []
    for load in plan.loads:
        g = s.groups[load.group]
        if isinstance(layout, ChunkLayout):  # 0.33.0: a key per chunk, checked one by one
            missing = [b for b in load.blocks if not _holds(s, layout, load.group, b)]
            count = len(missing)
        else:
            # a block past the request's last offload key (scheduler.py:268) is never
            # stored, whatever the scenario lists ("all" included)
            keys = s.num_tokens // layout.groups[load.group].offloaded_block_size
            r = range(load.blocks[0], load.blocks[-1] + 1) if load.blocks else range(0)
            if g.stored is None:
                missing_r = range(max(r.start, keys), r.stop)
                count = len(missing_r)
                missing = list(missing_r[:8])
            else:
                held = frozenset(b for b in g.stored if b < keys)
                count = len(r) - sum(b in r for b in held)
                # the first few missing blocks: each step past one skips a held block
                missing = list(itertools.islice((b for b in r if b not in held), 8))
        if count:
            more = f" and {count - len(missing)} more" if count > len(missing) else ""
            out.append(Violation(
                "loads-stored-only",
                f"group {load.group} loads {_unit(layout)} {missing}{more} that the store "
                "does not hold (ready)",
            ))
    return out


def _unit(layout: AnyLayout) -> str:
    return "key(s) ending at token" if isinstance(layout, ChunkLayout) else "block(s)"


def leaves_last_token(s: Scenario, layout: AnyLayout, hit: int, plan: LoadPlan) -> list[Violation]:
    end = s.num_computed_tokens + hit
    if hit and layout.sliding_window_groups and end > s.num_tokens - 1:
        return [Violation(
            "leaves-last-token",
            f"the hit ends at token {end} of {s.num_tokens}: the last token is not "
            "recomputed although sliding-window or Mamba groups need it",
        )]
    return []


def whole_blocks(s: Scenario, layout: AnyLayout, hit: int, plan: LoadPlan) -> list[Violation]:
    if not hit:
        return []
    if isinstance(layout, ChunkLayout):
        if plan.tail_boundary is not None:
            return []  # a partial-tail hit ends inside a block by design
        return [
            Violation("whole-blocks", f"the hit of {hit} tokens is shorter than group "
                      f"{c.group_idx}'s chunk of {c.tokens_per_chunk} tokens")
            for c in layout.groups if hit < c.tokens_per_chunk
        ]
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


def check_all(s: Scenario, layout: AnyLayout, hit: int | None, plan: LoadPlan) -> list[Violation]:
    if hit is None:
        return []
    return [v for name in INVARIANTS for v in CHECKERS[name](s, layout, hit, plan)]
