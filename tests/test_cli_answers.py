"""Issue 26's CLI points: what a command prints is what it means, every scenario it prints
is a file that replays, and each outcome has its own documented exit code.

- ``python -m model lookup``: a deferred answer is named as such (not ``hit None``);
  ``--json`` names 0.33.0's keys by the token each chunk ends at, older releases' by
  block index.
- the PR check (``python -m sim.crosscheck --vllm-source``): 0 same, 1 changed, 2 bad
  input, 3 an invariant broken (in ``--help``); its shrunk scenarios are written as
  files and replay.
- ``bench/bench_known_bugs.py`` without ``--sources``: finds the wheels or fetches them;
  when it cannot, one ``error:`` line and exit 2; with ``--out`` the shrunk scenario its
  table prints is also a file that replays.
- ``python -m model lookup`` on a FIFO (or a directory holding one) and ``python -m sim
  run`` with a semantics named twice: one error line and exit 2, not a hang.
- pytest-timeout is installed with the package, so the ``timeout`` option applies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from model import cli as model_cli
from releases import vllm_0_24_0, vllm_0_33_0
from sim.crosscheck import cli as cc_cli
from sim.crosscheck import knownbugs
from sim.crosscheck.knownbugs import BugError, find_sources
from sim.crosscheck.prcheck import (
    EXIT_BAD_INPUT,
    EXIT_BROKEN,
    EXIT_CHANGED,
    EXIT_SAME,
    SEED,
    Change,
    Nearest,
    PRResult,
    Side,
    write_scenarios,
)
from sim.crosscheck.prreport import compact, render
from sim.crosscheck.tree import Tree

ROOT = Path(__file__).resolve().parents[1]
DEFERRED = (ROOT / "tests" / "scenarios" / vllm_0_33_0.SEMANTICS.name
            / "partial-tail-pending-retry.json")
SLIDING = (ROOT / "tests" / "scenarios" / "finding-001"
           / "engine-core-sliding-window-gpu-layout.json")
OLDER = (ROOT / "tests" / "scenarios" / f"{vllm_0_24_0.SEMANTICS.name}-breaks"
         / "mamba-all-mode-boundary.json")


def test_deferred_answer_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert model_cli.main(["lookup", str(DEFERRED)]) == 0
    out = capsys.readouterr().out
    assert "hit None" not in out
    assert f": {vllm_0_33_0.SEMANTICS.name}: deferred (the lookup answers None" in out
    assert model_cli.main(["lookup", str(DEFERRED), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["hit_tokens"], d["deferred"]) == (None, True)


def _loads(path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    model_cli.main(["lookup", str(path), "--json"])
    loads: list[dict[str, Any]] = json.loads(capsys.readouterr().out)["loads"]
    return loads


def test_json_names_033_keys_by_token_end(capsys: pytest.CaptureFixture[str]) -> None:
    # finding 001's GPU layout: the Mamba chunk ending at 192, window chunks ending at
    # 128 and 160 (a 160-token hit)
    loads = _loads(SLIDING, capsys)
    assert [ld["key_end_tokens"] for ld in loads] == [[192], [128, 160]]
    assert all("blocks" not in ld for ld in loads)
    # before 0.33.0 the model keys loads by offloaded block index
    older = _loads(OLDER, capsys)
    assert older and all("blocks" in ld and "key_end_tokens" not in ld for ld in older)


def _result(changes: list[Change]) -> PRResult:
    tree = Tree(Path("/t"), Path("/t/vllm"), "0.24.0", "vllm/_version.py")
    return PRResult(tree, Nearest("0.24.0", "declared", {"0.24.0": 0}), changes=changes)


OLD = Side(None, 16, {0: (0,)}, None, ())
QUIET = Change("hit", 3, SEED, ("hit: model 16 vs real 31",), OLD,
               Side(None, 31, {0: (1,)}, None, ()), ())
BREAKING = Change("hit | breaks no-partial-state", 1, SEED, ("hit: model 16 vs real 31",),
                  OLD, Side(None, 31, {0: (1,)}, None,
                            (("no-partial-state", "state at 32, hit 31"),)),
                  ("no-partial-state",))


def test_pr_check_exit_codes_are_distinct_and_documented(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (EXIT_SAME, EXIT_CHANGED, EXIT_BAD_INPUT, EXIT_BROKEN) == (0, 1, 2, 3)
    assert _result([]).exit_code == EXIT_SAME
    assert _result([QUIET]).exit_code == EXIT_CHANGED
    assert _result([QUIET, BREAKING]).exit_code == EXIT_BROKEN
    assert "(exit 3)" in render(_result([BREAKING]))
    assert cc_cli.main(["--vllm-source", str(tmp_path / "nope")]) == EXIT_BAD_INPUT
    assert capsys.readouterr().err.count("\n") == 1
    with pytest.raises(SystemExit) as e:
        cc_cli.main(["--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for words in ("exit 0 nothing modelled changed", "1 behaviour changed, no invariant broken",
                  "2 bad input", "3 a changed behaviour breaks an invariant"):
        assert words in text, words


def test_pr_check_without_changes_writes_nothing(tmp_path: Path) -> None:
    assert write_scenarios(_result([]), tmp_path / "pr-check") == []
    assert not (tmp_path / "pr-check").exists()


def test_vllm_tests_bad_input_is_one_line_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sim.crosscheck import vllm_tests

    for argv in (["--vllm", "0.24.0"], ["--fix", "002"], [str(tmp_path / "nope.py")]):
        assert vllm_tests.main(argv) == 2, argv
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and err.startswith("error: "), err
    with pytest.raises(SystemExit) as e:
        vllm_tests.main(["--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "0 every test passed; 1 some test failed" in text and "2 bad input" in text


def test_pr_check_scenarios_are_written_and_replay(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = _result([BREAKING, QUIET])
    r.first_break, r.first_break_s, r.first_break_phase = dict(SEED), 1.0, "generated"
    files = write_scenarios(r, tmp_path / "pr-check")
    assert [p.name for p in files] == ["pr-check-01-hit-breaks-no-partial-state.json",
                                      "pr-check-02-hit.json", "pr-check-first-break.json"]
    text = render(r)
    for p in files:
        assert str(p) in text
        # the file replays: bad input would exit 2
        assert model_cli.main(["lookup", str(p)]) in (0, 1), capsys.readouterr()
    # the inline (compact) JSON of the report replays too: num_computed_tokens 0 kept
    inline = tmp_path / "inline.json"
    inline.write_text(json.dumps(compact(SEED)))
    assert compact(SEED)["num_computed_tokens"] == 0
    assert model_cli.main(["lookup", str(inline)]) in (0, 1), capsys.readouterr()


def test_known_bugs_finds_wheels_without_sources(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "vllm-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl").write_bytes(b"")
    monkeypatch.setenv("CROSSCHECK_WHEELS", str(wheels))
    assert find_sources("9.9.9") == wheels
    with pytest.raises(BugError, match=r"^--sources: no vllm-9\.9\.8-\*\.whl in "):
        find_sources("9.9.8", fetch=False)


def test_known_bugs_fetches_with_pip_or_says_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CROSSCHECK_WHEELS", str(tmp_path / "none"))
    monkeypatch.setattr(knownbugs, "wheel_dirs", lambda: [tmp_path / "none", tmp_path / "got"])
    calls: list[list[str]] = []

    def pip(cmd: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        if "vllm==9.9.9" in cmd:  # pip fetched it
            (tmp_path / "got" / "vllm-9.9.9-cp38-abi3-any.whl").write_bytes(b"")
            return subprocess.CompletedProcess(cmd, 0, "", "")
        return subprocess.CompletedProcess(
            cmd, 1, "", "ERROR: No matching distribution found for vllm==9.9.8\n")

    monkeypatch.setattr(knownbugs.subprocess, "run", pip)
    assert find_sources("9.9.9") == tmp_path / "got"
    assert calls[0][1:5] == ["-m", "pip", "download", "-q"]
    with pytest.raises(BugError) as e:
        find_sources("9.9.8")
    assert "\n" not in str(e.value) and "No matching distribution" in str(e.value)


def test_known_bugs_bad_sources_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_known_bugs.py"),
                           "--sources", str(tmp_path / "nope")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stdout == "" and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("error: --sources:")


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_model_lookup_refuses_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    for target in (fifo, tmp_path):  # the FIFO, and a directory holding one
        proc = _run("-m", "model", "lookup", str(target))
        assert proc.returncode == 2, proc
        assert proc.stdout == "" and proc.stderr.count("\n") == 1
        assert f"{fifo}: not a regular file" in proc.stderr


def test_sim_run_refuses_a_semantics_named_twice() -> None:
    name = vllm_0_24_0.SEMANTICS.name
    proc = _run("-m", "sim", "run", "--workload", "chat", "--requests", "10",
                "--semantics", f"{name},{name}", "--no-progress")
    assert proc.returncode == 2, proc
    assert proc.stderr.count("\n") == 1 and f"{name!r} is named more than once" in (
        proc.stderr)


def test_pytest_timeout_comes_with_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "timeout" in project["tool"]["pytest"]["ini_options"]
    assert any(d.startswith("pytest-timeout") for d in project["project"]["dependencies"])


def test_known_bugs_writes_each_shrunk_scenario_as_a_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """bench/bench_known_bugs.py prints each bug's first breaking scenario in its table;
    with --out it is also a file (named in the table) that replays.  The release tree,
    the patch and the PR check are stubbed: the table and the files are under test."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_known_bugs", ROOT / "bench" / "bench_known_bugs.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bug = knownbugs.Bug("revert-44599", "the round-down reverted", "0.24.0",
                        "no-partial-state", knownbugs.BUGS_DIR / "revert-44599.diff")

    def check_tree(tree: Any, examples: int, corpus: Any, **_: Any) -> PRResult:
        changes = [] if examples in (300, 2000) else [BREAKING]  # the control is clean
        return _result(changes)

    monkeypatch.setattr(bench, "modelled_releases", lambda: ["0.24.0"])
    monkeypatch.setattr(bench, "load_bugs", lambda: [bug])
    monkeypatch.setattr(bench, "release_tree", lambda src, v, dest: dest)
    monkeypatch.setattr(bench, "find_package", lambda tree: tree)
    monkeypatch.setattr(bench, "apply_patch", lambda patch, dest: None)
    monkeypatch.setattr(bench, "check_tree", check_tree)
    monkeypatch.setattr(bench, "NEEDS_RELEASE", [])
    out = tmp_path / "known-bugs.md"
    assert bench.main(["--quick", "--sources", str(tmp_path), "--out", str(out)]) == 0
    table = capsys.readouterr().out
    written = sorted((tmp_path / "known-bugs-scenarios" / "revert-44599").glob("*.json"))
    assert [p.name for p in written] == ["pr-check-01-hit-breaks-no-partial-state.json"]
    row = next(line for line in table.splitlines() if line.startswith("| revert-44599"))
    assert f"(`{written[0]}`)" in row and out.read_text() == table
    assert model_cli.main(["lookup", str(written[0])]) in (0, 1), capsys.readouterr()
