"""Random event sequences for the CPU-tier cross-check (``sim.crosscheck.tier``).

One sequence is one tier (1-16 chunks, rarely 0; the policy; sometimes a store
threshold and a tiny offer tracker) and 10-90 calls from up to five overlapping
requests, as the connector makes them: prompts share prefixes (keys ``(hash, group)``
over 1-3 groups, positions at chunk ends), offers come per group in chunk order with
stragglers, lookups and loads follow what the tier answers, transfers complete late, in
any order, or fail; requests finish with transfers still in flight; rarely the cache is
reset (whose jobs then never complete, as the scheduler's stale-job threshold makes
sure, scheduler.py:2255-2275). The generator steers by the model's own answers so every
call keeps vLLM's contract (a load only of ready keys, completions only of issued
jobs); a wrong model then shows as the real side asserting.

Deterministic: the sequence is a function of (seed, policy, index).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from sim.crosscheck.tier_events import Event, TierCase, apply
from sim.tier import Answer, Tier, TierConfig
from sim.tier_context import Key, ReqContext

MAX_LIVE = 5


@dataclass
class _Req:
    rid: int
    keys: list[list[Key]]  # per group, chunk order
    tokens_per_chunk: list[int]
    positioned: int = 0  # chunks whose positions were recorded
    stored_upto: int = 0  # the connector's next_stored_chunk_idx (all groups alike)
    finished: bool = False
    loads: list[tuple[Key, ...]] = field(default_factory=list)
    stores: list[tuple[Key, ...]] = field(default_factory=list)

    def flat(self, lo: int, hi: int) -> list[Key]:
        return [k for group in self.keys for k in group[lo:hi]]


def _prompts(rng: random.Random) -> list[list[int]]:
    """A few documents of block hashes; requests read prefixes of them."""
    docs = []
    base = rng.randrange(1, 1 << 40)
    for d in range(rng.randint(1, 3)):
        docs.append([base + 1000 * d + i for i in range(rng.randint(2, 10))])
    return docs


def generate(seed: int, policy: str, index: int) -> TierCase:
    rng = random.Random(f"tier:{policy}:{seed}:{index}")
    num_chunks = rng.choice([0] + [1, 2, 3, 4, 6, 8, 10, 12, 16, 20, 24, 32] * 4)
    threshold = rng.choice([0] * 6 + [1, 2, 2, 3])
    tracker = rng.choice([64_000] * 4 + [1, 2, 3, 5])
    cfg = TierConfig(num_chunks, policy, threshold, tracker)
    groups = rng.randint(1, 3)
    tpc = [rng.choice([16, 32, 64]) for _ in range(groups)]
    docs = _prompts(rng)
    tier = Tier(cfg)
    ctxs: dict[int, ReqContext] = {}
    events: list[Event] = []
    live: list[_Req] = []
    next_rid = 0

    def emit(ev: Event) -> object:
        events.append(ev)
        return apply(tier, ctxs, ev)

    def new_request() -> None:
        nonlocal next_rid
        doc = rng.choice(docs)
        n = rng.randint(1, len(doc))
        hashes = doc[:n]
        if rng.random() < 0.3:  # a private suffix
            hashes = hashes + [rng.randrange(1 << 41, 1 << 42) for _ in range(rng.randint(1, 3))]
        req = _Req(next_rid, [[(h, g) for h in hashes] for g in range(groups)], tpc)
        next_rid += 1
        live.append(req)
        emit(Event("new", req.rid))

    def positions(req: _Req) -> None:
        # update_offload_keys (scheduler.py:412-429) as blocks arrive; now and then a key
        # is left without a position (the policies' no-position paths)
        hi = min(len(req.keys[0]), req.positioned + rng.randint(1, 4))
        keys: list[Key] = []
        pos: list[int] = []
        for g, group in enumerate(req.keys):
            for i in range(req.positioned, hi):
                if rng.random() < 0.05:
                    continue
                keys.append(group[i])
                pos.append((i + 1) * req.tokens_per_chunk[g])
        req.positioned = hi
        if keys:
            emit(Event("pos", req.rid, tuple(keys), tuple(pos)))

    def lookup(req: _Req) -> None:
        hi = rng.randint(1, len(req.keys[0]))
        keys = req.flat(0, hi)
        if rng.random() < 0.2 and live:
            keys += rng.choice(live).flat(0, 2)
        answers = emit(Event("lookup", req.rid, tuple(keys)))
        if not isinstance(answers, list) or req.finished or rng.random() < 0.3:
            return
        # the connector loads a prefix of ready keys (update_state_after_alloc)
        hits = [k for k, a in zip(keys, answers, strict=True) if a == Answer.HIT.value]
        if not hits:
            return
        hits = hits[rng.randrange(len(hits)):] if rng.random() < 0.5 else hits
        if rng.random() < 0.05:
            hits = hits + hits[:1]  # the same key twice in one load
        load(req, tuple(hits))

    def load(req: _Req, keys: tuple[Key, ...]) -> None:
        if isinstance(emit(Event("load", req.rid, keys)), list):
            req.loads.append(keys)

    def store(req: _Req) -> None:
        total = len(req.keys[0])
        hi = min(total, req.positioned + (rng.random() < 0.2))
        lo = req.stored_upto if rng.random() < 0.85 else rng.randrange(0, max(1, hi))
        if hi <= lo:
            lo, hi = 0, total
        keys = req.flat(lo, hi)
        if rng.random() < 0.15:
            keys = [k for k in keys if rng.random() < 0.7]  # null blocks, skipped groups
        if rng.random() < 0.1 and len(live) > 1:
            keys += rng.choice(live).flat(0, 1)
        keys = list(dict.fromkeys(keys))
        if not keys:
            return
        out = emit(Event("store", req.rid, tuple(keys)))
        if isinstance(out, dict) and "keys" in out:
            req.stored_upto = max(req.stored_upto, hi)
            stored = tuple((k[0], k[1]) for k in out["keys"])
            if stored:
                req.stores.append(stored)

    def complete(req: _Req) -> None:
        jobs = [("load_done", j) for j in req.loads] + [("store_done", j) for j in req.stores]
        op, job = rng.choice(jobs)
        if op == "load_done":
            req.loads.remove(job)
            emit(Event(op, req.rid, job))
        else:
            req.stores.remove(job)
            emit(Event(op, req.rid, job, success=rng.random() < 0.9))

    def touch(req: _Req) -> None:
        hi = rng.randint(0, len(req.keys[0]))
        keys = req.flat(0, hi)
        if rng.random() < 0.3 and live:
            keys += rng.choice(live).flat(0, 3)
        emit(Event("touch", req.rid, tuple(keys)))

    for _ in range(rng.randint(10, 90)):
        active = [r for r in live if not r.finished]
        busy = [r for r in live if r.loads or r.stores]
        r = rng.random()
        if (not active or r < 0.06) and len(active) < MAX_LIVE:
            new_request()
            continue
        if 0.06 <= r < 0.35 and busy:
            complete(rng.choice(busy))
            continue
        if 0.35 <= r < 0.36:
            emit(Event("reset"))
            for req in live:  # the scheduler never completes pre-reset jobs
                req.loads.clear()
                req.stores.clear()
                req.stored_upto = 0
            continue
        if not active:
            if busy:
                complete(rng.choice(busy))
            continue
        req = rng.choice(active)
        r = rng.random()
        if r < 0.2 and req.positioned < len(req.keys[0]):
            positions(req)
        elif r < 0.4:
            lookup(req)
        elif r < 0.65:
            store(req)
        elif r < 0.72:
            touch(req)
        elif r < 0.88 and busy:
            complete(rng.choice(busy))
        elif r < 0.94:
            if not (req.loads or req.stores) or rng.random() < 0.3:
                req.finished = True
                emit(Event("finish", req.rid))
        else:
            emit(Event("new", req.rid))  # on_new_request again (request_finished path)
        live[:] = [q for q in live if not (q.finished and not q.loads and not q.stores)]
    return TierCase(cfg, tuple(events))
