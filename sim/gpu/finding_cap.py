"""Finding 003 on the real vLLM 0.33.0 engine: a ``max_load_tokens`` cap below the prompt's
end loads one Mamba chunk less from the CPU tier; the output text is unchanged, stock and
with the proposed fix (docs/findings/003-fix.diff).

GPU host, vLLM 0.33.0 installed (shared/vllm-offline bundle), from the repository root:

    VLLM_ENABLE_V1_MULTIPROCESSING=0 python3 sim/gpu/finding_cap.py --out F [--fix 003]

``--fix 003`` applies the fix in process before the engine is built
(``sim/crosscheck/adapters/fix001_chunked.apply_fix``: the patched source of
``OffloadingConnectorScheduler._lookup_complete_chunks``, the same text as the diff).

The model is the tiny random-weight Mamba-1 model of ``sim/gpu/driver.py`` (float32, block
16, ``mamba_cache_mode="align"``, prefix caching, the OffloadingConnector with a CPU tier),
built here with transformers from seed 0. One 33-token prompt P (a fixed token list):

1. ``cold``: P, 12 greedy tokens; its chunks go to the CPU tier (in align mode a prefill
   saves the Mamba state only at its last aligned boundary, 32, so the tier holds that
   key and not the one ending at 16: ``tier_held_after_cold``). Then the GPU prefix
   cache is reset (the CPU tier kept).
2. ``cap32``: P again with ``kv_transfer_params = {"max_load_tokens": 32}`` (through
   ``SamplingParams.extra_args``, as the OpenAI server passes it). 0.33.0 lowers the
   bound to 31 and rounds it to 16, whose Mamba key the tier lacks: hit 0, nothing
   loaded. The fix keeps 32: the state at 32 is loaded. GPU prefix cache reset again.
3. ``nocap``: P again with no cap: 32 on both (control).

Per step it records the connector's answer (``get_num_new_matched_tokens``), the
tokens the scheduler counted as loaded externally (``update_state_after_alloc``'s
``num_external_tokens``), the Mamba keys the load restored (the token their state was
saved at) and the output tokens, and whether they equal the cold run's.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from typing import Any

SCHEMA = "finding-cap/1"
PROMPT = [(5 * t + 11) % 500 + 3 for t in range(33)]
CAP = 32
MAX_TOKENS = 12
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)
from sim.gpu import probe_chunked  # noqa: E402


class Probe(probe_chunked.Probe):
    """Records the connector's answers and what the scheduler loaded."""

    def __init__(self) -> None:
        super().__init__()
        self.lookups: list[dict[str, Any]] = []
        self.loads: list[dict[str, Any]] = []

    def on_lookup(self, request: Any, num_computed: int, hit: Any, st: Any) -> None:
        self.lookups.append({"request": request.request_id, "prompt": request.num_tokens,
                             "num_computed": num_computed, "hit": hit,
                             "max_load_tokens": getattr(st, "max_load_tokens", None)})

    def on_alloc(self, sched: Any, request: Any, num_external: int, st: Any) -> None:
        rec: dict[str, Any] = {"request": request.request_id,
                               "num_external_tokens": num_external}
        if num_external and st is not None:
            rec["mamba_loads"] = self.mamba_loads(sched, st)
        self.loads.append(rec)


def build_model(model_dir: str) -> None:
    from sim.gpu.driver import build_model as build

    build("mamba", 0, model_dir)


def run(out_path: str, fix: str | None) -> int:
    t0 = time.monotonic()
    result: dict[str, Any] = {"schema": SCHEMA, "fix": fix, "prompt": PROMPT, "cap": CAP,
                              "steps": {}, "error": None}

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

        result["vllm_version"] = vllm.__version__
        result["device"] = torch.cuda.get_device_name(0)
        if fix is not None:
            sys.path.insert(0, os.path.join(ROOT, "sim", "crosscheck", "adapters"))
            from fix001_chunked import apply_fix

            apply_fix(fix)
        probe.install(sched_mod)
        model_dir = tempfile.mkdtemp(prefix="tiny_mamba_")
        build_model(model_dir)
        llm = LLM(model=model_dir, skip_tokenizer_init=True, dtype="float32",
                  enforce_eager=True, block_size=16, enable_prefix_caching=True,
                  mamba_cache_mode="align", max_model_len=256, seed=0,
                  kv_cache_memory_bytes=1 << 28, gpu_memory_utilization=0.1,
                  kv_transfer_config=KVTransferConfig(
                      kv_connector="OffloadingConnector", kv_role="kv_both",
                      kv_connector_extra_config={"cpu_bytes_to_use": 1 << 30,
                                                 "block_size": 16}))
        result["layout"] = probe.layout()
        dump()

        def gen(extra: dict[str, Any] | None) -> list[int]:
            params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True,
                                    detokenize=False, extra_args=extra)
            o = llm.generate([TokensPrompt(prompt_token_ids=PROMPT)], params,
                             use_tqdm=False)[0]
            return list(o.outputs[0].token_ids)

        def reset() -> None:
            probe_chunked.reset_prefix_cache(llm, False, lambda: llm.generate(
                [TokensPrompt(prompt_token_ids=[0])],
                SamplingParams(max_tokens=1, detokenize=False), use_tqdm=False))

        def step(name: str, extra: dict[str, Any] | None, cold: list[int] | None) -> list[int]:
            n_lookups, n_loads = len(probe.lookups), len(probe.loads)
            tokens = gen(extra)
            lookups = [x for x in probe.lookups[n_lookups:] if x["prompt"] == len(PROMPT)]
            loads = [x for x in probe.loads[n_loads:]
                     if lookups and x["request"] == lookups[-1]["request"]]
            result["steps"][name] = {
                "kv_transfer_params": (extra or {}).get("kv_transfer_params"),
                "lookups": lookups, "loads": loads,
                "loaded_tokens": sum(x["num_external_tokens"] for x in loads),
                "tokens": tokens,
                "equal_to_cold": None if cold is None else tokens == cold}
            dump()
            return tokens

        cold = step("cold", None, None)
        reset()
        # what the CPU tier holds of the prompt: in align mode a prefill saves the Mamba
        # state only at its last aligned boundary (32), not at 16
        result["tier_held_after_cold"] = probe.held(
            probe.keys.get(probe.lookups[0]["request"], []))
        step("cap32", {"kv_transfer_params": {"max_load_tokens": CAP}}, cold)
        reset()
        step("nocap", None, cold)
    except Exception as e:
        probe_chunked.record_error(result, e)
        dump()
        traceback.print_exc()
        return 1
    dump()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="sim/gpu/finding_cap.py")
    ap.add_argument("--out", required=True)
    ap.add_argument("--fix", default=None, choices=("003",))
    args = ap.parse_args(argv)
    if not probe_chunked.in_process():
        return 2
    return run(args.out, args.fix)


if __name__ == "__main__":
    sys.exit(main())
