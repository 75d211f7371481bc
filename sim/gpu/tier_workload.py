"""Issue 25 item 4 (run on an H200, results in ``sim/gpu/results/tier-workload/``): a
workload of >= 200 requests on finding 001's tiny NemotronH with a CPU tier sized to
evict; the tier simulation (``sim.tier_sim``) predicts each request's hit, the state
restored and whether the output can differ from cold; the real vLLM 0.33.0 engine's
results are compared request by request (a confusion matrix).

    # here (the project's Python): the workload and the predictions
    python sim/gpu/tier_workload.py predict --out P.json [--requests 240] [--seed 0]
        [--workload shared-prefix] [--tier-chunks 10] [--policy lru]
    # here (torch + transformers, e.g. the 0.33.0 env): the model, as finding_swa.py
    python sim/gpu/finding_swa.py build --model-dir M
    # GPU host, vLLM 0.33.0 (shared/vllm-offline bundle), P.json carried:
    VLLM_ENABLE_V1_MULTIPROCESSING=0 python3 sim/gpu/tier_workload.py run --model-dir M \\
        --workload P.json --out R.json
    # here: the comparison (exit 1 on a mismatch), and the store offers against the
    # engine's prepare_store log in R.json (exit 1 on a difference)
    python sim/gpu/tier_workload.py compare --predicted P.json --real R.json [--json C.json]
    python sim/gpu/tier_workload.py storecheck --predicted P.json --real R.json

The engine runs finding_swa.py's settings (Triton declaring FlashInfer's kernel blocks:
Mamba 48, window block 32; block 16 hashes) with the tier sized to ``--tier-chunks``.
First every distinct prompt runs cold (both caches reset before each), then the caches are
reset and the workload runs one request at a time, as the simulation does: GPU prefix cache
reset before each request (every hit comes from the CPU tier), two one-token requests
after it so that the connector finalises the request and its stores complete before the
next lookup (scheduler.py:2176-2182). Recorded per request: the connector's hit, the
Mamba keys the load restored (the token their state was saved at), whether the output
equals the prompt's cold output.
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

SCHEMA = "tier-workload/1"
LAYOUT = "nemotronh-swa-tiny-flashinfer"
MAX_PROMPT = 480  # finding_swa.py's max_model_len 512, less the output tokens
OUTPUT_TOKENS = 12
TOKEN_OFFSET = 3  # workload tokens 0..255 become ids 3..258 (0, 1, 2 are special)


def workload_trace(requests: int, seed: int, workload: str) -> list[Any]:
    """The workload's first ``requests`` prompts of at most MAX_PROMPT tokens."""
    from sim.tier_layouts import LAYOUTS
    from sim.workload import make_trace

    return [r for r in make_trace(workload, requests * 4, seed, LAYOUTS[LAYOUT].hash_block)
            if r.prompt_len <= MAX_PROMPT][:requests]


def tier_sim(chunks: int, policy: str, semantics: str | None) -> Any:
    """The tier simulation of this workload's engine settings."""
    import releases
    from sim.tier import TierConfig
    from sim.tier_layouts import LAYOUTS
    from sim.tier_sim import TierSim, TierSimConfig

    sem = semantics or releases.reference("chunked").name
    return TierSim(TierSimConfig(LAYOUTS[LAYOUT], TierConfig(chunks, policy)), sem)


def log_sim_stores(sim: Any, log: list[dict[str, Any]]) -> None:
    """Wraps ``sim.tier.prepare_store`` as ``log_prepare_store`` wraps the engine's: every
    call appends the request (``req-<rid>``), the keys offered and the answer, keys named
    group:end token from the offering request's context."""
    names: dict[Any, str] = {}
    orig = sim.tier.prepare_store

    def logged(keys: Any, ctx: Any) -> Any:
        keys = list(keys)
        for k in keys:
            names[k] = f"{k[1]}:{ctx.position(k)}"
        out = orig(keys, ctx)
        log.append({"req": ctx.req_id, "offered": [names[k] for k in keys],
                    "answer": None if out is None else {
                        "store": [names.get(k, "?") for k in out.keys_to_store],
                        "evicted": [names.get(k, "?") for k in out.evicted]}})
        return out

    sim.tier.prepare_store = logged


def store_calls(entries: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """One request's ``prepare_store`` calls as (offered, answer), a refused call that
    repeats the one before it dropped: the engine retries a refused store every step
    until the tier has room (scheduler.py:1991-1996), the simulation once per modelled
    step, and a refusal changes nothing in the tier that a repeat would not."""
    out: list[tuple[Any, ...]] = []
    for e in entries:
        a = e["answer"]
        call = (tuple(e["offered"]), None if a is None else
                (tuple(a["store"]), tuple(sorted(a["evicted"]))))
        if a is None and out and out[-1] == call:
            continue
        out.append(call)
    return out


def storecheck(predicted_path: str, real_path: str) -> list[dict[str, Any]]:
    """Replays the workload of ``predicted_path`` through the tier simulation and compares
    every request's ``prepare_store`` calls with the engine's store log in
    ``real_path`` (``store_calls``); the requests that differ, in order."""
    with open(predicted_path) as f:
        work = json.load(f)
    with open(real_path) as f:
        real = json.load(f)
    sim = tier_sim(work["tier_chunks"], work["policy"], work["semantics"])
    sim_log: list[dict[str, Any]] = []
    log_sim_stores(sim, sim_log)
    trace = workload_trace(len(work["requests"]), work["seed"], work["workload"])
    rid_of = {r["request_id"]: r["rid"] for r in real["requests"]}
    by_real: dict[int, list[dict[str, Any]]] = {}
    for e in real["store_log"]:
        by_real.setdefault(rid_of[e["req"]], []).append(e)
    diffs = []
    for r in trace:
        n = len(sim_log)
        sim.run_request(r)
        got, want = store_calls(sim_log[n:]), store_calls(by_real.get(r.rid, []))
        if got != want:
            diffs.append({"rid": r.rid, "prompt": r.prompt_len, "sim": got, "real": want})
    return diffs


def predict(out: str, requests: int, seed: int, workload: str, chunks: int,
            policy: str, semantics: str | None) -> int:
    trace = workload_trace(requests, seed, workload)
    if len(trace) < requests:
        print(f"error: --requests: only {len(trace)} prompts of at most {MAX_PROMPT} tokens",
              file=sys.stderr)
        return 2
    sim = tier_sim(chunks, policy, semantics)
    sem = sim.semantics
    rows: list[dict[str, Any]] = []
    for r in trace:
        p = sim.run_request(r)
        tokens = [int(t) + TOKEN_OFFSET for t in r.seq.tokens[:r.prompt_len]]
        rows.append({"rid": r.rid, "tokens": tokens,
                     "predicted": {"hit": p.hit_tokens, "state_from": p.state_from,
                                   "differs": p.differs, "inherited": p.inherited,
                                   "missing_load": p.missing_load}})
    doc = {"schema": SCHEMA, "layout": LAYOUT, "semantics": sem, "workload": workload,
           "seed": seed, "tier_chunks": chunks, "policy": policy, "requests": rows}
    with open(out, "w") as f:
        json.dump(doc, f)
    hits = sum(r["predicted"]["hit"] > 0 for r in rows)
    wrong = sum(r["predicted"]["differs"] for r in rows)
    print(f"{len(rows)} requests, {hits} predicted hits, {wrong} predicted to differ")
    return 0


def run(model_dir: str, workload_path: str, out_path: str) -> int:
    from sim.gpu import finding_swa, probe_chunked

    class WorkloadProbe(finding_swa.Probe):
        """Also records, at each lookup, which of the request's keys the CPU tier held
        (group:token the key ends at): what explains a hit the simulation did not
        predict."""

        def __init__(self) -> None:
            super().__init__()
            self.held_at_lookup: dict[str, Any] = {}

        def on_lookup(self, request: Any, num_computed: int, hit: Any, st: Any) -> None:
            super().on_lookup(request, num_computed, hit, st)
            if st is None:
                return
            try:
                chunks = held_keys(self.sched.manager)
                self.held_at_lookup[request.request_id] = [
                    f"{g}:{st.req_context.get_offload_key_position(k)}"
                    for g, gs in enumerate(st.group_states) for k in gs.offload_keys
                    if k in chunks]
            except Exception as e:  # a record for the explanation, never a failed run
                self.held_at_lookup[request.request_id] = f"{type(e).__name__}: {e}"

    with open(workload_path) as f:
        work = json.load(f)
    t0 = time.monotonic()
    result: dict[str, Any] = {"schema": SCHEMA, "workload": workload_path,
                              "tier_chunks": work["tier_chunks"], "requests": [],
                              "error": None}
    probe = WorkloadProbe()
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
            lambda kv_cache_spec=None: list(finding_swa.DECLARED_BLOCKS))
        spec_init = CPUOffloadingSpec.__init__

        def sized(self: Any, config: Any) -> None:
            chunk = round_up(config.worker_kv_bytes_per_block,
                             CPUOffloadingSpec.BLOCK_SIZE_ALIGNMENT)
            config.extra_config["cpu_bytes_to_use"] = work["tier_chunks"] * chunk
            config.extra_config["eviction_policy"] = work["policy"]
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
        store_log: list[dict[str, Any]] = []
        result["store_log"] = store_log
        log_stores = log_prepare_store(probe.sched.manager, store_log)
        greedy = dict(temperature=0.0, ignore_eos=True, detokenize=False)

        def gen(tokens: list[int], n: int = OUTPUT_TOKENS) -> list[int]:
            o = llm.generate([TokensPrompt(prompt_token_ids=tokens)],
                             SamplingParams(max_tokens=n, **greedy), use_tqdm=False)[0]
            return list(o.outputs[0].token_ids)

        def reset(connector: bool = False) -> None:
            probe_chunked.reset_prefix_cache(llm, connector, lambda: gen([1], 1))

        cold: dict[str, list[int]] = {}
        for row in work["requests"]:
            key = json.dumps(row["tokens"])
            if key not in cold:
                reset(connector=True)
                cold[key] = gen(row["tokens"])
        print(f"{len(cold)} cold runs, {time.monotonic() - t0:.0f} s", flush=True)
        reset(connector=True)
        log_stores[0] = True  # the workload pass only
        for i, row in enumerate(work["requests"]):
            reset()
            n_before = len(probe.hits)
            out = gen(row["tokens"])
            gen([1], 1)  # the connector finalises the request (next step)
            gen([1], 1)  # and its last stores complete
            req_id = [r for r in probe.hits][n_before] if len(probe.hits) > n_before else None
            hits = probe.hits.get(req_id, []) if req_id else []
            ref = cold[json.dumps(row["tokens"])]
            result["requests"].append({
                "rid": row["rid"], "request_id": req_id,
                "hit": hits[-1][1] if hits else None,
                "mamba_loads": probe.mamba_loads_of.get(req_id) if req_id else None,
                "held_at_lookup": probe.held_at_lookup.get(req_id) if req_id else None,
                "equal_to_cold": out == ref,
                "first_diff": next((j for j, (x, y) in enumerate(zip(ref, out, strict=False))
                                    if x != y), None),
                "cold_tokens": ref, "tokens": out})
            if i % 20 == 0:
                probe_chunked.dump(result, out_path, t0)
                print(f"request {i + 1}/{len(work['requests'])}, "
                      f"{time.monotonic() - t0:.0f} s", flush=True)
    except Exception as e:
        probe_chunked.record_error(result, e)
        probe_chunked.dump(result, out_path, t0)
        traceback.print_exc()
        return 1
    probe_chunked.dump(result, out_path, t0)
    return 0


def held_keys(manager: Any) -> set[Any]:
    """The keys the CPU tier's policy holds: LRU keeps them in ``chunks``
    (cpu/policies/lru.py:43), ARC in ``t1`` and ``t2`` (cpu/policies/arc.py:55-56)."""
    policy = manager._policy
    if hasattr(policy, "chunks"):
        return set(policy.chunks)
    return set(policy.t1) | set(policy.t2)


def log_prepare_store(manager: Any, log: list[dict[str, Any]]) -> list[bool]:
    """Wraps the CPU tier's ``prepare_store`` (cpu/manager.py:261) on ``manager``: each call
    while the returned flag is set appends the request, the keys offered and what the tier
    answered (None: refused; else the keys it will store and those it evicted), keys as
    group:token they end at (from the offering request's context)."""
    from vllm.v1.kv_offload.base import get_offload_group_idx

    names: dict[Any, str] = {}
    on = [False]
    orig = manager.prepare_store

    def name(key: Any) -> str:
        return names.get(key, f"{get_offload_group_idx(key)}:?")

    def logged(keys: Any, req_context: Any) -> Any:
        keys = list(keys)
        for k in keys:
            names[k] = f"{get_offload_group_idx(k)}:{req_context.get_offload_key_position(k)}"
        held = len(held_keys(manager))
        out = orig(keys, req_context)
        if on[0]:
            log.append({"req": req_context.req_id, "offered": [name(k) for k in keys],
                        "held_before": held,
                        "answer": None if out is None else {
                            "store": [name(k) for k in out.keys_to_store],
                            "evicted": [name(k) for k in out.evicted_keys]}})
        return out

    manager.prepare_store = logged
    return on


def compare(predicted_path: str, real_path: str, json_out: str | None = None) -> int:
    """Per request: the predicted hit and state position against the real ones, and the
    confusion matrix of "output differs from cold" (predicted x real); with ``json_out``
    also written there as JSON."""
    with open(predicted_path) as f:
        pred = {r["rid"]: r["predicted"] for r in json.load(f)["requests"]}
    with open(real_path) as f:
        real = json.load(f)
    matrix = {(p, r): 0 for p in (False, True) for r in (False, True)}
    mismatches = []
    for row in real["requests"]:
        p = pred[row["rid"]]
        hit = row["hit"] or 0
        loads = row["mamba_loads"] or []
        state = loads[0]["state_at"] if loads else None
        differs = not row["equal_to_cold"]
        matrix[(p["differs"], differs)] += 1
        if (p["hit"], p["state_from"]) != (hit, state if hit else None) or \
                p["differs"] != differs:
            mismatches.append({"rid": row["rid"], "predicted": p,
                               "real": {"hit": hit, "state_from": state, "differs": differs}})
    print("predicted differs x real differs:")
    for (p, r), n in matrix.items():
        print(f"  predicted {str(p).lower():5s} real {str(r).lower():5s} {n}")
    print(f"{len(real['requests'])} requests, {len(mismatches)} mismatches")
    for m in mismatches[:20]:
        print(f"  {json.dumps(m)}")
    if json_out:
        agree = sum(1 for row in real["requests"]
                    if row["rid"] not in {m["rid"] for m in mismatches})
        doc = {"schema": SCHEMA + "/compare", "predicted": predicted_path, "real": real_path,
               "requests": len(real["requests"]), "agree": agree,
               "confusion_predicted_x_real_differs": {
                   f"predicted_{str(p).lower()}_real_{str(r).lower()}": n
                   for (p, r), n in matrix.items()},
               "mismatches": mismatches}
        with open(json_out, "w") as f:
            json.dump(doc, f, indent=1)
    return 1 if mismatches else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="sim/gpu/tier_workload.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("predict")
    p.add_argument("--out", required=True)
    p.add_argument("--requests", type=int, default=240)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workload", default="shared-prefix")
    p.add_argument("--tier-chunks", type=int, default=10)
    p.add_argument("--policy", default="lru")
    p.add_argument("--semantics", default=None, help="default: the chunked release")
    r = sub.add_parser("run")
    r.add_argument("--model-dir", required=True)
    r.add_argument("--workload", required=True)
    r.add_argument("--out", required=True)
    k = sub.add_parser("storecheck", help="the simulation's prepare_store calls against "
                       "the engine's store log, request by request (exit 1 on a difference)")
    k.add_argument("--predicted", required=True)
    k.add_argument("--real", required=True)
    c = sub.add_parser("compare")
    c.add_argument("--predicted", required=True)
    c.add_argument("--real", required=True)
    c.add_argument("--json", default=None, help="also write the comparison here")
    a = ap.parse_args(argv)
    if a.cmd == "predict":
        return predict(a.out, a.requests, a.seed, a.workload, a.tier_chunks, a.policy,
                       a.semantics)
    if a.cmd == "compare":
        return compare(a.predicted, a.real, a.json)
    if a.cmd == "storecheck":
        with open(a.real) as f:
            if "store_log" not in json.load(f):
                print("error: --real: no store_log (a run before the store log)",
                      file=sys.stderr)
                return 2
        diffs = storecheck(a.predicted, a.real)
        with open(a.predicted) as f:
            n = len(json.load(f)["requests"])
        print(f"prepare_store calls: {n - len(diffs)} of {n} requests as the engine's")
        for d in diffs[:10]:
            print(f"  {json.dumps(d)}")
        return 1 if diffs else 0
    from sim.gpu import probe_chunked

    if not probe_chunked.in_process():
        return 2
    return run(a.model_dir, a.workload, a.out)


if __name__ == "__main__":
    sys.exit(main())
