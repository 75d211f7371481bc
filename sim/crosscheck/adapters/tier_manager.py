"""Drives vLLM 0.33.0's real ``CPUOffloadingManager`` (cpu/manager.py) with its real LRU
and ARC policies; runs INSIDE that release's environment, never in the project's Python.
Same JSON-lines protocol as the scheduler harnesses (``harness_protocol.serve``): ``run``
takes ``{"cases": [...]}``, each a ``sim.crosscheck.tier_events.TierCase`` in JSON, and
answers per case the observation after every event: the manager's answer and its whole
state (held keys with ref_cnt and slot, free list, counters, the policy's order state).

Real: ``CPUOffloadingManager(num_chunks, cache_policy, store_threshold=...,
max_tracker_size=...)`` as cpu/spec.py:165-172 builds it (events off), its policies
from ``CachePolicyFactory``, ``ReqContext`` (one per request id) with the positions the
case records (``set_offload_key_position``), keys from ``make_offload_key`` (the block
hash as 8 big-endian bytes). Nothing is stubbed; the state is read from the objects'
own fields.
"""

from __future__ import annotations

import os
import sys
from typing import Any

_PROTO = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import vllm  # noqa: E402
from harness_protocol import serve  # noqa: E402  (this folder)
from vllm.v1.kv_offload import base as offload_base  # noqa: E402
from vllm.v1.kv_offload.cpu import manager as manager_mod  # noqa: E402
from vllm.v1.kv_offload.cpu.policies.arc import ARCCachePolicy  # noqa: E402
from vllm.v1.kv_offload.cpu.policies.lru import LRUCachePolicy  # noqa: E402

VERSION = vllm.__version__
HASH_BYTES = 8


def to_key(raw: list[int]) -> bytes:
    return offload_base.make_offload_key(int(raw[0]).to_bytes(HASH_BYTES, "big"), int(raw[1]))


def from_key(key: bytes) -> list[int]:
    return [int.from_bytes(offload_base.get_offload_block_hash(key), "big"),
            offload_base.get_offload_group_idx(key)]


def view(m: manager_mod.CPUOffloadingManager) -> dict[str, Any]:
    pol = m._policy
    if isinstance(pol, LRUCachePolicy):
        chunks = dict(pol.chunks)
        pview: dict[str, Any] = {
            "ranks": sorted([*from_key(k), r[0], r[1]] for k, r in pol._ranks.items()),
            "evictable": sorted(from_key(k) for k in pol._evictable),
            "next_rank": pol._next_rank,
        }
    elif isinstance(pol, ARCCachePolicy):
        chunks = {**pol.t1, **pol.t2}
        pview = {"t1": [from_key(k) for k in pol.t1], "t2": [from_key(k) for k in pol.t2],
                 "b1": [from_key(k) for k in pol.b1], "b2": [from_key(k) for k in pol.b2],
                 "target": pol.target_t1_size}
    else:
        raise TypeError(f"unknown policy {type(pol).__name__}")
    held = sorted([*from_key(k), c.ref_cnt, c.chunk_id] for k, c in chunks.items())
    return {"held": held, "free_list": list(m._free_list),
            "allocated": m._num_allocated_chunks, "evictable": m._num_evictable_cache_chunks,
            "write_pending": m._num_write_pending_chunks, "policy": pview}


def apply(m: manager_mod.CPUOffloadingManager, ctxs: dict[int, Any], ev: list[Any]) -> Any:
    op, req, raw_keys, positions, success = ev
    keys = [to_key(k) for k in raw_keys]
    ctx = ctxs.get(req)
    if ctx is None and op != "reset":
        ctx = ctxs[req] = offload_base.ReqContext(req_id=f"req-{req}")
    try:
        if op == "reset":
            m.reset_cache()
            return None
        if op == "new":
            return m.on_new_request(ctx).policy.value
        if op == "pos":
            for key, p in zip(keys, positions, strict=True):
                ctx.set_offload_key_position(key, p)
            return None
        if op == "lookup":
            return [m.lookup(k, ctx).name for k in keys]
        if op == "touch":
            m.touch(keys, ctx)
            return None
        if op == "load":
            return [int(x) for x in m.prepare_load(keys, ctx).block_ids]
        if op == "load_done":
            m.complete_load(keys, ctx)
            return None
        if op == "store":
            out = m.prepare_store(keys, ctx)
            if out is None:
                return None
            return {"keys": [from_key(k) for k in out.keys_to_store],
                    "chunks": [int(x) for x in out.store_spec.block_ids],
                    "evicted": [from_key(k) for k in out.evicted_keys]}
        if op == "store_done":
            m.complete_store(keys, ctx, success=success)
            return None
        if op == "finish":
            m.on_request_finished(ctx)
            return None
    except AssertionError:
        return {"error": "AssertionError"}
    raise ValueError(f"unknown op {op!r}")


def run_one(case: dict[str, Any]) -> list[dict[str, Any]]:
    cfg = case["config"]
    m = manager_mod.CPUOffloadingManager(
        num_chunks=cfg["num_chunks"], cache_policy=cfg["policy"],
        store_threshold=cfg["store_threshold"], max_tracker_size=cfg["max_tracker_size"])
    ctxs: dict[int, Any] = {}
    return [{"answer": apply(m, ctxs, ev), "view": view(m)} for ev in case["events"]]


def run_case(msg: dict[str, Any]) -> dict[str, Any]:
    return {"observations": [run_one(c) for c in msg["cases"]]}


def bench(case: dict[str, Any], n: int) -> dict[str, Any]:
    import time

    t0 = time.perf_counter()
    for _ in range(n):
        run_one(case)
    return {"seconds": time.perf_counter() - t0, "calls": n}


def main() -> None:
    serve(_PROTO, {"version": VERSION, "fix": None, "scheduler_file": manager_mod.__file__},
          run_case, bench)


if __name__ == "__main__":
    main()
