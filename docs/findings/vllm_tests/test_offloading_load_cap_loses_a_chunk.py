# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""A ``max_load_tokens`` cap below the prompt's end must not cost a chunk of hit.

For ``tests/v1/kv_connector/unit/offloading_connector/``; written against vLLM
0.33.0 (git ``4ba787ec9``), whose test helpers (``MockOffloadingSpec``,
``RequestRunner`` and the ``request_runner`` fixture in ``utils.py`` and
``conftest.py``, ``_make_vllm_config`` in ``test_config.py``) were read in the
0.33.0 source distribution.

With a sliding-window or Mamba group, ``_lookup_complete_chunks`` caps the hit
bound at ``max_load_tokens`` and then still takes one token off for the
last-prompt-token rule, although the cap already leaves that token to compute;
the round-down to the Mamba chunk (or, with the cap, to each group's chunk) then
drops a whole chunk.  The tests assert the hit that keeps every rule, so on
0.33.0 the capped cases fail (hit 16 instead of 32).  Taking the minimum with
``num_tokens - 1`` instead of subtracting after the caps, as the partial-tail
path already does, makes them pass.
"""

import pytest
import torch

from tests.v1.kv_connector.unit.offloading_connector.test_config import (
    _make_vllm_config,
)
from tests.v1.kv_connector.unit.offloading_connector.utils import (
    MockOffloadingSpec,
    generate_store_output,
)
from tests.v1.kv_connector.unit.utils import EOS_TOKEN_ID, create_request
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import (
    build_offloading_config,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
    OffloadingConnectorScheduler,
)
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
    SlidingWindowSpec,
)
from vllm.v1.kv_offload.base import LookupResult

BLOCK_SIZE = 16
NUM_PROMPT_TOKENS = 2 * BLOCK_SIZE + 1


@pytest.mark.parametrize("max_load_tokens", [None, 33, 32])
def test_mamba_load_cap_keeps_the_chunk(max_load_tokens):
    """One Mamba group (align, block 16), as 0.33.0 builds it for a small Mamba1
    or Mamba2 model; every chunk of a 33-token prompt is stored.  A hit of 32
    ends on a Mamba chunk, leaves the last prompt token to compute and stays
    within every cap tried."""
    kv_cache_config = KVCacheConfig(
        num_blocks=0,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["mamba_layer"],
                MambaSpec(
                    block_size=BLOCK_SIZE,
                    shapes=((1, 1),),
                    dtypes=(torch.float32,),
                    mamba_cache_mode="align",
                ),
            )
        ],
    )
    vllm_config = _make_vllm_config(extra_config={})
    spec = MockOffloadingSpec(build_offloading_config(vllm_config, kv_cache_config))
    scheduler = OffloadingConnectorScheduler(spec, vllm_config, kv_cache_config)
    request = create_request(num_tokens=NUM_PROMPT_TOKENS, block_size=BLOCK_SIZE)
    if max_load_tokens is not None:
        request.kv_transfer_params = {"max_load_tokens": max_load_tokens}
    scheduler.on_new_request(request)
    spec.manager.lookup.return_value = LookupResult.HIT

    hit, _ = scheduler.get_num_new_matched_tokens(request, 0)
    assert hit == 2 * BLOCK_SIZE, f"max_load_tokens={max_load_tokens}: hit {hit}"


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_sliding_window_load_cap_keeps_the_chunk(request_runner, async_scheduling):
    """Full attention and a 32-token sliding window, block 16: the prompt is
    stored by a first request, then sent again with ``max_load_tokens=32``."""
    runner = request_runner(
        block_size=BLOCK_SIZE,
        num_gpu_blocks=100,
        async_scheduling=async_scheduling,
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["full_layer"],
                FullAttentionSpec(
                    block_size=BLOCK_SIZE,
                    num_kv_heads=1,
                    head_size=1,
                    dtype=torch.float32,
                ),
            ),
            KVCacheGroupSpec(
                ["sliding_layer"],
                SlidingWindowSpec(
                    block_size=BLOCK_SIZE,
                    num_kv_heads=1,
                    head_size=1,
                    dtype=torch.float32,
                    sliding_window=2 * BLOCK_SIZE,
                ),
            ),
        ],
    )
    token_ids = list(range(1, NUM_PROMPT_TOKENS + 1))
    runner.manager.prepare_store.side_effect = lambda keys, req_context: (
        generate_store_output(keys)
    )
    runner.new_request(token_ids=token_ids)
    runner.run(decoded_tokens=[EOS_TOKEN_ID], expected_stored=(0, 1))
    runner.scheduler.reset_prefix_cache()

    matched: list[tuple[int | None, bool]] = []
    get_num_new_matched_tokens = runner.connector_scheduler.get_num_new_matched_tokens

    def record_matched(*args, **kwargs):
        result = get_num_new_matched_tokens(*args, **kwargs)
        matched.append(result)
        return result

    runner.connector_scheduler.get_num_new_matched_tokens = record_matched
    runner.manager.prepare_store.side_effect = lambda keys, req_context: (
        generate_store_output([])
    )
    runner.manager.lookup.return_value = LookupResult.HIT
    runner.new_request(
        token_ids=token_ids, kv_transfer_params={"max_load_tokens": 2 * BLOCK_SIZE}
    )
    try:
        runner.run(decoded_tokens=[EOS_TOKEN_ID], expected_loaded=(0, 1))
    finally:
        hit = matched[0][0] if matched else None
        assert hit == 2 * BLOCK_SIZE, f"max_load_tokens=32: hit {hit}"
