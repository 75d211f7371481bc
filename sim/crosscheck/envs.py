"""Per-version virtual environments for the real vLLM schedulers, made on demand and cached.

``ensure_env("0.24.0")`` makes ``.venvs/vllm-0.24.0`` (or ``$CROSSCHECK_VENVS/vllm-0.24.0``)
with: ``python -m venv``; ``pip install torch==2.13.0`` (pip takes the CPU build from
this machine's wheel folder; a CUDA build is never asked for); ``pip install --no-deps
vllm==X``; ``pip install --no-deps -r sim/crosscheck/requirements/vllm-X.txt``.  A stamp
file records what was installed, so a second call returns at once; a changed
requirements file rebuilds the environment.  Each step prints a progress line.

Light environments (``ensure_light_env``) for every release 0.23.0-0.33.0, as
docs/releases.md § Environments proposes: one shared base venv (torch 2.13.0 CPU and
``requirements/shared-base.txt``) and, per release, a venv made ``--without-pip`` whose
``site-packages`` holds only the release's ``vllm/**/*.py`` (unzipped from its wheel,
no compiled parts: the scheduler path imports none, see ``compiled_modules``), a
``vllm-X.dist-info`` stub and a ``.pth`` naming the base's ``site-packages``.  Each is
keyed by the sha256 of its recipe (``base_recipe`` / ``light_recipe``: the base's
requirements and torch pin; the release's wheel digest and the base's key), so a new
recipe makes a new folder and an unchanged one is reused.  0.25.1 and 0.27.1 are
aliases of 0.25.0 and 0.27.0 (``ALIASES``, checked by ``alias_evidence``: the same
offloading scheduler source) and are not built.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
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


# free disk a full environment build asks for before it starts: the largest measured
# (0.33.0's, with triton and flashinfer for sim/layouts: 3.7 GB) and pip's unpacking room
FULL_ENV_NEED_GB = 5.0


def free_gb(path: Path) -> float:
    """Free space on the file system that holds ``path`` (its nearest existing parent)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free / 1e9


def check_disk(target: Path, need_gb: float) -> None:
    """Refuse a build that cannot fit, before it starts, naming the place and the sizes."""
    have = free_gb(target)
    if have < need_gb:
        raise RuntimeError(f"CROSSCHECK_VENVS={target.parent}: {have:.1f} GB free, a full "
                           f"environment needs {need_gb:.0f} GB")


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
    check_disk(target, FULL_ENV_NEED_GB)
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


# ---------------------------------------------------------------- light environments

# releases whose offloading scheduler is byte for byte their predecessor's (not built;
# ``alias_evidence`` shows it from the wheels)
ALIASES = {"0.25.1": "0.25.0", "0.27.1": "0.27.0"}
SCHEDULER_PATH = "vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py"
BASE_REQUIREMENTS = REQUIREMENTS / "shared-base.txt"
LIGHT_STAMP = ".crosscheck-light-ready"


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


# every vLLM release the bisect runs, oldest first (docs/releases.md): the registry's
# releases and their aliases; a release module added to releases/ is picked up here
ALL_RELEASES = tuple(sorted({*VERSIONS, *ALIASES}, key=version_key))


def built_releases() -> tuple[str, ...]:
    """``ALL_RELEASES`` less the aliases: the releases that get an environment."""
    return tuple(v for v in ALL_RELEASES if v not in ALIASES)


def canonical(version: str) -> str:
    """The release whose environment serves ``version`` (itself unless an alias)."""
    if version not in ALL_RELEASES:
        raise ValueError(f"vLLM {version!r} is not a known release "
                         f"(known: {', '.join(ALL_RELEASES)})")
    return ALIASES.get(version, version)


def wheel_dirs() -> list[Path]:
    """Where release wheels are looked for: ``$CROSSCHECK_WHEELS``, ``../wheels`` next to
    the checkout, ``<venvs>/wheels``, then the checkout's ``.wheels`` (CI's download)."""
    env = os.environ.get("CROSSCHECK_WHEELS")
    return [*([Path(env)] if env else []), ROOT.parent / "wheels", venvs_dir() / "wheels",
            ROOT / ".wheels"]


def find_wheel(version: str, *, fetch: bool = False) -> Path:
    """The release's wheel (``vllm-X-*.whl`` or ``vllm-X-N-*.whl``); with ``fetch``,
    ``pip download --no-deps`` into ``<venvs>/wheels`` when none is found."""
    for d in wheel_dirs():
        found = sorted(d.glob(f"vllm-{version}-*.whl"))
        if found:
            return found[0]
    if fetch:
        dest = venvs_dir() / "wheels"
        dest.mkdir(parents=True, exist_ok=True)
        _say(f"vLLM {version}: pip download --no-deps vllm=={version} -d {dest}")
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        f"vllm=={version}", "-d", str(dest)], check=False)
        found = sorted(dest.glob(f"vllm-{version}-*.whl"))
        if found:
            return found[0]
    raise ValueError(f"no vllm-{version}-*.whl in " + ", ".join(str(d) for d in wheel_dirs()))


# digests already taken in this process, by file, modification time and size (a light
# env's folder name hashes its release's wheel: asked again at each harness start-up)
_SHA256: dict[tuple[str, int, int], str] = {}


def file_sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    if key not in _SHA256:
        _SHA256[key] = _sha256(path)
    return _SHA256[key]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def scheduler_sha256(wheel: Path) -> str:
    """sha256 of the offloading scheduler's source in a release wheel."""
    with zipfile.ZipFile(wheel) as z:
        return hashlib.sha256(z.read(SCHEDULER_PATH)).hexdigest()


def alias_evidence(version: str) -> tuple[str, str, str]:
    """(alias, target, sha256) for an alias whose scheduler source equals its target's;
    ValueError when the wheels differ (the alias would be wrong)."""
    target = ALIASES[version]
    a, b = (scheduler_sha256(find_wheel(v, fetch=True)) for v in (version, target))
    if a != b:
        raise ValueError(f"vLLM {version} is declared an alias of {target}, but its "
                         f"{SCHEDULER_PATH} differs (sha256 {a[:16]} vs {b[:16]})")
    return version, target, a


def _recipe_key(recipe: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


# a ready venv to serve as the base instead of building one (CI: the newest release's full
# env, a superset of the base's packages; the light env's own vllm comes first on sys.path)
BASE_ENV = "CROSSCHECK_LIGHT_BASE"
BASE_IMPORTS = ("torch", "networkx", "gguf", "fastapi", "partial_json_parser", "transformers")


_BASES_CHECKED: set[str] = set()  # given bases whose imports worked in this process


def given_base() -> Path | None:
    given = os.environ.get(BASE_ENV)
    return Path(given).resolve() if given else None


def base_recipe() -> dict[str, str]:
    """What the shared base is made of (its folder name is this recipe's hash)."""
    if given_base() is not None:
        return {"base-venv": str(given_base())}
    reqs = "".join(p.read_text() for p in (BASE_REQUIREMENTS, REQUIREMENTS / "common.txt"))
    return {"torch": TORCH, "python": f"{sys.version_info.major}.{sys.version_info.minor}",
            "requirements-sha256": hashlib.sha256(reqs.encode()).hexdigest()}


def base_dir() -> Path:
    return given_base() or venvs_dir() / f"base-{_recipe_key(base_recipe())}"


def light_recipe(version: str, wheel_sha256: str) -> dict[str, str]:
    """A release's light env: its wheel (by digest) over the base (by key)."""
    return {"vllm": version, "wheel-sha256": wheel_sha256,
            "base": _recipe_key(base_recipe()), "layout": "py-only+pth/1"}


def _site_packages(env: Path) -> Path:
    py = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return env / "lib" / py / "site-packages"


def ensure_base() -> Path:
    """Make (or reuse) the shared base venv; returns its python."""
    target = base_dir()
    python = target / "bin" / "python"
    if given_base() is not None:
        if str(python) in _BASES_CHECKED:  # checked once a process: its imports cost ~6 s
            return python
        try:
            check = subprocess.run([str(python), "-c", "import " + ", ".join(BASE_IMPORTS)],
                                   capture_output=True, text=True)
        except OSError as e:
            raise RuntimeError(f"{BASE_ENV}={target}: not a usable base ({e})") from None
        if check.returncode != 0:
            last = (check.stderr.strip().splitlines() or ["no python"])[-1]
            raise RuntimeError(f"{BASE_ENV}={target}: not a usable base ({last})")
        _BASES_CHECKED.add(str(python))
        return python
    stamp = target / LIGHT_STAMP
    if stamp.exists():
        return python
    if target.exists():
        shutil.rmtree(target)
    t0 = time.monotonic()
    _say(f"base {target.name}: venv, {TORCH} (CPU), {BASE_REQUIREMENTS.name} --no-deps ...")
    subprocess.run([sys.executable, "-m", "venv", str(target)], check=True)
    for args in ([TORCH], ["--no-deps", "-r", str(BASE_REQUIREMENTS)]):
        proc = subprocess.run([str(python), "-m", "pip", "install", "-q", *args],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout[-3000:])
            raise RuntimeError(f"base env: pip install {' '.join(args)} failed")
    stamp.write_text(json.dumps(base_recipe(), sort_keys=True) + "\n")
    _say(f"base {target.name}: ready in {time.monotonic() - t0:.0f}s")
    return python


def light_dir(version: str, wheel: Path) -> Path:
    """The light env's folder: ``light-X-<recipe hash>``."""
    recipe = light_recipe(version, file_sha256(wheel))
    return venvs_dir() / f"light-{version}-{_recipe_key(recipe)}"


def ensure_light_env(version: str) -> Path:
    """Make (or reuse) the light env of ``version`` (an alias: its target's); returns
    its python.  The base is made first if needed."""
    version = canonical(version)
    base_python = ensure_base()
    wheel = find_wheel(version, fetch=True)
    recipe = light_recipe(version, file_sha256(wheel))
    target = light_dir(version, wheel)
    python = target / "bin" / "python"
    stamp = target / LIGHT_STAMP
    if stamp.exists():
        return python
    if target.exists():
        shutil.rmtree(target)
    t0 = time.monotonic()
    # the venv's python is the base's interpreter, so the base's version and stdlib apply
    subprocess.run([str(base_python), "-m", "venv", "--without-pip", str(target)],
                   check=True)
    site = _site_packages(target)
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.startswith("vllm/") and name.endswith(".py"):
                z.extract(name, site)
            elif name.startswith("vllm-") and ".dist-info/" in name and name.endswith(
                    ("/METADATA", "/top_level.txt")):
                z.extract(name, site)
    (site / "_crosscheck_base.pth").write_text(str(_site_packages(base_dir())) + "\n")
    check = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m, torch; "
         "print(m.version('vllm'), torch.__version__)"], capture_output=True, text=True)
    if check.returncode != 0 or not check.stdout.startswith(version + " "):
        sys.stderr.write(check.stderr[-2000:])
        raise RuntimeError(f"light env for vLLM {version} does not report vllm {version}")
    stamp.write_text(json.dumps(recipe, sort_keys=True) + "\n")
    _say(f"vLLM {version}: light env {target.name} ready in {time.monotonic() - t0:.1f}s "
         f"({tree_mb(target):.0f} MB)")
    return python


def harness_python(version: str) -> Path:
    """The interpreter a release's real scheduler runs in: its full env when one is made
    (``ensure_env``), else its light env (made if needed). CI makes one full env, the
    newest release's (``.ci/run``); every other release runs in its light env."""
    version = canonical(version)
    return env_python(version) if is_ready(version) else ensure_light_env(version)


def source_package(version: str) -> Path | None:
    """The ``vllm`` package of an environment already made for ``version`` (its full env,
    else a finished light env), without making one; None if neither exists."""
    full = release_package(version)
    if full is not None:
        return full
    light = sorted(p for p in venvs_dir().glob(
        f"light-{canonical(version)}-*/lib/python3*/site-packages/vllm")
        if (p.parents[3] / LIGHT_STAMP).exists())
    return light[-1] if light else None


def pinned_versions() -> tuple[str, ...]:
    """The releases the cross-check runs on every CI run: each lookup family's reference
    (the release its model follows line by line, ``releases.reference``) and newest
    release; every other release takes its turn (``ci_versions``). The proofs make claims
    about most releases (``releases.proved``), and pinning them all would cost a harness
    start-up and a generated set per release on every run."""
    families = {releases.get(n).family for n in releases.releases()}
    pinned = {s.base_version for f in families
              for s in (releases.reference(f), releases.newest(f))}
    return tuple(v for v in VERSIONS if v in pinned)


def rotation_pool() -> tuple[str, ...]:
    """The releases that take turns in CI (the modelled ones not pinned), oldest first."""
    pinned = pinned_versions()
    return tuple(v for v in VERSIONS if v not in pinned)


def release_of_the_day(day_of_year: int | None = None) -> str | None:
    """CI's one release of the day from ``rotation_pool`` (by the day of the year, UTC,
    unless given), or None when every release is pinned. The cross-check's marked suite
    and the bisect's ``--releases rotate`` both take it, so one extra env serves both."""
    pool = rotation_pool()
    if not pool:
        return None
    if day_of_year is None:
        import datetime

        day_of_year = datetime.datetime.now(datetime.UTC).timetuple().tm_yday
    return pool[day_of_year % len(pool)]


def ci_versions(day_of_year: int | None = None) -> tuple[str, ...]:
    """``CROSSCHECK_VERSIONS`` (comma-separated, or ``all``), else the pinned releases and
    the release of the day (``release_of_the_day``), oldest first: each release is
    cross-checked in full by ``python -m sim.crosscheck --vllm all``."""
    given = os.environ.get("CROSSCHECK_VERSIONS", "").strip()
    if given == "all":
        return VERSIONS
    if given:
        return tuple(canonical(v.strip()) for v in given.split(","))
    today = release_of_the_day(day_of_year)
    return tuple(v for v in VERSIONS if v in pinned_versions() or v == today)


def light_package(version: str) -> Path:
    """The ``vllm`` package of the release's light env (made if needed)."""
    python = ensure_light_env(version)
    return _site_packages(python.parent.parent) / "vllm"


def tree_mb(path: Path) -> float:
    files = (p for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    return sum(p.stat().st_size for p in files) / 1e6


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m sim.crosscheck.envs",
                                 description="make the per-version vLLM environments")
    ap.add_argument("--vllm", default=",".join(VERSIONS), help="comma-separated versions")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--light", action="store_true",
                    help="the light envs (shared base + the release's .py files) instead; "
                    "--vllm all: every release 0.23.0-0.33.0")
    args = ap.parse_args(argv)
    if args.light:
        wanted = (built_releases() if args.vllm in ("all", ",".join(VERSIONS))
                  else tuple(v.strip() for v in args.vllm.split(",")))
        for v in wanted:
            try:
                _say(f"vLLM {v}: {ensure_light_env(v)}")
            except (RuntimeError, ValueError) as e:
                _say(f"vLLM {v}: {e}")
                return 2
        for alias in ALIASES if args.vllm == "all" else ():
            a, target, sha = alias_evidence(alias)
            _say(f"vLLM {a} = {target}: scheduler.py sha256 {sha[:16]} in both wheels "
                 "(not built)")
        return 0
    for v in args.vllm.split(","):
        try:
            py = ensure_env(v.strip(), rebuild=args.rebuild)
        except (RuntimeError, ValueError) as e:
            _say(f"vLLM {v}: {e}")
            return 2
        _say(f"vLLM {v}: {py}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
