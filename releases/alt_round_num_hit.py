"""A review alternative to PR #44599: round num_hit_tokens after the loop instead."""

from releases import vllm_0_24_0
from releases.base import Expect, child

SEMANTICS = child(
    vllm_0_24_0.SEMANTICS, name="alt-round-num-hit", kind="alternative", align_at="num_hit",
    summary="Review alternative: round num_hit_tokens (tokens beyond the GPU hit) down to "
    "the Mamba offloaded block size after the loop, instead of max_hit_size_tokens.",
    expect={
        "no-partial-state": Expect(holds=False, accepted=False),
        "loads-stored-only": Expect(holds=False, accepted=False),
        "maximality": Expect(holds=False, accepted=False),
    },
)
