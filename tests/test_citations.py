"""Every vLLM ``file:line`` this project cites holds what it claims to hold.

``model/citations.py`` pairs each cited step with the text its first (and, for a span, its
last) line contains; this suite checks them against the source of the pinned releases, read
from the cross-check environments' site-packages (``$CROSSCHECK_VENVS`` or ``.venvs``; built
by ``python -m sim.crosscheck.envs``). Without an environment the source check skips with
the reason; the spec's own citations are always checked to be registered ones, so a line
number typed into a text or a template cannot escape the source check.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from model.citations import _LINES, TOKENS, releases, span, tokens
from proofs.theorems import PRECONDITIONS
from sim.crosscheck.envs import source_package, venvs_dir

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "docs" / "spec.md", *(ROOT / "docs" / "spec").glob("*.md")])
# "scheduler.py:556" or "vllm/v1/core/kv_cache_utils.py:662-665" in prose
PROSE = re.compile(r"([\w/]+\.py):(\d+)(?:-(\d+))?")
# links to the release tag: ".../blob/v0.24.0/vllm/<path>#L556-L559"
LINK = re.compile(r"/blob/v(\d+\.\d+\.\d+)/vllm/([\w/]+\.py)#L(\d+)(?:-L(\d+))?")


def source_root(version: str) -> Path | None:
    """The ``vllm`` package of the release's cross-check environment (full or light), else
    the release's unpacked wheel beside the checkout (``../wheels/src-X.Y.Z/vllm``), if
    either exists."""
    found = source_package(version)
    unpacked = ROOT.parent / "wheels" / f"src-{version}" / "vllm"
    return found if found is not None else (unpacked if unpacked.is_dir() else None)


def misplaced(lines: list[str], texts: tuple[str, ...], first: int, last: int) -> str | None:
    """Why the cited lines do not hold the step's texts (None when they do)."""
    if last > len(lines):
        return f"line {last} is past the end ({len(lines)} lines)"
    checks = [(first, texts[0])] + ([(last, texts[-1])] if len(texts) > 1 else [])
    for line, token in checks:
        if token not in lines[line - 1]:
            near = [i + 1 for i, text in enumerate(lines) if token in text]
            return f"line {line} does not contain {token!r} (found at {near[:5]})"
    return None


def test_every_citation_says_what_its_line_holds() -> None:
    missing = sorted(f"{v} {k}" for v in _LINES for k in _LINES[v] if tokens(v, k) is None)
    assert not missing, f"model/citations.py: add TOKENS (or RELEASE_TOKENS) for {missing}"
    for v in _LINES:
        for key in _LINES[v]:
            texts = tokens(v, key)
            assert texts and 1 <= len(texts) <= 2 and all(t.strip() for t in texts), (v, key)


@pytest.mark.parametrize("version", releases())
def test_citations_match_the_pinned_source(version: str) -> None:
    root = source_root(version)
    if root is None:
        pytest.skip(f"no cross-check environment for vLLM {version} under {venvs_dir()} "
                    "(python -m sim.crosscheck.envs builds it)")
    wrong = []
    for key in _LINES[version]:
        where = span(version, key)
        assert where is not None
        path, first, last = where
        texts = tokens(version, key)
        assert texts is not None, f"{version} {key}: no text recorded"
        why = misplaced((root / path).read_text().splitlines(), texts, first, last)
        if why:
            wrong.append(f"{version} {key} vllm/{path}: {why}")
    assert not wrong, "\n".join(wrong)


def test_the_check_catches_an_off_by_one() -> None:
    """The check above fails when a line number moves by one."""
    lines = ["x = 1", "        max_hit_size_tokens -= 1", "y = 2"]
    texts = TOKENS["leave_last_token"]
    assert misplaced(lines, texts, 2, 2) is None
    assert misplaced(lines, texts, 3, 3) is not None
    assert misplaced(lines, texts, 4, 4) is not None
    assert misplaced(["a(", "b", ")"], ("a(", ")"), 1, 2) is not None  # a span's end


def _registered() -> set[tuple[str, str, int, int]]:
    out = set()
    for version in releases():
        for key in _LINES[version]:
            where = span(version, key)
            assert where is not None
            out.add((version, *where))
    return out


def _texts() -> list[tuple[str, str]]:
    texts = [(p.relative_to(ROOT).as_posix(), p.read_text()) for p in PAGES if p.exists()]
    texts += [(f"proofs/theorems.py: {name}", p.in_vllm) for name, p in PRECONDITIONS.items()]
    return texts


def test_spec_prose_cites_registered_lines() -> None:
    """A ``file.py:N`` in the spec or a precondition's text is a registered citation (so the
    source check above covers it)."""
    known = {(path.rsplit("/", 1)[-1], first, last) for _, path, first, last in _registered()}
    wrong = []
    for where, text in _texts():
        for m in PROSE.finditer(LINK.sub("", text)):
            first = int(m.group(2))
            last = int(m.group(3) or first)
            if (m.group(1).rsplit("/", 1)[-1], first, last) not in known:
                wrong.append(f"{where}: {m.group(0)}")
    assert not wrong, "not in model/citations.py: " + ", ".join(sorted(set(wrong)))


def test_spec_links_are_registered_lines() -> None:
    """Every link to a release's source line is a registered citation of that release."""
    known = _registered()
    wrong, seen = [], 0
    for where, text in _texts():
        for m in LINK.finditer(text):
            seen += 1
            first = int(m.group(3))
            last = int(m.group(4) or first)
            if (m.group(1), m.group(2), first, last) not in known:
                wrong.append(f"{where}: {m.group(0)}")
    assert seen, "the spec links no vLLM line"
    assert not wrong, "not in model/citations.py: " + ", ".join(sorted(set(wrong)))
