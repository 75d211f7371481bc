"""A vLLM source tree (a branch, an unpacked sdist or wheel) under the PR check.

- ``find_package(path)``: the ``vllm/`` package inside ``path`` (a repository root, an
  unpacked sdist or wheel, or a ``.whl`` / ``.tar.gz`` file, unpacked first);
- ``tree_version(root)``: the version the tree's metadata declares, if any;
- ``cited_distance(tree, release)``: how many lines of the files ``model/citations.py``
  cites differ between the tree and a release (the textual distance);
- ``build_overlay(...)``: a directory that, placed first on ``PYTHONPATH``, imports the
  release's ``vllm`` with the tree's Python files laid over ``OVERLAY`` (compiled parts
  and everything else stay the release's; the release's environment is not touched).
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import shutil
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

# Paths under vllm/ whose Python files the tree supplies: the offloading connector
# (its scheduler included), the offload spec/manager package and the KV-cache manager.
OVERLAY = (
    "distributed/kv_transfer/kv_connector/v1/offloading",
    "distributed/kv_transfer/kv_connector/v1/offloading_connector.py",
    "v1/kv_offload",
    "v1/core",
)
SCHEDULER = "distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py"
_SKIP = {"__pycache__"}
_VERSION_RE = re.compile(
    r"""^__version__\s*(?::\s*str\s*)?=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", re.M)


class TreeError(ValueError):
    """Bad input: one line naming what is wrong with the tree."""


@dataclass(frozen=True)
class Tree:
    root: Path  # the directory that holds vllm/
    package: Path  # root / "vllm"
    version: str | None  # from the tree's metadata, None if it declares none
    version_source: str | None  # which file said so


def _wanted(rel: str) -> bool:
    """A file under vllm/ the PR check reads: the overlaid paths, the cited files, the
    version file."""
    from model.citations import cited_files

    if rel == "_version.py" or any(rel == p or rel.startswith(p + "/") for p in OVERLAY):
        return True
    return rel in cited_files()


def _unpack(archive: Path, dest: Path) -> Path:
    """Unpack what the PR check reads of a wheel (or every Python file of an sdist);
    returns the root."""
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as z:
            for name in z.namelist():
                if ".." in name:
                    continue
                if (name.startswith("vllm/") and name.endswith(".py")
                        and _wanted(name.removeprefix("vllm/"))) or name.endswith(
                        ".dist-info/METADATA"):
                    z.extract(name, dest)
        return dest
    with tarfile.open(archive) as t:
        members = [m for m in t.getmembers()
                   if m.isfile() and (m.name.endswith(".py") or m.name.endswith("PKG-INFO"))
                   and ".." not in m.name and not m.name.startswith("/")]
        t.extractall(dest, members=members, filter="data")
    tops = [p for p in dest.iterdir() if p.is_dir()]
    return tops[0] if len(tops) == 1 else dest


def find_package(path: Path, scratch: Path | None = None) -> Tree:
    """The vLLM tree at ``path``; raises ``TreeError`` (one line) if there is none."""
    if not path.exists():
        raise TreeError(f"--vllm-source: {path} does not exist")
    if path.is_file():
        if not (path.suffix == ".whl" or path.name.endswith((".tar.gz", ".tgz"))):
            raise TreeError(f"--vllm-source: {path} is not a directory, .whl or .tar.gz")
        dest = Path(tempfile.mkdtemp(prefix="vllm-src-", dir=scratch))
        try:
            path = _unpack(path, dest)
        except (OSError, zipfile.BadZipFile, tarfile.TarError) as e:
            raise TreeError(f"--vllm-source: cannot unpack {path}: {e}") from None
    root = path
    if path.name == "vllm" and (path / "__init__.py").exists():
        root = path.parent
    if not (root / "vllm" / SCHEDULER).is_file():
        raise TreeError(f"--vllm-source: no vllm/{SCHEDULER} under {path}")
    version, source = tree_version(root)
    return Tree(root, root / "vllm", version, source)


def tree_version(root: Path) -> tuple[str | None, str | None]:
    """(version, file) from ``vllm/_version.py`` (written by the build), PKG-INFO or a
    wheel's METADATA; (None, None) when the tree declares none (a git checkout: its
    ``vllm/version.py`` only falls back to "dev")."""
    p = root / "vllm" / "_version.py"
    if p.is_file():
        m = _VERSION_RE.search(p.read_text(errors="replace"))
        if m:
            return m.group(1), "vllm/_version.py"
    metas = [root / "PKG-INFO", *sorted(root.glob("vllm-*.dist-info/METADATA"))]
    for p in metas:
        if p.is_file():
            m = re.search(r"^Version:\s*(\S+)", p.read_text(errors="replace"), re.M)
            if m:
                return m.group(1), str(p.relative_to(root))
    return None, None


def release_tuple(version: str) -> tuple[int, ...]:
    """The numeric release part of a version string: '0.25.0rc1.dev3+g1' -> (0, 25, 0)."""
    m = re.match(r"(\d+(?:\.\d+)*)", version)
    return tuple(int(x) for x in m.group(1).split(".")) if m else ()


def _lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines() if path.is_file() else []


def changed_lines(a: Path, b: Path) -> int:
    """Lines added plus lines removed between two files (a missing file is empty)."""
    sm = difflib.SequenceMatcher(None, _lines(a), _lines(b), autojunk=False)
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in sm.get_opcodes()
               if tag != "equal")


def cited_distance(tree_pkg: Path, release_pkg: Path, paths: list[str]) -> int:
    """Changed lines summed over the cited files the tree has (a partial tree, such as
    the benchmark's, lacks some: those are not counted)."""
    return sum(changed_lines(release_pkg / p, tree_pkg / p) for p in paths
               if (tree_pkg / p).is_file())


def overlay_files(pkg: Path) -> list[str]:
    """The tree's files under ``OVERLAY``, relative to ``vllm/``, sorted."""
    out = []
    for rel in OVERLAY:
        p = pkg / rel
        if p.is_file():
            out.append(rel)
        elif p.is_dir():
            out.extend(str(f.relative_to(pkg)) for f in sorted(p.rglob("*"))
                       if f.is_file() and not _SKIP & set(f.relative_to(pkg).parts))
    return sorted(out)


def overlay_digest(pkg: Path, release_key: str) -> str:
    h = hashlib.sha256(release_key.encode())
    for rel in overlay_files(pkg):
        h.update(rel.encode() + b"\0" + (pkg / rel).read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _mirror(release: Path, dest: Path, rel: Path, replaced: set[Path]) -> None:
    """Link every entry of ``release/rel`` into ``dest/rel``; real directories only on
    the way to a replaced path (so the tree's files can sit beside the release's).  The
    release's ``__pycache__`` directories are linked too: its bytecode is reused (the
    harness runs with PYTHONDONTWRITEBYTECODE, so nothing is written there)."""
    (dest / rel).mkdir(parents=True, exist_ok=True)
    for entry in sorted((release / rel).iterdir()):
        r = rel / entry.name
        if r in replaced:
            continue
        if entry.is_dir() and any(r in p.parents for p in replaced):
            _mirror(release, dest, r, replaced)
        else:
            os.symlink(entry, dest / r)


def build_overlay(release_pkg: Path, tree_pkg: Path, dest: Path) -> Path:
    """Make ``dest`` (reused if present): ``dest/vllm`` = the release's package with the
    tree's ``OVERLAY`` paths in place of the release's.  Returns ``dest``."""
    if (dest / "vllm" / SCHEDULER).exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    replaced = {Path(p) for p in OVERLAY}
    _mirror(release_pkg, tmp / "vllm", Path("."), replaced)
    for rel in OVERLAY:
        src, dst = tree_pkg / rel, tmp / "vllm" / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.is_file():
            shutil.copy2(src, dst)
    try:
        tmp.rename(dest)
    except OSError:  # another run made it first
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
