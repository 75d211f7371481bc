"""The events of the CPU-tier cross-check and how the model (``sim.tier``) answers them.

An event is one call the offloading connector makes into ``CPUOffloadingManager``
(``new``: on_new_request, ``lookup`` (one call per key), ``touch``, ``load``:
prepare_load, ``load_done``: complete_load, ``store``: prepare_store, ``store_done``:
complete_store, ``finish``: on_request_finished, ``reset``: reset_cache) or the
scheduler recording key positions in a request's ``ReqContext`` (``pos``,
scheduler.py:426 / :1065). The real side (``adapters/tier_manager.py``) replays the same
JSON and reports the same observation: the answer and the tier's whole state after the
event (``sim.tier.TierView``). Both sides report a failed vLLM assertion as
``{"error": "AssertionError"}`` and go on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sim.tier import Tier, TierConfig
from sim.tier_context import Key, ReqContext

OPS = ("new", "pos", "lookup", "touch", "load", "load_done", "store", "store_done",
       "finish", "reset")


@dataclass(frozen=True)
class Event:
    op: str
    req: int = -1
    keys: tuple[Key, ...] = ()
    positions: tuple[int, ...] = ()  # op "pos": one per key
    success: bool = True  # op "store_done"

    def to_json(self) -> list[Any]:
        return [self.op, self.req, [list(k) for k in self.keys], list(self.positions),
                self.success]


@dataclass(frozen=True)
class TierCase:
    config: TierConfig
    events: tuple[Event, ...]

    def to_json(self) -> dict[str, Any]:
        return {"config": asdict(self.config), "events": [e.to_json() for e in self.events]}


def event_from_json(raw: Sequence[Any]) -> Event:
    op, req, keys, positions, success = raw
    return Event(op, req, tuple((int(k[0]), int(k[1])) for k in keys),
                 tuple(positions), bool(success))


def case_from_json(raw: dict[str, Any]) -> TierCase:
    return TierCase(TierConfig(**raw["config"]),
                    tuple(event_from_json(e) for e in raw["events"]))


def view_json(tier: Tier) -> dict[str, Any]:
    v = tier.view()
    return {"held": [list(h) for h in v.held], "free_list": list(v.free_list),
            "allocated": v.allocated, "evictable": v.evictable,
            "write_pending": v.write_pending, "policy": v.policy}


def apply(tier: Tier, ctxs: dict[int, ReqContext], ev: Event) -> Any:
    """Run one event on the model; its JSON answer."""
    ctx = ctxs.get(ev.req)
    if ctx is None and ev.op != "reset":
        ctx = ctxs[ev.req] = ReqContext(f"req-{ev.req}")
    try:
        if ev.op == "reset":
            tier.reset()
            return None
        assert ctx is not None
        if ev.op == "new":
            return tier.on_new_request(ctx).value
        if ev.op == "pos":
            for key, p in zip(ev.keys, ev.positions, strict=True):
                ctx.set_position(key, p)
            return None
        if ev.op == "lookup":
            return [tier.lookup(k).value for k in ev.keys]
        if ev.op == "touch":
            tier.touch(ev.keys, ctx)
            return None
        if ev.op == "load":
            return list(tier.prepare_load(ev.keys, ctx))
        if ev.op == "load_done":
            tier.complete_load(ev.keys, ctx)
            return None
        if ev.op == "store":
            out = tier.prepare_store(ev.keys, ctx)
            if out is None:
                return None
            return {"keys": [list(k) for k in out.keys_to_store],
                    "chunks": list(out.chunk_ids), "evicted": [list(k) for k in out.evicted]}
        if ev.op == "store_done":
            tier.complete_store(ev.keys, ctx, ev.success)
            return None
        if ev.op == "finish":
            tier.on_request_finished(ctx)
            return None
    except AssertionError:
        return {"error": "AssertionError"}
    raise ValueError(f"op: unknown event {ev.op!r} (known: {', '.join(OPS)})")


def replay(case: TierCase) -> list[dict[str, Any]]:
    """The model's observation after each event: the answer and the state."""
    tier = Tier(case.config)
    ctxs: dict[int, ReqContext] = {}
    return [{"answer": apply(tier, ctxs, ev), "view": view_json(tier)} for ev in case.events]
