"""vLLM 0.23.0: the last release before PR #44599 (the block lookup, no Mamba alignment)."""

from releases.base import Expect, root

SEMANTICS = root(
    name="vllm-0.23.0", base_version="0.23.0", align_at="none", align_from="groups",
    eagle=False, skip_reading_check=False, in_flight_check=False, align_assert=False,
    summary="vLLM 0.23.0, the last release before PR #44599: no Mamba alignment.",
    expect={
        "no-partial-state": Expect(holds=False, accepted=False),
        "loads-stored-only": Expect(holds=True, accepted=False),
        "leaves-last-token": Expect(holds=True),
        "whole-blocks": Expect(holds=True, accepted=False),
        "termination": Expect(holds=True),
        "maximality": Expect(holds=True, accepted=False),
    },
)
