"""The mutant catalogue stays applicable, and each mutant really changes the lookup.

Fast (default suite). ``python -m publish --mutants`` (marked suite ``mutation``, run by
``.ci/run``) shows what kills each one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import model.lookup
from proofs.mutants import ENV, MUTANTS, applied

ROOT = Path(__file__).resolve().parent.parent


def test_catalogue_size_and_names() -> None:
    assert len(MUTANTS) >= 25
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)
    assert all(m.model and m.encoding for m in MUTANTS)  # model and encoding together


def test_named_tests_exist() -> None:
    # a renamed test must not leave a hint that runs nothing (by_tests: not a kill)
    for m in MUTANTS:
        for node in m.tests:
            path, _, name = node.partition("::")
            assert name and f"def {name}(" in (ROOT / path).read_text(), (m.name, node)


@pytest.mark.skipif(bool(os.environ.get(ENV)), reason="a mutant is applied already")
@pytest.mark.parametrize("name", [m.name for m in MUTANTS])
def test_mutant_applies_and_restores(name: str) -> None:
    original = model.lookup.lookup
    with applied(name):  # raises StaleMutant when an edit's text moved
        pass
    assert model.lookup.lookup is original


@pytest.mark.mutation
@pytest.mark.timeout(1200)  # 2.9-4.3 min on 2 shared cores at load 5-6
def test_every_catalogue_mutant_is_killed() -> None:
    r = subprocess.run([sys.executable, "-m", "publish", "--mutants", "--jobs", "2"],
                       cwd=ROOT, capture_output=True, text=True, check=False)
    print(r.stdout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
