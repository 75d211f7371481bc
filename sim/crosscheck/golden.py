"""Recorded answers of the real vLLM schedulers: a fast, offline differential test.

``python -m sim.crosscheck.golden [--vllm 0.23.0,0.24.0] [--examples N] [--out DIR]``
draws ``N`` distinct scenarios per version from the cross-check's generator
(``sim.crosscheck.gen``, fixed seeds 0, 1, ...: the same scenarios on every run), runs
each through the real ``OffloadingConnectorScheduler`` of that release (the harness of
``python -m sim.crosscheck``) and writes ``DIR/vllm-X.json``: one record per scenario,
the scenario and the real answer (refusal, hit, lookups, load plan, worker copies, load
assertion; timings dropped). ``tests/test_golden.py`` compares ``model/`` with these
answers in the default suite (no vLLM environment needed, well under a second), so every
change to the lookup that changes an answer of the real scheduler fails at once; its
crosscheck-marked test asks the real scheduler again, so the file cannot drift from it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import releases
from model.args import OneLineParser, bounded_int, output_dir
from model.scenario import Scenario, parse_scenario, scenario_to_json
from sim.crosscheck.envs import ROOT

GOLDEN_DIR = ROOT / "tests" / "golden"
# golden answers are recorded for the block lookup's releases (tests/golden/vllm-X.json)
VERSIONS = releases.versions("block")
# what the comparison reads (sim.crosscheck.compare.compare); timings change every run
KEPT = ("refused", "hit", "lookups", "loads", "copies", "load_error", "lookup_error",
        "keys_ok", "unknown_load_keys", "gpu")


def draw(version: str, n: int) -> list[Scenario]:
    """``n`` distinct generated scenarios for ``version``, the same on every run."""
    from sim.crosscheck.gen import distinct
    from sim.crosscheck.mapping import semantics_for

    return distinct(semantics_for(version), n)


def record(real: Any, s: Scenario) -> dict[str, Any]:
    from sim.crosscheck.mapping import to_case

    s = s.with_semantics(real.semantics)
    answer = real.run(to_case(s))
    return {"scenario": scenario_to_json(s),
            "real": {k: answer[k] for k in KEPT if k in answer}}


def load(version: str, directory: Path = GOLDEN_DIR) -> list[tuple[Scenario, dict[str, Any]]]:
    data = json.loads((directory / f"vllm-{version}.json").read_text())
    return [(parse_scenario(r["scenario"]), r["real"]) for r in data["records"]]


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(prog="python -m sim.crosscheck.golden", description=__doc__)
    ap.add_argument("--vllm", default=",".join(VERSIONS))
    ap.add_argument("--examples", type=bounded_int(1, 100_000), default=500)
    ap.add_argument("--out", type=output_dir, default=GOLDEN_DIR)
    ap.add_argument("--light", action="store_true",
                    help="run each release in its light environment (sim/crosscheck/envs.py)")
    a = ap.parse_args(argv)
    versions = a.vllm.split(",")
    for v in versions:
        if v not in VERSIONS:
            ap.error(f"argument --vllm: unknown version {v!r} (known: {', '.join(VERSIONS)})")
    from sim.crosscheck import envs
    from sim.crosscheck.client import RealScheduler

    a.out.mkdir(parents=True, exist_ok=True)
    for v in versions:
        real = RealScheduler(v, python=envs.ensure_light_env(v) if a.light else None)
        records = [record(real, s) for s in draw(v, a.examples)]
        doc = {"what": f"the real vLLM {v} OffloadingConnectorScheduler's answers "
                       f"(python -m sim.crosscheck.golden --vllm {v} --examples {a.examples})",
               "records": records}
        path = a.out / f"vllm-{v}.json"
        # one record a line: small diffs when the generator or a release changes
        lines = ",\n".join(json.dumps(r, sort_keys=True) for r in records)
        path.write_text(f'{{"what": {json.dumps(doc["what"])},\n"records": [\n{lines}\n]}}\n')
        print(f"vLLM {v}: {len(records)} scenarios recorded in {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
