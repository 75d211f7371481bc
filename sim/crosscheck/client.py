"""The main-process side of the harness: one subprocess per vLLM version, JSON lines."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import IO, Any

from sim.crosscheck import forkserver
from sim.crosscheck.envs import ROOT, harness_python
from sim.crosscheck.mapping import fix_for, semantics_for

HARNESS = Path(__file__).resolve().parent / "adapters" / "harness.py"
# vLLM 0.26.0 reworked the scheduler's API (the spec built from an OffloadingConfig,
# chunks); harness_chunked.py drives 0.26.0 - 0.33.0 (docs/releases.md § Adapters)
HARNESS_V033 = Path(__file__).resolve().parent / "adapters" / "harness_chunked.py"
CHUNKED_FROM = (0, 26)


def harness_for(version: str) -> Path:
    major_minor = tuple(int(x) for x in version.split(".")[:2])
    return HARNESS_V033 if major_minor >= CHUNKED_FROM else HARNESS


def harness_env(fix: str | None = None) -> dict[str, str]:
    """The environment a process in a release's environment runs with (the harnesses, the
    findings' searches, the layouts' derivation): CPU only, hashes seeded, vLLM's logging
    at errors, ``CROSSCHECK_FIX`` the fix the harness applies (none: empty).  One value
    for all, so one fork server per release serves them all (``forkserver``)."""
    return dict(os.environ, PYTHONHASHSEED="0", VLLM_LOGGING_LEVEL="ERROR",
                TOKENIZERS_PARALLELISM="false", CUDA_VISIBLE_DEVICES="",
                CROSSCHECK_FIX=fix or "")


class HarnessError(RuntimeError):
    pass


class RealScheduler:
    """A running harness for one version: ``run(case)`` returns the real result dict.

    ``semantics``: the model semantics the real side stands for: ``vllm-X`` (default) or
    an alt semantics whose fix the harness applies (``mapping.REAL_FIXES``)."""

    def __init__(self, version: str, overlay: Path | None = None,
                 semantics: str | None = None, harness: Path | None = None,
                 python: Path | None = None) -> None:
        """``overlay``: a directory from ``tree.build_overlay``, put first on the
        harness's ``PYTHONPATH``; no bytecode is written (the release's env stays as is).
        ``harness``: another adapter speaking the same protocol (default: the
        scheduler harness for ``version``), e.g. ``adapters/tier_manager.py``.
        ``python``: the interpreter to run the harness with (default: the release's full
        env if made, else its light env: ``envs.harness_python``); a release without a
        model runs as shipped (``semantics`` empty)."""
        self.version = version
        try:
            own = semantics_for(version)
        except ValueError:  # not modelled: the real scheduler only (the bisect)
            own = ""
        self.semantics = semantics or own
        self.fix = fix_for(version, self.semantics) if self.semantics else None
        python = python or harness_python(version)
        env = harness_env(self.fix)
        if overlay is not None:
            env["PYTHONPATH"] = str(overlay)
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        self._log: IO[str] = tempfile.NamedTemporaryFile(
            "w+", prefix=f"crosscheck-{version}-", suffix=".log", delete=False)
        # a fork of the environment's fork server (vLLM imported once per process), or a
        # plain process for an overlay (forkserver.py)
        self.proc = forkserver.popen(
            [str(python), str(harness or harness_for(version))], cwd=ROOT, env=env,
            stderr=self._log)
        info = self._call({"op": "info"})
        if info.get("version") != version or info.get("fix") != self.fix:
            raise HarnessError(f"harness for {version} (fix {self.fix}) reports {info!r}")
        self.scheduler_file: str = info.get("scheduler_file", "")
        if overlay is not None and not self.scheduler_file.startswith(str(overlay)):
            raise HarnessError(f"the overlay {overlay} was not imported "
                               f"(scheduler from {self.scheduler_file})")

    def _call(self, msg: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            self._log.flush()
            tail = Path(self._log.name).read_text()[-3000:]
            raise HarnessError(f"harness for vLLM {self.version} died:\n{tail}")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise HarnessError(f"vLLM {self.version}: {reply['error']}\n"
                               f"{reply.get('traceback', '')}")
        return reply

    def run(self, case: dict[str, Any]) -> dict[str, Any]:
        return self._call({"op": "run", "case": case})

    def bench(self, case: dict[str, Any], n: int) -> dict[str, Any]:
        return self._call({"op": "bench", "case": case, "n": n})

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
        self._log.close()
        os.unlink(self._log.name)

    def __enter__(self) -> RealScheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
