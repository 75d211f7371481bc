"""Finding 003's fix (docs/findings/003-fix.diff): vLLM 0.33.0 with the last-prompt-token
rule taken as a minimum with num_tokens - 1, so a cap below the prompt end keeps its chunk."""

from dataclasses import replace

from releases import steps, vllm_0_33_0
from releases.base import Expect, child

SEMANTICS = child(
    vllm_0_33_0.SEMANTICS, name="alt-v033-cap-min", kind="fix",
    steps=replace(vllm_0_33_0.SEMANTICS.steps, last_token=steps.last_token_min),
    finding="003", fix_diff="docs/findings/003-fix.diff",
    summary="Finding 003's proposed fix (docs/findings/003-fix.diff): vLLM 0.33.0 with the "
    "last-prompt-token rule taken as a minimum with num_tokens - 1 instead of one "
    "token subtracted after the caps (a cap below the prompt's end keeps its value).",
    expect={"maximality": Expect(holds=True, accepted=False, pre=("no-eagle",))},
)
