"""The README leads with the answer and stays short (issue 26, item 3): at most 120 lines;
the two commands first; what the project is and for whom; the newest release's verdict
with its finding, fix and evidence; how to check a branch; where to read more. Every
repository file it links exists."""

from __future__ import annotations

import re
from pathlib import Path

import releases

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
LINES = README.splitlines()


def test_readme_is_short() -> None:
    assert len(LINES) <= 120, len(LINES)


def test_readme_leads_with_the_commands_and_the_answer() -> None:
    head = "\n".join(LINES[:8])
    assert "python -m publish --report" in head and "python -m pytest" in head
    # what it is and for whom, before the findings
    found_at = next(i for i, line in enumerate(LINES) if line == "## What it found in vLLM")
    before = " ".join(LINES[:found_at])
    assert "OffloadingConnectorScheduler._lookup" in before
    assert "for vLLM developers and reviewers" in before
    # the newest release's verdict opens that section, with a finding, a fix and evidence
    newest = releases.newest().base_version
    verdict = next(line for line in LINES[found_at + 1:] if line.strip())
    assert verdict.startswith(f"**vLLM {newest} (the newest release): ")
    answer = "\n".join(LINES[found_at:found_at + 40])
    assert re.search(r"\(docs/findings/\d{3}-[\w-]+\.md\)", answer)
    assert re.search(r"\(docs/findings/\d{3}-fix[\w-]*\.diff\)", answer)
    assert "**Evidence:**" in answer and "**Fix:**" in answer


def test_readme_says_how_to_check_a_branch_and_where_to_read_more() -> None:
    sections = [line for line in LINES if line.startswith("## ")]
    assert sections.index("## What it found in vLLM") == 0
    assert "## Check a scenario or your branch" in sections
    assert sections[-1] == "## Read more"
    assert "python -m sim.crosscheck --vllm-source" in README
    assert "python -m model lookup" in README


def test_readme_links_exist() -> None:
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if "://" not in target:
            assert (ROOT / target).exists(), target
