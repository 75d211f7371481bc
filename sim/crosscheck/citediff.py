"""Which lines that ``model/citations.py`` cites moved or changed in a source tree.

For a release's citation table and its files, each cited line is followed through a
line diff (``difflib``) of the release's file against the tree's: unchanged (same text
at the same line), moved (same text, other line), or changed (the line itself was
edited or removed), so a reviewer sees which modelled steps to re-check.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from model.citations import cited_lines


@dataclass(frozen=True)
class CitedLine:
    key: str  # the modelled step (model/citations.py)
    path: str  # under vllm/
    line: int  # in the release
    # "unchanged", "moved", "changed", or "not in tree" (a partial tree lacks the file)
    status: str
    tree_line: int | None  # where it is in the tree (moved/unchanged)
    old_text: str
    new_text: str  # the tree's text at (or in place of) that line


def _read(p: Path) -> list[str] | None:
    return p.read_text(errors="replace").splitlines() if p.is_file() else None


Opcodes = Sequence[tuple[str, int, int, int, int]]


def _follow(ops: Opcodes, new: list[str], line: int) -> tuple[str, int | None, str]:
    i = line - 1
    for tag, i1, i2, j1, j2 in ops:
        if i1 <= i < i2:
            if tag == "equal":
                j = j1 + (i - i1)
                return ("unchanged" if j == i else "moved"), j + 1, new[j]
            # replaced or deleted: show what stands in its place (nearest line), if any
            if j2 > j1:
                j = min(j1 + (i - i1), j2 - 1)
                return "changed", j + 1, new[j]
            return "changed", None, ""
    return "changed", None, ""


def diff_citations(version: str, release_pkg: Path, tree_pkg: Path) -> list[CitedLine]:
    """Every cited line of ``version``, followed into the tree (sorted by path, line)."""
    table = cited_lines(version)
    files: dict[str, tuple[list[str] | None, list[str] | None, Opcodes]] = {}
    out = []
    for key, (path, line) in sorted(table.items(), key=lambda kv: (kv[1], kv[0])):
        if path not in files:
            a, b = _read(release_pkg / path), _read(tree_pkg / path)
            ops: Opcodes = (
                difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
                if a is not None and b is not None else [])
            files[path] = (a, b, ops)
        old, new, ops = files[path]
        old_text = old[line - 1].strip() if old and line <= len(old) else ""
        if old is None or new is None:
            out.append(CitedLine(key, path, line, "not in tree", None, old_text, ""))
            continue
        status, tree_line, new_text = _follow(ops, new, line)
        out.append(CitedLine(key, path, line, status, tree_line, old_text, new_text.strip()))
    return out


def cited_paths(version: str) -> list[str]:
    return sorted({path for path, _ in cited_lines(version).values()})
