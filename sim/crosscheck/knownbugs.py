"""Known alignment bugs re-introduced as source patches (``bench/known_bugs/*.diff``).

Each patch has header lines ``# bug:``, ``# release:``, ``# invariant:`` (the invariant
the PR check must report broken).  A bug on a release without a model also names
``# scenario:`` (its reproduction) and optionally ``# stock:`` (a release that ships the
bug): ``detect_on_real`` runs that scenario on the patched release's real scheduler (and
on the stock host, and on the unpatched release as the control) and reads the invariant
off the real answer (``sim/crosscheck/bisect.py``).

``release_tree`` copies what the PR check reads of a release (its overlaid paths and
``_version.py``) from an unpacked wheel, a ``.whl`` or an installed ``vllm`` package;
``apply_patch`` re-introduces a bug into such a copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.crosscheck.envs import ROOT, find_wheel, venvs_dir
from sim.crosscheck.tree import OVERLAY


class BugError(ValueError):
    """A patch that does not apply, or missing sources: one line."""


BUGS_DIR = ROOT / "bench" / "known_bugs"
# Known bugs that need a release the model does not cover yet and have no patch under
# bench/known_bugs/ (a bug with a patch and a ``# scenario:`` runs on the real scheduler):
# (name, what, first release with the fix, first release without the code path)
NEEDS_RELEASE = [
    ("mamba-all-unrounded", 'vLLM #51094 reverted: mamba_cache_mode="all" not rounded '
     "(fixed in 0.28.0)", "0.28.0", "0.32.0"),
]
# why a release from the last field on cannot host the bug (docs/releases.md § #51094)
GONE_BECAUSE = {
    "mamba-all-unrounded": 'vLLM 0.32.0 dropped mode "all" (vllm/config/cache.py:63 of '
                           '0.32.0: MambaCacheMode is "align" or "none")',
}


@dataclass(frozen=True)
class Bug:
    name: str
    what: str
    release: str
    invariant: str
    patch: Path | None
    scenario: str | None = None  # the reproduction run on the real scheduler
    stock: str | None = None  # a release that ships the bug


def load_bugs() -> list[Bug]:
    bugs = []
    for p in sorted(BUGS_DIR.glob("*.diff")):
        head = {}
        for line in p.read_text().splitlines():
            if not line.startswith("# "):
                break
            key, _, value = line[2:].partition(":")
            head[key.strip()] = value.strip()
        bugs.append(Bug(p.stem, head["bug"], head["release"], head["invariant"], p,
                        head.get("scenario"), head.get("stock")))
    return bugs


def has_release(sources: Path, version: str) -> bool:
    """``sources`` holds release ``version`` in a form ``release_tree`` reads."""
    return ((sources / "__init__.py").is_file()
            or (sources / f"vllm-{version}" / "vllm").is_dir()
            or any(sources.glob(f"vllm-{version}-*.whl")))


def wheel_dirs() -> list[Path]:
    """Where release wheels are looked for without ``--sources``: ``$CROSSCHECK_WHEELS``,
    ``../wheels`` next to the checkout, then ``<venvs>/wheels`` (where they are fetched)."""
    env = os.environ.get("CROSSCHECK_WHEELS")
    return [*([Path(env)] if env else []), ROOT.parent / "wheels", venvs_dir() / "wheels"]


def find_sources(version: str, *, fetch: bool = True) -> Path:
    """The first of ``wheel_dirs()`` that holds release ``version``; if none does and
    ``fetch``, ``pip download --no-deps vllm==X`` into the last one.  BugError (one line)
    when neither works."""
    dirs = wheel_dirs()
    for d in dirs:
        if has_release(d, version):
            return d
    if not fetch:
        raise BugError(f"--sources: no vllm-{version}-*.whl in "
                       + ", ".join(str(d) for d in dirs))
    dest = dirs[-1]
    dest.mkdir(parents=True, exist_ok=True)
    print(f"[known bugs] pip download --no-deps vllm=={version} -d {dest}",
          file=sys.stderr, flush=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                           f"vllm=={version}", "-d", str(dest)],
                          capture_output=True, text=True)
    if proc.returncode != 0 or not has_release(dest, version):
        why = [ln for ln in proc.stderr.splitlines() if ln.strip().startswith("ERROR")]
        raise BugError(f"--sources: no vllm-{version}-*.whl in "
                       + ", ".join(str(d) for d in dirs)
                       + f", and pip could not fetch it ({(why or ['pip failed'])[-1]})")
    return dest


def release_tree(sources: Path, version: str, dest: Path) -> Path:
    """Copy the overlaid paths (and ``_version.py``) of release ``version`` to ``dest``
    from ``sources/vllm-X/vllm/``, ``sources/vllm-X-*.whl`` or, when ``sources`` is a
    ``vllm`` package directory itself, from it."""
    unpacked = (sources if (sources / "__init__.py").is_file()
                else sources / f"vllm-{version}" / "vllm")
    wanted = ["_version.py", *OVERLAY]
    if unpacked.is_dir():
        for rel in wanted:
            src, dst = unpacked / rel, dest / "vllm" / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
            elif src.is_file():
                shutil.copy2(src, dst)
        return dest
    wheels = sorted(sources.glob(f"vllm-{version}-*.whl"))
    if not wheels:  # the wheel the release's light env is made from (downloaded if needed)
        try:
            wheels = [find_wheel(version, fetch=True)]
        except ValueError:
            raise BugError(f"--sources: neither {unpacked.parent} nor vllm-{version}-*.whl "
                           f"in {sources} or the cross-check's wheel folders") from None
    with zipfile.ZipFile(wheels[0]) as z:
        for name in z.namelist():
            rel = name.removeprefix("vllm/")
            if name.startswith("vllm/") and name.endswith(".py") and any(
                    rel == w or rel.startswith(w + "/") for w in wanted):
                z.extract(name, dest)
    return dest


def apply_patch(patch: Path, tree: Path) -> None:
    proc = subprocess.run(["patch", "-p1", "-s", "--no-backup-if-mismatch", "-d",
                           str(tree), "-i", str(patch)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BugError(f"{patch.name} does not apply: {(proc.stdout + proc.stderr).strip()}")




@dataclass(frozen=True)
class RealDetection:
    label: str  # what ran: the patched release, the stock host, the control
    version: str
    hit: int | None
    broken: tuple[str, ...]  # the invariants its real answer breaks
    expect_broken: bool  # True: the bug must show; False: the control
    seconds: float
    invariant: str

    @property
    def seen(self) -> bool:
        return self.invariant in self.broken

    @property
    def ok(self) -> bool:
        return self.seen == self.expect_broken


def detect_on_real(bug: Bug, scratch: Path) -> list[RealDetection]:
    """Run the bug's scenario on the real schedulers (light envs): the release with the
    patch applied (must break the invariant), the stock host if named (must break it) and
    the unpatched release (the control: must not).  BugError on a missing header or a
    patch that does not apply."""
    import time

    from sim.crosscheck import bisect, envs
    from sim.crosscheck.client import RealScheduler

    if bug.scenario is None or bug.patch is None:
        raise BugError(f"{bug.name}: no '# scenario:' header or patch")
    scen = ROOT / bug.scenario
    patch = bug.patch
    dest = scratch / f"{bug.name}-overlay"
    try:
        package = envs.light_package(bug.release)
        if bug.stock:
            envs.ensure_light_env(bug.stock)
    except (RuntimeError, ValueError, OSError) as e:
        raise BugError(f"{bug.name}: no environment: {str(e).splitlines()[0]}") from None
    shutil.copytree(package, dest / "vllm", ignore=shutil.ignore_patterns("__pycache__"))
    apply_patch(patch, dest)

    def patched(version: str, cases: Any) -> list[dict[str, Any]]:
        with RealScheduler(version, overlay=dest,
                           python=envs.ensure_light_env(version)) as real:
            return [real.run(c) for c in cases]

    runs: list[tuple[str, str, bisect.Runner, bool]] = [
        (f"vLLM {bug.release} + {patch.name}", bug.release, patched, True)]
    if bug.stock:
        runs.append((f"vLLM {bug.stock} as shipped (carries the bug)", bug.stock,
                     bisect.light_runner, True))
    runs.append((f"control: vLLM {bug.release} as shipped", bug.release,
                 bisect.light_runner, False))
    out = []
    for label, version, runner, want in runs:
        t0 = time.monotonic()
        b = bisect.run_bisect([scen], versions=(version,), runner=runner, say=lambda m: None)
        c = b.cells[(0, version)]
        if c.error:
            raise BugError(f"{bug.name}: {label}: {c.error}")
        out.append(RealDetection(label, version, c.hit, c.breaks or (), want,
                                 round(time.monotonic() - t0, 1), bug.invariant))
    return out
