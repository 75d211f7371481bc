"""No Python file but the registry (``releases/``) spells a semantics name (issue 22).

Code asks the registry by role (``releases.newest()``, ``releases.fixes(finding=...)``,
``releases.fix_for(...)``) or imports the semantics' own module
(``releases.vllm_0_24_0.SEMANTICS.name``). Every tracked ``.py`` file outside ``releases/``
is parsed with ``ast``; a str constant (an f-string's literal parts included) equal to a
registered name, or shaped like one, fails with its file:line. Also: nothing under
``proofs/`` imports ``sim``.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

import releases

ROOT = Path(__file__).resolve().parent.parent
# the shape of a semantics name: a vLLM release or an alternative/fix
NAME_SHAPE = re.compile(r"^(vllm-\d+\.\d+\.\d+|alt-[a-z0-9-]+)$")

# Files being changed on other branches right now; swept when those land (remove an entry
# as its file is swept: the test then covers it).
EXCLUDED: dict[str, str] = {}
EXCLUDED_PREFIXES: dict[str, str] = {
    "releases/": "the registry: each semantics' own module spells its name",
}


def _tracked_py() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", "*.py"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout
        files = [f for f in out.split("\0") if f]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout
        files = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
                 if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)]
    return sorted(f for f in files if (ROOT / f).is_file())


def _checked() -> list[str]:
    return [f for f in _tracked_py() if f not in EXCLUDED
            and not any(f.startswith(p) for p in EXCLUDED_PREFIXES)]


def _is_name(value: str) -> bool:
    return value in releases.all_semantics() or NAME_SHAPE.match(value) is not None


def _literals(path: str) -> list[str]:
    tree = ast.parse((ROOT / path).read_text(), filename=path)
    return [f"{path}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and _is_name(node.value)]


def _imports_sim(path: str) -> list[str]:
    tree = ast.parse((ROOT / path).read_text(), filename=path)
    hits = []
    for node in ast.walk(tree):
        mods: list[str] = []
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            mods = [node.module]
        hits += [f"{path}:{node.lineno}: {m}" for m in mods
                 if m == "sim" or m.startswith("sim.")]
    return hits


def test_excluded_files_exist() -> None:
    # an entry whose file was moved or removed is stale: drop it
    tracked = set(_tracked_py())
    assert sorted(f for f in EXCLUDED if f not in tracked) == []


def test_scanner_sees_names() -> None:
    # the check itself: every registered name has the shape, and f-string parts are seen
    assert all(NAME_SHAPE.match(n) for n in releases.names())
    # (the sample names are built, not spelled, so this file passes its own check)
    release, fix = "-".join(("vllm", "0.1.2")), "-".join(("alt", "foo", "bar"))
    tree = ast.parse(f'x = f"{{a}}-vllm"; y = f"{release}{{b}}"; z = "{fix}"')
    found = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
             and isinstance(n.value, str) and _is_name(n.value)}
    assert found == {release, fix}  # the f-string's literal part included


def test_role_queries_the_sweep_uses() -> None:
    from releases import (
        fix_001_reround,
        fix_001_reround_rerun,
        fix_003_cap_min,
        vllm_0_24_0,
        vllm_0_25_0,
        vllm_0_27_0,
        vllm_0_33_0,
    )

    assert releases.newest() is vllm_0_33_0.SEMANTICS
    assert releases.newest("chunked") is vllm_0_33_0.SEMANTICS
    assert releases.newest("block") is vllm_0_27_0.SEMANTICS
    # the newest block release the proofs encode
    assert releases.newest_proved("block") is vllm_0_27_0.SEMANTICS
    assert vllm_0_25_0.SEMANTICS.name in releases.proved("block")
    assert vllm_0_24_0.SEMANTICS.name in releases.proved("block")
    assert releases.fix_for("001") is fix_001_reround.SEMANTICS
    assert releases.fix_for("001", completed=True) is fix_001_reround_rerun.SEMANTICS
    assert releases.fix_for("003") is releases.fix_for("003", completed=True) \
        is fix_003_cap_min.SEMANTICS
    assert releases.versions() == tuple(releases.get(n).base_version
                                        for n in releases.releases())
    assert releases.versions("block") + releases.versions("chunked") == releases.versions()
    with pytest.raises(ValueError, match="no fix of finding"):
        releases.fix_for("999")


def test_no_semantics_name_literals() -> None:
    hits = [h for f in _checked() for h in _literals(f)]
    assert hits == [], ("semantics names spelled outside releases/ (ask the registry):\n"
                        + "\n".join(hits))


def test_proofs_do_not_import_sim() -> None:
    # (tests/test_package_boundaries.py also keeps vllm and publish out of proofs/)
    hits = [h for f in _tracked_py() if f.startswith("proofs/") for h in _imports_sim(f)]
    assert hits == [], "proofs/ imports sim/:\n" + "\n".join(hits)
