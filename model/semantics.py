"""The named semantics the model covers.

Three are real releases (each checked against that release's code by ``sim.crosscheck``);
two are the alternatives weighed in the review of vLLM PR #44599.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

AlignAt = Literal["none", "max_hit", "num_hit"]
AlignFrom = Literal["groups", "cache_config"]


@dataclass(frozen=True)
class Semantics:
    name: str
    # the release whose code (and line numbers) the steps follow
    base_version: str
    # where the Mamba alignment is applied: nowhere (0.23.0), to max_hit_size_tokens
    # before the loop (0.24.0, scheduler.py:470), or to num_hit_tokens after it
    align_at: AlignAt
    # where the alignment size comes from: the KV-cache groups (resolve_mamba_align_size,
    # scheduler.py:108) or cache_config.mamba_block_size (the scenario's mamba_block_size)
    align_from: AlignFrom
    # 0.24.0 additions beside the fix
    eagle: bool  # EAGLE groups look up and pop one extra block (scheduler.py:515-554)
    skip_reading_check: bool  # request.skip_reading_prefix_cache gives 0 (scheduler.py:673)
    in_flight_check: bool  # in-flight transfers defer the request (scheduler.py:662)
    align_assert: bool  # Mamba align groups must agree on the size (scheduler.py:121)
    summary: str
    # 0.33.0's reworked scheduler: chunks, partial tails, caps, LookupResult answers
    # (model/layout_chunked.py, lookup_chunked.py, load_chunked.py instead of the 0.24.0 modules)
    chunked: bool = False
    # finding 001's proposed fix (docs/findings/001-fix.diff): in the 0.33.0 lookup, round
    # max_hit_size_tokens down to the Mamba align size again after each per-group cut
    reround_mamba: bool = False
    # ... and a sliding-window group whose confirmed window that rounding cut is looked up
    # again (the loop's re-run of the sliding-window groups), so its window ends at the hit
    reround_rerun: bool = False
    # finding 003's proposed fix (docs/findings/003-fix.diff): the last-prompt-token rule
    # of the 0.33.0 lookup lowers max_hit_size_tokens to num_tokens - 1 (a minimum, as
    # the partial-tail path does, scheduler.py:1087) instead of subtracting one after the
    # caps, so a cap that ends before the prompt's end keeps its value
    cap_min: bool = False


SEMANTICS: dict[str, Semantics] = {
    s.name: s
    for s in (
        Semantics(
            "vllm-0.23.0", "0.23.0", "none", "groups", False, False, False, False,
            "vLLM 0.23.0, the last release before PR #44599: no Mamba alignment.",
        ),
        Semantics(
            "vllm-0.24.0", "0.24.0", "max_hit", "groups", True, True, True, True,
            "vLLM 0.24.0, the first release with PR #44599: max_hit_size_tokens is rounded "
            "down to the Mamba offloaded block size found by scanning the KV-cache groups.",
        ),
        Semantics(
            "alt-round-num-hit", "0.24.0", "num_hit", "groups", True, True, True, True,
            "Review alternative: round num_hit_tokens (tokens beyond the GPU hit) down to "
            "the Mamba offloaded block size after the loop, instead of max_hit_size_tokens.",
        ),
        Semantics(
            "alt-cache-config-block-size", "0.24.0", "max_hit", "cache_config", True, True,
            True, False,
            "Review alternative: round max_hit_size_tokens down to "
            "cache_config.mamba_block_size (scenario field mamba_block_size, possibly stale) "
            "instead of the size found by scanning the KV-cache groups.",
        ),
    )
}


# vLLM 0.33.0 (model/*_chunked.py): the model and the cross-check answer for it; the Z3
# encoding (proofs/) and the simulator (sim/) cover only SEMANTICS above.
CHUNKED_SEMANTICS: dict[str, Semantics] = {
    s.name: s
    for s in (
        Semantics(
            "vllm-0.33.0", "0.33.0", "max_hit", "groups", True, True, True, True,
            "vLLM 0.33.0: chunked offloading (blocks_per_chunk), partial-tail keys for "
            "Mamba align layouts, max_num_new_tokens / max_load_tokens caps, HIT_PENDING "
            "and RETRY answers; max_hit_size_tokens still rounded to the Mamba chunk size.",
            chunked=True,
        ),
        Semantics(
            "alt-v033-reround-mamba", "0.33.0", "max_hit", "groups", True, True, True, True,
            "Finding 001's proposed fix (docs/findings/001-fix.diff): vLLM 0.33.0 with "
            "max_hit_size_tokens rounded down to the Mamba chunk size again after each "
            "group's cut (its keyed length, its confirmed chunks), not only before the loop.",
            chunked=True, reround_mamba=True,
        ),
        Semantics(
            "alt-v033-reround-mamba-rerun", "0.33.0", "max_hit", "groups", True, True, True,
            True,
            "alt-v033-reround-mamba, completed: when the round-down cuts a sliding-window "
            "group's confirmed window, the sliding-window groups are looked up again at the "
            "lowered bound (otherwise the load can read a window chunk the store lacks).",
            chunked=True, reround_mamba=True, reround_rerun=True,
        ),
        Semantics(
            "alt-v033-cap-min", "0.33.0", "max_hit", "groups", True, True, True, True,
            "Finding 003's proposed fix (docs/findings/003-fix.diff): vLLM 0.33.0 with the "
            "last-prompt-token rule taken as a minimum with num_tokens - 1 instead of one "
            "token subtracted after the caps (a cap below the prompt's end keeps its value).",
            chunked=True, cap_min=True,
        ),
    )
}

MODEL_SEMANTICS: dict[str, Semantics] = {**SEMANTICS, **CHUNKED_SEMANTICS}


def get_semantics(name: str) -> Semantics:
    try:
        return MODEL_SEMANTICS[name]
    except KeyError:
        known = ", ".join(MODEL_SEMANTICS)
        raise ValueError(f"semantics: unknown name {name!r} (known: {known})") from None
