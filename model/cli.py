"""``python -m model lookup SCENARIO.json... [--semantics NAME] [--json] [--explain]``.

Exit 0: no violation anywhere; 1: violations; 2: any file is bad input (one line each).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from model.evaluate import Outcome, evaluate
from model.explain import explain
from model.scenario import ScenarioError, iter_scenario_paths, load_scenario_file
from model.semantics import MODEL_SEMANTICS as SEMANTICS


def outcome_json(name: str, o: Outcome) -> dict[str, Any]:
    if o.refused:
        return {"scenario": name, "semantics": o.semantics, "error": o.refused}
    return {
        "scenario": name,
        "semantics": o.semantics,
        "hit_tokens": o.hit_tokens,
        "loads": [
            {"group": ld.group, "blocks": list(ld.blocks), "state_position": ld.state_position}
            for ld in o.loads
        ],
        "violations": [{"invariant": v.invariant, "message": v.message} for v in o.violations],
    }


def _lookup(args: argparse.Namespace) -> int:
    paths = iter_scenario_paths(args.scenarios)
    if not paths:
        print("scenarios: no scenario file found", file=sys.stderr)
        return 2
    bad = violated = False
    for path in paths:
        try:
            s = load_scenario_file(path)
            o = evaluate(s, args.semantics)
        except (ScenarioError, ValueError) as e:
            bad = True
            msg = str(e).splitlines()[0]
            if args.json:
                print(json.dumps({"scenario": str(path), "error": msg}))
            else:
                print(f"{path}: error: {msg}", file=sys.stderr)
            continue
        bad |= o.refused is not None
        violated |= bool(o.violations)
        if args.json:
            print(json.dumps(outcome_json(str(path), o)))
        elif args.explain:
            print(f"== {path}")
            print(explain(s, o))
        else:
            if o.refused:
                print(f"{path}: error: {o.refused}", file=sys.stderr)
                continue
            verdict = ", ".join(v.invariant for v in o.violations) or "ok"
            print(f"{path}: {o.semantics}: hit {o.hit_tokens} - {verdict}")
            for v in o.violations:
                print(f"  {v.invariant}: {v.message}")
    return 2 if bad else (1 if violated else 0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m model", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    lk = sub.add_parser("lookup", help="evaluate scenario files (or directories of them)")
    lk.add_argument("scenarios", nargs="+")
    lk.add_argument("--semantics", choices=list(SEMANTICS), default=None,
                    help="override each file's semantics")
    lk.add_argument("--json", action="store_true", help="one JSON object per line")
    lk.add_argument("--explain", action="store_true", help="the loop in words and a picture")
    args = p.parse_args(argv)
    return _lookup(args)
