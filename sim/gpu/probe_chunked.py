"""What the 0.33.0 finding scripts (``finding_cap.py``, ``finding_swa.py``) share on the real
engine: a probe on the scheduler-side ``OffloadingConnectorScheduler`` (the scheduler
object, each request's offload keys with the token each ends at, the Mamba keys a load
restores, what the CPU tier holds), the prefix-cache reset that keeps the CPU tier, the
layout the connector derived, and the result file's write and error fields.

Runs in the GPU host's process, vLLM 0.33.0 imported by the caller; nothing here imports
vLLM at module level (tests/test_gpu_probe.py drives it on a stand-in engine).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

Keys = list[list[tuple[bytes, int]]]


class Probe:
    """Wraps the scheduler's ``__init__``, ``get_num_new_matched_tokens`` and
    ``update_state_after_alloc``; a script's subclass records what it needs in
    ``on_lookup`` and ``on_alloc``."""

    def __init__(self) -> None:
        self.sched: Any = None
        self.keys: dict[str, Keys] = {}

    def on_lookup(self, request: Any, num_computed: int, hit: Any, st: Any) -> None:
        """After a lookup: the request, its computed tokens, the answer's hit, its
        ``_req_status`` entry (or None)."""

    def on_alloc(self, sched: Any, request: Any, num_external: int, st: Any) -> None:
        """After ``update_state_after_alloc`` on ``sched``: the tokens counted as loaded
        externally."""

    def install(self, sched_mod: Any) -> None:
        cls = sched_mod.OffloadingConnectorScheduler
        probe = self
        init, lookup, alloc = (cls.__init__, cls.get_num_new_matched_tokens,
                               cls.update_state_after_alloc)

        def _init(self: Any, *a: Any, **k: Any) -> None:
            init(self, *a, **k)
            probe.sched = self

        def _lookup(self: Any, request: Any, num_computed: int, *a: Any, **k: Any) -> Any:
            out = lookup(self, request, num_computed, *a, **k)
            st = self._req_status.get(request.request_id)
            probe.on_lookup(request, num_computed, out[0], st)
            if st is not None:
                probe.keys[request.request_id] = [
                    [(key, st.req_context.get_offload_key_position(key))
                     for key in gs.offload_keys] for gs in st.group_states]
            return out

        def _alloc(self: Any, request: Any, blocks: Any, num_external: int) -> Any:
            out = alloc(self, request, blocks, num_external)
            probe.on_alloc(self, request, num_external,
                           self._req_status.get(request.request_id))
            return out

        cls.__init__ = _init
        cls.get_num_new_matched_tokens = _lookup
        cls.update_state_after_alloc = _alloc

    @staticmethod
    def mamba_loads(sched: Any, st: Any) -> list[dict[str, Any]]:
        """The Mamba keys a load on ``sched`` restores: the token range each serves and
        the token its state was saved at."""
        from vllm.v1.kv_offload.base import get_offload_group_idx

        mamba = {c.group_idx for c in sched.config.kv_group_configs
                 if c.requires_cow_source}
        return [{"serves": [s, e], "state_at": st.req_context.get_offload_key_position(k)}
                for s, e, k in st.load_key_ranges if get_offload_group_idx(k) in mamba]

    def held(self, keys: Keys) -> list[str]:
        """Which of ``keys`` the CPU tier holds now, as group:token the key ends at."""
        chunks = self.sched.manager._policy.chunks
        return [f"{g}:{pos}" for g, group in enumerate(keys)
                for key, pos in group if key in chunks]

    def layout(self, sliding: bool = False) -> dict[str, Any]:
        """The offload groups the connector derived (with each one's sliding window in
        chunks where ``sliding``), tokens per hash and the Mamba align size."""
        cfg = self.sched.config
        groups = []
        for c in cfg.kv_group_configs:
            g = {"group": c.group_idx, "tokens_per_chunk": c.tokens_per_chunk}
            if sliding:
                g["sliding_window_size_in_chunks"] = c.sliding_window_size_in_chunks
            g["mamba"] = c.requires_cow_source
            groups.append(g)
        return {"offload_groups": groups, "tokens_per_hash": cfg.tokens_per_hash,
                "mamba_align_size": self.sched._mamba_align_size}


def reset_prefix_cache(llm: Any, connector: bool, tick: Callable[[], object]) -> None:
    """Resets the GPU prefix cache (and the CPU tier where ``connector``), running
    ``tick`` (a one-token request) until the engine lets it, 30 s at most."""
    deadline = time.monotonic() + 30
    while not llm.reset_prefix_cache(reset_connector=connector):
        if time.monotonic() > deadline:
            raise TimeoutError("reset_prefix_cache did not succeed in 30 s")
        tick()


def dump(result: dict[str, Any], out_path: str, t0: float) -> None:
    """Writes the result so far, with the seconds since ``t0``."""
    result["seconds"] = round(time.monotonic() - t0, 1)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)


def record_error(result: dict[str, Any], e: Exception) -> None:
    """The error's first line and the traceback's end into the result."""
    result["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    result["traceback"] = traceback.format_exc()[-3000:]


def in_process() -> bool:
    """The probe needs the engine in this process; says so on stderr where it is not."""
    if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0":
        return True
    print("error: set VLLM_ENABLE_V1_MULTIPROCESSING=0 (the probe needs the engine "
          "in this process)", file=sys.stderr)
    return False
