"""Issue 22's "Done when": a new semantics is one module, and nothing else is edited.

The test writes a toy fix of vLLM 0.33.0 into a temporary package (its ``last_token``
step drops the last-prompt-token margin: it returns the bound unchanged), registers it
with ``OLC_SEMANTICS`` (``releases/__init__.py``), and shows in subprocesses that

(a) the model answers for it (``python -m model lookup --semantics NAME FILE``),
(b) the proofs check it and the toy's broken step turns a theorem red: it inherits 0.33.0's
    expectation that leaves-last-token holds, and the prover finds a counterexample
    (``python -m proofs --semantics NAME --theorem leaves-last-token``: FAIL, exit 1),
(c) the report (``python -m publish --semantics NAME --theorem leaves-last-token --report
    DIR``) has its row, and the spec's matrix (``publish.spec.matrix`` over that report)
    a column for it, with that verdict,
(d) the cross-check lists it (``python -m sim.crosscheck --list-semantics``),
(e) the family conformance entry runs it (``tests/test_family_conformance.py``, one
    parametrised case per registered name): its encodings and its model agree, the step
    being one function for both.

The toy's name is spelled once, inside the toy's source (``TOY_NAME``).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from releases.base import Semantics

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "toy_semantics_plugin"
MODULE = "keeps_last_token"
TOY_NAME = "toy-v033-keeps-last-token"

TOY_SOURCE = f'''"""A toy fix of vLLM 0.33.0: the last-prompt-token rule (scheduler.py:876)
keeps the bound, so a hit may end at the prompt's end."""

from dataclasses import replace
from typing import Any

from releases import vllm_0_33_0
from releases.arith import Arith
from releases.base import child

NAME = {TOY_NAME!r}


def last_token_keep(a: Arith, max_hit: Any, num_tokens: Any) -> Any:
    return max_hit


SEMANTICS = child(
    vllm_0_33_0.SEMANTICS, name=NAME, kind="fix",
    steps=replace(vllm_0_33_0.SEMANTICS.steps, last_token=last_token_keep),
    summary="A toy: vLLM 0.33.0 with the last-prompt-token margin dropped.",
)
'''

# a Mamba align layout whose whole prompt is stored: 0.33.0 leaves the last token (hit 2
# of 4: 4 - 1 rounded down to the Mamba chunk 2); the toy loads all 4
SCENARIO = {
    "block_size_factor": 1, "prompt_tokens": 4, "num_computed_tokens": 0,
    "groups": [{"kind": "mamba", "gpu_block_size": 2, "mamba_cache_mode": "align",
                "stored": "all"}],
}


@pytest.fixture
def toy_env(tmp_path: Path) -> dict[str, str]:
    """The environment that registers the toy: its package on PYTHONPATH, its module in
    OLC_SEMANTICS."""
    pkg = tmp_path / "plugins" / PACKAGE
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / f"{MODULE}.py").write_text(TOY_SOURCE)
    path = os.pathsep.join(p for p in (str(tmp_path / "plugins"), str(ROOT),
                                       os.environ.get("PYTHONPATH", "")) if p)
    return os.environ | {"PYTHONPATH": path, "OLC_SEMANTICS": f"{PACKAGE}.{MODULE}"}


def _toy_semantics(env: dict[str, str]) -> Semantics:
    """The toy's record, read from its module (importing it registers nothing)."""
    sys.path.insert(0, env["PYTHONPATH"].split(os.pathsep)[0])
    try:
        mod = importlib.import_module(f"{PACKAGE}.{MODULE}")
    finally:
        del sys.path[0]
        for name in (f"{PACKAGE}.{MODULE}", PACKAGE):
            sys.modules.pop(name, None)
    sem: Semantics = mod.SEMANTICS
    return sem


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_model_answers_for_a_registered_toy(toy_env: dict[str, str], tmp_path: Path) -> None:
    """(a) The model runs the toy's step: the hit reaches the prompt's end."""
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps(SCENARIO | {"semantics": TOY_NAME}))
    # the name is refused where the toy is not registered
    unregistered = os.environ | {"PYTHONPATH": toy_env["PYTHONPATH"], "OLC_SEMANTICS": ""}
    refused = _run(unregistered, "-m", "model", "lookup", "--semantics", TOY_NAME,
                   str(scenario))
    assert refused.returncode == 2 and TOY_NAME in refused.stderr, refused
    r = _run(toy_env, "-m", "model", "lookup", "--semantics", TOY_NAME, "--json",
             str(scenario))
    assert r.returncode == 1, r.stdout + r.stderr  # a violation
    out = json.loads(r.stdout.splitlines()[0])
    assert out["semantics"] == TOY_NAME and out["hit_tokens"] == 4, out
    assert "leaves-last-token" in json.dumps(out["violations"]), out
    # its parent, on the same file: the margin is left (the toy's step is the difference)
    parent = _toy_semantics(toy_env).parent
    assert parent is not None
    r = _run(toy_env, "-m", "model", "lookup", "--semantics", parent, "--json",
             str(scenario))
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout.splitlines()[0])["hit_tokens"] == 2, r.stdout


def test_proofs_spec_and_crosscheck_pick_up_a_registered_toy(
        toy_env: dict[str, str], tmp_path: Path) -> None:
    """(b) the toy's broken step turns leaves-last-token red; (c) the spec's matrix has
    its column; (d) the cross-check lists it."""
    run = ("--semantics", TOY_NAME, "--theorem", "leaves-last-token")
    r = _run(toy_env, "-m", "proofs", *run)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAIL: 0 of 1 results match their expectation" in r.stdout, r.stdout

    report = tmp_path / "report"
    r = _run(toy_env, "-m", "publish", *run, "--report", str(report))
    assert r.returncode == 1, r.stdout + r.stderr
    rows = json.loads((report / "report.json").read_text())["results"]
    (row,) = [x for x in rows if x["semantics"] == TOY_NAME]
    assert row["theorem"] == "leaves-last-token"
    assert (row["expected"], row["status"], row["matches"]) == ("holds", "COUNTEREXAMPLE",
                                                                 False), row

    cells = _run(toy_env, "-c", (
        "import json, sys; from pathlib import Path; from publish import spec; "
        "names = list(spec.columns()); i = names.index(sys.argv[1]); "
        "m = spec.matrix(spec.load_results(Path(sys.argv[2]))); "
        "print(json.dumps({row['theorem']: row['cells'][i] for row in m}))"),
        TOY_NAME, str(report))
    assert cells.returncode == 0, cells.stderr
    cell = json.loads(cells.stdout)["leaves-last-token"]
    assert (cell["expected"], cell["obtained"], cell["matches"]) == (
        "holds", "counterexample", False), cell

    listed = _run(toy_env, "-m", "sim.crosscheck", "--list-semantics")
    assert listed.returncode == 0, listed.stderr
    line = next(x for x in listed.stdout.splitlines() if x.split("\t")[0] == TOY_NAME)
    assert "no real counterpart" in line, line


def test_family_conformance_picks_up_a_registered_toy(toy_env: dict[str, str]) -> None:
    """(e) The conformance entry has a case for the toy, and it passes."""
    r = _run(toy_env, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             f"tests/test_family_conformance.py::test_family_conformance[{TOY_NAME}]")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "1 passed" in r.stdout, r.stdout[-3000:]
