# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""An EAGLE/MTP draft group gives the trailing stored chunk back: intended behaviour.

For ``tests/v1/kv_connector/unit/offloading_connector/``; written against vLLM
0.33.0 (git ``4ba787ec9``), whose test helpers (``MockOffloadingSpec`` in
``utils.py``, ``_make_vllm_config`` in ``test_config.py``, ``create_request`` in
``tests/v1/kv_connector/unit/utils.py``) were read in the 0.33.0 source
distribution.  The tests document the behaviour and pass on 0.33.0: the pop is
deliberate (the drafter's KV at a chunk's last position depends on the token after
the chunk, which the chunk's key does not cover).

Layout: four Mamba groups in ``mamba_cache_mode="align"`` and one full-attention
group marked ``is_eagle_group`` (the drafter's layers, as the model runner tags
them), block 80 each, one block per chunk, hash block 80; every chunk of the prompt
is stored.  ``_lookup_complete_chunks`` bounds a 161-token prompt at 160 (one token
off, rounded down to the Mamba chunk).  The EAGLE group may query one chunk past
the bound, but the prompt has only two complete chunks, so it finds [0, 80) and
[80, 160) and pops the last as volatile: the hit is 80 where 160 is stored.
Without the EAGLE flag, or with a third chunk in the prompt (240 tokens), it is 160.
"""

import pytest
import torch

from tests.v1.kv_connector.unit.offloading_connector.test_config import (
    _make_vllm_config,
)
from tests.v1.kv_connector.unit.offloading_connector.utils import (
    MockOffloadingSpec,
)
from tests.v1.kv_connector.unit.utils import create_request
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
)
from vllm.v1.kv_offload.base import LookupResult

BLOCK_SIZE = 80
NUM_MAMBA_GROUPS = 4


def _scheduler(eagle: bool) -> OffloadingConnectorScheduler:
    page = BLOCK_SIZE * 128  # K and V, 1 head of 16 float32 values
    mamba = MambaSpec(
        block_size=BLOCK_SIZE,
        shapes=((8, page // 64),),
        dtypes=(torch.float32,),
        mamba_cache_mode="align",
        page_size_padded=page,
    )
    attention = FullAttentionSpec(
        block_size=BLOCK_SIZE, num_kv_heads=1, head_size=16, dtype=torch.float32
    )
    groups = [
        KVCacheGroupSpec([f"model.layers.{i}.mamba"], mamba)
        for i in range(NUM_MAMBA_GROUPS)
    ]
    groups.append(
        KVCacheGroupSpec(
            ["model.layers.7.self_attn.attn"], attention, is_eagle_group=eagle
        )
    )
    kv_cache_config = KVCacheConfig(
        num_blocks=0, kv_cache_tensors=[], kv_cache_groups=groups
    )
    vllm_config = _make_vllm_config(extra_config={})
    vllm_config.speculative_config = None
    spec = MockOffloadingSpec(build_offloading_config(vllm_config, kv_cache_config))
    scheduler = OffloadingConnectorScheduler(spec, vllm_config, kv_cache_config)
    assert [g.is_eagle_group for g in scheduler.config.kv_group_configs] == [
        False
    ] * NUM_MAMBA_GROUPS + [eagle]
    # every chunk of every group is stored
    spec.manager.lookup.return_value = LookupResult.HIT
    return scheduler


@pytest.mark.parametrize(
    "num_tokens,eagle,hit",
    [
        # the EAGLE group cannot look past 160 and pops [80, 160)
        (161, True, 80),
        # without the EAGLE flag nothing is popped
        (161, False, 160),
        # a third chunk [160, 240) exists and is stored: it is the one popped
        (240, True, 160),
    ],
)
def test_eagle_group_gives_the_trailing_chunk_back(num_tokens, eagle, hit):
    scheduler = _scheduler(eagle)
    request = create_request(num_tokens=num_tokens, block_size=BLOCK_SIZE)
    scheduler.on_new_request(request)
    assert scheduler.get_num_new_matched_tokens(request, 0)[0] == hit
