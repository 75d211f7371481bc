"""The run's first line says what it found about vLLM, apart from the expectations'
verdict (issue 26): ``proofs.results.found_line`` and ``publish.staging.stamp``."""

from __future__ import annotations

from pathlib import Path

import releases
from proofs.check import Verdict
from proofs.results import Row, answered_by, found_line
from publish.staging import stamp

NEWEST = releases.newest()
OLDER = releases.releases()[0]


def _row(theorem: str, semantics: str, status: str, accepted: str | None = None) -> Row:
    return Row(theorem, semantics, Verdict(status, 0.0), "holds", (),
               accepted=Verdict(accepted, 0.0) if accepted else None)


def test_the_newest_release_s_failures_and_proofs_are_named() -> None:
    rows = [_row("no-partial-state", NEWEST.name, "PROVED", "COUNTEREXAMPLE"),
            _row("termination", NEWEST.name, "PROVED"),
            _row("leaves-last-token", NEWEST.name, "UNKNOWN"),
            _row("whole-blocks", OLDER, "COUNTEREXAMPLE")]
    line = found_line(rows)
    assert line == (f"vLLM {NEWEST.base_version}: no-partial-state (finding 001) FAIL on "
                    "layouts it accepts; termination hold on every layout it accepts; "
                    "no verdict for leaves-last-token")


def test_a_failure_names_the_finding_whose_fix_answers_it() -> None:
    """issue 26: the bug was an indented line linked to no finding. A fix built on the
    release that holds the theorem with less than the release needs names its finding;
    a failure no fix answers (whole-blocks: finding 002, not a bug) names none."""
    assert answered_by("no-partial-state", NEWEST.name) == ["001"]
    assert answered_by("maximality", NEWEST.name) == ["003"]
    assert answered_by("whole-blocks", NEWEST.name) == []
    assert answered_by("termination", NEWEST.name) == []
    rows = [_row("maximality", NEWEST.name, "PROVED", "COUNTEREXAMPLE"),
            _row("whole-blocks", NEWEST.name, "COUNTEREXAMPLE")]
    assert found_line(rows) == (f"vLLM {NEWEST.base_version}: maximality (finding 003), "
                                "whole-blocks FAIL on layouts it accepts")


def test_only_the_newest_release_with_rows_is_reported() -> None:
    assert found_line([_row("termination", OLDER, "PROVED")]) == (
        f"vLLM {releases.get(OLDER).base_version}: termination hold on every layout it "
        "accepts")
    assert found_line([]) is None


def test_report_opens_with_the_finding_then_the_verdict(tmp_path: Path) -> None:
    md = tmp_path / "report.md"
    md.write_text("body\n")
    stamp(md, "PASS: 1 of 1 results match", "vLLM X: t FAIL on layouts it accepts")
    lines = md.read_text().splitlines()
    assert lines[0] == "found: vLLM X: t FAIL on layouts it accepts"
    assert lines[1] == "PASS: 1 of 1 results match" == lines[-1]


def test_report_states_each_scope_once(tmp_path: Path) -> None:
    """report.md names each verdict's scope by a number and writes its text once (issue
    26), however many rows share it."""
    from publish.report import write_report

    scope = "every layout the release accepts (a test scope)"
    rows = [Row(t, NEWEST.name, Verdict("PROVED", 0.0, scope=scope), "holds", ())
            for t in ("termination", "leaves-last-token")]
    write_report(rows, tmp_path, queue=[])
    text = (tmp_path / "report.md").read_text()
    assert text.count(scope) == 1
    assert text.count("(scope 1)") == 2
