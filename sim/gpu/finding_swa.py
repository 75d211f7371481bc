"""Finding 001 on the real vLLM 0.33.0 engine: cold output vs output after a CPU hit that
restores a Mamba state past the hit's end (sliding-window route).

Two steps, two machines:

    # here (CPU; torch + transformers, e.g. the 0.33.0 env): the tiny random-weight model
    python sim/gpu/finding_swa.py build --model-dir DIR [--seed 0]
    # GPU host, vLLM 0.33.0 installed (shared/vllm-offline bundle):
    VLLM_ENABLE_V1_MULTIPROCESSING=0 python3 sim/gpu/finding_swa.py run --model-dir DIR --out F

The model is a NemotronH (Mamba2 + attention, pattern ``M*M*``) whose attention layers
use a 64-token sliding window, float32, random weights (seed), hidden 64, 2 KV heads of
32, 4 Mamba heads of 32, state 32.  vLLM's start-up then makes the Mamba (align) block 48
(platforms/interface.py ``_align_hybrid_block_size``).  The compact bundle has no
FlashInfer, so the Triton backend is told to declare FlashInfer's kernel block sizes
(16, 32, 64; v1/attention/backends/flashinfer.py:603): vLLM's own
``Attention.get_kv_cache_spec`` then picks block 32 for the sliding-window layers and
page unification pads them, the layout ``swa_layout_chunked.py`` derives for FlashInfer
("block sizes forced", in the issue's words: the Triton kernels run the 32-token blocks).

The CPU tier is sized to 7 chunks (``CPUOffloadingSpec`` is given ``cpu_bytes_to_use`` =
7 aligned chunks).  Per scenario, through ``LLMEngine.add_request``/``step``:

- ``evict``: A (200 tokens, 12 output tokens) is the cold run; once A has ended (and a
  1-token request has stepped the engine, which tells the tier), B (40 tokens) stores
  one chunk and the LRU evicts A's sliding-window chunk ending at token 192, ranked
  before the Mamba chunk ending there; GPU prefix cache reset (CPU tier kept); A's
  prompt again (C).  Expected: hit 160, Mamba state from token 192, output differs.
- ``control``: the same with another 200-token prompt and no B: hit 192, the Mamba
  state from token 192, output equal.
- ``recompute``: A's prompt once more after the CPU tier is also reset: no hit, output
  equal to A's (vLLM is deterministic here).

Records per scenario: the connector's hit, the Mamba keys the load restored (the token
their state was saved at, from ``ReqContext.get_offload_key_position``), the tier's
holdings of A's keys after B, cold and hot tokens; writes JSON to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
from sim.gpu import probe_chunked  # noqa: E402

SCHEMA = "finding-swa/1"
TIER_CHUNKS = 7
DECLARED_BLOCKS = [16, 32, 64]  # FlashInfer's, outside Blackwell (flashinfer.py:603)
MODEL: dict[str, Any] = {
    "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 4,
    "hybrid_override_pattern": "M*M*", "num_attention_heads": 2,
    "num_key_value_heads": 2, "head_dim": 32, "mamba_num_heads": 4, "mamba_head_dim": 32,
    "ssm_state_size": 32, "n_groups": 1, "conv_kernel": 4, "intermediate_size": 128,
    "sliding_window": 64, "max_position_embeddings": 1024, "initializer_range": 0.5,
    "tie_word_embeddings": False, "pad_token_id": 0, "bos_token_id": 1,
    "eos_token_id": 2, "architectures": ["NemotronHForCausalLM"],
}


def prompt(n: int, a: int, b: int) -> list[int]:
    return [(a * t + b) % 500 + 3 for t in range(n)]


P_EVICT = prompt(200, 7, 5)
P_CONTROL = prompt(200, 13, 9)
Q_OTHER = prompt(40, 11, 2)


def build(model_dir: str, seed: int) -> None:
    import torch
    import transformers

    config = transformers.NemotronHConfig(**MODEL)
    torch.manual_seed(seed)
    model = transformers.NemotronHForCausalLM(config).to(torch.float32)
    model.save_pretrained(model_dir)
    # transformers 5.x writes layers_block_type; older readers (and vLLM's nemotron_h.py,
    # which reads hybrid_override_pattern) also find the pattern itself
    path = os.path.join(model_dir, "config.json")
    with open(path) as f:
        saved = json.load(f)
    saved["hybrid_override_pattern"] = MODEL["hybrid_override_pattern"]
    with open(path, "w") as f:
        json.dump(saved, f, indent=1, sort_keys=True)
    print(f"saved {model_dir}")


class Probe(probe_chunked.Probe):
    """Records the connector's answers and the Mamba keys its loads restore."""

    def __init__(self) -> None:
        super().__init__()
        self.hits: dict[str, list[tuple[int, Any]]] = {}
        self.mamba_loads_of: dict[str, list[dict[str, Any]]] = {}

    def on_lookup(self, request: Any, num_computed: int, hit: Any, st: Any) -> None:
        self.hits.setdefault(request.request_id, []).append((num_computed, hit))

    def on_alloc(self, sched: Any, request: Any, num_external: int, st: Any) -> None:
        if num_external and st is not None:
            self.mamba_loads_of[request.request_id] = self.mamba_loads(sched, st)

    def held_of(self, req_id: str) -> list[str]:
        """A request's keys the CPU tier holds now, as group:position (the engine
        appends a suffix to the request id)."""
        ids = [r for r in self.keys if r == req_id or r.startswith(req_id + "-")]
        return self.held(self.keys[ids[-1]] if ids else [])


def run(model_dir: str, out_path: str) -> int:
    t0 = time.monotonic()
    result: dict[str, Any] = {"schema": SCHEMA, "model_config": MODEL,
                              "declared_kernel_block_sizes": DECLARED_BLOCKS,
                              "tier_chunks": TIER_CHUNKS, "scenarios": {}, "error": None}

    def dump() -> None:
        probe_chunked.dump(result, out_path, t0)

    probe = Probe()
    try:
        import torch
        import vllm
        from vllm import LLM, SamplingParams
        from vllm.config import KVTransferConfig
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading import (
            scheduler as sched_mod,
        )
        from vllm.inputs import TokensPrompt
        from vllm.utils.math_utils import round_up
        from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend
        from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

        result["vllm_version"] = vllm.__version__
        result["device"] = torch.cuda.get_device_name(0)
        probe.install(sched_mod)
        TritonAttentionBackend.get_supported_kernel_block_sizes = staticmethod(
            lambda kv_cache_spec=None: list(DECLARED_BLOCKS))
        spec_init = CPUOffloadingSpec.__init__

        def sized(self: Any, config: Any) -> None:
            chunk = round_up(config.worker_kv_bytes_per_block,
                             CPUOffloadingSpec.BLOCK_SIZE_ALIGNMENT)
            config.extra_config["cpu_bytes_to_use"] = TIER_CHUNKS * chunk
            spec_init(self, config)

        CPUOffloadingSpec.__init__ = sized
        llm = LLM(model=model_dir, skip_tokenizer_init=True, dtype="float32",
                  enforce_eager=True, attention_backend="TRITON_ATTN", block_size=16,
                  enable_prefix_caching=True, max_model_len=512, seed=0,
                  kv_cache_memory_bytes=1 << 28, gpu_memory_utilization=0.1,
                  kv_transfer_config=KVTransferConfig(
                      kv_connector="OffloadingConnector", kv_role="kv_both",
                      kv_connector_extra_config={"cpu_bytes_to_use": 1 << 30,
                                                 "blocks_per_chunk": 1}))
        result["layout"] = {**probe.layout(sliding=True),
                            "tier_capacity": probe.sched.manager._policy.cache_capacity}
        dump()
        engine = llm.llm_engine
        greedy = dict(temperature=0.0, ignore_eos=True, detokenize=False)

        def until_done(req_ids: set[str], steps: int = 400) -> dict[str, list[int]]:
            out: dict[str, list[int]] = {}
            for _ in range(steps):
                for o in engine.step():
                    if o.finished:
                        out[o.request_id] = list(o.outputs[0].token_ids)
                if req_ids <= set(out):
                    return out
            raise TimeoutError(f"requests {sorted(req_ids - set(out))} did not finish")

        def gen(tokens: list[int], n: int = 12) -> list[int]:
            o = llm.generate([TokensPrompt(prompt_token_ids=tokens)],
                             SamplingParams(max_tokens=n, **greedy), use_tqdm=False)[0]
            return list(o.outputs[0].token_ids)

        def reset(connector: bool = False) -> None:
            probe_chunked.reset_prefix_cache(llm, connector, lambda: gen([0], 1))

        # control: no eviction, an aligned hit
        cold = gen(P_CONTROL)
        reset()
        hot = gen(P_CONTROL)
        result["scenarios"]["control"] = scenario(probe, cold, hot, None)
        dump()
        reset(connector=True)
        # evict: A cold; after A ends (and the next step tells the CPU tier, here a
        # 1-token request that stores nothing), B's one stored chunk makes the LRU evict
        # A's sliding-window chunk ending at 192, which it ranks before the Mamba chunk
        engine.add_request("A", TokensPrompt(prompt_token_ids=P_EVICT),
                           SamplingParams(max_tokens=12, **greedy))
        outs = until_done({"A"})
        engine.add_request("tick", TokensPrompt(prompt_token_ids=[1]),
                           SamplingParams(max_tokens=1, **greedy))
        until_done({"tick"})
        held_a = probe.held_of("A")
        engine.add_request("B", TokensPrompt(prompt_token_ids=Q_OTHER),
                           SamplingParams(max_tokens=1, **greedy))
        until_done({"B"})
        held_b = probe.held_of("A")
        reset()
        hot = gen(P_EVICT)
        sc = scenario(probe, outs["A"], hot, "A")
        sc.update(tier_held_of_A_before_B=held_a, tier_held_of_A_after_B=held_b)
        result["scenarios"]["evict"] = sc
        dump()
        # recompute: nothing cached anywhere; same output as A's cold run?
        reset(connector=True)
        again = gen(P_EVICT)
        result["scenarios"]["recompute"] = {"equal_to_cold": again == outs["A"],
                                            "tokens": again}
    except Exception as e:
        probe_chunked.record_error(result, e)
        dump()
        traceback.print_exc()
        return 1
    dump()
    return 0


def scenario(probe: Probe, cold: list[int], hot: list[int], _: str | None) -> dict[str, Any]:
    req_id = list(probe.hits)[-1]  # the latest request looked up: the hot one
    first_diff = next((i for i, (x, y) in enumerate(zip(cold, hot, strict=False)) if x != y),
                      None)
    return {"hot_request": req_id, "lookups": probe.hits.get(req_id),
            "mamba_loads": probe.mamba_loads_of.get(req_id),
            "equal": cold == hot, "first_diff": first_diff,
            "cold_tokens": cold, "hot_tokens": hot}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="sim/gpu/finding_swa.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--model-dir", required=True)
    b.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("run")
    r.add_argument("--model-dir", required=True)
    r.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if args.cmd == "build":
        build(args.model_dir, args.seed)
        return 0
    if not probe_chunked.in_process():
        return 2
    return run(args.model_dir, args.out)


if __name__ == "__main__":
    sys.exit(main())
