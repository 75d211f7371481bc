"""The file:line citations of the upstream issue texts (``docs/findings/001-issue.md``,
``003-issue.md``), of the README's answer, of findings 001's and 003's write-ups and of
the statements issue 26 corrected in the findings, checked against vLLM 0.33.0's
installed source (the 0.33.0 environment of ``python -m sim.crosscheck.envs``).

Each row: a cited range and a piece of code that must lie inside it.  A range that drifts
(or a text that cites a range this table does not hold) fails.  Without the environment the
check skips, as ``tests/test_citations.py`` does.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sim.crosscheck.envs import release_package

ROOT = Path(__file__).resolve().parents[1]
OFF = "distributed/kv_transfer/kv_connector/v1/offloading/"
# (file under vllm/, first line, last line, code inside the range)
CITED = [
    # issue 26 proposed 137-154; the function's return is line 155
    (OFF + "scheduler.py", 137, 155, "def resolve_mamba_align_size("),
    (OFF + "scheduler.py", 137, 155, "return mamba_align_size"),
    (OFF + "scheduler.py", 384, 387, 'params.get("max_load_tokens")'),
    (OFF + "scheduler.py", 385, 387, 'params.get("max_load_tokens")'),
    (OFF + "scheduler.py", 574, 579, "full_attention_groups: list[int] = []"),
    (OFF + "scheduler.py", 574, 579, "sliding_window_size_in_chunks is None"),
    (OFF + "scheduler.py", 862, 862, "max_hit_size_tokens: int = req_status.req.num_tokens"),
    (OFF + "scheduler.py", 876, 876, "max_hit_size_tokens -= 1"),
    (OFF + "scheduler.py", 936, 940, "max_hit_size_tokens + tokens_per_chunk,"),
    (OFF + "scheduler.py", 984, 986, "num_hit_chunks -= 1"),
    (OFF + "config.py", 38, 45, "def get_offloading_group_ids("),
    (OFF + "config.py", 38, 45, "KVCacheGroupRole.HISPARSE_INDEXER"),
    ("distributed/kv_transfer/kv_connector/v1/offloading_connector.py", 54, 65,
     "def _bounding_group_ids(self)"),
    ("distributed/kv_transfer/kv_connector/v1/offloading_connector.py", 161, 161,
     "max_num_new_tokens=self._max_loadable_tokens("),
    ("distributed/kv_transfer/kv_connector/v1/offloading_connector.py", 165, 181,
     "bound = min(per_group_hits[group_id]"),
    ("distributed/kv_transfer/kv_connector/v1/offloading_connector.py", 177, 178,
     "request.block_hashes, request.num_tokens - 1"),
    ("entrypoints/openai/chat_completion/protocol.py", 521, 521, "kv_transfer_params"),
    ("entrypoints/openai/chat_completion/protocol.py", 784, 786,
     'extra_args["kv_transfer_params"]'),
    ("v1/request.py", 119, 122, '"kv_transfer_params"'),
    # finding 001's write-up
    ("v1/attention/backends/flashinfer.py", 585, 604, "def get_supported_kernel_block_sizes("),
    ("v1/attention/backends/flashinfer.py", 603, 603, "return [16, 32, 64]"),
    ("v1/core/kv_cache_planning.py", 392, 399, "page_size_padded=max_page_size"),
    ("v1/core/kv_cache_planning.py", 392, 395, "block_size=new_block_size"),
    ("v1/core/kv_cache_utils.py", 891, 891, "math.gcd(*hashing_sizes)"),
    ("v1/core/kv_cache_utils.py", 740, 742, "dcp_world_size if spec.dcp_sharded else 1"),
    (OFF + "config.py", 107, 120, "tokens_per_block % tokens_per_hash == 0"),
    (OFF + "config.py", 114, 120, "tokens_per_block % tokens_per_hash == 0"),
    (OFF + "config.py", 128, 160, "blocks_per_chunk = int(blocks_per_chunk_config)"),
    ("model_executor/models/nemotron_h.py", 477, 489,
     'sliding_window = getattr(config, "sliding_window", None)'),
    ("model_executor/models/nemotron_h.py", 477, 489,
     "per_layer_sliding_window=sliding_window,"),
    ("v1/core/single_type_kv_cache_manager.py", 1995, 2016,
     "self._pending_boundary_state_offloads.append("),
    ("v1/core/single_type_kv_cache_manager.py", 1442, 1444,
     'self.mamba_cache_mode == "align" or not self.enable_caching'),
    (OFF + "scheduler.py", 2176, 2182, "self.manager.on_request_finished("),
    (OFF + "scheduler.py", 914, 914, "max_hit_size_tokens = min("),
    (OFF + "scheduler.py", 1056, 1066, "def _make_boundary_key("),
    (OFF + "scheduler.py", 1154, 1195, "def _partial_tail_key_tokens("),
    ("v1/kv_offload/cpu/policies/lru.py", 163, 163, "reversed(order_request_keys("),
    ("v1/kv_offload/cpu/policies/base.py", 10, 22, "def order_request_keys("),
    ("v1/kv_offload/cpu/manager.py", 231, 231, 'assert chunk is not None, f"Chunk'),
    ("platforms/interface.py", 1114, 1115,
     "cache_config.mamba_block_size = cache_config.block_size"),
    ("platforms/interface.py", 826, 937, "def _align_heterogeneous_kv_block_size("),
    ("platforms/xpu.py", 507, 508, "cache_config.mamba_block_size = new_block_size"),
    ("model_executor/layers/attention/attention.py", 613, 613,
     "block_size = vllm_config.cache_config.block_size"),
    ("model_executor/layers/attention/attention.py", 675, 675, "return FullAttentionSpec("),
    ("config/cache.py", 176, 176, 'MambaCacheMode = Literal["align", "none"]'),
    (OFF + "scheduler.py", 863, 866, "num_computed_tokens + max_num_new_tokens"),
    (OFF + "scheduler.py", 867, 871, "num_computed_tokens + req_status.max_load_tokens"),
    (OFF + "scheduler.py", 872, 876, "max_hit_size_tokens -= 1"),
    (OFF + "scheduler.py", 872, 881, "max_hit_size_tokens, self._mamba_align_size"),
    (OFF + "scheduler.py", 877, 881, "max_hit_size_tokens, self._mamba_align_size"),
    (OFF + "scheduler.py", 913, 916, "len(offload_keys) * tokens_per_chunk"),
    (OFF + "scheduler.py", 917, 920, "if req_status.max_load_tokens is not None:"),
    (OFF + "scheduler.py", 917, 920, "max_hit_size_tokens, tokens_per_chunk"),
    (OFF + "scheduler.py", 942, 942, "num_chunks = min(cdiv(query_max, tokens_per_chunk)"),
    (OFF + "scheduler.py", 988, 991, "tokens_per_chunk * (start_chunk_idx + num_hit_chunks)"),
    (OFF + "scheduler.py", 1423, 1446,
     "num_chunks = cdiv(num_cached_tokens, tokens_per_chunk)"),
    (OFF + "scheduler.py", 1423, 1446, "req_status.load_key_ranges.extend("),
    (OFF + "scheduler.py", 1087, 1087, "req_status.req.num_prompt_tokens - 1"),
    (OFF + "scheduler.py", 1095, 1101, "local_tokens + req_status.max_load_tokens"),
    (OFF + "config.py", 79, 81, "isinstance(kv_cache_spec, MambaSpec)"),
    (OFF + "config.py", 79, 81, "return 1"),
    (OFF + "config.py", 113, 119, "tokens_per_block % tokens_per_hash == 0"),
    ("model_executor/layers/attention/attention.py", 266, 271,
     "sliding_window = cache_config.sliding_window"),
    ("model_executor/layers/attention/attention.py", 101, 130,
     "def _largest_kernel_block_within("),
    ("model_executor/layers/attention/attention.py", 101, 130, "return max(fitting)"),
    ("model_executor/layers/attention/attention.py", 624, 666,
     "if self.sliding_window is not None:"),
    ("model_executor/layers/attention/attention.py", 624, 666, "block_size=sw_block_size,"),
    ("config/model.py", 1625, 1627, 'getattr(self.hf_text_config, "sliding_window", None)'),
    ("engine/arg_utils.py", 2288, 2294, "sliding_window = model_config.get_sliding_window()"),
    ("v1/attention/backends/flashinfer.py", 585, 603, "return [16, 32, 64]"),
    ("v1/attention/backends/flashinfer.py", 589, 604, "is_device_capability_family(100)"),
    ("v1/attention/backends/flashinfer.py", 604, 604,
     "return [16, 32, 64, 128, 256, 512, 1024]"),
    ("platforms/cuda.py", 160, 168, "device_capability.major == 10"),
    ("platforms/cuda.py", 160, 168, "AttentionBackendEnum.FLASHINFER,"),
    ("platforms/cuda.py", 169, 178, "AttentionBackendEnum.FLASH_ATTN,"),
    ("v1/attention/backends/flash_attn.py", 357, 367, "return [MultipleOf(16)]"),
    ("v1/attention/backends/flash_attn.py", 362, 366, "_get_fa4_hd256_block_size"),
    ("v1/attention/backends/triton_attn.py", 339, 340, "return [MultipleOf(16)]"),
    ("v1/core/kv_cache_utils.py", 816, 891, "math.gcd(*hashing_sizes)"),
    ("platforms/interface.py", 1098, 1115,
     "cache_config.mamba_block_size = cache_config.block_size"),
    ("entrypoints/openai/completion/protocol.py", 248, 248, "kv_transfer_params"),
    ("entrypoints/openai/completion/protocol.py", 401, 403, 'extra_args["kv_transfer_params"]'),
    # finding 001's preemption section (sim/tier_preempt.py, tests/test_tier_preempt.py)
    ("v1/core/sched/scheduler.py", 1817, 1817, "self._free_request_blocks(request)"),
    ("v1/core/sched/scheduler.py", 1822, 1822, "request.num_computed_tokens = 0"),
    ("v1/core/sched/scheduler.py", 1842, 1842, "self.waiting.prepend_request(request)"),
    (OFF + "scheduler.py", 2136, 2151, "for req_id in scheduler_output.preempted_req_ids"),
    (OFF + "scheduler.py", 1241, 1254, "group_state.next_stored_chunk_idx = 0"),
]
TEXTS = [ROOT / "docs" / "findings" / name for name in ("001-issue.md", "003-issue.md")]
TEXTS.append(ROOT / "README.md")  # its 0.33.0 citations (finding 001's mechanism)
TEXTS += [ROOT / "docs" / "findings" / name  # their file:line are all 0.33.0's
          for name in ("001-mamba-state-past-hit-end.md", "003-load-cap-loses-a-chunk.md")]


@pytest.fixture(scope="module")
def vllm_033() -> Path:
    pkg = release_package("0.33.0")
    if pkg is None:
        pytest.skip("no vLLM 0.33.0 env: python -m sim.crosscheck.envs --vllm 0.33.0")
    return pkg


@pytest.mark.parametrize("path,first,last,code", CITED,
                         ids=[f"{p.split('/')[-1]}:{a}-{b}" for p, a, b, _ in CITED])
def test_cited_range_holds_the_code(vllm_033: Path, path: str, first: int, last: int,
                                    code: str) -> None:
    lines = (vllm_033 / path).read_text().splitlines()
    assert any(code in line for line in lines[first - 1:last]), (
        f"vllm/{path}:{first}-{last} does not hold {code!r}")


def test_issue_texts_cite_only_checked_ranges() -> None:
    """Every ``scheduler.py:A-B`` style citation of the issue texts and the README (and
    each bare ``:A-B`` after it, which refers to the last file named, with or without a
    line) is a checked range."""
    checked = {(p.split("/")[-1], a, b) for p, a, b, _ in CITED}
    checked |= {(p.split("/")[-1], a, a) for p, a, _, _ in CITED}
    cite = re.compile(r"`(?:[\w/]*/)?([\w]+\.py)?(?::(\d+)(?:-(\d+))?)?`")
    for text in TEXTS:
        current = None
        for m in cite.finditer(text.read_text()):
            current = m.group(1) or current
            if m.group(2) is None:
                continue
            a, b = int(m.group(2)), int(m.group(3) or m.group(2))
            assert current is not None, m.group(0)
            assert (current, a, b) in checked, f"{text.name}: {m.group(0)} ({current})"
