"""``python -m sim.layouts``: derive, render or check the real-configuration layout table."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from model.real_layouts import LayoutError, parse_table
from sim.layouts.derive import DeriveError, derive, dumps
from sim.layouts.table import render

DOCS = Path(__file__).resolve().parents[2] / "docs"


def paths(out: Path, version: str) -> tuple[Path, Path]:
    return out / f"layouts-vllm-{version}.json", out / f"layouts-vllm-{version}.md"


def render_file(json_path: Path) -> str:
    raw = json.loads(json_path.read_text())
    return render(parse_table(raw), raw["vllm"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.layouts", description=__doc__)
    ap.add_argument("--vllm", default="0.33.0", help="the vLLM release (0.33.0)")
    ap.add_argument("--out", type=Path, default=DOCS, help="where the table lives (docs/)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="re-derive and compare with the committed JSON (exit 1 if not)")
    mode.add_argument("--render", action="store_true",
                      help="only re-render the markdown from the committed JSON")
    args = ap.parse_args(argv)
    json_path, md_path = paths(args.out, args.vllm)
    try:
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
