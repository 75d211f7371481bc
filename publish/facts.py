"""The spec's expensive facts (``spec-facts.json``): one Z3 search on the seed layout, one
taken from a pair's search, and the simulator's numbers (the chat workload on the block
lookup's semantics, and re-sent prompts). Each part is computed on its own, in the main
job's process pool while the pairs run (``python -m publish``), or all at once
(``collect_facts``: ``python -m publish.spec DIR --facts``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from model.semantics import get_semantics
from proofs import theorems
from proofs.theorems import THEOREMS
from publish.names import BEFORE_PR, PR_RELEASE, ROUND_NUM_HIT, SIM_SEMANTICS

FACTS = "spec-facts.json"
SIM_REQUESTS = 5000
SIM_KEYS = ("requests", "lookups", "cpu_hit_requests", "prompt_tokens", "cpu_hit_tokens",
            "oracle_hit_tokens", "given_away_tokens", "above_oracle", "missing_loads",
            "wrong_state", "corrupted", "corrupted_direct", "corrupted_inherited",
            "corrupted_divergence")
RERUN_LENGTHS = range(17, 81)
SIM_LABELS = {"chat": 0, "chat-hybrid": 1}  # label -> attention groups
# each simulator part's CPU seconds, per label, in SIM_SEMANTICS' order (FACT_PARTS)
_SIM_SECONDS = {"chat": (0.6, 0.55, 0.55), "chat-hybrid": (1.3, 2.1, 2.1)}


# the facts' parts, each computable on its own (in any process: the Z3 searches and the
# simulator are deterministic), with its CPU seconds for the run's scheduler: each part
# alone in a fresh process (``python bench/bench_facts.py --parts all --fresh``, means over
# 2 reps on the shared 2-core machine, bench/results/facts.txt); a part that follows
# another simulator part in the same process costs less (shared recurrence caches)
FACT_PARTS: dict[str, float] = {
    "seed_counterexample": 0.2, "alt_round_num_hit_counterexample": 0.25,
    **{f"sim:{label}:{sem}": seconds for label, costs in _SIM_SECONDS.items()
       for sem, seconds in zip(SIM_SEMANTICS, costs, strict=True)},
    "rerun": 0.12}
# a fact that is the same computation as a pair's counterexample search (the same theorem,
# semantics and assumptions: ``proofs.check.counterexample`` adds RUNTIME to the
# preconditions either way): the run takes it from that pair's verdict, in this run only
PAIR_FACTS = {"alt_round_num_hit_counterexample": ("no-partial-state", ROUND_NUM_HIT)}


def facts_from_pairs(rows: Sequence[Any]) -> dict[str, Any]:
    """The parts of ``PAIR_FACTS`` that this run's rows (``proofs.results.Row``) already
    found (a pair without a counterexample leaves its fact to ``collect_facts``)."""
    out = {}
    for name, (thm, sem) in PAIR_FACTS.items():
        v = next((r.verdict for r in rows if (r.theorem, r.semantics) == (thm, sem)), None)
        if v is not None and v.status == "COUNTEREXAMPLE" and v.counterexample:
            out[name] = v.counterexample
    return out


def fact_part(name: str) -> Any:
    """One part of the spec's facts (``FACT_PARTS``): from the cache where it holds it for
    these inputs (``publish.cache``, the main job only), else computed (and kept there)."""
    from publish import cache

    if not cache.enabled():
        return _compute(name)
    got, value = cache.fact(name)
    if got:
        return value
    # as the cache gives it back (JSON), so a hit and a miss give the same value
    value = json.loads(json.dumps(_compute(name)))
    cache.keep_fact(name, value)
    return value


def _compute(name: str) -> Any:
    from proofs.check import counterexample

    thm = THEOREMS["no-partial-state"]
    if name == "seed_counterexample":
        v = counterexample(thm, get_semantics(BEFORE_PR), thm.preconditions, 120_000,
                           sizes=[((16, 16, 16), 1)])
        return v.counterexample if v.status == "COUNTEREXAMPLE" else None
    if name == "alt_round_num_hit_counterexample":
        # the review alternative on requests a real engine produces (GPU hit whole GPU
        # blocks): the pair's search (PAIR_FACTS)
        alt = counterexample(thm, get_semantics(PAIR_FACTS[name][1]),
                             thm.pre(PAIR_FACTS[name][1]) + theorems.RUNTIME, 120_000)
        return alt.counterexample if alt.status == "COUNTEREXAMPLE" else None
    from sim.config import EngineConfig

    if name == "rerun":
        from sim.rerun import rerun_one

        rerun = {}
        for sem in (BEFORE_PR, PR_RELEASE):
            rows = [rerun_one(n, sem, EngineConfig()) for n in RERUN_LENGTHS]
            rerun[sem] = [[r.length, r.hit_tokens, r.corrupted] for r in rows]
        return rerun
    from sim.runner import RunSpec, run_one

    _, label, sem = name.split(":")
    spec = RunSpec("chat", SIM_REQUESTS, 0, SIM_SEMANTICS,
                   EngineConfig(attention_groups=SIM_LABELS[label]))
    s = run_one(spec, sem)  # the trace depends only on (workload, requests, seed)
    return ({k: getattr(s, k) for k in SIM_KEYS}
            | {"no_partial_state": s.violations["no-partial-state"]})


def collect_facts(parts: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run what the spec quotes besides the proofs (about ten seconds of CPU): every part of
    ``FACT_PARTS`` not already in ``parts`` (computed elsewhere, e.g. in the proofs' process
    pool while the pairs run)."""
    from sim.config import EngineConfig

    got = {name: (parts[name] if parts is not None and name in parts else fact_part(name))
           for name in FACT_PARTS}
    sim: dict[str, Any] = {}
    for label, attention in SIM_LABELS.items():
        sim[label] = {
            "workload": "chat", "requests": SIM_REQUESTS, "seed": 0,
            "attention_groups": attention,
            "block_size": EngineConfig(attention_groups=attention).block_size,
            "semantics": {sem: got[f"sim:{label}:{sem}"] for sem in SIM_SEMANTICS},
        }
    return {"seed_counterexample": got["seed_counterexample"],
            "alt_round_num_hit_counterexample": got["alt_round_num_hit_counterexample"],
            "sim": sim, "rerun": got["rerun"]}
