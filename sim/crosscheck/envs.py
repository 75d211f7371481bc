"""Per-version virtual environments for the real vLLM schedulers, made on demand and cached.

``ensure_env("0.24.0")`` makes ``.venvs/vllm-0.24.0`` (or ``$CROSSCHECK_VENVS/vllm-0.24.0``)
with: ``python -m venv``; ``pip install torch==2.13.0`` (pip takes the CPU build from
this machine's wheel folder; a CUDA build is never asked for); ``pip install --no-deps
vllm==X``; ``pip install --no-deps -r sim/crosscheck/requirements/vllm-X.txt``.  A stamp
file records what was installed, so a second call returns at once; a changed
requirements file rebuilds the environment.  Each step prints a progress line.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import releases

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = Path(__file__).resolve().parent / "requirements"
TORCH = "torch==2.13.0"
STAMP = ".crosscheck-ready"
# every modelled release's vLLM version (the registry's releases), oldest first
VERSIONS = releases.versions()


def venvs_dir() -> Path:
    return Path(os.environ.get("CROSSCHECK_VENVS", ROOT / ".venvs"))


def env_dir(version: str) -> Path:
    return venvs_dir() / f"vllm-{version}"


def env_python(version: str) -> Path:
    return env_dir(version) / "bin" / "python"


def release_package(version: str) -> Path | None:
    """The release's ``vllm`` package inside its environment, None if not made yet."""
    found = sorted(env_dir(version).glob("lib/python*/site-packages/vllm/__init__.py"))
    return found[0].parent if found and is_ready(version) else None


def modelled_releases() -> tuple[str, ...]:
    """Releases with both model semantics (``vllm-X``) and an environment recipe, oldest
    first: the bases a source tree can be checked against.  A new release plugs in by
    adding its semantics and ``requirements/vllm-X.txt``."""
    def modelled(version: str) -> bool:
        try:
            return releases.by_version(version).base_version == version
        except ValueError:
            return False

    have = [p.stem.removeprefix("vllm-") for p in REQUIREMENTS.glob("vllm-*.txt")]
    found = [v for v in have if modelled(v)]
    return tuple(sorted(found, key=lambda v: tuple(int(x) for x in v.split("."))))


def requirements_file(version: str) -> Path:
    path = REQUIREMENTS / f"vllm-{version}.txt"
    if not path.exists():
        known = sorted(p.stem.removeprefix("vllm-") for p in REQUIREMENTS.glob("vllm-*.txt"))
        raise ValueError(f"no requirements for vLLM {version} (known: {', '.join(known)})")
    return path


def stamp_text(version: str) -> str:
    """What a ready environment's stamp holds: the recipe, so a new recipe rebuilds."""
    digest = hashlib.sha256()
    for path in (requirements_file(version), REQUIREMENTS / "common.txt"):
        digest.update(path.read_bytes())
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    return f"vllm=={version} {TORCH} python{py} req-sha256={digest.hexdigest()[:16]}\n"


def is_ready(version: str) -> bool:
    stamp = env_dir(version) / STAMP
    return stamp.exists() and stamp.read_text() == stamp_text(version)


def _say(msg: str) -> None:
    print(f"[crosscheck env] {msg}", file=sys.stderr, flush=True)


def _pip(version: str, *args: str) -> None:
    cmd = [str(env_python(version)), "-m", "pip", "install", "-q", *args]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # pip's notes about the local index folders are noise; show the rest on failure
    lines = [ln for ln in proc.stdout.splitlines() if "is ignored: it is neither" not in ln]
    if proc.returncode != 0:
        sys.stderr.write("\n".join(lines) + "\n")
        raise RuntimeError(f"pip install {' '.join(args)} failed for vLLM {version}")


def ensure_env(version: str, *, rebuild: bool = False) -> Path:
    """Make (or reuse) the environment for ``version``; returns its python."""
    if not rebuild and is_ready(version):
        return env_python(version)
    req = requirements_file(version)
    target = env_dir(version)
    start = time.monotonic()
    if target.exists():
        _say(f"vLLM {version}: rebuilding {target}")
        shutil.rmtree(target)
    # (label, pip arguments); the first step makes the venv itself
    steps: list[tuple[str, list[str]]] = [
        ("venv", []),
        (TORCH + " (CPU)", [TORCH]),
        (f"vllm=={version} --no-deps", ["--no-deps", f"vllm=={version}"]),
        (f"{req.name} --no-deps", ["--no-deps", "-r", str(req)]),
    ]
    for i, (name, pip_args) in enumerate(steps, 1):
        t = time.monotonic()
        _say(f"vLLM {version}: step {i}/{len(steps)} {name} ...")
        if pip_args:
            _pip(version, *pip_args)
        else:
            subprocess.run([sys.executable, "-m", "venv", str(target)], check=True)
        _say(f"vLLM {version}: step {i}/{len(steps)} done in {time.monotonic() - t:.0f}s")
    check = subprocess.run(
        [str(env_python(version)), "-c",
         "import torch, vllm, sys; "
         "sys.stdout.write(vllm.__version__ + ' torch ' + torch.__version__)"],
        capture_output=True, text=True,
    )
    if check.returncode != 0 or not check.stdout.startswith(version):
        sys.stderr.write(check.stderr[-2000:])
        raise RuntimeError(f"environment for vLLM {version} does not import vllm {version}")
    (target / STAMP).write_text(stamp_text(version))
    _say(f"vLLM {version}: ready ({check.stdout}) in {time.monotonic() - start:.0f}s")
    return env_python(version)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m sim.crosscheck.envs",
                                 description="make the per-version vLLM environments")
    ap.add_argument("--vllm", default=",".join(VERSIONS), help="comma-separated versions")
    ap.add_argument("--rebuild", action="store_true")
    args = ap.parse_args(argv)
    for v in args.vllm.split(","):
        py = ensure_env(v.strip(), rebuild=args.rebuild)
        _say(f"vLLM {v}: {py}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
