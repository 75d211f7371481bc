"""The vLLM-ready tests (``docs/findings/vllm_tests/``) are files vLLM could take as they
are (issue 26, item 7): vLLM's SPDX header and 88-character lines, no ``__main__`` mode,
no temporary folder left behind (pytest's ``tmp_path``, never ``mkdtemp``), built on
vLLM's own test helpers of the release they name.  Whether they pass (and fail without
the fix) on the real release is tests/test_findings.py's check (crosscheck mark)."""

from __future__ import annotations

import ast
import re
import tarfile
from pathlib import Path

import pytest

from sim.crosscheck import vllm_tests

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted((ROOT / "docs" / "findings" / "vllm_tests").glob("test_*.py"))
# vLLM's header text is not spelled here: vLLM's own pre-commit check states it
# (tools/pre_commit/check_spdx_header.py:28-29 of the 0.33.0 source distribution) and
# test_header_is_the_one_vllms_pre_commit_asks_for reads it from there
SPDX_CHECK = "tools/pre_commit/check_spdx_header.py"
SPDX_TAGS = ("# SPDX-License-Identifier: ", "# SPDX-FileCopyrightText: ")
# vLLM 0.33.0's commit (vllm/_version.py of its wheel and source distribution)
COMMIT = {"0.33.0": "4ba787ec9"}


def _helper_imports(tree: ast.Module) -> list[tuple[str, str]]:
    """(module, name) of every ``from tests.... import name``."""
    return [(node.module, a.name) for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
            and node.module.startswith("tests.") for a in node.names]


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_file_follows_vllms_conventions(path: Path) -> None:
    text = path.read_text()
    lines = text.splitlines()
    assert all(line.startswith(tag) for line, tag in zip(lines[:2], SPDX_TAGS, strict=True))
    long = [i + 1 for i, line in enumerate(lines) if len(line) > 88]
    assert not long, f"lines over 88 characters: {long}"
    assert "mkdtemp" not in text and "__main__" not in text
    tree = ast.parse(text)
    doc = ast.get_docstring(tree) or ""
    release = vllm_tests.RELEASES[-1]
    flat = " ".join(doc.split())
    assert f"vLLM {release} (git ``{COMMIT[release]}``)" in flat, "name the helpers' release"
    # vLLM's offloading spec stand-in: imported, or named to the engine's connector
    names = {name for _, name in _helper_imports(tree)}
    names |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
              and isinstance(n.value, str) and n.value.isidentifier()}
    assert "MockOffloadingSpec" in names


def test_the_load_cap_test_runs_on_vllms_request_runner() -> None:
    path = next(p for p in FILES if p.name == "test_offloading_load_cap_loses_a_chunk.py")
    text = path.read_text()
    assert re.search(r"def test_\w+\(request_runner\b", text)


def _sdist_sources(release: str, wanted: set[str]) -> dict[str, bytes]:
    """The files ``wanted`` (paths below the top folder) of the release's source
    distribution, read in one pass; skips the test when it is not on disk."""
    sdist = next((p for p in vllm_tests.sdist_candidates(release) if p.is_file()), None)
    if sdist is None:
        pytest.skip(f"no vllm-{release}.tar.gz (python -m sim.crosscheck.vllm_tests "
                    "fetches it)")
    sources: dict[str, bytes] = {}
    with tarfile.open(sdist) as tar:
        for member in tar:
            rel = member.name.split("/", 1)[-1]
            if rel in wanted and (f := tar.extractfile(member)) is not None:
                sources[rel] = f.read()
                if len(sources) == len(wanted):
                    break
    return sources


def test_header_is_the_one_vllms_pre_commit_asks_for() -> None:
    """The first two lines are the header vLLM's pre-commit check inserts: its two texts
    (check_spdx_header.py:28-29) after the ``#`` comment prefix (:46-49)."""
    release = vllm_tests.RELEASES[-1]
    source = ast.parse(_sdist_sources(release, {SPDX_CHECK})[SPDX_CHECK])
    texts = {t.id: n.value.value for n in source.body if isinstance(n, ast.Assign)
             and isinstance(n.value, ast.Constant) for t in n.targets
             if isinstance(t, ast.Name)}
    header = [f"# {texts['LICENSE_TEXT']}", f"# {texts['COPYRIGHT_TEXT']}"]
    for path in FILES:
        assert path.read_text().splitlines()[:2] == header, path.name


def test_every_helper_imported_is_in_the_releases_test_tree() -> None:
    release = vllm_tests.RELEASES[-1]
    imports = [(path.name, module, name) for path in FILES
               for module, name in _helper_imports(ast.parse(path.read_text()))]
    for file, module, _ in imports:
        assert module.replace(".", "/") + ".py" in vllm_tests.HELPERS, (file, module)
    wanted = {"vllm/_version.py", *(m.replace(".", "/") + ".py" for _, m, _ in imports)}
    sources = _sdist_sources(release, wanted)
    assert COMMIT[release] in sources["vllm/_version.py"].decode()
    for file, module, name in imports:
        source = ast.parse(sources[module.replace(".", "/") + ".py"])
        defined = {n.name for n in source.body
                   if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        defined |= {t.id for n in source.body if isinstance(n, ast.Assign)
                    for t in n.targets if isinstance(t, ast.Name)}
        assert name in defined, (file, module, name)
