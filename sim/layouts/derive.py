"""Run ``vllm_side/derive.py`` in a vLLM environment and return its rows (JSON)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import releases
from sim.crosscheck import forkserver
from sim.crosscheck.client import harness_env
from sim.crosscheck.envs import env_python

SCRIPT = Path(__file__).resolve().parent / "vllm_side" / "derive.py"
# the chunked lookup's releases: vllm_side/derive.py runs their start-up code
VERSIONS = releases.versions("chunked")
TIMEOUT_S = 900


class DeriveError(RuntimeError):
    """The vLLM-side script failed or produced rows this harness could not evaluate."""


def derive(version: str) -> dict[str, Any]:
    if version not in VERSIONS:
        raise ValueError(f"--vllm: layouts are derived for {', '.join(VERSIONS)}, "
                         f"not {version!r}")
    python = env_python(version)
    if not python.exists():
        raise ValueError(f"--vllm: no environment for vLLM {version} at {python.parent.parent} "
                         f"(python -m sim.crosscheck.envs --vllm {version}; "
                         "CROSSCHECK_VENVS names the folder)")
    # CPU only, hashes seeded (the harnesses' environment): forked from the release's fork
    # server where this process has one (sim/crosscheck/forkserver.py)
    proc = forkserver.run([str(python), str(SCRIPT)], env=harness_env(), timeout=TIMEOUT_S)
    if proc.returncode != 0:
        raise DeriveError(f"vllm_side/derive.py exited {proc.returncode}:\n"
                          + proc.stderr[-4000:])
    out: dict[str, Any] = json.loads(proc.stdout)
    broken = [r for r in out["rows"] if r.get("status") == "harness_error"]
    if broken:
        raise DeriveError("rows the harness could not evaluate (not vLLM refusals):\n" + "\n".join(
            f"  {r['model']}/{r['backend']}/{r['drafter']}: {r['refused_by']}: {r['error']}"
            for r in broken))
    if out.get("vllm") != version:
        raise DeriveError(f"the environment runs vLLM {out.get('vllm')}, not {version}")
    return out


def dumps(table: dict[str, Any]) -> str:
    return json.dumps(table, indent=1, sort_keys=True) + "\n"
