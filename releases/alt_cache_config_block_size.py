"""A review alternative to PR #44599: align to cache_config.mamba_block_size."""

from releases import vllm_0_24_0
from releases.base import Expect, child

SEMANTICS = child(
    vllm_0_24_0.SEMANTICS, name="alt-cache-config-block-size", kind="alternative",
    align_from="cache_config", align_assert=False,
    summary="Review alternative: round max_hit_size_tokens down to "
    "cache_config.mamba_block_size (scenario field mamba_block_size, possibly stale) "
    "instead of the size found by scanning the KV-cache groups.",
    expect={
        "no-partial-state": Expect(holds=False, accepted=False),
        "loads-stored-only": Expect(holds=False, accepted=False),
        "maximality": Expect(holds=False, accepted=False),
    },
)
