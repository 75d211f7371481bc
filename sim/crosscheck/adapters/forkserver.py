"""A fork server for one release's environment: runs INSIDE that environment (standard
library only, like the harnesses), imports the heavy modules once (torch, vLLM's config
and KV-cache code: most of a harness's start-up) and then starts each job as a fork of
itself, so a job pays for its own work and not for the imports
(``sim/crosscheck/forkserver.py`` is the main-process side; issue 27).

    python forkserver.py CONTROL_FD MODULE [MODULE ...]

A job is one message on the control socket (a Unix socket pair): a JSON object
``{"argv": [...], "env": {...}, "cwd": "..."}`` with four file descriptors: the job's
stdin, stdout, stderr and its status socket.  ``argv`` is what would follow the
interpreter on a command line: ``[script, args...]``, ``["-m", module, args...]`` or
``["-c", code, args...]``.  The server forks; the child takes the descriptors as 0, 1, 2,
the environment (all of it, replacing the server's), the working directory, ``sys.argv``
and ``sys.path`` as a fresh ``python argv...`` would have them (the script's folder or the
working directory first, then ``PYTHONPATH``), reseeds ``random`` (and numpy's global
generator) from the OS as a fresh interpreter does, runs the job as ``__main__``, then its
exit handlers, and writes its exit status (one decimal line) on the status socket.  The
server answers each job with the child's pid (one line on the control socket), waits for
its ended children (their CPU time counts as a plain process's would) and exits at the
control socket's end.

The client starts a server only with the environment variables that a module read at
import could depend on (``VLLM_*``, ``HF_*``, ``PYTHONHASHSEED``, ...) equal to the job's,
and sends no job whose ``PYTHONPATH`` holds one of the imported packages (a PR check's
overlay of vLLM's scheduler runs as a plain process).
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import random
import runpy
import signal
import socket
import sys
import traceback

MAX_MSG = 1 << 20


def child(job: dict, fds: list[int], base_path: list[str]) -> None:
    """In the forked child: become the job, run it, never return."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    stdin, stdout, stderr, status = fds
    code = 1
    try:
        for target, fd in ((0, stdin), (1, stdout), (2, stderr)):
            os.dup2(fd, target)
        for fd in (stdin, stdout, stderr):
            if fd > 2:
                os.close(fd)
        os.set_inheritable(status, False)
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])
        sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
        argv = list(job["argv"])
        extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if argv[0] == "-m":
            head, sys.argv = os.getcwd(), ["-m", *argv[2:]]
        elif argv[0] == "-c":
            head, sys.argv = "", ["-c", *argv[2:]]
        else:
            script = os.path.abspath(argv[0])
            head, sys.argv = os.path.dirname(script), [argv[0], *argv[1:]]
        sys.path[:] = [head, *extra, *base_path]
        random.seed()
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        code = run(argv)
    except SystemExit as e:
        code = exit_code(e)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        try:
            import threading

            threading._shutdown()  # type: ignore[attr-defined]  # as the interpreter does
            atexit._run_exitfuncs()
        except BaseException:
            traceback.print_exc()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        try:
            os.write(status, f"{code}\n".encode())
        finally:
            os._exit(code)


def exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def run(argv: list[str]) -> int:
    if argv[0] == "-m":
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c":
        main = type(sys)("__main__")
        sys.modules["__main__"] = main
        exec(compile(argv[1], "<string>", "exec"), main.__dict__)
    else:
        runpy.run_path(argv[0], run_name="__main__")
    return 0


def reap(_signum: int, _frame: object) -> None:
    """Wait for every ended child (so that its CPU time counts in this process's
    children's, as a plain process's counts in its parent's)."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def serve(control: socket.socket, base_path: list[str]) -> None:
    signal.signal(signal.SIGCHLD, reap)
    while True:
        try:
            msg, fds, _flags, _addr = socket.recv_fds(control, MAX_MSG, 4)
        except (ConnectionError, OSError):
            return
        if not msg:
            return
        job = json.loads(msg)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            control.close()
            child(job, fds, base_path)
        for fd in fds:
            os.close(fd)
        control.sendall(f"{pid}\n".encode())


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    # sys.path as a job's interpreter would have it, less its first entry (this folder)
    base_path = sys.path[1:]
    for name in sys.argv[2:]:
        importlib.import_module(name)
    sys.path[:] = base_path
    control.sendall(b"ready\n")
    serve(control, base_path)


if __name__ == "__main__":
    main()
