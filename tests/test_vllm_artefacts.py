"""The regression test the spec offers vLLM (docs/vllm/test_offloading_mamba_align.py)
against the real schedulers: every test in it fails on vLLM 0.23.0 and passes on 0.24.0.

It runs in each release's cross-check environment (built by ``python -m sim.crosscheck.envs``;
no pytest there, so each ``test_*`` function is called directly)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REGRESSION = ROOT / "docs" / "vllm" / "test_offloading_mamba_align.py"
RUNNER = """
import json, runpy, sys
module = runpy.run_path(sys.argv[1])
out = {}
for name, fn in sorted(module.items()):
    if name.startswith("test_"):
        try:
            fn()
            out[name] = "passed"
        except AssertionError as e:
            out[name] = "failed: " + str(e)
print(json.dumps(out))
"""


def test_regression_file_is_plain_python() -> None:
    source = REGRESSION.read_text()
    compile(source, str(REGRESSION), "exec")
    assert "def test_" in source and "import pytest" not in source


@pytest.mark.crosscheck
@pytest.mark.xdist_group("releases")  # with test_crosscheck.py: the same releases' servers
@pytest.mark.parametrize("version,passes", [("0.23.0", False), ("0.24.0", True)])
def test_regression_file_on_the_real_scheduler(version: str, passes: bool) -> None:
    # the release's full env if made, else its light env (the file needs the scheduler
    # only): CI makes no full env for 0.23.0
    # (in the harnesses' environment: the fork server of the release's harnesses runs it)
    from sim.crosscheck import forkserver
    from sim.crosscheck.client import harness_env
    from sim.crosscheck.envs import harness_python

    proc = forkserver.run([str(harness_python(version)), "-c", RUNNER, str(REGRESSION)],
                          env=harness_env(), timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(outcome) >= 2, outcome
    for name, result in outcome.items():
        assert (result == "passed") == passes, f"vLLM {version} {name}: {result}"
