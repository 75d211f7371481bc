"""Random search for a wrong recurrent state on the real vLLM 0.33.0 offload lookup.

Runs INSIDE the vLLM 0.33.0 environment (``$CROSSCHECK_VENVS/vllm-0.33.0``); the project
never imports it.  ``python state_search_chunked.py --family reachable|forced --cases N
--seed S`` prints one JSON object: the cases run, the layouts refused at start-up, and
every violation found (at most 20 written out, all counted).

Real objects: VllmConfig/CacheConfig/ModelConfig (a tiny Jamba config, no weights),
KVCacheConfig with FullAttentionSpec/SlidingWindowSpec/MambaSpec groups, Request with
vLLM's own block hashes, the OffloadingConnector built by its own constructor (so
``build_offloading_config`` and ``SchedulerOffloadConfig.from_spec`` run), its
``OffloadingConnectorScheduler``, ``KVCacheManager.allocate_slots``.  Stand-in: the
offloading manager (the harnesses' ``standins.ScenarioManager``), answering HIT for a
random set of keys (every hash position of every group, so complete chunks and
partial-tail boundary keys alike), MISS otherwise.

Families:
- ``reachable``: what vLLM's start-up produces for a Mamba (align) hybrid with prefix
  caching (see docs/findings/001-...md): the Mamba block is ``cache_config.block_size``
  and every attention group's block is that times an integer (1, or 2 as page-size
  unification or DCP make it); optional sliding-window group, optional EAGLE group,
  ``blocks_per_chunk`` 1-3, ``prefix_match_unit`` (finer hashes: partial tails),
  ``max_load_tokens``, ``max_num_new_tokens``, GPU prefix hits.
- ``forced``: the Mamba block twice the attention block, which no start-up produces.

Checked per case (no-partial-state and loads-stored-only, on vLLM's own data): the hit
ends at H = num_computed + hit; the Mamba key a load restores must have been saved at
token H (``ReqContext.get_offload_key_position``), and every loaded key must be stored.
For num_computed == 0 the load plan is the real ``update_state_after_alloc`` output
(``load_key_ranges``); with a GPU prefix hit it is read the same way from the chunk
``update_state_after_alloc`` would take (the last Mamba chunk below H, or the
partial-tail key at H).
"""
# ruff: noqa: E402
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from typing import Any

_OUT = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import torch
import transformers
from standins import ScenarioManager  # this folder: the harnesses' stand-in
from vllm import SamplingParams
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    KVTransferConfig,
    ModelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import (
    OffloadingConnector,
)
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.utils.math_utils import cdiv
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import (
    get_request_block_hasher,
    init_none_hash,
    resolve_kv_cache_block_sizes,
)
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
    SlidingWindowSpec,
)
from vllm.v1.kv_offload import base as offload_base
from vllm.v1.request import Request

JAMBA = dict(
    vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=4, attn_layer_period=2,
    attn_layer_offset=1, num_experts=1, num_experts_per_tok=1, expert_layer_period=1,
    expert_layer_offset=0, mamba_d_state=16, mamba_d_conv=4, mamba_expand=1,
    mamba_dt_rank=8, use_mamba_kernels=False, max_position_embeddings=4096,
    architectures=["JambaForCausalLM"],
)
MAX_LEN = 2048


def draw_layout(rng: random.Random, family: str) -> dict[str, Any]:
    base = rng.choice([16, 32, 64])
    if family == "forced":
        attn_block, mamba_block = base, 2 * base
    else:
        attn_block, mamba_block = base * rng.choice([1, 1, 2]), base
    groups: list[dict[str, Any]] = [{"kind": "full_attention", "block": attn_block}]
    if rng.random() < 0.3:
        groups.append({"kind": "full_attention", "block": attn_block, "eagle": True})
    if rng.random() < 0.4:
        groups.append({"kind": "sliding_window", "block": attn_block,
                       "window": rng.randint(1, 4 * attn_block)})
    groups.append({"kind": "mamba", "block": mamba_block})
    pmu = None
    if attn_block == mamba_block and rng.random() < 0.5:
        pmu = rng.choice([d for d in (4, 8, 16) if d < base])
    return {"groups": groups, "blocks_per_chunk": rng.choice([1, 1, 2, 3]),
            "prefix_match_unit": pmu}


class Layout:
    """Configs and a real connector for one layout."""

    def __init__(self, layout: dict[str, Any], model_dir: str) -> None:
        specs: list[Any] = []
        for i, g in enumerate(layout["groups"]):
            common = dict(block_size=g["block"], num_kv_heads=i + 1, head_size=16,
                          dtype=torch.float32)
            if g["kind"] == "mamba":
                specs.append(MambaSpec(block_size=g["block"], shapes=((4, 16 * (i + 1)),),
                                       dtypes=(torch.float32,), mamba_cache_mode="align"))
            elif g["kind"] == "sliding_window":
                specs.append(SlidingWindowSpec(**common, sliding_window=g["window"]))
            else:
                specs.append(FullAttentionSpec(**common))
        block = min(g["block"] for g in layout["groups"])
        cache = CacheConfig(block_size=block, enable_prefix_caching=True,
                            mamba_cache_mode="align",
                            prefix_match_unit=layout["prefix_match_unit"])
        self.vllm_config = VllmConfig(
            model_config=ModelConfig(model=model_dir, skip_tokenizer_init=True,
                                     max_model_len=MAX_LEN, dtype="float32"),
            device_config=DeviceConfig("cpu"),
            cache_config=cache,
            scheduler_config=SchedulerConfig(max_num_batched_tokens=MAX_LEN,
                                             max_model_len=MAX_LEN,
                                             is_encoder_decoder=False),
            kv_transfer_config=KVTransferConfig(
                kv_connector="OffloadingConnector", kv_role="kv_both",
                kv_connector_extra_config={"cpu_bytes_to_use": 1 << 24,
                                           "blocks_per_chunk": layout["blocks_per_chunk"]}),
        )
        self.vllm_config.cache_config.num_gpu_blocks = 4000
        self.kv_cache_config = KVCacheConfig(
            num_blocks=4000, kv_cache_tensors=[],
            kv_cache_groups=[
                KVCacheGroupSpec([f"layer.{i}"], spec, is_eagle_group=bool(g.get("eagle")))
                for i, (g, spec) in enumerate(zip(layout["groups"], specs, strict=True))],
        )
        self.block, self.hash_block = resolve_kv_cache_block_sizes(
            self.kv_cache_config, self.vllm_config)
        connector = OffloadingConnector(self.vllm_config, KVConnectorRole.SCHEDULER,
                                        self.kv_cache_config)
        self.sched = connector.connector_scheduler
        self.manager = ScenarioManager()
        self.sched.manager = self.manager
        hash_fn = get_hash_fn_by_name(self.vllm_config.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        self.hasher = get_request_block_hasher(self.hash_block, hash_fn)
        self.mamba = next(i for i, g in enumerate(layout["groups"]) if g["kind"] == "mamba")


def run_case(lay: Layout, rng: random.Random, case_id: int
             ) -> tuple[str, dict[str, Any] | None, int]:
    """('miss' | 'hit' | 'tail-hit', the violation or None, the hit in tokens)."""
    cfg = lay.sched.config
    tpc_max = max(g.tokens_per_chunk for g in cfg.kv_group_configs)
    length = rng.randint(1, 6 * tpc_max + 2)
    params: dict[str, Any] = {}
    if rng.random() < 0.25:
        params["max_load_tokens"] = rng.randint(0, length)
    sp = SamplingParams(max_tokens=1, extra_args={"kv_transfer_params": params})
    req = Request(request_id=f"r{case_id}",
                  prompt_token_ids=[rng.randrange(3, 500) for _ in range(length)],
                  sampling_params=sp, pooling_params=None, block_hasher=lay.hasher)
    q = rng.choice([0.5, 0.8, 0.95, 1.0])
    for g in cfg.kv_group_configs:
        for h in req.block_hashes:
            if rng.random() < q:
                key = offload_base.make_offload_key(h, g.group_idx)
                lay.manager.answers[key] = offload_base.LookupResult.HIT
    num_computed = 0
    if rng.random() < 0.25 and length > lay.block:
        num_computed = lay.block * rng.randint(0, (length - 1) // lay.block)
    max_new = rng.randint(1, length) if rng.random() < 0.25 else None
    lay.sched.on_new_request(req)
    hit, _ = lay.sched.get_num_new_matched_tokens(req, num_computed, max_new)
    if not hit:
        return "miss", None, 0
    end = num_computed + hit
    status = lay.sched._req_status[req.request_id]
    ctx = status.req_context
    tail = status.partial_tail_boundary
    mamba_cfg = cfg.kv_group_configs[lay.mamba]
    if num_computed == 0:
        kvm = KVCacheManager(lay.kv_cache_config, max_model_len=MAX_LEN,
                             scheduler_block_size=lay.block, hash_block_size=lay.hash_block,
                             enable_caching=True)
        if kvm.allocate_slots(req, 0, num_external_computed_tokens=hit,
                              delay_cache_blocks=True) is None:
            return "hit", {"case": case_id, "error": "allocation failed"}, hit
        lay.sched.update_state_after_alloc(req, kvm.get_blocks(req.request_id), hit)
        ranges = list(status.load_key_ranges)
        mamba_keys = [(k, e) for _, e, k in ranges
                      if offload_base.get_offload_group_idx(k) == mamba_cfg.group_idx]
        loaded = [k for _, _, k in ranges]
        source = "update_state_after_alloc"
    else:
        if tail is not None:
            key = lay.sched._make_boundary_key(req, mamba_cfg.group_idx, tail, ctx)
        else:
            key = status.group_states[lay.mamba].offload_keys[
                cdiv(end, mamba_cfg.tokens_per_chunk) - 1]
        mamba_keys, loaded, source = [(key, end)], [key], "chunk at hit end"
    bad = {}
    states = [ctx.get_offload_key_position(k) for k, _ in mamba_keys]
    if not mamba_keys or any(s != e for s, (_, e) in zip(states, mamba_keys, strict=True)):
        bad["no-partial-state"] = {"state_at": states}
    if any(k not in lay.manager.answers for k in loaded):
        bad["loads-stored-only"] = True
    kind = "hit" if tail is None else "tail-hit"
    if not bad:
        return kind, None, hit
    return kind, {"case": case_id, "prompt": length, "num_computed": num_computed, "hit": hit,
            "max_load_tokens": params.get("max_load_tokens"), "max_num_new_tokens": max_new,
            "partial_tail": tail, "source": source, **bad}, hit


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", choices=["reachable", "forced"], required=True)
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-layout", type=int, default=50)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    model_dir = tempfile.mkdtemp()
    transformers.JambaConfig(**JAMBA).save_pretrained(model_dir)
    out: dict[str, Any] = {"family": args.family, "seed": args.seed, "cases": 0,
                           "hits": 0, "hit_tokens": 0, "partial_tail_hits": 0,
                           "layouts": 0, "refused": {},
                           "layout_features": {},
                           "violations": 0, "examples": []}
    while out["cases"] < args.cases:
        layout = draw_layout(rng, args.family)
        try:
            lay = Layout(layout, model_dir)
        except (AssertionError, ValueError, NotImplementedError) as e:
            msg = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:160]
            out["refused"][msg] = out["refused"].get(msg, 0) + 1
            continue
        out["layouts"] += 1
        for feature, on in (("eagle", any(g.get("eagle") for g in layout["groups"])),
                            ("sliding_window", any(g["kind"] == "sliding_window"
                                                   for g in layout["groups"])),
                            ("blocks_per_chunk>1", layout["blocks_per_chunk"] > 1),
                            ("partial_tails", lay.sched.config.supports_partial_tail),
                            ("attention_block>mamba_block", len({g["block"] for g in
                                                                 layout["groups"]}) > 1)):
            out["layout_features"][feature] = out["layout_features"].get(feature, 0) + on
        for _ in range(args.per_layout):
            case_id = out["cases"]
            out["cases"] += 1
            kind, found, hit = run_case(lay, rng, case_id)
            out["hit_tokens"] += hit
            lay.sched._release_step()  # the step region build_connector_meta would close
            out["hits"] += kind != "miss"
            out["partial_tail_hits"] += kind == "tail-hit"
            if found is not None:
                out["violations"] += 1
                if len(out["examples"]) < 20:
                    out["examples"].append({"layout": layout, "blocks": [
                        lay.block, lay.hash_block], **found})
            if out["cases"] >= args.cases:
                break
    json.dump(out, _OUT, sort_keys=True)
    _OUT.write("\n")
    _OUT.flush()


if __name__ == "__main__":
    main()
