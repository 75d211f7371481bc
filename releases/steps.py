"""The lookup steps that releases and fixes override, each written once over ``Arith``.

A release module names the step it uses (``releases.base.ChunkSteps``); ``model/`` runs it
on integers (``releases.arith.INT``: ``model.lookup_chunked``), ``proofs/`` on Z3 terms
(``proofs.arith``: the layered turn ``proofs.turn_chunked`` and the bounded encoding
``proofs.encoding_chunked``), so editing a step here changes the model and both encodings.
Lines are vLLM 0.33.0's ``offloading/scheduler.py``. The partial tail's search end
(``tail_search_*``) runs in the model (``model.lookup_chunked.lookup``), the bounded
encoding (``proofs.encoding_chunked.partial_tail_phase``) and the layered tail
(``proofs.tail_chunked.prologue``).
"""

from __future__ import annotations

from typing import Any

from releases.arith import Arith


def last_token_subtract(a: Arith, max_hit: Any, num_tokens: Any) -> Any:
    """scheduler.py:876: with sliding-window or Mamba groups the last prompt token is
    recomputed, so one token comes off the bound after the caps (a cap below the prompt
    end loses a token too: finding 003)."""
    return max_hit - 1


def last_token_min(a: Arith, max_hit: Any, num_tokens: Any) -> Any:
    """Finding 003's fix (docs/findings/003-fix.diff): the bound is at most
    ``num_tokens - 1``, as the partial-tail search takes it (scheduler.py:1087); a cap
    below the prompt end keeps its value."""
    return a.min(max_hit, num_tokens - 1)


def keep_after_cut(a: Arith, max_hit: Any, align_on: Any, align: Any, label: str) -> Any:
    """vLLM 0.33.0: after a group's cut (scheduler.py:914, :988) the bound is not rounded
    to the Mamba align size again."""
    return max_hit


def reround_after_cut(a: Arith, max_hit: Any, align_on: Any, align: Any, label: str) -> Any:
    """Finding 001's fix (docs/findings/001-fix.diff): after each group's cut the bound is
    rounded down to the Mamba align size again, so a group whose chunk is not a multiple
    of the Mamba chunk cannot leave it between two Mamba boundaries."""
    return a.ite(align_on, a.round_down(max_hit, align, label), max_hit)


def eagle_query_end(a: Arith, max_hit: Any, tokens_per_chunk: Any, cap: Any,
                    unverified: Any, widens: bool) -> Any:
    """The end of a group's query (scheduler.py:936): an unverified EAGLE group asks for
    one more chunk (popped after, :984), no further than its last keyed chunk (``cap``).
    ``widens``: whether this group widens at all (``ChunkSteps.eagle_query_all``, from
    0.30.0, or the group has a window: 0.29.0's scheduler.py:762 widens sliding-window
    groups only, and a full-attention EAGLE group pops one of its ``max_hit`` chunks)."""
    if not widens:
        return max_hit
    return a.ite(unverified, a.min(max_hit + tokens_per_chunk, cap), max_hit)


def tail_search_with_proofs(a: Any, complete_boundary: Any, block: Any, prompt_tokens: Any,
                            hashed_tokens: Any, margin: Any, has_margin: Any) -> Any:
    """vLLM 0.33.0, the partial tail's search end before the caps (scheduler.py:1083-1093):
    with an EAGLE proof margin (``has_margin``: ``margin > 0``) the tail may lie one block
    further (two search blocks), and its proof key needs a hash past the boundary
    (``hashed_tokens - margin``)."""
    search = a.ite(has_margin, 2 * block, block)  # num_search_blocks * block: linear
    end = a.min(prompt_tokens - 1, complete_boundary + search - 1)
    return a.ite(has_margin, a.min(end, hashed_tokens - margin), end)


def tail_search_one_block(a: Any, complete_boundary: Any, block: Any, prompt_tokens: Any,
                          hashed_tokens: Any, margin: Any, has_margin: Any) -> Any:
    """vLLM 0.28.0-0.32.0 (0.32.0's scheduler.py:979-980): one search block past the
    complete boundary, no proof margin (those releases turn partial tails off when a group
    is EAGLE), so no cap by the request's hashes."""
    return a.min(prompt_tokens - 1, complete_boundary + block - 1)


# --- the block lookup's start-up and load (vLLM 0.23.0-0.27.0) -------------------------
# read by model/layout.py and model/load_plan.py on integers and by proofs/encoding.py and
# proofs/theorems.py on Z3 terms. Lines are vLLM 0.26.0's (offloading/config.py,
# offloading/scheduler.py).


def chunk_blocks(a: Arith, block_size_factor: Any, blocks_per_chunk: Any, has_bpc: Any) -> Any:
    """GPU blocks per offloaded block (the chunk): ``kv_connector_extra_config
    ["blocks_per_chunk"]`` when set (config.py:69-70, from 0.26.0; one value for every
    group, so each group's chunk is that many of its own GPU blocks), else the factor the
    extra config's token ``block_size`` gives (config.py:75-88; before 0.26.0 the only
    way, v1/kv_offload/base.py:507)."""
    return a.ite(has_bpc, blocks_per_chunk, block_size_factor)


def load_window_limit(window_blocks: Any, blocks_per_chunk: Any, slack: int) -> Any:
    """The most pending GPU blocks a sliding-window group's load accepts
    (``update_state_after_alloc``'s assertion, scheduler.py:822-826 of 0.26.0): the
    window's chunks in GPU blocks, plus ``slack`` (0.27.0: one more, its scheduler.py:
    918-922; ``Semantics.load_window_slack``). Without slack the term is the product alone
    (the proofs of the older releases read the very terms they read before)."""
    limit = window_blocks * blocks_per_chunk
    return limit + slack if slack else limit
