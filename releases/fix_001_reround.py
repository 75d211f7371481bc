"""Finding 001's fix as proposed (docs/findings/001-fix.diff): vLLM 0.33.0 with the bound
rounded down to the Mamba chunk again after each group's cut."""

from dataclasses import replace

from releases import steps, vllm_0_33_0
from releases.base import Expect, child

SEMANTICS = child(
    vllm_0_33_0.SEMANTICS, name="alt-v033-reround-mamba", kind="fix",
    steps=replace(vllm_0_33_0.SEMANTICS.steps, after_cut=steps.reround_after_cut),
    finding="001", fix_diff="docs/findings/001-fix.diff",
    summary="Finding 001's proposed fix (docs/findings/001-fix.diff): vLLM 0.33.0 with "
    "max_hit_size_tokens rounded down to the Mamba chunk size again after each "
    "group's cut (its keyed length, its confirmed chunks), not only before the loop.",
    expect={
        "no-partial-state": Expect(holds=True, accepted=True, pre=()),
        # it can load a sliding-window chunk the store lacks
        "loads-stored-only": Expect(holds=True, accepted=False),
    },
)
