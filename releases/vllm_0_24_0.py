"""vLLM 0.24.0: the first release with PR #44599 (max_hit_size_tokens rounded down to the
Mamba offloaded block size), EAGLE groups, skip_reading_prefix_cache, in-flight transfers."""

from releases import vllm_0_23_0
from releases.base import Expect, child

SEMANTICS = child(
    vllm_0_23_0.SEMANTICS, name="vllm-0.24.0", base_version="0.24.0", kind="release",
    align_at="max_hit", eagle=True, skip_reading_check=True, in_flight_check=True,
    align_assert=True,
    summary="vLLM 0.24.0, the first release with PR #44599: max_hit_size_tokens is rounded "
    "down to the Mamba offloaded block size found by scanning the KV-cache groups.",
    expect={"no-partial-state": Expect(holds=True, accepted=False)},
)
