"""Start processes in a release's environment from a fork server that imported vLLM once
(``adapters/forkserver.py``), so that a test run starting many harnesses and scripts in
one environment pays the imports (about 23 s of CPU a start-up in the 0.33.0 env) once per
environment and process, not once per start-up (issue 27).

``popen(cmd, ...)`` is ``subprocess.Popen(cmd, ...)`` for a command line whose first word
is an environment's interpreter; ``run(cmd, ...)`` is ``subprocess.run(cmd,
capture_output=True, text=True, ...)``.  A job is a fork of the server: a fresh process
with its own argv, environment, working directory, descriptors and exit status, whose
heavy modules are already imported.  One server per interpreter and per value of the
environment variables a module could read at import (``SENSITIVE``): a job whose
environment differs there gets its own server.  A job whose ``PYTHONPATH`` holds one of the
imported packages (a PR check's overlay of vLLM) runs as a plain process, as does every
job under ``CROSSCHECK_FORKSERVER=0``.  At most ``MAX_SERVERS`` servers live at a time
(the least recently used is stopped; its running jobs go on).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import subprocess
import tempfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

SERVER = Path(__file__).resolve().parent / "adapters" / "forkserver.py"
# what every job in a release's environment imports first (the harnesses, the searches,
# vLLM's own test helpers): the top-level packages also decide which PYTHONPATH a server
# may serve
PRELOAD = ("torch", "transformers", "vllm.config", "vllm.v1.core.kv_cache_manager",
           "vllm.v1.request")
# variables whose values a module (or the interpreter) may read once at start-up; every
# PYTHON* but the two a job applies itself (PYTHONPATH, PYTHONDONTWRITEBYTECODE)
SENSITIVE = ("VLLM_", "HF_", "HUGGINGFACE", "TRANSFORMERS_", "TOKENIZERS_", "TORCH",
             "CUDA_", "OMP_", "MKL_", "KMP_", "PYTORCH_", "LD_", "LC_", "LANG", "PYTHON")
APPLIED = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")
MAX_SERVERS = 6  # a server holds about 300 MB; the crosscheck mark's files share six
STARTS: list[tuple[str, str]] = []  # (interpreter, "server" | "plain"): a count for tests


def enabled() -> bool:
    return os.environ.get("CROSSCHECK_FORKSERVER", "1") != "0"


Key = tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]]


def _key(python: str, preload: tuple[str, ...], env: dict[str, str]) -> Key:
    return python, preload, tuple(sorted((k, v) for k, v in env.items()
                                         if k.startswith(SENSITIVE) and k not in APPLIED))


def _shadows(env: dict[str, str], preload: tuple[str, ...]) -> bool:
    """Whether the job's PYTHONPATH holds one of the packages a server has imported."""
    for entry in filter(None, env.get("PYTHONPATH", "").split(os.pathsep)):
        for name in {module.split(".")[0] for module in preload}:
            if (Path(entry) / name).exists() or (Path(entry) / f"{name}.py").exists():
                return True
    return False


class ServerError(RuntimeError):
    pass


class Server:
    """One fork server: an environment's interpreter with ``preload`` imported."""

    def __init__(self, python: str, env: dict[str, str], preload: tuple[str, ...]) -> None:
        self.python = python
        ours, theirs = socket.socketpair()
        self._log = tempfile.TemporaryFile("w+")
        server_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
        self.proc = subprocess.Popen(
            [python, str(SERVER), str(theirs.fileno()), *preload], env=server_env,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log,
            pass_fds=(theirs.fileno(),), cwd=SERVER.parent)
        theirs.close()
        self.control = ours
        STARTS.append((python, "server"))
        if self._line() != "ready":
            raise ServerError(f"the fork server of {python} did not start:\n{self.log()}")

    def log(self) -> str:
        self._log.seek(0)
        return self._log.read()[-3000:]

    def _line(self) -> str:
        data = b""
        while not data.endswith(b"\n"):
            chunk = self.control.recv(1)
            if not chunk:
                return data.decode()
            data += chunk
        return data.decode().strip()

    def start(self, argv: list[str], env: dict[str, str], cwd: str,
              fds: tuple[int, int, int]) -> tuple[int, socket.socket]:
        """Fork a job; returns its pid and the socket its exit status arrives on."""
        ours, theirs = socket.socketpair()
        msg = json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode()
        try:
            socket.send_fds(self.control, [msg], [*fds, theirs.fileno()])
        finally:
            theirs.close()
        line = self._line()
        if not line.isdigit():
            ours.close()
            raise ServerError(f"the fork server of {self.python} answered {line!r}:\n"
                              f"{self.log()}")
        return int(line), ours

    def close(self) -> None:
        self.control.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


_SERVERS: OrderedDict[Key, Server] = OrderedDict()


def _server(python: str, env: dict[str, str], preload: tuple[str, ...]) -> Server:
    key = _key(python, preload, env)
    if key in _SERVERS:
        _SERVERS.move_to_end(key)
        return _SERVERS[key]
    while len(_SERVERS) >= MAX_SERVERS:
        _SERVERS.popitem(last=False)[1].close()
    _SERVERS[key] = server = Server(python, env, preload)
    return server


@atexit.register
def close_all() -> None:
    while _SERVERS:
        _SERVERS.popitem()[1].close()


class Forked:
    """A job started by a fork server, with the part of ``subprocess.Popen``'s interface
    the callers use: ``stdin``, ``stdout``, ``pid``, ``returncode``, ``poll``, ``wait``,
    ``kill``."""

    def __init__(self, pid: int, status: socket.socket, stdin: IO[str] | None,
                 stdout: IO[str] | None) -> None:
        self.pid, self._status = pid, status
        self.stdin, self.stdout = stdin, stdout
        self.returncode: int | None = None
        self._killed = False

    def _read_status(self) -> int:
        data = b""
        while chunk := self._status.recv(64):
            data += chunk
        self._status.close()
        text = data.decode().strip()
        if text.lstrip("-").isdigit():
            return int(text)
        return -signal.SIGKILL if self._killed else -1  # died without reporting

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._status], [], [], 0)[0]:
            self.returncode = self._read_status()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._status], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            self.returncode = self._read_status()
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            self._killed = True
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@dataclass(frozen=True)
class _Plan:
    python: str
    argv: list[str]
    env: dict[str, str]
    cwd: str
    preload: tuple[str, ...]

    def start(self, fds: tuple[int, int, int]) -> tuple[int, socket.socket]:
        """Fork the job from its server; a server that fails leaves the pool."""
        server = _server(self.python, self.env, self.preload)
        try:
            return server.start(self.argv, self.env, self.cwd, fds)
        except (OSError, ServerError):
            key = _key(self.python, self.preload, self.env)
            if _SERVERS.get(key) is server:
                del _SERVERS[key]
            server.close()
            raise


def _plan(cmd: list[str], env: dict[str, str] | None, cwd: str | Path | None,
          preload: tuple[str, ...]) -> _Plan | None:
    """The job's parts if a fork server may run it, else None (a plain process): the
    interpreter's options are not read (the first argument is a script, ``-m`` or
    ``-c``)."""
    full = dict(os.environ if env is None else env)
    if not enabled() or _shadows(full, preload) or len(cmd) < 2 or (
            str(cmd[1]).startswith("-") and str(cmd[1]) not in ("-m", "-c")):
        return None
    return _Plan(str(cmd[0]), [str(c) for c in cmd[1:]], full,
                 str(Path(cwd) if cwd is not None else Path.cwd()), preload)


def popen(cmd: list[str], *, env: dict[str, str] | None = None,
          cwd: str | Path | None = None, stderr: IO[Any] | int | None = None,
          preload: tuple[str, ...] = PRELOAD) -> Forked | subprocess.Popen[str]:
    """``subprocess.Popen(cmd, env=env, cwd=cwd, text=True, bufsize=1, stdin=PIPE,
    stdout=PIPE, stderr=stderr)`` (``stderr`` a file or None: this process's), through
    a fork server where one may run it."""
    plan = _plan(cmd, env, cwd, preload)
    if plan is None:
        STARTS.append((str(cmd[0]), "plain"))
        return subprocess.Popen([str(c) for c in cmd], cwd=cwd, env=env, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=stderr, bufsize=1)
    err_fd = (stderr.fileno() if hasattr(stderr, "fileno") else  # type: ignore[union-attr]
              stderr if isinstance(stderr, int) else 2)
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    try:
        pid, status = plan.start((in_r, out_w, err_fd))
    except BaseException:
        for fd in (in_w, out_r):
            os.close(fd)
        raise
    finally:
        for fd in (in_r, out_w):
            os.close(fd)
    return Forked(pid, status, open(in_w, "w", buffering=1),
                  open(out_r))


def run(cmd: list[str], *, env: dict[str, str] | None = None,
        cwd: str | Path | None = None, timeout: float | None = None,
        check: bool = False, preload: tuple[str, ...] = PRELOAD,
        ) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd,
    timeout=timeout, check=check)``, through a fork server where one may run it."""
    plan = _plan(cmd, env, cwd, preload)
    if plan is None:
        STARTS.append((str(cmd[0]), "plain"))
        return subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                              env=env, cwd=cwd, timeout=timeout, check=check)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err, \
            open(os.devnull) as null:
        pid, status = plan.start((null.fileno(), out.fileno(), err.fileno()))
        job = Forked(pid, status, None, None)
        try:
            code = job.wait(timeout)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()
            raise subprocess.TimeoutExpired(cmd, timeout or 0) from None
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess([str(c) for c in cmd], code, out.read(),
                                           err.read())
    if check:
        done.check_returncode()
    return done
