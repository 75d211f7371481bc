import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402
from hypothesis.database import DirectoryBasedExampleDatabase  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# a test computes the main job's facts and pictures (publish/cache.py: no run's entries
# read, none written) unless it sets PUBLISH_CACHE itself
os.environ.setdefault("PUBLISH_CACHE", "off")
# One example database for every run: xdist workers, HypoFuzz campaigns, and (with
# OLC_HYPOTHESIS_DB on a shared file system) many machines; a failure found anywhere is
# replayed first everywhere. Tests that pin database=None keep their own behaviour.
settings.register_profile(
    "shared",
    database=DirectoryBasedExampleDatabase(
        os.environ.get("OLC_HYPOTHESIS_DB", str(ROOT / ".hypothesis" / "examples"))),
    print_blob=True,
    # time is bounded per test by pytest-timeout; a wall-clock deadline per example only
    # flakes on a loaded 2-core machine (and under mutmut's instrumentation)
    deadline=None,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "shared"))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # a fixed Hypothesis seed unless one is given: two runs draw the same examples;
    # OLC_SEED (or --hypothesis-seed) picks another, and every failure prints it
    if config.getoption("hypothesis_seed", None) is None:
        config.option.hypothesis_seed = os.environ.get("OLC_SEED", "0")
    from tests.subset import VAR, parse_share

    try:
        parse_share(os.environ.get(VAR))
    except ValueError as e:  # one line naming the variable, exit 2
        pytest.exit(str(e), returncode=2)


def pytest_report_header(config: pytest.Config) -> str:
    return f"hypothesis seed: {config.getoption('hypothesis_seed')} (--hypothesis-seed / OLC_SEED)"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    from tests import replay

    outcome = yield
    report = outcome.get_result()
    if call.when != "call":
        return
    if report.failed:
        seed = item.config.getoption("hypothesis_seed")
        lines = [f"replay: python -m pytest '{item.nodeid}' --hypothesis-seed={seed}"]
        path = replay.write_failure(item.nodeid)
        if path is not None:
            lines.append(f"failing scenario written to {path}: python -m model lookup {path}")
        report.sections.append(("replay", "\n".join(lines)))
        sys.stderr.write("\n" + "\n".join(lines) + "\n")
    replay.forget()

if os.environ.get("OLC_MUTANT"):
    # python -m publish --mutants: run the suite against one mutant of model and encoding
    import importlib
    import pkgutil

    for pkg in ("model", "proofs", "publish"):
        for info in pkgutil.walk_packages([str(Path(__file__).resolve().parent.parent / pkg)],
                                          prefix=f"{pkg}."):
            if not info.name.endswith("__main__"):
                importlib.import_module(info.name)
    from proofs.mutants import applied

    MUTANT = applied(os.environ["OLC_MUTANT"])  # kept: collecting it would undo the patch
    MUTANT.__enter__()
