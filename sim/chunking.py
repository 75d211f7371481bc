"""How the scheduler splits one prefill into chunks in Mamba ``align`` mode.

A Mamba state is saved only where a scheduled chunk ends on a block boundary
(the running state lives in the block of the last computed token,
v1/worker/mamba_utils.py:716 (0.23.0: 678); a full block is then hashed and cached,
and the offloading connector stores it). So the chunk ends decide which states exist.

Per chunk (vLLM 0.24.0 v1/core/sched/scheduler.py, 0.23.0 line in parentheses):
  * the remaining prompt, capped by ``long_prefill_token_threshold`` when > 0
    (:797 (685); default 0, config/scheduler.py:80) and by the token budget
    ``max_num_batched_tokens`` (:811 (699); default 2048, config/scheduler.py:42);
  * ``_mamba_block_aligned_split`` (:330 (293)), with ``need_mamba_block_aligned_split``
    true for Mamba layers in align mode (:289 (261)):
    last_cache_position = num_tokens - num_tokens % block_size (:358 (320));
    a chunk ending before it is rounded down to whole blocks (:364 (326)); a chunk that
    would cross it is cut to end exactly there, "force to cache the last chunk"
    (:371 (333)); otherwise the tail is prefilled as is (:374 (336));
  * 0.24.0 only (Marconi admission, :377-385): when a longer common prefix is cached for
    attention than for Mamba, the first chunk ends at the end of that prefix, rounded
    down to a block (``num_uncached_common_prefix_tokens``, kv_cache_coordinator.py:729).
    It is passed only on the new-request path (:833-839); the split is skipped while an
    async load is set up (:832 (720)) and the first chunk after the load gets none.

So a prompt shorter than the budget and ending on a block boundary is prefilled in one
chunk, and only the state at its end is saved; a prompt ending mid-block is cut at its
last block boundary, whose state is saved, and the tail follows in a second chunk. When
other requests use part of the step's budget, a chunk is rounded down to whole blocks,
so a prefill under load saves more intermediate states.

With a KV connector the Marconi hint is 0 in practice: a pure Mamba model has a
unitary coordinator without the attribute (scheduler.py:716 getattr default 0), and a
hybrid one takes the per-group path (scheduler.py:675-701), which never calls the
``find_longest_cache_hit`` that sets it. The simulator therefore passes 0.
"""

from __future__ import annotations


def aligned_chunk(num_tokens: int, computed: int, num_new: int, block_size: int,
                  uncached_common_prefix: int = 0) -> int:
    """``_mamba_block_aligned_split``: the tokens actually scheduled out of ``num_new``.

    0 means the request cannot be scheduled this step (not enough budget for a
    block-aligned chunk, scheduler.py:514 (451)).
    """
    last_cache_position = num_tokens - num_tokens % block_size
    after = computed + num_new
    if after < last_cache_position:
        num_new = num_new // block_size * block_size
    elif computed < last_cache_position < after:
        num_new = last_cache_position - computed
    if uncached_common_prefix >= block_size and num_new > uncached_common_prefix:
        num_new = uncached_common_prefix // block_size * block_size
    return num_new


def chunk_ends(num_tokens: int, start: int, block_size: int, *, budget: int = 2048,
               long_prefill_threshold: int = 0, uncached_common_prefix: int = 0) -> list[int]:
    """Token positions where the prefill chunks of a prompt end when the request has the
    whole token budget to itself (the last is the prompt end).

    ``start`` is the number of tokens already computed (GPU hit plus loaded tokens).
    """
    ends: list[int] = []
    computed = start
    ucp = uncached_common_prefix
    while computed < num_tokens:
        n = num_tokens - computed
        if 0 < long_prefill_threshold < n:
            n = long_prefill_threshold
        n = aligned_chunk(num_tokens, computed, min(n, budget), block_size, ucp)
        if n <= 0:
            raise ValueError(f"token budget {budget} is below the block size {block_size}")
        computed += n
        ends.append(computed)
        ucp = 0
    return ends
