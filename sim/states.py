"""What a saved Mamba state is: its token position and whether it is the cold state.

A state is *clean* when it equals the state a cold run reaches at ``position`` (then
its vector is not kept: the cold cache recomputes it on demand). An unclean state
keeps its vector and ``poison``: the id of the request whose no-partial-state load
first produced it, so corrupted outputs can be traced back to a violation.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.ssm import Vector


@dataclass(frozen=True)
class StateRecord:
    position: int
    clean: bool = True
    vector: Vector | None = None
    poison: int | None = None


ZERO = StateRecord(0)
