"""The stand-ins every real-scheduler adapter shares; runs INSIDE a release's environment
(vLLM 0.23.0 - 0.33.0), never in the project's Python. Importing it has no side effect
(``harness_core`` moves stdout; ``state_search_chunked`` prints to it).

- ``ScenarioManager``: the offloading manager. ``lookup`` answers from ``answers`` (key ->
  the release's answer; ``miss`` for any other key) and records each key asked;
  ``prepare_load`` records the keys a load takes. ``OffloadingManager`` is abstract in
  every pinned release (v1/kv_offload/base.py), so these five methods are the whole stand-in.
- ``ScenarioSpec``: a real ``OffloadingSpec`` subclass (its ``__init__`` and assertions
  run) whose manager is a ``ScenarioManager``; the worker side is never called (its
  method is ``get_handlers`` up to 0.24.0, ``get_worker`` from 0.25.0).
- ``kv_spec``: a group's ``KVCacheSpec``, distinct per group (``HybridKVCacheCoordinator``
  merges equal specs and asserts two or more distinct ones remain,
  v1/core/kv_cache_coordinator.py:578 in 0.24.0; a real model's groups differ anyway).
- ``miss``: the release's answer for a key not stored (False before 0.25.0, whose
  ``LookupResult`` replaced True / None / False, base.py:56).
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec, SlidingWindowSpec
from vllm.v1.kv_offload import base as offload_base

# 0.25.0 on: the manager answers a LookupResult (v1/kv_offload/base.py:56)
LOOKUP_RESULT = getattr(offload_base, "LookupResult", None)


def miss() -> Any:
    return False if LOOKUP_RESULT is None else LOOKUP_RESULT.MISS


def hit() -> Any:
    return True if LOOKUP_RESULT is None else LOOKUP_RESULT.HIT


class CpuSpec(offload_base.LoadStoreSpec):
    @staticmethod
    def medium() -> str:
        return "CPU"


class ScenarioManager(offload_base.OffloadingManager):
    """Stand-in manager: answers ``lookup`` from ``answers`` and records keys."""

    def __init__(self, answers: dict[bytes, Any] | None = None) -> None:
        self.answers: dict[bytes, Any] = dict(answers or {})
        self.names: dict[bytes, tuple[int, int]] = {}
        self.looked_up: list[bytes] = []
        self.loaded: list[bytes] | None = None
        self.miss = miss()

    def lookup(self, key, req_context):  # type: ignore[no-untyped-def]
        self.looked_up.append(key)
        return self.answers.get(key, self.miss)

    def prepare_load(self, keys, req_context):  # type: ignore[no-untyped-def]
        self.loaded = list(keys)
        return CpuSpec()

    def prepare_store(self, keys, req_context):  # type: ignore[no-untyped-def]
        return None

    def on_new_request(self, req_context):  # type: ignore[no-untyped-def]
        return offload_base.RequestOffloadingContext()


class ScenarioSpec(offload_base.OffloadingSpec):
    """A real OffloadingSpec subclass: the base __init__ (and its assertions) runs."""

    manager: ScenarioManager

    def get_manager(self):  # type: ignore[no-untyped-def]
        return self.manager

    def get_handlers(self, kv_caches):  # type: ignore[no-untyped-def]
        raise NotImplementedError("worker side is not exercised by the cross-check")

    # 0.25.0 renamed get_handlers (an abstract method of OffloadingSpec)
    def get_worker(self, kv_caches):  # type: ignore[no-untyped-def]
        raise NotImplementedError("worker side is not exercised by the cross-check")


def kv_spec(g: dict[str, Any], index: int) -> Any:
    """Group ``index``'s KV-cache spec from a case's group dict (module doc)."""
    common = dict(block_size=g["block_size"], num_kv_heads=index + 1, head_size=8,
                  dtype=torch.float16)
    if g["kind"] == "full_attention":
        return FullAttentionSpec(**common)
    if g["kind"] == "sliding_window":
        return SlidingWindowSpec(**common, sliding_window=g["sliding_window"])
    return MambaSpec(
        block_size=g["block_size"],
        shapes=((4, 8 * (index + 1)),),
        dtypes=(torch.float16,),
        mamba_cache_mode=g["mamba_cache_mode"],
    )
