"""Run the vLLM-ready tests (``docs/findings/vllm_tests/``) where they are meant to live:
in vLLM's own ``tests/v1/kv_connector/unit/offloading_connector/``, on that release's
test helpers, under pytest, in the release's environment (``sim.crosscheck.envs``).

vLLM's wheel ships no tests, its source distribution does: the helpers
(``MockOffloadingSpec``, ``RequestRunner``, the ``request_runner`` fixture, ...) are
read from ``vllm-X.tar.gz`` at run time into a temporary tree that is removed
afterwards; nothing of vLLM's is kept in this project.  The archive is looked for in
``$CROSSCHECK_SDISTS``, then ``../wheels`` (next to the checkout), then
``<venvs>/sdists``; if none has it, it is fetched from PyPI into ``<venvs>/sdists``
(sha256 checked).

    python -m sim.crosscheck.vllm_tests [FILE ...] [--fix 001|001b|003] [--vllm 0.33.0]

prints one line per test (``pass``, ``fail: <message>``, ``error: <message>``, ``skip``).
Exit codes: 0 every test passed; 1 some test failed (the expected outcome for a finding
on the release as shipped); 2 bad input (unknown release, fix or file; no environment).
"""

from __future__ import annotations

import argparse
import atexit
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

from sim.crosscheck import forkserver
from sim.crosscheck.envs import env_python, venvs_dir

ROOT = Path(__file__).resolve().parents[2]
ADAPTERS = Path(__file__).resolve().parent / "adapters"
TESTS = ROOT / "docs" / "findings" / "vllm_tests"
TARGET = "tests/v1/kv_connector/unit/offloading_connector"
# vLLM's test helpers the vLLM-ready tests import, and the packages around them
HELPERS = (
    "tests/__init__.py",
    "tests/v1/__init__.py",
    "tests/v1/kv_connector/__init__.py",
    "tests/v1/kv_connector/unit/__init__.py",
    "tests/v1/kv_connector/unit/conftest.py",
    "tests/v1/kv_connector/unit/utils.py",
    f"{TARGET}/__init__.py",
    f"{TARGET}/conftest.py",
    f"{TARGET}/utils.py",
    f"{TARGET}/test_config.py",
)
FIXES = ("001", "001b", "003")
# releases whose environment has pytest and whose helpers the tests were written on
RELEASES = ("0.33.0",)


class BadInput(ValueError):
    """One line naming what is wrong with the arguments."""


def sdist_candidates(version: str) -> list[Path]:
    name = f"vllm-{version}.tar.gz"
    dirs = [Path(p) for p in [os.environ.get("CROSSCHECK_SDISTS")] if p]
    dirs += [ROOT.parent / "wheels", venvs_dir() / "sdists"]
    return [d / name for d in dirs]


def index_url() -> str:
    """The package index pip is set up to use (``PIP_INDEX_URL``, pip's configuration,
    else pip's default)."""
    if url := os.environ.get("PIP_INDEX_URL"):
        return url.rstrip("/")
    out = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"],
                         capture_output=True, text=True, check=False)
    if out.returncode == 0 and out.stdout.strip():
        return out.stdout.strip().rstrip("/")
    from pip._internal.models.index import PyPI  # pip's own default index
    return PyPI.simple_url.rstrip("/")


def fetch_sdist(version: str, dest_dir: Path) -> Path:
    """vLLM ``version``'s source distribution from the package index, through its simple
    JSON API (PEP 691), which names the file and its sha256."""
    req = urllib.request.Request(f"{index_url()}/vllm/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        info = json.load(resp)
    name = f"vllm-{version}.tar.gz"
    sdists = [f for f in info["files"] if f["filename"] == name]
    if not sdists:
        raise BadInput(f"--vllm: the package index has no source distribution of vLLM "
                       f"{version}")
    url, sha = sdists[0]["url"], sdists[0]["hashes"]["sha256"]
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / name
    part = dest.with_suffix(".part")
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=600) as resp, part.open("wb") as out:
        while chunk := resp.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
    if digest.hexdigest() != sha:
        part.unlink()
        raise RuntimeError(f"{name}: sha256 differs from the index's")
    part.replace(dest)
    return dest


def sdist_path(version: str) -> Path:
    for path in sdist_candidates(version):
        if path.is_file():
            return path
    print(f"[vllm tests] fetching vLLM {version}'s source distribution from PyPI",
          file=sys.stderr, flush=True)
    return fetch_sdist(version, venvs_dir() / "sdists")


def build_tree(sdist: Path, dest: Path, test_files: list[Path]) -> list[Path]:
    """vLLM's helpers from ``sdist`` and ``test_files`` under ``dest``; returns where
    the test files landed."""
    with tarfile.open(sdist) as tar:
        prefix = tar.getnames()[0].split("/")[0]
        for rel in HELPERS:
            member = tar.getmember(f"{prefix}/{rel}")
            src = tar.extractfile(member)
            assert src is not None, rel
            out = dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(src.read())
    placed = []
    for f in test_files:
        out = dest / TARGET / f.name
        shutil.copyfile(f, out)
        placed.append(out)
    return placed


def outcomes(junit_xml: Path) -> dict[str, dict[str, str]]:
    """{test file's stem: {test name (with its parameters): "pass" | "fail: ..." |
    "error: ..." | "skip"}}."""
    found: dict[str, dict[str, str]] = {}
    for case in ET.parse(junit_xml).iter("testcase"):
        name = case.get("name", "?")
        stem = case.get("classname", "?").split(".")[-1]
        outcome = "pass"
        for tag, label in (("failure", "fail"), ("error", "error"), ("skipped", "skip")):
            node = case.find(tag)
            if node is not None:
                message = (node.get("message") or "").splitlines()
                outcome = label if label == "skip" else f"{label}: {' '.join(message)}"
                break
        found.setdefault(stem, {})[name] = outcome
    return found


@functools.cache
def offline_hf_home() -> Path:
    """The Hugging Face home of this process's runs (the offline model's configuration,
    written by the plugin at each run; removed at exit): one folder for every run, as
    ``HF_HOME`` is read once, when the fork server imports transformers."""
    home = Path(tempfile.mkdtemp(prefix="vllm-tests-hf-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    return home


def run_vllm_tests_by_file(test_files: list[Path], *, version: str = "0.33.0",
                           fix: str | None = None,
                           timeout: float = 900) -> dict[str, dict[str, str]]:
    """Run ``test_files`` in one pytest process in vLLM ``version``'s own test tree and
    environment (with ``fix`` applied in process); returns each test's outcome by the
    stem of its file."""
    if version not in RELEASES:
        raise BadInput(f"--vllm: {version!r} has no vLLM-ready test setup "
                       f"(known: {', '.join(RELEASES)})")
    if fix is not None and fix not in FIXES:
        raise BadInput(f"--fix: unknown fix {fix!r} (known: {', '.join(FIXES)})")
    for f in test_files:
        if not f.is_file():
            raise BadInput(f"FILE: {f} is not a file")
    python = env_python(version)
    if not python.exists():
        raise BadInput(f"--vllm: no vLLM {version} environment: "
                       f"python -m sim.crosscheck.envs --vllm {version}")
    sdist = sdist_path(version)
    with tempfile.TemporaryDirectory(prefix="vllm-tests-") as tmp:
        tree, hf_home = Path(tmp) / "vllm", offline_hf_home()
        placed = build_tree(sdist, tree, test_files)
        junit = Path(tmp) / "junit.xml"
        env = {**os.environ,
               "PYTHONPATH": os.pathsep.join([str(tree), str(ADAPTERS)]),
               "VLLM_LOGGING_LEVEL": "ERROR",
               "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1",
               "CROSSCHECK_OFFLINE_MODEL": str(hf_home),
               "CROSSCHECK_FIX": fix or ""}
        cmd = [str(python), "-m", "pytest", "-p", "no:cacheprovider",
               "-p", "vllm_tests_plugin_chunked", "-o", "addopts=", "--rootdir", str(tree),
               "-q", "--junitxml", str(junit), *map(str, placed)]
        # a fork of the environment's fork server: vLLM imported once per process
        proc = forkserver.run(cmd, cwd=tree, env=env, timeout=timeout)
        if not junit.exists():
            raise RuntimeError(f"pytest gave no results (exit {proc.returncode}):\n"
                               + (proc.stdout + proc.stderr)[-4000:])
        return outcomes(junit)


def run_vllm_tests(test_files: list[Path], *, version: str = "0.33.0",
                   fix: str | None = None, timeout: float = 900) -> dict[str, str]:
    """As ``run_vllm_tests_by_file``, every file's outcomes in one mapping."""
    found = run_vllm_tests_by_file(test_files, version=version, fix=fix, timeout=timeout)
    return {name: o for per_file in found.values() for name, o in per_file.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m sim.crosscheck.vllm_tests",
        description="run the vLLM-ready tests in vLLM's own test tree and environment",
        epilog="exit codes: 0 every test passed; 1 some test failed (expected for a "
               "finding on the release as shipped); 2 bad input")
    ap.add_argument("files", nargs="*", type=Path,
                    help="test files (default: every file of docs/findings/vllm_tests/)")
    ap.add_argument("--vllm", default="0.33.0", help="release (default 0.33.0)")
    ap.add_argument("--fix", default=None, help="apply a proposed fix: " + ", ".join(FIXES))
    args = ap.parse_args(argv)
    files = list(args.files) or sorted(TESTS.glob("test_*.py"))
    try:
        results = run_vllm_tests(files, version=args.vllm, fix=args.fix)
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name, outcome in results.items():
        print(f"{name}: {outcome}")
    return 0 if all(o in ("pass", "skip") for o in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
