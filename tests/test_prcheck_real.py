"""The PR check on real trees: the release's own files (nothing changes, exit 0) and a
known bug re-introduced (exit 3, naming its invariant).  The trees are copied from the
release's installed package in its environment, so no download is needed.

Marked ``crosscheck`` (it starts the real scheduler in the 0.24.0 environment: the full
one if made, else the light one).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.crosscheck.envs import harness_python, source_package
from sim.crosscheck.knownbugs import BUGS_DIR, apply_patch, release_tree
from sim.crosscheck.prcheck import check_tree
from sim.crosscheck.prreport import render
from sim.crosscheck.tree import find_package

pytestmark = pytest.mark.crosscheck


def _release(tmp: Path) -> Path:
    harness_python("0.24.0")  # the full env if made, else the light env (made now)
    pkg = source_package("0.24.0")
    assert pkg is not None
    return release_tree(pkg, "0.24.0", tmp)


def test_unchanged_release_exits_0(tmp_path: Path) -> None:
    r = check_tree(find_package(_release(tmp_path / "t")), examples=300, corpus=[])
    assert r.nearest.version == "0.24.0"
    assert r.exit_code == 0, render(r)
    assert all(c.status in ("unchanged", "not in tree") for c in r.cited)


def test_reverted_fix_exits_3_with_its_invariant(tmp_path: Path) -> None:
    tree = _release(tmp_path / "t")
    apply_patch(BUGS_DIR / "revert-44599.diff", tree)
    r = check_tree(find_package(tree), examples=0, corpus=[])  # the seed case alone
    assert r.exit_code == 3
    assert r.first_break_phase == "seed"
    assert any("no-partial-state" in c.new_broken for c in r.changes)
    text = render(r)
    assert "**breaks no-partial-state**" in text
    assert "`mamba_round_down`" in text  # the cited line the patch removed
