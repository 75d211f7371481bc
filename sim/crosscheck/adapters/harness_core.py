"""What both real-scheduler harnesses share (``harness.py``: the block lookup of vLLM
0.23.0 - 0.25.x; ``harness_chunked.py``: 0.26.0 - 0.33.0); runs INSIDE a release's
environment, never in the project's Python. Import it before anything that imports vLLM:
it keeps the process's original stdout for the protocol (``PROTO``) and sends everything
else, vLLM's logging included, to stderr.

Shared: the stand-ins (``standins.py``), the request with vLLM's own block hasher, the
GPU prefix hit as cached blocks and the load's ``allocate_slots`` (as
``Scheduler.schedule`` does for an async load), the per-group tally of loaded keys, the
timed lookup call, the benchmark loop and the protocol loop. Each family's file keeps
what differs: the configs, the spec and scheduler construction, the key names and the
store's answers.
"""

from __future__ import annotations

import gc
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any

PROTO = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("PYTHONHASHSEED", "0")

import vllm  # noqa: E402
from harness_protocol import err, serve  # noqa: E402  (this folder)
from standins import ScenarioManager  # noqa: E402  (this folder)
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.core.kv_cache_manager import KVCacheBlocks  # noqa: E402
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    get_request_block_hasher,
    init_none_hash,
    resolve_kv_cache_block_sizes,
)
from vllm.v1.request import Request  # noqa: E402

VERSION = vllm.__version__
FAKE_JOB_ID = 1 << 40  # stands for a transfer job still in flight (in_flight_transfers)

_HASH_READY: set[str] = set()


def make_request(case: dict[str, Any], vllm_config: Any, kv_cache_config: Any,
                 req_id: str = "req-0", *, extra_args: dict[str, Any] | None = None,
                 output_tokens: int = 0) -> Any:
    """The case's request, its block hashes from vLLM's own hasher; ``extra_args`` on its
    sampling parameters (given only when set), ``output_tokens`` appended (a resumed
    request: they count in num_tokens and the hashes)."""
    _, hash_block_size = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
    algo = vllm_config.cache_config.prefix_caching_hash_algo
    hash_fn = get_hash_fn_by_name(algo)
    if algo not in _HASH_READY:  # as EngineCore.__init__ does (v1/engine/core.py:215)
        init_none_hash(hash_fn)
        _HASH_READY.add(algo)
    hasher = get_request_block_hasher(hash_block_size, hash_fn)
    kw: dict[str, Any] = {"extra_args": extra_args} if extra_args is not None else {}
    params = SamplingParams(
        max_tokens=1, skip_reading_prefix_cache=case["skip_reading_prefix_cache"], **kw)
    request = Request(
        request_id=req_id,
        prompt_token_ids=[(7 * t + 3) % 30000 for t in range(case["prompt_tokens"])],
        sampling_params=params,
        pooling_params=None,
        block_hasher=hasher,
    )
    if output_tokens:
        request.append_output_token_ids([(11 * t + 5) % 30000 for t in range(output_tokens)])
    return request


def allocate_load(kvm: Any, kv_cache_config: Any, request: Any, num_computed: int,
                  hit: int, cp: int = 1) -> Any:
    """The GPU prefix hit as blocks cached by an earlier request with the same prompt
    (``BlockPool.cache_full_blocks``, then freed), as ``get_computed_blocks`` would find
    them, then ``allocate_slots`` for an async load of ``hit`` tokens; None when the
    pool is too small. ``cp``: the context-parallel size (a group's block spans
    ``block_size * cp`` tokens)."""
    pool = kvm.block_pool
    computed: list[list[Any]] = []
    for g, group in enumerate(kv_cache_config.kv_cache_groups):
        bs = group.kv_cache_spec.block_size * cp
        n = num_computed // bs
        blocks = pool.get_new_blocks(n) if n else []
        if n:
            pool.cache_full_blocks(request, blocks, 0, n, bs, g)
        computed.append(blocks)
    for blocks in computed:
        pool.free_blocks(list(reversed(blocks)))
    new_computed = KVCacheBlocks(tuple(computed)) if num_computed else None
    return kvm.allocate_slots(
        request,
        0,
        num_new_computed_tokens=num_computed,
        new_computed_blocks=new_computed,
        num_external_computed_tokens=hit,
        delay_cache_blocks=True,
    )


def loads_by_group(manager: ScenarioManager, groups: int) -> tuple[list[list[Any]], int]:
    """The keys ``prepare_load`` took, by name per group, and how many had no name."""
    loads: list[list[Any]] = [[g, []] for g in range(groups)]
    unknown = 0
    for key in manager.loaded or []:
        name = manager.names.get(key)
        if name is None:
            unknown += 1
        else:
            loads[name[0]][1].append(name[1])
    return loads, unknown


# How a case's lookup is timed, as the model's is (sim/crosscheck/compare.py, TIMED_CALLS):
# one untimed warm-up lookup of the case, then the best of TIMED_CALLS timed lookups, each
# on its own new request of the same scheduler (the last the case's own, which answers).
TIMED_CALLS = 3


def spare_lookups(spare: Callable[[int], Callable[[], Any]]) -> float:
    """The warm-up and the first TIMED_CALLS - 1 timed lookups: ``spare(j)`` registers a
    new request of the case with the scheduler and gives its lookup call. Returns the best
    of the timed ones' CPU seconds; the caller forgets the keys they looked up."""
    best = math.inf
    for j in range(TIMED_CALLS):
        call = spare(j)
        gc.disable()
        t0 = time.thread_time()
        try:
            call()
        except AssertionError:
            pass  # the case's own call reports it
        finally:
            seconds = time.thread_time() - t0
            gc.enable()
        if j:  # the first is the warm-up
            best = min(best, seconds)
    return best


def timed_lookup(call: Callable[[], tuple[Any, Any]], out: dict[str, Any],
                 best: float = math.inf) -> Any:
    """``call()`` (the scheduler's ``get_num_new_matched_tokens``) timed in this thread's
    CPU time (time spent waiting for a core on a loaded machine is not the lookup's; the
    model is timed alike, compare.py); writes ``t_lookup`` (the best of this call and
    ``best``, the spare lookups' time), ``hit``, ``async`` and, on an assertion,
    ``lookup_error`` into ``out``; returns the hit."""
    gc.disable()  # as timeit: no collection of other objects inside the timed call
    t0 = time.thread_time()
    try:
        hit, load_async = call()
    except AssertionError as e:
        out["lookup_error"] = err(e)
        hit, load_async = None, False
    finally:
        seconds = time.thread_time() - t0
        gc.enable()
    out["t_lookup"] = min(best, seconds)
    out["hit"] = hit
    out["async"] = bool(load_async)
    return hit


def bench_calls(requests: list[Any], call: Callable[[Any], Any]) -> dict[str, Any]:
    """``call(request)`` (a new request per call, built beforehand) timed per call;
    ``call`` returns the hit. The median call is robust to other load on the machine."""
    hit = None
    per_call = []
    clock = time.perf_counter
    for r in requests:
        t0 = clock()
        hit = call(r)
        per_call.append(clock() - t0)
    per_call.sort()
    return {"seconds": sum(per_call), "calls": len(requests), "hit": hit,
            "median": per_call[len(per_call) // 2]}


def main(info: dict[str, Any], run_case: Callable[[dict[str, Any]], dict[str, Any]],
         bench: Callable[[dict[str, Any], int], dict[str, Any]]) -> None:
    serve(PROTO, info, run_case, bench)
