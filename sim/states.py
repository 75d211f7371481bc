"""What a saved Mamba state is: its token position and whether it is the cold state.

A state is *clean* when it equals the state a cold run reaches at ``position`` (then
its vector is not kept: the cold cache recomputes it on demand). An unclean state
keeps its vector, ``poison`` (the id of the request that first produced it) and
``cause`` (why that request started from a wrong state), so every corrupted output can
be traced back to its origin.
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
    cause: str | None = None  # one of CAUSES


# why a request started from a wrong Mamba state
CAUSES = (
    "no-partial-state",  # its load brought a state saved at another position
    "local-hit-divergence",  # 0.24.0 hybrid: the local hit passed beyond the Mamba hit
)


ZERO = StateRecord(0)
