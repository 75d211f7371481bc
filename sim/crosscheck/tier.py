"""``python -m sim.crosscheck.tier``: the CPU tier model (``sim.tier``) against vLLM
0.33.0's real ``CPUOffloadingManager``, event by event.

Each generated sequence (``tier_gen``) is replayed by the model here and by the real
manager in the release's environment (``adapters/tier_manager.py``, over the JSON-lines
protocol of ``client.RealScheduler``); after every event the answer and the whole tier
state must be equal. Prints per policy the sequences and events compared, the mix of
answers seen, the time, and every disagreement (the first differing event of a
sequence); writes each disagreeing sequence, cut after that event, to ``--out``. Exit 0
when all agree, 1 on a disagreement, 2 on bad input.

    python -m sim.crosscheck.tier --policy lru,arc --sequences 10000 --seed 0
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from sim.crosscheck.client import RealScheduler
from sim.crosscheck.tier_events import TierCase, replay
from sim.crosscheck.tier_gen import generate
from sim.progress import ProgressBar
from sim.tier import POLICIES

ADAPTER = Path(__file__).resolve().parent / "adapters" / "tier_manager.py"
BATCH = 50  # sequences per harness call


def tier_release() -> str:
    """The release whose CPU tier ``sim.tier`` models: the chunked family's reference
    release in the registry (``releases``; its older releases are deltas of it)."""
    import releases

    return releases.reference("chunked").base_version


@dataclass(frozen=True)
class Disagreement:
    policy: str
    index: int
    event: int
    op: str
    what: str  # "answer" or the first differing state field
    model: Any
    real: Any


@dataclass
class Tally:
    policy: str
    sequences: int = 0
    events: int = 0
    answers: Counter[str] = field(default_factory=Counter)
    disagreements: list[Disagreement] = field(default_factory=list)
    seconds: float = 0.0


def first_difference(case: TierCase, model: Sequence[dict[str, Any]],
                     real: Sequence[dict[str, Any]]) -> tuple[int, str, Any, Any] | None:
    """(event index, what differs, model's, real's) of the first differing event."""
    for i, (m, r) in enumerate(zip(model, real, strict=True)):
        if m["answer"] != r["answer"]:
            return i, "answer", m["answer"], r["answer"]
        for name in m["view"]:
            if name == "policy":
                for part in m["view"]["policy"]:
                    mv, rv = m["view"]["policy"][part], r["view"]["policy"].get(part)
                    if mv != rv:
                        return i, f"policy.{part}", mv, rv
            elif m["view"][name] != r["view"][name]:
                return i, name, m["view"][name], r["view"][name]
    return None


def _kind(op: str, answer: Any) -> str:
    if isinstance(answer, dict) and "error" in answer:
        return f"{op}:error"
    if op == "lookup" and isinstance(answer, list):
        return "lookup:" + ("HIT" if "HIT" in answer else "PENDING" if "HIT_PENDING" in answer
                            else "MISS")
    if op == "store":
        if answer is None:
            return "store:failed"
        return "store:evicted" if answer["evicted"] else "store:ok"
    return op


def check_batch(real: RealScheduler, cases: Sequence[TierCase], indices: Sequence[int],
                tally: Tally, out: Path | None) -> None:
    reply = real.run({"cases": [c.to_json() for c in cases]})
    for case, index, robs in zip(cases, indices, reply["observations"], strict=True):
        mobs = replay(case)
        tally.sequences += 1
        tally.events += len(case.events)
        for ev, o in zip(case.events, mobs, strict=True):
            tally.answers[_kind(ev.op, o["answer"])] += 1
        diff = first_difference(case, mobs, robs)
        if diff is None:
            continue
        at, what, mv, rv = diff
        d = Disagreement(case.config.policy, index, at, case.events[at].op, what, mv, rv)
        tally.disagreements.append(d)
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            cut = TierCase(case.config, case.events[:at + 1])
            path = out / f"tier-{case.config.policy}-{index}.json"
            path.write_text(json.dumps({"disagreement": d.__dict__, "case": cut.to_json()},
                                       indent=1) + "\n")


def batches(policy: str, seed: int, n: int) -> Iterator[tuple[list[TierCase], list[int]]]:
    for lo in range(0, n, BATCH):
        idx = list(range(lo, min(n, lo + BATCH)))
        yield [generate(seed, policy, i) for i in idx], idx


def run(policies: Sequence[str], n: int, seed: int, out: Path | None,
        progress: bool = True) -> list[Tally]:
    tallies = []
    with RealScheduler(tier_release(), harness=ADAPTER) as real:
        for policy in policies:
            tally = Tally(policy)
            bar = ProgressBar(n, f"tier {policy}", enabled=progress)
            t0 = time.perf_counter()
            for cases, idx in batches(policy, seed, n):
                check_batch(real, cases, idx, tally, out)
                bar.update(tally.sequences)
            bar.finish(tally.sequences)
            tally.seconds = time.perf_counter() - t0
            tallies.append(tally)
    return tallies


def report(t: Tally) -> str:
    agree = t.sequences - len({d.index for d in t.disagreements})
    lines = [f"{t.policy}: {agree}/{t.sequences} sequences agree, {t.events} events, "
             f"{t.seconds:.1f} s"]
    mix = ", ".join(f"{k} {v}" for k, v in sorted(t.answers.items()))
    lines.append(f"  events: {mix}")
    for d in t.disagreements[:20]:
        lines.append(f"  DISAGREE seq {d.index} event {d.event} ({d.op}) {d.what}: "
                     f"model {json.dumps(d.model)[:300]} real {json.dumps(d.real)[:300]}")
    if len(t.disagreements) > 20:
        lines.append(f"  ... {len(t.disagreements) - 20} more")
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"error: {message.splitlines()[0]}", file=sys.stderr)
        raise SystemExit(2)


def _policies(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in names if p not in POLICIES]
    if not names or bad:
        raise argparse.ArgumentTypeError(
            f"unknown policy {', '.join(bad) or text!r} (known: {', '.join(POLICIES)})")
    return names


def _count(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = -1
    if not 1 <= v <= 10_000_000:
        raise argparse.ArgumentTypeError(f"expected 1..10,000,000, got {text[:20]!r}")
    return v


def _seed(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = -1
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text[:20]!r}")
    return v


def main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog="python -m sim.crosscheck.tier", description=__doc__.splitlines()[0])
    ap.add_argument("--policy", type=_policies, default=list(POLICIES),
                    help="comma-separated: lru,arc")
    ap.add_argument("--sequences", type=_count, default=1000, help="per policy")
    ap.add_argument("--seed", type=_seed, default=0)
    ap.add_argument("--out", type=Path, default=Path("failures"),
                    help="where disagreeing sequences are written")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    if args.out.exists() and not args.out.is_dir():
        ap.error(f"argument --out: {args.out} exists and is not a directory")
    tallies = run(args.policy, args.sequences, args.seed, args.out, not args.no_progress)
    for t in tallies:
        print(report(t))
    return 1 if any(t.disagreements for t in tallies) else 0


if __name__ == "__main__":
    raise SystemExit(main())
