"""``sim.crosscheck.forkserver``: a job started from a fork server is a fresh process as
far as the job can tell (argv, sys.path, environment, working directory, descriptors,
exit status, exit handlers, random state), started once per interpreter and import-time
environment; a job the server may not run (an overlay on PYTHONPATH, the switch off) is a
plain process.  On this project's interpreter with a light preload (``json``), so it runs
in the default suite; the crosscheck mark runs it on the releases' environments."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sim.crosscheck import forkserver

PY = sys.executable
LIGHT = ("json",)


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    forkserver.close_all()
    forkserver.STARTS.clear()
    yield
    forkserver.close_all()


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return forkserver.run([PY, *cmd], preload=LIGHT, **kw)  # type: ignore[arg-type]


def test_jobs_share_one_server_and_look_fresh(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(
        "import atexit, json, os, random, sys\n"
        "atexit.register(lambda: print('bye', file=sys.stderr))\n"
        "print(json.dumps({'argv': sys.argv, 'path0': sys.path[0], 'cwd': os.getcwd(),\n"
        "                  'x': os.environ.get('X'), 'r': random.random(),\n"
        "                  'main': __name__, 'pp': sys.path[1]}))\n"
        "sys.exit(int(sys.argv[1]))\n")
    env = dict(os.environ, X="1", PYTHONPATH=str(tmp_path / "lib"))
    outs = [run([str(script), str(code), "b"], env=env, cwd=tmp_path) for code in (0, 3)]
    assert [o.returncode for o in outs] == [0, 3]
    import json

    first, second = (json.loads(o.stdout) for o in outs)
    assert first["argv"] == [str(script), "0", "b"]
    assert (first["path0"], first["cwd"], first["x"], first["main"], first["pp"]) == (
        str(tmp_path), str(tmp_path), "1", "__main__", str(tmp_path / "lib"))
    assert first["r"] != second["r"]  # reseeded as a fresh interpreter is
    assert all(o.stderr == "bye\n" for o in outs)  # exit handlers ran
    assert forkserver.STARTS == [(PY, "server")]


def test_module_code_errors_and_timeouts(tmp_path: Path) -> None:
    assert run(["-m", "json.tool"], cwd=tmp_path).returncode != 0  # stdin: empty, no JSON
    out = run(["-c", "import sys; print(sys.argv, __name__); sys.exit('no')", "a"])
    assert (out.returncode, out.stdout, out.stderr) == (1, "['-c', 'a'] __main__\n", "no\n")
    out = run(["-c", "raise ValueError('boom')"])
    assert out.returncode == 1 and "ValueError: boom" in out.stderr
    with pytest.raises(subprocess.TimeoutExpired):
        run(["-c", "import time; time.sleep(60)"], timeout=1)
    with pytest.raises(subprocess.CalledProcessError):
        run(["-c", "raise SystemExit(4)"], check=True)
    assert forkserver.STARTS == [(PY, "server")]


def test_popen_speaks_lines_and_can_be_killed(tmp_path: Path) -> None:
    log = (tmp_path / "err").open("w")
    proc = forkserver.popen([PY, "-c", "import sys\nfor line in sys.stdin:\n"
                             "    print(line.strip().upper(), flush=True)\n"
                             "    print('seen', file=sys.stderr, flush=True)"],
                            stderr=log, preload=LIGHT)
    assert proc.stdin is not None and proc.stdout is not None
    for word in ("a", "b"):
        proc.stdin.write(word + "\n")
        assert proc.stdout.readline() == word.upper() + "\n"
    assert proc.poll() is None
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0
    assert (tmp_path / "err").read_text() == "seen\nseen\n"
    sleeper = forkserver.popen([PY, "-c", "import time; time.sleep(60)"], preload=LIGHT)
    sleeper.kill()
    assert sleeper.wait(timeout=30) != 0


def test_what_a_server_may_not_run_is_a_plain_process(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "json").mkdir()  # an overlay of a preloaded package
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    assert run(["-c", "print(1)"], env=env).stdout == "1\n"
    assert run(["-S", "-c", "print(2)"]).stdout == "2\n"  # an interpreter option
    monkeypatch.setenv("CROSSCHECK_FORKSERVER", "0")
    assert run(["-c", "print(3)"]).stdout == "3\n"
    assert forkserver.STARTS == [(PY, "plain")] * 3


def test_an_import_time_variable_gets_its_own_server() -> None:
    for value in ("1", "2", "1"):
        out = run(["-c", "import os; print(os.environ['HF_HOME'])"],
                  env=dict(os.environ, HF_HOME=value))
        assert out.stdout == value + "\n"
    assert forkserver.STARTS == [(PY, "server")] * 2


def test_a_dead_server_fails_its_job_loudly_and_is_replaced() -> None:
    assert run(["-c", "print(1)"]).stdout == "1\n"
    (server,) = forkserver._SERVERS.values()
    server.proc.kill()
    server.proc.wait()
    with pytest.raises((OSError, forkserver.ServerError)):
        run(["-c", "print(2)"])
    assert run(["-c", "print(3)"]).stdout == "3\n"
    assert forkserver.STARTS == [(PY, "server")] * 2
