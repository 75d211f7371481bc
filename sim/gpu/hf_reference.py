"""Greedy outputs of the GPU cross-check's tiny models under transformers, on the CPU.

    python -m sim.gpu.hf_reference [--lengths 17-80] [--out sim/gpu/results/hf-reference.json]

Needs torch and transformers (not the project's default dependencies). Builds the same
random-weight models as the driver (same configs, ``torch.manual_seed(seed)`` on the CPU
generator, so the weights equal the GPU host's: vLLM's cold outputs match these token
for token) and the same prompts, and writes the greedy continuation per model and
length. ``python -m sim.gpu.report`` then checks vLLM's cold and second outputs against
them, which tells which of two differing outputs is the right one.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from sim.gpu.driver import (
    CONFIGS,
    VOCAB_SIZE,
    BadInput,
    build_model,
    hf_greedy,
    make_prompts,
    parse_lengths,
)

HF_SCHEMA = "sim-gpu-hf-reference/1"
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "hf-reference.json"


def greedy(model_dir: str, prompts: dict[int, list[int]], max_tokens: int) -> dict[int, list[int]]:
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    return {n: hf_greedy(model, p, max_tokens, "cpu") for n, p in prompts.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.gpu.hf_reference", description=__doc__)
    ap.add_argument("--lengths", default="17-80")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    a = ap.parse_args(argv)
    try:
        lengths = parse_lengths(a.lengths)
        if a.max_tokens < 1:
            raise BadInput(f"--max-tokens: must be >= 1, got {a.max_tokens}")
        prompts = make_prompts(lengths, a.seed, VOCAB_SIZE)
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result: dict[str, object] = {"schema": HF_SCHEMA, "seed": a.seed,
                                 "max_tokens": a.max_tokens, "models": {}}
    models: dict[str, dict[str, list[int]]] = {}
    for kind in CONFIGS:
        with tempfile.TemporaryDirectory(prefix=f"hf_{kind}_") as d:
            build_model(kind, a.seed, d)
            toks = greedy(d, prompts, a.max_tokens)
        models[kind] = {str(n): t for n, t in toks.items()}
        print(f"{kind}: {len(toks)} lengths", flush=True)
    result["models"] = models
    a.out.write_text(json.dumps(result, separators=(",", ":")) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
