"""``python -m model lookup SCENARIO.json... [--semantics NAME] [--json] [--explain]``.

Each scenario prints ``PATH: SEMANTICS: hit N - VERDICT``, or ``PATH: SEMANTICS: deferred
(the lookup answers None: a chunk is still being stored or loaded; vLLM asks again next
step) - VERDICT``.  ``--json``: one object per line; each load lists its keys as
``"blocks"`` (offloaded block indices) for releases before 0.33.0 and as
``"key_end_tokens"`` (the token each key's chunk ends at) for 0.33.0 and its fixes, where
the model keys chunks by position; a deferred answer has ``"hit_tokens": null`` and
``"deferred": true``.

Exit 0: no violation anywhere; 1: violations, or a result that differs from the file's
``expect``; 2: any file is bad input (one line each).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from model.args import OneLineParser
from model.evaluate import Outcome, evaluate
from model.explain import explain
from model.scenario import Scenario, ScenarioError, iter_scenario_paths, load_scenario_file
from model.semantics import MODEL_SEMANTICS as SEMANTICS
from model.semantics import get_semantics

LIST_LIMIT = 65536  # longer loads print as {"first": a, "stop": b}: bounded output


def _blocks_json(blocks: Sequence[int]) -> Any:
    if len(blocks) <= LIST_LIMIT:
        return list(blocks)
    return {"first": blocks[0], "stop": blocks[-1] + 1}


def outcome_json(name: str, o: Outcome) -> dict[str, Any]:
    if o.refused:
        return {"scenario": name, "semantics": o.semantics, "error": o.refused}
    # 0.33.0's model keys a chunk by the token it ends at (load_chunked), older releases'
    # by the offloaded block's index
    keys = "key_end_tokens" if get_semantics(o.semantics).chunked else "blocks"
    return {
        "scenario": name,
        "semantics": o.semantics,
        "hit_tokens": o.hit_tokens,
        "deferred": o.hit_tokens is None,
        "loads": [
            {"group": ld.group, keys: _blocks_json(ld.blocks),
             "state_position": ld.state_position}
            for ld in o.loads
        ],
        "violations": [{"invariant": v.invariant, "message": v.message} for v in o.violations],
    }


def hit_words(o: Outcome) -> str:
    """``hit N``, or what a None answer means."""
    if o.hit_tokens is None:
        return ("deferred (the lookup answers None: a chunk is still being stored or "
                "loaded; vLLM asks again next step)")
    return f"hit {o.hit_tokens}"


def expect_mismatches(s: Scenario, o: Outcome) -> list[str]:
    """Where the outcome differs from the scenario's ``expect`` (one line each)."""
    e = s.expect
    if e is None or o.refused:
        return [] if e is None else [f"expect: the scenario is refused ({o.refused})"]
    out = []
    if e.hit_tokens != "any" and e.hit_tokens != o.hit_tokens:
        out.append(f"expect.hit_tokens: expected {e.hit_tokens}, got {o.hit_tokens}")
    got = tuple(sorted({v.invariant for v in o.violations}))
    if e.violations is not None and e.violations != got:
        out.append(f"expect.violations: expected {list(e.violations)}, got {list(got)}")
    return out


def _error(path: str, msg: str, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"scenario": path, "error": msg}))
    else:
        print(f"{path}: error: {msg}", file=sys.stderr)


def _lookup(args: argparse.Namespace) -> int:
    try:
        paths = iter_scenario_paths(args.scenarios)
    except ScenarioError as e:
        _error(str(e).split(": ")[0], str(e), args.json)
        return 2
    bad = violated = False
    for path in paths:
        try:
            s = load_scenario_file(path, args.semantics)
            o = evaluate(s, args.semantics)
        except (ScenarioError, ValueError) as e:
            bad = True
            _error(str(path), str(e).splitlines()[0], args.json)
            continue
        bad |= o.refused is not None
        violated |= bool(o.violations)
        mismatches = expect_mismatches(s, o)
        violated |= bool(mismatches)
        if args.json:
            d = outcome_json(str(path), o)
            if s.expect is not None:
                d["expect_mismatches"] = mismatches
            print(json.dumps(d))
        elif args.explain:
            print(f"== {path}")
            print(explain(s, o))
        else:
            if o.refused:
                print(f"{path}: error: {o.refused}", file=sys.stderr)
                continue
            verdict = ", ".join(v.invariant for v in o.violations) or "ok"
            print(f"{path}: {o.semantics}: {hit_words(o)} - {verdict}")
            for v in o.violations:
                print(f"  {v.invariant}: {v.message}")
        for m in mismatches if not args.json else []:
            print(f"{path}: {m}")
    return 2 if bad else (1 if violated else 0)


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m model", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=OneLineParser)
    lk = sub.add_parser("lookup", help="evaluate scenario files (or directories of them)")
    lk.add_argument("scenarios", nargs="+")
    lk.add_argument("--semantics", choices=list(SEMANTICS), default=None,
                    help="override each file's semantics")
    lk.add_argument("--json", action="store_true", help="one JSON object per line")
    lk.add_argument("--explain", action="store_true", help="the loop in words and a picture")
    args = p.parse_args(argv)
    return _lookup(args)
