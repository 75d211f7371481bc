"""The committed reviewers' spec (docs/spec.md, docs/spec.html) is what the code produces.

Fast: re-renders from the committed proof results (docs/report.json, docs/spec-facts.json)
and the code's static content; no Z3 proof runs here.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from model.evaluate import evaluate
from model.explain import explain
from model.scenario import parse_scenario
from proofs.spec import (
    CI_WORKFLOW,
    SEED_FILE,
    gather_code_facts,
    load_results,
    regression_test,
    render,
)

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
STALE = ("docs/spec.{} differs from what the code produces: run `python -m proofs.spec docs/` "
         "(after a change to theorems or the encoding: `python -m proofs --report docs/`) "
         "and commit docs/")


@pytest.fixture(scope="module")
def spec() -> tuple[str, str]:
    results = load_results(DOCS)
    return render(gather_code_facts(results), results)


def test_spec_md_is_current(spec: tuple[str, str]) -> None:
    assert spec[0] == (DOCS / "spec.md").read_text(), STALE.format("md")


def test_spec_html_is_current(spec: tuple[str, str]) -> None:
    assert spec[1] == (DOCS / "spec.html").read_text(), STALE.format("html")


def test_spec_has_no_run_dependent_content(spec: tuple[str, str]) -> None:
    for word in ("seconds", "/tmp/", "/work/", "lookups/s", "requests/s"):
        assert word not in spec[0]


def test_spec_matches_the_proofs_report() -> None:
    report = json.loads((DOCS / "report.json").read_text())
    assert report["results"], "docs/report.json holds no result"
    md = (DOCS / "spec.md").read_text()
    for r in report["results"]:
        assert f"`{r['theorem']}`" in md


def test_spec_uses_the_explain_words_and_picture(spec: tuple[str, str]) -> None:
    seed = parse_scenario(json.loads((ROOT / SEED_FILE).read_text()))
    for sem in ("vllm-0.23.0", "vllm-0.24.0"):
        assert explain(seed, evaluate(seed, sem)) in spec[0]


def test_spec_pictures_exist(spec: tuple[str, str]) -> None:
    for name in ("spec-seed-vllm-0.23.0.png", "no-partial-state--vllm-0.23.0.png"):
        assert f"]({name})" in spec[0]
        assert (DOCS / name).exists(), name


def test_regression_template_is_python() -> None:
    seed = json.loads((ROOT / SEED_FILE).read_text())
    compile(regression_test(seed, 16), "regression.py", "exec")


def test_ci_workflow_runs_the_proofs_and_the_crosscheck() -> None:
    text = (ROOT / CI_WORKFLOW).read_text()
    assert "python -m proofs --report" in text
    assert "python -m sim.crosscheck --vllm" in text and "--examples 2000" in text
    assert "VLLM_VERSION: \"0.24.0\"" in text


@pytest.mark.crosscheck
@pytest.mark.parametrize("version,passes", [("0.24.0", True), ("0.23.0", False)])
def test_regression_template_on_the_real_scheduler(version: str, passes: bool,
                                                   tmp_path: Path) -> None:
    """The spec's pytest function as the spec shows it (the block-16 counterexample), run
    in the release's venv: it passes on 0.24.0 and fails on 0.23.0."""
    from sim.crosscheck.envs import ensure_env

    facts = json.loads((DOCS / "spec-facts.json").read_text())
    scen = facts["seed_counterexample"]
    hit = evaluate(parse_scenario(scen), "vllm-0.24.0").hit_tokens
    test = tmp_path / "regression.py"
    test.write_text(regression_test(scen, hit) + "\n\ntest_offloading_lookup_regression()\n")
    env = dict(os.environ, VLLM_LOGGING_LEVEL="ERROR", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([str(ensure_env(version)), str(test)], capture_output=True,
                          text=True, env=env, timeout=600)
    assert (proc.returncode == 0) == passes, proc.stderr[-2000:]
    if not passes:
        assert "AssertionError" in proc.stderr


@pytest.mark.slow
def test_spec_facts_are_current() -> None:
    """The expensive facts still come out the same (about a minute): the simulator's
    numbers exactly; the Z3 searches (whose incidental details, such as an unconstrained
    window size, may vary with the solver's time budget) in what the spec says of them.
    After a change to sim/ or the encoding: `python -m proofs --report docs/`."""
    from proofs.spec import FACTS, collect_facts

    fresh = json.loads(json.dumps(collect_facts(), sort_keys=True))
    committed = json.loads((DOCS / FACTS).read_text())
    stale = "docs/spec-facts.json is stale: run `python -m proofs --report docs/`"
    for key in ("sim", "rerun"):
        assert fresh[key] == committed[key], stale
    for facts in (fresh, committed):
        seed = parse_scenario(facts["seed_counterexample"])
        assert seed.prompt_tokens == 32
        assert evaluate(seed, "vllm-0.23.0").hit_tokens == 31
        assert evaluate(seed, "vllm-0.24.0").hit_tokens == 16
        alt = evaluate(parse_scenario(facts["alt_round_num_hit_counterexample"]))
        assert alt.refused is None and "no-partial-state" in {v.invariant for v in alt.violations}
