"""What one simulated run counts, and the frozen summary it ends with."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from model.invariants import INVARIANTS


@dataclass(frozen=True)
class RequestResult:
    rid: int
    prompt_len: int
    gpu_hit: int
    cpu_hit: int
    violations: tuple[str, ...]  # invariants the final lookup of this request violates
    wrong_state: bool  # the state after the prompt differs from the cold one
    corrupted: bool  # the greedy output differs from the cold one
    poison: int | None  # the request whose violating load made this state wrong
    lookup_hit: int = 0  # the connector's answer (cpu_hit is 0 when its load would assert)
    missing_load: bool = False  # the load reads a block the store does not hold
    cause: str | None = None  # why the state is wrong (sim.states.CAUSES), at its origin
    inherited: bool = False  # the wrong state came from a cache, made by request ``poison``


@dataclass
class Counters:
    requests: int = 0
    lookups: int = 0
    deferred: int = 0
    deferred_loading: int = 0  # of which: a hit block was being loaded for another request
    refused: int = 0
    assertions: int = 0  # loads that would trip an assertion in update_state_after_alloc
    missing_loads: int = 0  # loads of blocks the store does not hold (vLLM asserts)
    cpu_hit_requests: int = 0
    prompt_tokens: int = 0
    gpu_hit_tokens: int = 0
    cpu_hit_tokens: int = 0
    recomputed_tokens: int = 0
    violations: dict[str, int] = field(default_factory=lambda: dict.fromkeys(INVARIANTS, 0))
    wrong_state: int = 0
    corrupted: int = 0
    corrupted_direct: int = 0  # the request's own lookup violated no-partial-state
    corrupted_inherited: int = 0  # it started from a wrong state cached by another request
    corrupted_divergence: int = 0  # 0.24.0 hybrid: local hit beyond the Mamba hit (#46453)
    dirty_attention: int = 0  # 0.24.0 hybrid: local hit beyond an attention group's hit
    model_disagreements: int = 0  # a state/hit mismatch the model did not flag, or v.v.
    waiting_steps: int = 0  # steps requests spent waiting for budget, seats or loads
    oracle_hit_tokens: int = 0  # the best correct hits (sim.oracle), summed over lookups
    given_away_tokens: int = 0  # how far answers fell short of them
    above_oracle: int = 0  # answers beyond the best correct hit


@dataclass(frozen=True)
class Summary:
    semantics: str
    workload: str
    requests: int
    lookups: int
    deferred: int
    deferred_loading: int
    refused: int
    assertions: int
    missing_loads: int
    cpu_hit_requests: int
    prompt_tokens: int
    gpu_hit_tokens: int
    cpu_hit_tokens: int
    recomputed_tokens: int
    violations: dict[str, int]
    wrong_state: int
    corrupted: int
    corrupted_direct: int
    corrupted_inherited: int
    corrupted_divergence: int
    dirty_attention: int
    model_disagreements: int
    waiting_steps: int
    steps: int
    oracle_hit_tokens: int
    given_away_tokens: int
    above_oracle: int
    cpu_stored_blocks: int
    cpu_evictions: int
    cpu_failed_stores: int
    gpu_evictions: int
    wall_s: float

    @property
    def hit_rate(self) -> float:
        return (self.gpu_hit_tokens + self.cpu_hit_tokens) / max(1, self.prompt_tokens)

    @property
    def cpu_hit_rate(self) -> float:
        return self.cpu_hit_tokens / max(1, self.prompt_tokens)

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def lookups_per_s(self) -> float:
        return self.lookups / self.wall_s if self.wall_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(hit_rate=self.hit_rate, cpu_hit_rate=self.cpu_hit_rate,
                   requests_per_s=self.requests_per_s, lookups_per_s=self.lookups_per_s)
        return out
