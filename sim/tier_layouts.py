"""The layouts the tier simulation (``sim.tier_sim``) runs: finding 001's NemotronH with a
sliding window, as vLLM 0.33.0's own start-up code made them
(``docs/findings/evidence/swa-layouts-v033.json``, from
``sim/crosscheck/adapters/swa_layout_v033.py``; ``tests/test_tier_sim.py`` checks each
against its row there) and ``docs/layouts-vllm-0.33.0.*`` (the group count).

Groups in vLLM's order: the Mamba (align) groups first, then the sliding-window group
(``kv cache group sizes (48, 32)`` in the GPU run's log, finding 001). One GPU block per
offloaded chunk (``blocks_per_chunk`` 1, the default).
"""

from __future__ import annotations

from dataclasses import dataclass

from model.scenario import Group


@dataclass(frozen=True)
class TierLayout:
    name: str
    evidence_model: str  # the row's "model" in swa-layouts-v033.json
    backend: str
    hash_block: int  # resolve_kv_cache_block_sizes' GCD (kv_cache_utils.py:891)
    scheduler_block: int  # Mamba states are retained at its multiples (finding 001)
    mamba_groups: int
    mamba_block: int
    window: int  # the sliding window in tokens
    window_block: int
    summary: str

    def groups(self) -> tuple[Group, ...]:
        """The groups as ``model.scenario`` names them, nothing stored."""
        mamba = Group(kind="mamba", gpu_block_size=self.mamba_block,
                      mamba_cache_mode="align", stored=frozenset())
        window = Group(kind="sliding_window", gpu_block_size=self.window_block,
                       sliding_window=self.window, stored=frozenset())
        return (mamba,) * self.mamba_groups + (window,)

    def tokens_per_chunk(self) -> tuple[int, ...]:
        return (self.mamba_block,) * self.mamba_groups + (self.window_block,)


LAYOUTS: dict[str, TierLayout] = {
    lay.name: lay
    for lay in (
        TierLayout("nemotronh-swa-tiny-flashinfer", "tiny-gpu-check", "FLASHINFER", 16, 96,
                   1, 48, 64, 32,
                   "finding 001's GPU-checked tiny NemotronH, window 64, FlashInfer's "
                   "kernel blocks: Mamba 48, window block 32 (the chunk does not divide)"),
        TierLayout("nemotronh-swa-tiny-triton", "tiny-gpu-check", "TRITON_ATTN", 48, 48,
                   1, 48, 64, 48,
                   "the same model on Triton: every block 48 (control: the Mamba chunk "
                   "divides every chunk)"),
        TierLayout("nemotronh-swa-8b-flashinfer", "nemotron-h-8b-swa1024", "FLASHINFER", 16,
                   4160, 4, 1040, 1024, 64,
                   "Nemotron-H-8B sizes, window 1024, FlashInfer: 4 Mamba groups of 1040, "
                   "window block 64"),
    )
}
