"""Run a vLLM-ready test file of ``docs/findings/vllm_tests/`` inside the vLLM 0.33.0
environment (which has no pytest), on the release as shipped or with one of the proposed
fixes applied in process (``fix001_chunked.apply_fix``: ``001``, ``001b``, ``003``).

``python vllm_test_chunked.py FILE [--fix 003]`` imports FILE, calls each of its ``test_*``
functions (no arguments) and prints JSON: ``{"fix": ..., "tests": {name: "pass" | "fail:
<assertion>"}}``.  Exit 0 whatever the tests say; a test that raises anything but an
AssertionError is an error (traceback, exit 1).
"""
# ruff: noqa: E402
from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
from pathlib import Path

_OUT = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file", type=Path)
    ap.add_argument("--fix", default=None, help="001, 001b or 003 (default: none)")
    args = ap.parse_args()
    if args.fix is not None:
        from fix001_chunked import apply_fix

        apply_fix(args.fix)  # exits naming an unknown fix
    ns = runpy.run_path(str(args.file), run_name="vllm_test")
    tests: dict[str, str] = {}
    for name in sorted(ns):
        if name.startswith("test_") and callable(ns[name]):
            try:
                ns[name]()
                tests[name] = "pass"
            except AssertionError as e:
                tests[name] = f"fail: {e}"
    json.dump({"fix": args.fix, "tests": tests}, _OUT, sort_keys=True)
    _OUT.write("\n")
    _OUT.flush()


if __name__ == "__main__":
    main()
