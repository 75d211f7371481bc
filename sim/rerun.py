"""The rerun prediction: the hit a prompt gets when it is sent a second time.

For each prompt length: a fresh engine runs the prompt once (cold), its stores
complete, the GPU prefix cache is cleared, and the same prompt is sent again (with
``keep_gpu_cache`` the cache is kept: the control run, where the second request is
served from the GPU prefix cache). This is
the end-to-end GPU check's procedure (vLLM's test_mamba_align_cpu_offload): what the
real engine stores after one cold prefill follows ``chunking`` -- a prompt shorter than
the token budget that ends on a block boundary is prefilled in one chunk, so only the
state at its end is saved (block L/bs - 1); one ending mid-block is cut at its last
block boundary, whose state is saved.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.config import EngineConfig
from sim.engine import Engine
from sim.metrics import RequestResult
from sim.ssm import VOCAB
from sim.workload import Request, TokenSeq


@dataclass(frozen=True)
class Rerun:
    length: int
    hit_tokens: int
    corrupted: bool
    wrong_state: bool
    violations: tuple[str, ...]
    stored_blocks: tuple[int, ...]  # Mamba blocks the first run stored
    missing_load: bool = False  # the hit loads a block the store does not hold
    gpu_hit: int = 0  # num_computed_tokens of the second request (0 once the cache is reset)
    cause: str | None = None  # why its state is wrong (sim.states.CAUSES)

    def to_json(self, with_gpu_hit: bool = False) -> dict[str, object]:
        out: dict[str, object] = {"length": self.length, "hit_tokens": self.hit_tokens,
                                  "corrupted": self.corrupted}
        if with_gpu_hit:
            out["gpu_hit_tokens"] = self.gpu_hit
        return out


def rerun_one(length: int, semantics: str, config: EngineConfig, seed: int = 0,
              keep_gpu_cache: bool = False) -> Rerun:
    rng = np.random.default_rng([seed, length])
    seq = TokenSeq(rng.integers(0, VOCAB, size=length, dtype=np.uint8), config.block_size)
    engine = Engine(config, semantics, keep_results=True)
    first = Request(0, 0, seq, length, reply_len=8)
    engine.submit(first)
    engine.drain()
    if not keep_gpu_cache:
        engine.clear_gpu()
    mg = config.mamba_group
    hashes = seq.hashes_upto(length // config.block_size)
    stored = tuple(b for b, h in enumerate(hashes) if (mg, h) in engine.cpu.entries)
    later = 1 + max(e.ready_step for e in engine.cpu.entries.values()) if stored else 1_000
    engine.submit(Request(1, later, seq, length, reply_len=8))
    engine.drain()
    assert engine.results is not None
    second: RequestResult = engine.results[-1]
    # a load of a block the store does not hold trips vLLM's assertion in prepare_load;
    # had it gone on, the state would be whatever the CPU slot held: not the cold one
    corrupted = second.corrupted or second.missing_load
    return Rerun(length, second.lookup_hit, corrupted, second.wrong_state or second.missing_load,
                 second.violations, stored, second.missing_load, second.gpu_hit, second.cause)


def parse_lengths(text: str) -> range:
    """``A-B`` (inclusive) or a single length; raises ValueError naming --lengths."""
    parts = text.split("-")
    try:
        if len(parts) == 1:
            lo = hi = int(parts[0])
        elif len(parts) == 2:
            lo, hi = int(parts[0]), int(parts[1])
        else:
            raise ValueError
    except ValueError:
        raise ValueError(f"--lengths: expected A-B or a single length, got {text!r}") from None
    if lo < 1 or hi < lo:
        raise ValueError(f"--lengths: need 1 <= A <= B, got {text!r}")
    if hi > 100_000:
        raise ValueError(f"--lengths: lengths above 100000 are not supported, got {hi}")
    return range(lo, hi + 1)
