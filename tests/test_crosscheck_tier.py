"""The CPU tier model (``sim.tier``) against vLLM 0.33.0's real ``CPUOffloadingManager``.

Marked ``crosscheck`` (run by ``.ci/run`` with ``-m crosscheck``): makes or reuses the
0.33.0 environment. ``TIER_SEQUENCES`` sets the generated sequences per policy (default
1,000); every event's answer and the whole tier state must agree. A sabotaged model must
be caught, so the comparison is known to look.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from sim.crosscheck.client import RealScheduler
from sim.crosscheck.tier import ADAPTER, Tally, batches, check_batch, tier_release
from sim.tier_arc import ArcPolicy
from sim.tier_context import Key, ReqContext
from sim.tier_lru import LruPolicy

# on the xdist worker of the newest release's files (its fork servers: --dist loadgroup)
pytestmark = [pytest.mark.crosscheck, pytest.mark.xdist_group("newest")]

SEQUENCES = int(os.environ.get("TIER_SEQUENCES", "1000"))
SEED = 1000


@pytest.fixture(scope="module")
def real() -> Iterator[RealScheduler]:
    with RealScheduler(tier_release(), harness=ADAPTER) as r:
        yield r


def check(real: RealScheduler, policy: str, n: int) -> Tally:
    tally = Tally(policy)
    for cases, idx in batches(policy, SEED, n):
        check_batch(real, cases, idx, tally, None)
    return tally


@pytest.mark.parametrize("policy", ["lru", "arc"])
def test_tier_agrees_with_the_real_manager(real: RealScheduler, policy: str) -> None:
    tally = check(real, policy, SEQUENCES)
    assert not tally.disagreements, tally.disagreements[:3]
    # the sequences reach what matters: evictions, refused stores, pending and ready
    # hits, loads and their completions, failed stores, resets
    a = tally.answers
    for kind in ("store:evicted", "store:failed", "lookup:HIT", "lookup:PENDING",
                 "load", "load_done", "store_done", "reset", "touch", "finish"):
        assert a[kind] >= SEQUENCES // 20, (kind, dict(a))


def test_a_wrong_model_is_caught(real: RealScheduler, monkeypatch: pytest.MonkeyPatch) -> None:
    # ARC promoting a chunk still being stored on touch (arc.py:103-106 keeps it in T1)
    def touch(self: ArcPolicy, keys: list[Key], ctx: ReqContext) -> None:
        for key in reversed(list(keys)):
            if key in self.t1:
                self.t2[key] = self.t1.pop(key)
            elif key in self.t2:
                self.t2.move_to_end(key)
            else:
                self._ghost_hit(key)

    monkeypatch.setattr(ArcPolicy, "touch", touch)
    assert check(real, "arc", 200).disagreements
    # LRU touching head first (lru.py:129-130 walks the keys tail first)
    monkeypatch.setattr(LruPolicy, "touch",
                        lambda self, keys, ctx: self._renew(list(keys)))
    assert check(real, "lru", 200).disagreements
