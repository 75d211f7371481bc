"""``python -m sim.layouts``: derive, render or check the real-configuration layout table."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import releases
from model.real_layouts import LayoutError, LayoutTemplate, load_templates, parse_table
from model.semantics import get_semantics
from sim.layouts.derive import DeriveError, derive, dumps
from sim.layouts.table import render

DOCS = Path(__file__).resolve().parents[2] / "docs"


def paths(out: Path, version: str) -> tuple[Path, Path]:
    return out / f"layouts-vllm-{version}.json", out / f"layouts-vllm-{version}.md"


def render_file(json_path: Path) -> str:
    raw = json.loads(json_path.read_text())
    return render(parse_table(raw), raw["vllm"])


def write_scenarios(templates: tuple[LayoutTemplate, ...], out: Path, semantics: str) -> int:
    get_semantics(semantics)  # an unknown name is bad input (exit 2)
    out.mkdir(parents=True, exist_ok=True)
    n = 0
    for t in templates:
        if not t.accepted:
            continue
        prompt = 2 * math.lcm(*(g.block_size for g in t.groups)) * (t.blocks_per_chunk or 1) + 1
        s = t.scenario_json(semantics=semantics, prompt_tokens=prompt)
        name = t.key.replace("/", "--") + ".json"
        (out / name).write_text(json.dumps(s, indent=1, sort_keys=True) + "\n")
        n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.layouts", description=__doc__)
    ap.add_argument("--vllm", default="0.33.0", help="the vLLM release (0.33.0)")
    ap.add_argument("--out", type=Path, default=DOCS, help="where the table lives (docs/)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="re-derive and compare with the committed JSON (exit 1 if not)")
    mode.add_argument("--render", action="store_true",
                      help="only re-render the markdown from the committed JSON")
    mode.add_argument("--scenarios", type=Path, metavar="DIR",
                      help="write one scenario file per accepted row into DIR (every block "
                           "stored; prompt two scheduler blocks of offloaded size plus one "
                           "token) for python -m model lookup / sim.crosscheck --scenarios")
    ap.add_argument("--semantics", default=releases.newest("block").name,
                    help="the semantics the --scenarios files name")
    args = ap.parse_args(argv)
    json_path, md_path = paths(args.out, args.vllm)
    try:
        if args.scenarios is not None:
            n = write_scenarios(load_templates(json_path), args.scenarios, args.semantics)
            print(f"wrote {n} scenarios to {args.scenarios}")
            return 0
        if not args.render:
            fresh = dumps(derive(args.vllm))
            if args.check:
                committed = json_path.read_text() if json_path.exists() else ""
                if fresh != committed:
                    print(f"{json_path}: differs from what vLLM {args.vllm} derives now "
                          "(python -m sim.layouts to regenerate)", file=sys.stderr)
                    return 1
                print(f"{json_path}: matches vLLM {args.vllm} "
                      f"({len(json.loads(fresh)['rows'])} rows)")
                return 0
            json_path.write_text(fresh)
        md_path.write_text(render_file(json_path))
    except (ValueError, LayoutError) as e:
        print(str(e).splitlines()[0], file=sys.stderr)
        return 2
    except DeriveError as e:
        print(str(e), file=sys.stderr)
        return 1
    print(f"wrote {md_path}" + ("" if args.render else f" and {json_path}"))
    return 0
