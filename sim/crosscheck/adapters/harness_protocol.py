"""The harnesses' side of the JSON-lines protocol with ``sim/crosscheck/client.py`` (info /
run / bench / quit, one JSON object a line) and the one-line error they report. Standard
library only: ``harness.py`` and ``harness_chunked.py`` import it inside a release's
environment (this folder is their script folder)."""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from typing import IO, Any


def err(e: BaseException) -> str:
    """The exception's type, the innermost vLLM file:line it passed, its first line."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    tb = traceback.extract_tb(e.__traceback__)
    where = ""
    for fr in reversed(tb):
        if "/vllm/" in fr.filename:  # the release's site-packages or a PR check overlay
            where = f" at vllm/{fr.filename.rsplit('/vllm/', 1)[1]}:{fr.lineno}"
            break
    return f"{type(e).__name__}{where}: {msg}"


def compiled_vllm_modules() -> list[str]:
    """The compiled extension modules of vLLM this process has imported (the light envs
    carry none: docs/guide.md § Every release)."""
    out = []
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None) or ""
        if "/vllm/" in f and f.endswith((".so", ".pyd")):
            out.append(name)
    return sorted(out)


def serve(out: IO[str], info: dict[str, Any],
          run_case: Callable[[dict[str, Any]], dict[str, Any]],
          bench: Callable[[dict[str, Any], int], dict[str, Any]]) -> None:
    """Answers each request line on stdin with one line on ``out`` until quit or EOF; an
    error is a reply (with its traceback), not the end."""
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        op = msg.get("op")
        try:
            if op == "info":
                reply: dict[str, Any] = dict(info, compiled=compiled_vllm_modules())
            elif op == "run":
                reply = run_case(msg["case"])
            elif op == "bench":
                reply = bench(msg["case"], int(msg["n"]))
            elif op == "quit":
                break
            else:
                reply = {"error": f"unknown op {op!r}"}
        except Exception as e:  # report, keep serving
            reply = {"error": err(e), "traceback": traceback.format_exc()}
        out.write(json.dumps(reply) + "\n")
