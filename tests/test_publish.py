"""A failed or partial main-job run (python -m publish) into a green report directory
leaves a report whose first line says FAIL and none of the earlier run's artefacts."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import pytest

import publish.__main__ as publish_main
from releases import vllm_0_24_0

V024 = vllm_0_24_0.SEMANTICS.name


def green(d: Path) -> None:
    """What an earlier successful full run left (plus a file that is not the report's)."""
    (d / "counterexamples").mkdir(parents=True)
    (d / "ci").mkdir()
    (d / "report.md").write_text("PASS: 24 of 24 results match\n")
    for name in ("report.json", "spec.md", "spec.html", "spec-facts.json", "old.png",
                 "counterexamples/old.json", "ci/workflow.yml"):
        (d / name).write_text("{}")


def check_failed(d: Path, code: int, capsys: pytest.CaptureFixture[str]) -> None:
    assert code == 1
    lines = (d / "report.md").read_text().splitlines()
    # what the run found about vLLM may come first; the expectations' verdict opens and
    # ends the rest
    if lines[0].startswith("found: "):
        lines = lines[1:]
    assert lines[0].startswith("FAIL") and lines[-1] == lines[0]
    assert capsys.readouterr().out.splitlines()[-1] == lines[0]  # the console's last line
    stale = {"spec.md", "spec.html", "spec-facts.json", "old.png", "counterexamples/old.json"}
    assert not {n for n in stale if (d / n).exists()}
    assert (d / "ci" / "workflow.yml").exists()  # not a report artefact: kept
    assert not list(d.parent.glob(".*partial*"))  # no staging directory left behind


def test_failing_run_replaces_a_green_report(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "report"
    green(d)
    # a 1 ms budget: the solver answers unknown, which never counts as a pass
    code = publish_main.main(["--report", str(d), "--timeout", "0.001", "--jobs", "1",
                              "--semantics", V024, "--theorem", "whole-blocks",
                             "--no-necessity"])
    check_failed(d, code, capsys)
    assert (d / "report.json").exists()  # this run's, complete


def test_crashed_run_leaves_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "report"
    green(d)

    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("injected failure")

    monkeypatch.setattr(publish_main, "run_all", crash)
    code = publish_main.main(["--report", str(d), "--jobs", "1"])
    check_failed(d, code, capsys)
    assert "injected failure" in (d / "report.md").read_text()
    assert not (d / "report.json").exists()


def test_the_prover_cli_prints_verdicts_writes_nothing_and_fails_on_a_mismatch(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``python -m proofs``: a line per pair and a verdict line, exit 1 on a mismatch (a
    1 ms budget: unknown), and no file written (the report is ``python -m publish``'s)."""
    from proofs.cli import main

    monkeypatch.chdir(tmp_path)
    code = main(["--timeout", "0.001", "--jobs", "1", "--semantics", V024,
                 "--theorem", "whole-blocks", "--no-necessity"])
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    # the progress line of the pair, as it ended, on stderr
    assert any(line.startswith("whole-blocks") for line in captured.err.splitlines())
    assert code == 1 and lines[-1].startswith("FAIL: 0 of 1 results match")
    assert any(line.startswith("whole-blocks") for line in lines)
    # stdout opens with what the run found about vLLM (issue 26); progress went to stderr
    version = vllm_0_24_0.SEMANTICS.base_version
    assert lines[0] == f"found: vLLM {version}: no verdict for whole-blocks"
    assert not list(tmp_path.iterdir())


def test_interrupted_run_keeps_its_finished_pairs_as_incomplete(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C after some pairs: report.md lists them under an INCOMPLETE FAIL (issue 26);
    no report.json and none of an earlier run's artefacts."""
    from proofs.check import Verdict
    from proofs.results import Row

    d = tmp_path / "report"
    green(d)
    row = Row("termination", V024, Verdict("PROVED", 0.1), "holds", ())

    def interrupted(*args: object, **kwargs: object) -> None:
        done = args[9]
        assert callable(done)
        done([row])
        raise KeyboardInterrupt

    monkeypatch.setattr(publish_main, "run_all", interrupted)
    code = publish_main.main(["--report", str(d), "--jobs", "1"])
    assert code == 130
    text = (d / "report.md").read_text()
    lines = text.splitlines()
    assert lines[0].startswith("FAIL: INCOMPLETE: interrupted with 1 pairs finished")
    assert lines[-1] == lines[0]
    assert "termination" in text and V024 in text
    assert not (d / "report.json").exists() and not (d / "spec.md").exists()
    assert capsys.readouterr().out.splitlines()[-1] == lines[0]


def test_interrupted_run_keeps_the_pairs_a_running_group_finished(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C inside a group of pairs (one process runs a group for minutes): the pairs
    of that group which ended are in the INCOMPLETE report too, not only whole groups."""
    import proofs.results as runs
    from proofs.check import Verdict

    d = tmp_path / "report"
    green(d)
    calls: list[str] = []

    def run_one(theorem: str, semantics: str, *_: object) -> runs.Row:
        calls.append(theorem)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return runs.Row(theorem, semantics, Verdict("PROVED", 0.1), "holds", ())

    def run_all(*args: object, spill: Path | None = None, **_: object) -> None:
        assert spill is not None  # the real run_all hands it to the processes
        pairs = [(t, V024, 1.0, False)
                 for t in ("termination", "whole-blocks", "leaves-last-token")]
        runs._work(("one group", pairs, runs.Live(spill=str(spill))))

    monkeypatch.setattr(runs, "run_one", run_one)
    monkeypatch.setattr(publish_main, "run_all", run_all)
    code = publish_main.main(["--report", str(d), "--jobs", "1"])
    assert code == 130
    text = (d / "report.md").read_text()
    assert text.startswith("FAIL: INCOMPLETE: interrupted with 2 pairs finished")
    pairs = re.findall(r"^### ([\w-]+) on ([\w.-]+):", text, re.M)
    assert pairs == [("whole-blocks", V024), ("termination", V024)], pairs
    assert capsys.readouterr().out.splitlines()[-1] == text.splitlines()[0]
    assert not list(Path(tempfile.gettempdir()).glob(f"proofs-rows-*/{os.getpid()}-*"))
