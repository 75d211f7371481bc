"""Cold output vs output after a CPU hit, on the real vLLM engine (runs ON the GPU host).

    VLLM_ENABLE_V1_MULTIPROCESSING=0 python sim/gpu/driver.py --model mamba \
        --mode stock --lengths 17-80 --out results.json

For each prompt length: a cold greedy generation, a reset of the GPU prefix cache that
keeps the CPU tier (retry ``llm.reset_prefix_cache(reset_connector=False)``, stepping
the engine with a 1-token request between tries, as vLLM's own
tests/v1/kv_connector/unit/test_offloading_connector.py ``_wait_for_prefix_cache_reset``
does), and the same generation again. Recorded per length: whether the outputs are
equal (else the first differing token), ``num_cached_tokens`` of both requests, what
``OffloadingConnectorScheduler.get_num_new_matched_tokens`` returned for the second
request, and which offloaded blocks of that request the CPU tier held when it looked
them up (read from the manager's cache policy).

Prompts: every length gets its own random token ids (``random.Random(seed*1000 + L)``),
and the driver checks that no two lengths share a first block, so that block hashes
(which chain from the first block) never collide across lengths: each length's second
request can only hit what its own cold run stored. The 1-token requests used to step
the engine hold no full block and store nothing. The CPU tier is not reset between
lengths (1 GiB holds every block of the sweep; the store size is recorded to show no
eviction happened).

The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so that the
scheduler-side connector can be instrumented and, with ``--mode fix-disabled``,
``resolve_mamba_align_size`` in the connector's scheduler module (PR #44599,
vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py:108 in 0.24.0)
can be replaced by a function returning None before the engine is built.

Writes one JSON (rewritten after every length, so a run cut short keeps what it had).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
import traceback
from typing import Any

# --- tiny random-weight models ---
# No model hub: the driver builds the model with transformers (``torch.manual_seed(seed)``
# before construction), saves it with ``save_pretrained`` into a temporary directory and
# points vLLM at it; no tokenizer (``skip_tokenizer_init=True``, token-id prompts).
# initializer_range 0.5 makes the random model's greedy output sensitive to its state
# (checked on the CPU with transformers: duplicating the last prompt token, which is what
# a state restored one token late amounts to, changes the first output token).
#
# Sizes are chosen so that vLLM keeps block size 16 for the hybrid model:
# vllm/platforms/interface.py (0.24.0) ``_align_hybrid_block_size`` raises the attention
# block size until ``block_size * attention page per token >= mamba page``. Here the
# attention page per token is 2 (K, V) * 4 heads * 32 dims * 4 bytes = 1 KiB, 16 KiB for
# 16 tokens, and one Mamba-1 state is (d_conv - 1 + d_state) * d_inner * 4 bytes =
# (3 + 16) * 128 * 4 = 9.5 KiB, so 16 tokens suffice. Triton attention needs a head size
# of at least 32 (vllm/v1/attention/backends/triton_attn.py:347, 0.24.0).
VOCAB_SIZE = 512

# transformers MambaConfig -> vLLM MambaForCausalLM (vllm/model_executor/models/mamba.py)
MAMBA_CONFIG: dict[str, Any] = {
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 64,
    "state_size": 16,
    "num_hidden_layers": 2,
    "expand": 2,
    "conv_kernel": 4,
    "use_bias": False,
    "use_conv_bias": True,
    "initializer_range": 0.5,
    "tie_word_embeddings": False,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}

# transformers JambaConfig -> vLLM JambaForCausalLM (vllm/model_executor/models/jamba.py):
# layers 0 and 2 are Mamba-1 mixers, 1 and 3 attention; one expert means plain MLPs
# (jamba.py:151, num_experts > 1 picks the MoE block).
HYBRID_CONFIG: dict[str, Any] = {
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "attn_layer_period": 2,
    "attn_layer_offset": 1,
    "num_experts": 1,
    "num_experts_per_tok": 1,
    "expert_layer_period": 1,
    "expert_layer_offset": 0,
    "mamba_d_state": 16,
    "mamba_d_conv": 4,
    "mamba_expand": 1,
    "mamba_dt_rank": 8,
    "use_mamba_kernels": False,
    "initializer_range": 0.5,
    "max_position_embeddings": 1024,
    "tie_word_embeddings": False,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}

ARCHITECTURES = {"mamba": "MambaForCausalLM", "hybrid": "JambaForCausalLM"}
CONFIGS = {"mamba": MAMBA_CONFIG, "hybrid": HYBRID_CONFIG}


def build_model(kind: str, seed: int, out_dir: str) -> str:
    """Build the ``kind`` model with random weights from ``seed`` and save it to ``out_dir``."""
    import torch
    import transformers

    if kind not in CONFIGS:
        raise ValueError(f"model: expected one of {', '.join(CONFIGS)}, got {kind!r}")
    arch = ARCHITECTURES[kind]
    config_cls = getattr(transformers, arch.replace("ForCausalLM", "Config"))
    model_cls = getattr(transformers, arch)
    config = config_cls(**CONFIGS[kind])
    torch.manual_seed(seed)
    model = model_cls(config).to(torch.float32)
    model.save_pretrained(out_dir)
    return out_dir


SCHEMA = "sim-gpu-result/1"
MODES = ("stock", "fix-disabled")
CACHE_MODES = ("align", "all")
BLOCK_SIZE = 16


class BadInput(Exception):
    pass


def parse_lengths(text: str) -> list[int]:
    """'17-80' or '17,32,33' or '17-20,32' -> sorted distinct lengths (each >= 1)."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if lo > hi:
                    raise ValueError
                out.update(range(lo, hi + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise BadInput(f"--lengths: expected e.g. 17-80 or 17,32,33, got {text!r}") from None
    if not out or min(out) < 1:
        raise BadInput(f"--lengths: lengths must be >= 1, got {text!r}")
    return sorted(out)


def make_prompts(lengths: list[int], seed: int, vocab: int) -> dict[int, list[int]]:
    prompts = {}
    for length in lengths:
        rng = random.Random(seed * 1000 + length)
        prompts[length] = [rng.randrange(3, vocab) for _ in range(length)]
    firsts = [tuple(p[:BLOCK_SIZE]) for p in prompts.values() if len(p) >= BLOCK_SIZE]
    if len(set(firsts)) != len(firsts):
        raise BadInput("prompts: two lengths share a first block; pick another --seed")
    return prompts


class Probe:
    """Records what the scheduler-side offloading connector saw and answered."""

    def __init__(self) -> None:
        self.scheduler: Any = None
        self.phase: str = "setup"
        self.calls: list[dict[str, Any]] = []

    def install(self, sched_mod: Any) -> None:
        cls = sched_mod.OffloadingConnectorScheduler
        orig_init = cls.__init__
        orig_match = cls.get_num_new_matched_tokens
        probe = self

        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            orig_init(self, *args, **kwargs)
            probe.scheduler = self

        def match(self: Any, request: Any, num_computed_tokens: int, *args: Any,
                  **kwargs: Any) -> Any:
            result = orig_match(self, request, num_computed_tokens, *args, **kwargs)
            rec: dict[str, Any] = {
                "phase": probe.phase,
                "req_id": str(request.request_id),
                "num_tokens": int(request.num_tokens),
                "num_computed_tokens": int(num_computed_tokens),
                "hit": result[0],
            }
            try:
                rec.update(store_view(self, request.request_id))
            except Exception as e:  # recorded, not fatal: the hit is still measured
                rec["store_error"] = repr(e)
            probe.calls.append(rec)
            return result

        cls.__init__ = init
        cls.get_num_new_matched_tokens = match


def _policy(scheduler: Any) -> Any:
    # CPUOffloadingManager._policy: vllm/v1/kv_offload/cpu/manager.py:58 (0.23.0),
    # :62 (0.24.0), :81 (0.33.0); its get(key) returns the block/chunk status or None.
    return scheduler.manager._policy


def store_view(scheduler: Any, req_id: str) -> dict[str, Any]:
    """Which of the request's offload keys (per group) the CPU tier holds right now.

    The keys are the scheduler's own (RequestGroupState.offload_keys, filled by
    update_offload_keys in get_num_new_matched_tokens), so index i is offloaded block i.
    """
    policy = _policy(scheduler)
    state = scheduler._req_status[req_id]
    stored: list[list[int]] = []
    not_ready: list[list[int]] = []
    for gs in state.group_states:
        held, pending = [], []
        for i, key in enumerate(gs.offload_keys):
            blk = policy.get(key)
            if blk is not None:
                held.append(i)
                if getattr(blk, "ref_cnt", 0) < 0:
                    pending.append(i)
        stored.append(held)
        not_ready.append(pending)
    table = getattr(policy, "blocks", None)
    if table is None:
        table = getattr(policy, "chunks", {})
    return {"stored": stored, "not_ready": not_ready, "store_size": len(table)}


def group_info(llm: Any, scheduler: Any) -> list[dict[str, Any]]:
    specs: list[Any] = []
    try:
        kv_cfg = llm.llm_engine.engine_core.engine_core.scheduler.kv_cache_config
        specs = [g.kv_cache_spec for g in kv_cfg.kv_cache_groups]
    except Exception:
        pass
    out = []
    configs = scheduler.config.kv_group_configs if scheduler is not None else [None] * len(specs)
    for i, gc in enumerate(configs):
        spec = specs[i] if i < len(specs) else getattr(gc, "kv_cache_spec", None)
        name = type(spec).__name__
        kind = ("mamba" if "Mamba" in name else "sliding_window" if "Sliding" in name
                else "full_attention" if "Attention" in name else name)
        gpu_bs = (getattr(gc, "gpu_block_size", None) or getattr(gc, "tokens_per_block", None)
                  or getattr(spec, "block_size", None))
        off_bs = getattr(gc, "offloaded_block_size", None) or getattr(gc, "tokens_per_chunk", None)
        info: dict[str, Any] = {"index": i, "kind": kind, "spec": name,
                                "gpu_block_size": gpu_bs, "offloaded_block_size": off_bs}
        if kind == "mamba":
            info["mamba_cache_mode"] = getattr(spec, "mamba_cache_mode", None)
        out.append(info)
    return out


def first_diff(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def logprob_list(completion: Any) -> list[float] | None:
    lps = getattr(completion, "logprobs", None)
    if not lps:
        return None
    out = []
    for tok, d in zip(completion.token_ids, lps, strict=False):
        lp = d.get(tok) if hasattr(d, "get") else None
        out.append(float(lp.logprob) if lp is not None else float("nan"))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="sim/gpu/driver.py",
                                 description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--model", required=True, choices=("mamba", "hybrid"))
    ap.add_argument("--mode", default="stock", choices=MODES)
    ap.add_argument("--mamba-cache-mode", default="align", choices=CACHE_MODES)
    ap.add_argument("--lengths", default="17-80")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.1)
    ap.add_argument("--second", default="cpu", choices=("cpu", "gpu"),
                    help="cpu: reset the GPU prefix cache before the second request (a CPU "
                         "hit); gpu: keep it (a GPU prefix-cache hit, a control)")
    ap.add_argument("--connector", default="offload", choices=("offload", "none"),
                    help="none: no KV connector at all (a control; needs --second gpu)")
    ap.add_argument("--hf-check", default="",
                    help="lengths whose greedy output transformers also computes, e.g. 18,32")
    ap.add_argument("--kv-bytes", type=int, default=1 << 30,
                    help="kv_cache_memory_bytes (0: let vLLM profile memory)")
    args = ap.parse_args(argv)
    try:
        lengths = parse_lengths(args.lengths)
        if args.max_tokens < 1:
            raise BadInput(f"--max-tokens: must be >= 1, got {args.max_tokens}")
        if args.connector == "none" and args.second != "gpu":
            raise BadInput("--connector none: needs --second gpu (nothing to hit on the CPU)")
        if args.kv_bytes < 0:
            raise BadInput(f"--kv-bytes: must be >= 0, got {args.kv_bytes}")
        if not 0 < args.gpu_memory_utilization <= 1:
            raise BadInput("--gpu-memory-utilization: must be in (0, 1]")
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") != "0":
            raise BadInput("set VLLM_ENABLE_V1_MULTIPROCESSING=0 (the probe needs the engine "
                           "in this process)")
        prompts = make_prompts(lengths, args.seed, VOCAB_SIZE)
        hf_lengths = parse_lengths(args.hf_check) if args.hf_check else []
        if not set(hf_lengths) <= set(lengths):
            raise BadInput("--hf-check: every length must also be in --lengths")
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return run(args, lengths, prompts, ARCHITECTURES[args.model], CONFIGS[args.model],
               hf_lengths)


def hf_greedy(model: Any, prompt: list[int], max_tokens: int, device: str) -> list[int]:
    """Greedy tokens by full forward passes: no cache, and, like vLLM with ignore_eos,
    no suppression of the EOS token (``generate(min_new_tokens=...)`` would suppress it)."""
    import torch

    seq = list(prompt)
    with torch.no_grad():
        for _ in range(max_tokens):
            logits = model(torch.tensor([seq], device=device)).logits[0, -1]
            seq.append(int(torch.argmax(logits)))
    return seq[len(prompt):]


def hf_check(model_dir: str, result: dict[str, Any], prompts: dict[int, list[int]],
             lengths: list[int], max_tokens: int, device: str = "cuda") -> None:
    """Greedy output of the same weights under transformers, next to vLLM's two outputs."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32).to(device).eval()
    rows = {r["length"]: r for r in result["lengths"]}
    for length in lengths:
        toks = hf_greedy(model, prompts[length], max_tokens, device)
        row = rows[length]
        row["hf_tokens"] = toks
        row["hf_first_diff_cold"] = first_diff(toks, row["cold_tokens"])
        row["hf_first_diff_hot"] = first_diff(toks, row["hot_tokens"])
        print(f"HF L={length} vs cold {row['hf_first_diff_cold']} vs hot "
              f"{row['hf_first_diff_hot']}", flush=True)


def run(args: argparse.Namespace, lengths: list[int], prompts: dict[int, list[int]],
        arch: str, model_cfg: dict[str, Any], hf_lengths: list[int]) -> int:
    t0 = time.monotonic()
    result: dict[str, Any] = {
        "schema": SCHEMA, "vllm_version": None, "model": args.model, "architecture": arch,
        "mode": args.mode, "mamba_cache_mode": args.mamba_cache_mode, "second": args.second,
        "connector": args.connector,
        "seed": args.seed,
        "model_config": model_cfg, "max_tokens": args.max_tokens, "block_size": BLOCK_SIZE,
        "offload_block_size": BLOCK_SIZE, "dtype": "float32", "device": None,
        "groups": [], "mamba_align_size": None, "gpu_seconds": {}, "lengths": [],
        "error": None,
    }

    def dump() -> None:
        result["gpu_seconds"]["total"] = round(time.monotonic() - t0, 1)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)

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

        result["vllm_version"] = vllm.__version__
        result["device"] = torch.cuda.get_device_name(0)
        result["gpu_seconds"]["import"] = round(time.monotonic() - t0, 1)
        probe.install(sched_mod)
        if args.mode == "fix-disabled":
            if not hasattr(sched_mod, "resolve_mamba_align_size"):
                raise RuntimeError("fix-disabled: this vLLM has no resolve_mamba_align_size")
            sched_mod.resolve_mamba_align_size = lambda *a, **k: None

        model_dir = build_model(args.model, args.seed, tempfile.mkdtemp(prefix="tiny_"))
        kwargs: dict[str, Any] = {}
        if args.model == "hybrid":
            # the compact bundle has no flash-attention extension (shared/vllm-offline)
            kwargs["attention_backend"] = "TRITON_ATTN"
        if args.kv_bytes:
            kwargs["kv_cache_memory_bytes"] = args.kv_bytes
        if args.connector == "offload":
            kwargs["kv_transfer_config"] = KVTransferConfig(
                kv_connector="OffloadingConnector", kv_role="kv_both",
                kv_connector_extra_config={"cpu_bytes_to_use": 1 << 30,
                                           "block_size": BLOCK_SIZE})
        if args.mamba_cache_mode == "all":
            # Mamba-1 has no chunk size; without this vLLM aligns "all" mode to 2048
            # tokens (platforms/interface.py:752-760, 0.24.0)
            kwargs["mamba_block_size"] = BLOCK_SIZE
        t_build = time.monotonic()
        llm = LLM(
            model=model_dir, skip_tokenizer_init=True, dtype="float32", enforce_eager=True,
            gpu_memory_utilization=args.gpu_memory_utilization, block_size=BLOCK_SIZE,
            max_model_len=256, enable_prefix_caching=True,
            mamba_cache_mode=args.mamba_cache_mode, seed=args.seed,
            **kwargs,
        )
        result["gpu_seconds"]["engine_build"] = round(time.monotonic() - t_build, 1)
        sched = probe.scheduler
        result["groups"] = group_info(llm, sched)
        result["mamba_align_size"] = getattr(sched, "_mamba_align_size", "absent")
        dump()

        def params(logprobs: bool) -> Any:
            return SamplingParams(max_tokens=args.max_tokens, temperature=0.0, ignore_eos=True,
                                  detokenize=False, logprobs=0 if logprobs else None)

        use_logprobs = True
        dummy = SamplingParams(max_tokens=1, detokenize=False)

        def gen(tokens: list[int]) -> Any:
            nonlocal use_logprobs
            try:
                return llm.generate([TokensPrompt(prompt_token_ids=tokens)],
                                    params(use_logprobs), use_tqdm=False)[0]
            except Exception:
                if not use_logprobs:
                    raise
                use_logprobs = False
                result["logprobs_error"] = traceback.format_exc(limit=2)[-400:]
                return llm.generate([TokensPrompt(prompt_token_ids=tokens)],
                                    params(False), use_tqdm=False)[0]

        def reset() -> int:
            tries = 0
            deadline = time.monotonic() + 20
            probe.phase = "reset"
            while not llm.reset_prefix_cache(reset_connector=False):
                tries += 1
                if time.monotonic() > deadline:
                    raise TimeoutError("reset_prefix_cache did not succeed within 20 s")
                llm.generate([TokensPrompt(prompt_token_ids=[0])], dummy, use_tqdm=False)
            return tries

        t_sweep = time.monotonic()
        for length in lengths:
            prompt = prompts[length]
            n0 = len(probe.calls)
            probe.phase = "cold"
            cold = gen(prompt)
            tries = reset() if args.second == "cpu" else 0
            probe.phase = "hot"
            n1 = len(probe.calls)
            hot = gen(prompt)
            hot_calls = [c for c in probe.calls[n1:] if c["phase"] == "hot"]
            cold_calls = [c for c in probe.calls[n0:n1] if c["phase"] == "cold"]
            last = hot_calls[-1] if hot_calls else {}
            a, b = list(cold.outputs[0].token_ids), list(hot.outputs[0].token_ids)
            la, lb = logprob_list(cold.outputs[0]), logprob_list(hot.outputs[0])
            lp_diff = (max(abs(x - y) for x, y in zip(la, lb, strict=False))
                       if la and lb else None)
            result["lengths"].append({
                "length": length,
                "equal": a == b,
                "first_diff": first_diff(a, b),
                "cold_num_cached_tokens": cold.num_cached_tokens,
                "num_cached_tokens": hot.num_cached_tokens,
                "connector_hit": last.get("hit"),
                "num_computed_tokens": last.get("num_computed_tokens"),
                "lookups": [[c["num_computed_tokens"], c["hit"]] for c in hot_calls],
                "cold_lookups": [[c["num_computed_tokens"], c["hit"]] for c in cold_calls],
                "stored": last.get("stored"),
                "not_ready": last.get("not_ready"),
                "store_size": last.get("store_size"),
                "store_error": last.get("store_error"),
                "reset_tries": tries,
                "max_logprob_diff": None if lp_diff is None else round(lp_diff, 6),
                "cold_tokens": a,
                "hot_tokens": b,
            })
            dump()
            print(f"L={length} hit={last.get('hit')} cached={hot.num_cached_tokens} "
                  f"equal={a == b} stored={last.get('stored')}", flush=True)
        result["gpu_seconds"]["sweep"] = round(time.monotonic() - t_sweep, 1)
        if hf_lengths:
            t_hf = time.monotonic()
            hf_check(model_dir, result, prompts, hf_lengths, args.max_tokens)
            result["gpu_seconds"]["hf_check"] = round(time.monotonic() - t_hf, 1)
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        result["traceback"] = traceback.format_exc()[-3000:]
        dump()
        traceback.print_exc()
        return 1
    dump()
    return 0


if __name__ == "__main__":
    sys.exit(main())
