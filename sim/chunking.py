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
last block boundary, whose state is saved, and the tail follows in a second chunk.
"""

from __future__ import annotations


def chunk_ends(num_tokens: int, start: int, block_size: int, *, budget: int = 2048,
               long_prefill_threshold: int = 0, uncached_common_prefix: int = 0) -> list[int]:
    """Token positions where the prefill chunks of a prompt end (the last is the prompt end).

    ``start`` is the number of tokens already computed (GPU hit plus loaded tokens).
    """
    ends: list[int] = []
    computed = start
    last_cache_position = num_tokens - num_tokens % block_size
    first = True
    while computed < num_tokens:
        n = num_tokens - computed
        if 0 < long_prefill_threshold < n:
            n = long_prefill_threshold
        n = min(n, budget)
        after = computed + n
        if after < last_cache_position:
            n = n // block_size * block_size
        elif computed < last_cache_position < after:
            n = last_cache_position - computed
        if first and uncached_common_prefix >= block_size and n > uncached_common_prefix:
            n = uncached_common_prefix // block_size * block_size
        if n <= 0:
            # budget below one block: vLLM cannot schedule it (scheduler.py:514 (451))
            raise ValueError(f"token budget {budget} is below the block size {block_size}")
        computed += n
        ends.append(computed)
        first = False
    return ends
