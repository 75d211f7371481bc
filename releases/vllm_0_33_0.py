"""vLLM 0.33.0, the newest release: the chunked lookup (``_lookup_complete_chunks``, partial
tails, caps, HIT_PENDING / RETRY answers)."""

from releases import vllm_0_24_0
from releases.base import Expect, child

SEMANTICS = child(
    vllm_0_24_0.SEMANTICS, name="vllm-0.33.0", base_version="0.33.0", kind="release",
    chunked=True,
    summary="vLLM 0.33.0: chunked offloading (blocks_per_chunk), partial-tail keys for "
    "Mamba align layouts, max_num_new_tokens / max_load_tokens caps, HIT_PENDING "
    "and RETRY answers; max_hit_size_tokens still rounded to the Mamba chunk size.",
    expect={
        # finding 001: fails over the layouts 0.33.0 accepts
        "no-partial-state": Expect(holds=True, accepted=False, pre=("align-divides-blocks",)),
        "loads-stored-only": Expect(holds=True, accepted=True, pre=()),
        # finding 002 (not a bug): a full-attention chunk larger than every sliding-window
        # and Mamba chunk lets the hit end inside it
        "whole-blocks": Expect(holds=True, accepted=False,
                               pre=("full-chunk-within-windowed",)),
        # an EAGLE group's pop and a binding cap each give hit tokens away (004, 003)
        "maximality": Expect(holds=True, accepted=False, pre=("no-eagle", "caps-reach-prompt")),
    },
)
