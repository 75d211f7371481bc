"""What the main job computes besides the proofs, kept between runs: the spec's facts
(the simulator's numbers, two Z3 searches) and the pictures. They belong to the spec
builder, not the prover (issue 27): a run whose inputs did not change takes them from here
instead of computing them again.

Each entry is keyed by the SHA-256 of what it is (a fact's name; a picture's
``Drawing.key()``: its scenario, semantics, title and annotations) and of everything it
can depend on (``inputs``): every file of the code that computes it (``DEPENDS``: a
picture, model/ and releases/ and the drawing's module; the simulator's facts, sim/ too;
the two Z3 searches, proofs/ too; model/, sim/ and releases/ import neither proofs/ nor
publish/) and the versions of Python, Z3, matplotlib, numpy and Pillow. A change to any
of them is a miss, and a miss computes the entry again: never a stale answer.

Entries live outside the repository, in ``$PUBLISH_CACHE`` (default
``~/.cache/offload-lookup-check/publish``); ``PUBLISH_CACHE=off`` turns the cache off, and
so does a mutant (``OLC_MUTANT``: its code is not the files'). Only ``python -m publish``
uses it (``enable``): a library call, or a test (tests/conftest.py), computes.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
_BASE = ("model", "releases", "publish/cache.py")
# the files (folders: every file under them) each kind of entry is computed from
DEPENDS: dict[str, tuple[str, ...]] = {
    "pictures": (*_BASE, "publish/report.py"),
    "sim": (*_BASE, "sim", "publish/facts.py", "publish/names.py"),
    "z3": (*_BASE, "proofs", "publish/facts.py", "publish/names.py"),
}
PACKAGES = ("model", "sim", "releases", "proofs", "publish")  # every folder DEPENDS names

_DIR: list[Path] = []  # the cache's folder (none: off)
_INPUTS: dict[str, str] = {}  # inputs(kind), once per process


def enable() -> Path | None:
    """Use the cache in this process and the processes it forks from now on (the folder,
    or None when ``PUBLISH_CACHE=off``)."""
    where = os.environ.get("PUBLISH_CACHE", "")
    if where == "off" or os.environ.get("OLC_MUTANT"):  # a mutant's code is not the files
        _DIR[:] = []
        return None
    base = Path(where) if where else Path.home() / ".cache" / "offload-lookup-check" / "publish"
    _DIR[:] = [base]
    for kind in DEPENDS:
        inputs(kind)  # hashed once here, before the pool's processes fork
    return base


def inputs(kind: str) -> str:
    """The SHA-256 of every file ``DEPENDS[kind]`` names (path and bytes, ``__pycache__``
    apart) and of the versions of the interpreter and libraries that compute the entries."""
    if kind in _INPUTS:
        return _INPUTS[kind]
    from importlib.metadata import version

    h = hashlib.sha256()
    h.update(json.dumps([sys.version, *(version(d) for d in ("z3-solver", "matplotlib",
                                                             "numpy", "pillow"))]).encode())
    # a user's matplotlibrc changes how a picture is drawn
    for rc in (os.environ.get("MATPLOTLIBRC"),
               Path.home() / ".config" / "matplotlib" / "matplotlibrc"):
        if rc and Path(rc).is_file():
            h.update(Path(rc).read_bytes())
    for dep in DEPENDS[kind]:
        top = ROOT / dep
        for p in sorted(top.rglob("*")) if top.is_dir() else [top]:
            if p.is_file() and "__pycache__" not in p.parts:
                h.update(b"\0" + str(p.relative_to(ROOT)).encode() + b"\0")
                h.update(p.read_bytes())
    _INPUTS[kind] = h.hexdigest()
    return _INPUTS[kind]


def _fact_kind(name: str) -> str:
    """Which code fact ``name`` is computed from (``publish.facts.FACT_PARTS``): the
    simulator's runs, or a Z3 search."""
    return "sim" if name.startswith("sim:") or name == "rerun" else "z3"


def _path(kind: str, key: str, suffix: str) -> Path | None:
    if not _DIR:
        return None
    deps = "pictures" if kind == "pictures" else _fact_kind(key)
    name = hashlib.sha256(f"{kind}\0{key}\0{inputs(deps)}".encode()).hexdigest()
    return _DIR[0] / kind / f"{name}{suffix}"


def _put(path: Path, data: bytes) -> None:
    """Write whole, then rename: a reader never sees half an entry."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.name}.{os.getpid()}.part")
        part.write_bytes(data)
        part.replace(path)
    except OSError:
        pass  # a cache that cannot be written is a cache that misses


def fact(name: str) -> tuple[bool, Any]:
    """(True, the fact) where the cache holds fact ``name`` for these inputs; else
    (False, None)."""
    path = _path("facts", name, ".json")
    if path is None:
        return False, None
    try:
        value = json.loads(path.read_text())["value"]
    except (OSError, ValueError, KeyError):
        return False, None
    hit("facts")
    return True, value


def keep_fact(name: str, value: Any) -> None:
    path = _path("facts", name, ".json")
    if path is not None:
        _put(path, json.dumps({"name": name, "value": value}, sort_keys=True).encode())


def picture(key: str, dest: Path) -> bool:
    """Copy the picture kept under ``key`` (``Drawing.key()``) to ``dest``; False: none."""
    path = _path("pictures", key, ".png")
    if path is None:
        return False
    try:
        data = path.read_bytes()
    except OSError:
        return False
    dest.write_bytes(data)
    hit("pictures")
    return True


def keep_picture(key: str, drawn: Path) -> None:
    path = _path("pictures", key, ".png")
    if path is not None:
        try:
            _put(path, drawn.read_bytes())
        except OSError:
            pass


def enabled() -> bool:
    return bool(_DIR)


# what this process took from the cache, by kind ("facts", "pictures"): the main job's
# time lines say it (its CPU figures count only what was computed)
HITS: dict[str, int] = {}


def hit(kind: str) -> None:
    HITS[kind] = HITS.get(kind, 0) + 1
