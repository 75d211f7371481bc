"""The committed reviewers' spec (docs/spec.md, docs/spec/*.md and their HTML twins) is
what the code produces, and its first screen holds what a reviewer acts on.

Fast: re-renders from the committed proof results (docs/report.json, docs/spec-facts.json)
and the templates; no Z3 proof runs here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import releases
from model.evaluate import evaluate
from model.explain import explain
from model.scenario import parse_scenario
from publish.spec import (
    CI_WORKFLOW,
    PAGES,
    SEED_FILE,
    gather_code_facts,
    load_results,
    pictures,
    render,
    to_html,
)
from releases import alt_cache_config_block_size, vllm_0_23_0, vllm_0_24_0

V023 = vllm_0_23_0.SEMANTICS.name
V024 = vllm_0_24_0.SEMANTICS.name
CACHE_CONFIG = alt_cache_config_block_size.SEMANTICS.name

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
STALE = ("docs/{} differs from what the code produces: run `python -m publish.spec docs/` "
         "(after a change to theorems or the encoding: `python -m publish --report docs/`) "
         "and commit docs/")


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    results = load_results(DOCS)
    return render(gather_code_facts(results), results)


def test_pages_are_current(pages: dict[str, str]) -> None:
    assert set(pages) == set(PAGES)
    for rel, md in pages.items():
        assert md == (DOCS / rel).read_text(), STALE.format(rel)
        html = to_html(md, md.splitlines()[0].lstrip("# "))
        assert html == (DOCS / rel).with_suffix(".html").read_text(), STALE.format(rel)


def test_first_screen_holds_invariant_matrix_scope_and_preconditions(
        pages: dict[str, str]) -> None:
    first = "\n".join(pages["spec.md"].splitlines()[:40])
    assert "(num_computed_tokens + num_hit_tokens) % _mamba_align_size == 0" in first
    report = json.loads((DOCS / "report.json").read_text())
    newest = releases.newest().name
    for r in report["results"]:
        # the newest release and its fixes on the first screen, the rest a page later
        # (an older release built on the newest, as vLLM 0.32.0 on 0.33.0, is not a fix)
        on_first = r["semantics"] in (newest, *releases.fixes(of=newest))
        page = first if on_first else pages["spec/releases.md"]
        assert f"[`{r['theorem']}`]" in page and f"`{r['semantics']}`" in page
    assert "**Proof scope:**" in first
    assert "| precondition" in first and "enforced in vLLM?" in first
    for r in report["results"]:
        if r["semantics"] == V024:
            for p in r["preconditions"]:
                if not p["scope"]:
                    assert f"`{p['name']}`" in first, p["name"]


def test_main_page_is_small(pages: dict[str, str]) -> None:
    assert len(pages["spec.md"].encode()) < 25_000


def test_matrix_follows_the_results(pages: dict[str, str]) -> None:
    """A changed verdict shows in the matrix: the spec reads it, it is not written in."""
    results = load_results(DOCS)
    row = dict(results.rows[0], status="UNKNOWN", matches=False, counterexample=None)
    changed = type(results)((row, *results.rows[1:]), results.facts)
    rendered = render(gather_code_facts(changed), changed)
    assert "| no verdict |" in rendered["spec/releases.md"]
    assert "| no verdict |" not in pages["spec/releases.md"]
    assert f"no verdict for {row['theorem']} on {row['semantics']}" in rendered["spec.md"]


def test_spec_has_no_run_dependent_content(pages: dict[str, str]) -> None:
    for md in pages.values():
        for word in ("seconds", "/tmp/", "/work/", "lookups/s", "requests/s"):
            assert word not in md


def test_spec_uses_the_explain_words(pages: dict[str, str]) -> None:
    seed = parse_scenario(json.loads((ROOT / SEED_FILE).read_text()))
    for sem in (V023, V024):
        assert explain(seed, evaluate(seed, sem)) in pages["spec/counterexamples.md"]


def test_every_picture_is_shown_once_and_exists(pages: dict[str, str]) -> None:
    results = load_results(DOCS)
    drawn = pictures(results)
    text = "\n".join(pages.values())
    for rel in drawn:
        assert (DOCS / rel).exists(), rel
        assert text.count(rel.removeprefix("spec/") + ")") == 1, rel
    assert sorted(p.relative_to(DOCS).as_posix() for p in (DOCS / "spec/img").glob("*.png")) \
        == sorted(drawn)


def test_every_counterexample_has_a_section(pages: dict[str, str]) -> None:
    report = json.loads((DOCS / "report.json").read_text())
    page = pages["spec/counterexamples.md"]
    for r in report["results"]:
        if r.get("counterexample"):
            assert f"## {r['theorem']} on {r['semantics']}\n" in page


def test_ci_workflow_runs_the_proofs_and_the_crosscheck() -> None:
    text = (ROOT / CI_WORKFLOW).read_text()
    assert "python -m publish --report" in text
    assert "python -m sim.crosscheck --vllm" in text and "--examples 2000" in text
    assert "VLLM_VERSION: \"0.24.0\"" in text


@pytest.mark.slow
def test_spec_facts_are_current() -> None:
    """The expensive facts still come out the same (about a minute): the simulator's
    numbers exactly; the Z3 searches (whose incidental details, such as an unconstrained
    window size, may vary with the solver's time budget) in what the spec says of them.
    After a change to sim/ or the encoding: `python -m publish --report docs/`."""
    from publish.facts import FACTS, collect_facts

    fresh = json.loads(json.dumps(collect_facts(), sort_keys=True))
    committed = json.loads((DOCS / FACTS).read_text())
    stale = "docs/spec-facts.json is stale: run `python -m publish --report docs/`"
    for key in ("sim", "rerun"):
        assert fresh[key] == committed[key], stale
    for facts in (fresh, committed):
        seed = parse_scenario(facts["seed_counterexample"])
        assert seed.prompt_tokens == 32
        assert evaluate(seed, V023).hit_tokens == 31
        assert evaluate(seed, V024).hit_tokens == 16
        alt = evaluate(parse_scenario(facts["alt_round_num_hit_counterexample"]))
        assert alt.refused is None and "no-partial-state" in {v.invariant for v in alt.violations}


def test_links_to_files_of_this_repository_exist(pages: dict[str, str]) -> None:
    for rel, md in pages.items():
        base = (DOCS / rel).parent
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", md):
            assert (base / target).resolve().exists(), f"{rel}: {target}"


def test_a_semantics_without_results_shows_as_not_run() -> None:
    results = load_results(DOCS)
    rows = tuple(r for r in results.rows if r["semantics"] != CACHE_CONFIG)
    fewer = type(results)(rows, results.facts)
    rendered = render(gather_code_facts(fewer), fewer)
    md = rendered["spec.md"]
    assert any("| not run |" in line for line in rendered["spec/releases.md"].splitlines())
    assert re.search(rf"`{re.escape(CACHE_CONFIG)}`(, `[^`]+`)* ha(s|ve) no proofs yet", md)


def test_the_verdict_over_every_accepted_layout_shows_beside_the_one_under_preconditions(
        ) -> None:
    """Results that carry a verdict over every layout the release accepts (no precondition)
    show it in the matrix where it differs, with its counterexample, and the scope says the
    proofs cover every accepted layout."""
    results = load_results(DOCS)
    cex = {"semantics": V024, "block_size_factor": 1, "prompt_tokens": 32,
           "num_computed_tokens": 0,
           "groups": [{"kind": "mamba", "gpu_block_size": 16, "mamba_cache_mode": "all",
                       "stored": "all"}]}
    rows = tuple(dict(r, over_accepted_layouts=(
        {"status": "COUNTEREXAMPLE", "expected": "fails", "counterexample": cex}
        if (r["theorem"], r["semantics"]) == ("no-partial-state", V024) else
        {"status": r["status"], "expected": r["expected"], "counterexample": None}))
        for r in results.rows)
    wider = type(results)(rows, results.facts)
    pages = render(gather_code_facts(wider), wider)
    first = "\n".join(pages["spec.md"].splitlines()[:40])
    assert ("holds if `mamba-mode-not-all`, `align-divides-blocks` ([fails otherwise]("
            "counterexamples.md#no-partial-state-on-vllm-0240-over-every-accepted-layout))"
            in pages["spec/releases.md"])
    assert "for every layout the release's start-up checks accept" in first
    assert f"## no-partial-state on {V024} over every accepted layout\n" in pages[
        "spec/counterexamples.md"]
    assert f"img/no-partial-state--{V024}--accepted.png" in pages["spec/counterexamples.md"]


def test_a_fact_taken_from_a_pair_is_that_pairs_search(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """``python -m publish --report`` takes the facts of PAIR_FACTS from the pairs' rows:
    the fact's own search and the pair's (after its proof fails) ask the same question."""
    import proofs.check as check
    from publish.facts import PAIR_FACTS, fact_part

    asked: list[tuple[str, str, tuple[str, ...]]] = []

    def search(thm, sem, assumed, timeout_ms, sizes=None):  # type: ignore[no-untyped-def]
        assert sizes is None
        asked.append((thm.name, sem.name, tuple(dict.fromkeys((*check.RUNTIME, *assumed)))))
        return check.Verdict("UNKNOWN", 0.0)

    monkeypatch.setattr(check, "counterexample", search)
    monkeypatch.setattr(check, "prove", lambda *a: ("FAILED", "stubbed"))
    for name, (thm, sem) in PAIR_FACTS.items():
        asked.clear()
        fact_part(name)
        check.check(thm, sem)
        assert len(asked) == 2 and asked[0] == asked[1], asked


def test_fact_parts_name_every_simulator_run_once() -> None:
    # FACT_PARTS lists each part with its measured cost: every run collect_facts reads
    from publish.facts import FACT_PARTS, SIM_LABELS
    from publish.names import SIM_SEMANTICS

    sims = {f"sim:{label}:{sem}" for label in SIM_LABELS for sem in SIM_SEMANTICS}
    assert {n for n in FACT_PARTS if n.startswith("sim:")} == sims
    assert all(seconds > 0 for seconds in FACT_PARTS.values())


def test_first_screen_answers_the_reviewer(pages: dict[str, str]) -> None:
    """The spec's first 15 lines name the newest release, its verdict, a finding, a fix
    diff and the evidence (issue 26)."""
    head = "\n".join(pages["spec.md"].splitlines()[:15])
    newest = releases.newest()
    assert f"vLLM {newest.base_version}" in head.splitlines()[1]
    assert re.search(r"\*\*(fails|holds)\*\*", head)
    assert re.search(r"\]\(findings/\d{3}-[\w-]+\.md\)", head)
    assert re.search(r"\]\(findings/\d{3}-fix[\w-]*\.diff\)", head)
    assert "**Evidence:**" in head
    # whether a verdict matched the declared expectation is the report's business
    assert "✓" not in head
