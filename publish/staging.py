"""Reports are built in a temporary directory and moved into place only when complete.

A run that fails or stops part-way never leaves an earlier run's green artefacts behind:
``publish`` replaces every artefact of the report directory at once, and ``publish_failed``
removes them and leaves a report.md whose first and last lines say FAIL. Only the
artefacts a report writes are touched (the directory may hold other files, e.g. docs/ci).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

ARTEFACTS = ("report.md", "report.json", "spec.md", "spec.html", "spec-facts.json",
             "spec", "counterexamples")


def artefacts(out: Path) -> list[Path]:
    """What a report left in ``out``: its files, the counterexamples, the pictures."""
    if not out.is_dir():
        return []
    found = [out / a for a in ARTEFACTS if (out / a).exists()]
    return found + sorted(out.glob("*.png"))


def remove_artefacts(out: Path) -> None:
    # report.md first: a run killed part-way through leaves no green report behind
    for p in sorted(artefacts(out), key=lambda p: p.name != "report.md"):
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()


def staging(out: Path) -> Path:
    """A fresh temporary directory beside ``out`` (same file system: moves are renames)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))


def stamp(report_md: Path, verdict: str, found: str | None = None) -> None:
    """What the run found about vLLM (``found``) as report.md's first line, apart from
    the verdict on the project's expectations, which follows it and ends the file."""
    body = report_md.read_text() if report_md.exists() else ""
    head = f"found: {found}\n" if found else ""
    report_md.write_text(f"{head}{verdict}\n\n{body.rstrip()}\n\n{verdict}\n")


def publish(tmp: Path, out: Path) -> None:
    """Replace ``out``'s artefacts by ``tmp``'s (report.md last) and remove ``tmp``."""
    out.mkdir(parents=True, exist_ok=True)
    remove_artefacts(out)
    for p in sorted(tmp.iterdir(), key=lambda p: p.name == "report.md"):
        p.replace(out / p.name)
    tmp.rmdir()


def publish_failed(tmp: Path | None, out: Path, verdict: str) -> None:
    """A run that did not complete: drop ``tmp`` and every old artefact, write FAIL."""
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    remove_artefacts(out)
    stamp(out / "report.md", verdict)
