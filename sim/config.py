"""The simulated engine's configuration (one frozen dataclass)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineConfig:
    block_size: int = 16  # GPU block size of every group; block_size_factor is 1
    # full-attention groups beside the single Mamba (align) group; 0: a pure Mamba model
    attention_groups: int = 0
    gpu_blocks: int = 128  # GPU prefix cache capacity (blocks, all groups together)
    cpu_blocks: int = 32768  # CPU offload store capacity (blocks, all groups together)
    max_num_batched_tokens: int = 2048  # config/scheduler.py:42, shared by a step
    max_num_seqs: int = 128  # running requests at most, config/scheduler.py:44
    long_prefill_token_threshold: int = 0  # config/scheduler.py:80
    # steps from issuing a store / load until it completes (inclusive range, >= 1: a store
    # is submitted at the start of the next step, worker.py:293 (254))
    store_latency: tuple[int, int] = (2, 8)
    load_latency: tuple[int, int] = (1, 4)
    # cache_config.mamba_block_size as alt-cache-config-block-size reads it (None: correct)
    cache_mamba_block_size: int | None = None
    check_tokens: int = 64  # greedy tokens compared between the cold and the warm run
    verify_clean: bool = False  # also compute clean paths numerically and check them
    seed: int = 0  # latencies

    @property
    def num_groups(self) -> int:
        return self.attention_groups + 1

    @property
    def mamba_group(self) -> int:
        # attention groups first, as vLLM orders full attention before other specs
        return self.attention_groups
