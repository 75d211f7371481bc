"""The GPU cross-check's pure parts: result schema, comparison with model/ and sim/,
rendering, and the driver's argument handling. Uses the committed results in
sim/gpu/results/ (measured on one H200; see sim/gpu/results/report.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from releases import vllm_0_24_0
from sim.gpu import report
from sim.gpu.driver import BadInput, first_diff, make_prompts, parse_lengths
from sim.gpu.driver import main as driver_main

V024 = vllm_0_24_0.SEMANTICS.name

RESULTS = report.RESULTS
BOUNDARIES = {32, 48, 64, 80}


@pytest.fixture(scope="module")
def cases() -> list[report.Case]:
    return report.load_results(RESULTS)


@pytest.fixture(scope="module")
def compared(cases: list[report.Case]) -> list[report.Compared]:
    return report.compare(cases, report.run_sim)


def _case(cases: list[report.Case], name: str) -> report.Case:
    return next(c for c in cases if c.name == name)


def test_every_committed_result_follows_the_schema(cases: list[report.Case]) -> None:
    names = {c.name for c in cases}
    for v, m in [("0.23.0", "stock"), ("0.24.0", "stock"), ("0.24.0", "fix-disabled"),
                 ("0.33.0", "stock")]:
        assert f"vllm-{v}-mamba-{m}" in names
        assert f"vllm-{v}-hybrid-{m}" in names
    for c in cases:
        assert [r.length for r in c.rows] == list(range(17, 81)), c.name
        assert c.gpu_seconds > 0
        assert all(len(r.cold_tokens) == 16 for r in c.rows)
        if c.second == "cpu":
            assert all(r.stored is not None and len(r.stored) == len(c.groups) for r in c.rows)
            assert all(r.num_computed_tokens == 0 for r in c.rows)


def test_every_measured_hit_is_the_models(compared: list[report.Compared]) -> None:
    with_model = [c for c in compared if c.case.semantics is not None]
    assert len(with_model) >= 9 * 64
    assert all(c.model.hit == c.row.connector_hit for c in with_model)
    # the engine reports the connector's hit as cached tokens (the GPU cache was reset)
    assert all(c.row.num_cached_tokens == c.row.connector_hit for c in compared)


def test_the_simulator_agrees_wherever_it_predicts(compared: list[report.Compared]) -> None:
    with_sim = [c for c in compared if c.sim.hit is not None]
    assert len(with_sim) >= 6 * 64
    assert all(c.sim.hit == c.row.connector_hit for c in with_sim)
    assert all(c.sim.corrupted == c.measured_corrupted for c in with_sim)


def test_every_disagreement_is_explained(compared: list[report.Compared]) -> None:
    assert report.unexplained(compared) == []
    explained = [c for c in compared if c.disagreements()]
    assert {c.explanation for c in explained} <= {"all-mode-two-token-tail"}
    assert all(c.row.length % 16 == 2 for c in explained)


@pytest.mark.parametrize("name", ["vllm-0.23.0-mamba-stock", "vllm-0.24.0-mamba-fix-disabled",
                                  "vllm-0.23.0-hybrid-stock", "vllm-0.24.0-hybrid-fix-disabled"])
def test_without_the_fix_the_boundary_lengths_change_the_answer(
        cases: list[report.Case], name: str) -> None:
    c = _case(cases, name)
    assert {r.length for r in c.rows if not r.equal} == BOUNDARIES
    assert all(r.connector_hit == r.length - 1 for r in c.rows if r.length in BOUNDARIES)


@pytest.mark.parametrize("name", ["vllm-0.24.0-mamba-stock", "vllm-0.24.0-hybrid-stock",
                                  "vllm-0.33.0-mamba-stock", "vllm-0.33.0-hybrid-stock"])
def test_the_fixed_versions_never_change_an_answer(cases: list[report.Case], name: str) -> None:
    assert all(r.equal for r in _case(cases, name).rows)


def test_cold_outputs_are_the_transformers_outputs(cases: list[report.Case]) -> None:
    hf = report.load_hf_reference(RESULTS / "hf-reference.json")
    assert hf is not None
    for c in cases:
        assert all(r.cold_tokens == hf[c.model][r.length] for r in c.rows), c.name
        # a second output that differs from the cold one is the wrong one
        assert all((r.hot_tokens == hf[c.model][r.length]) == r.equal for r in c.rows), c.name


def test_scenario_uses_the_store_content_the_engine_held(cases: list[report.Case]) -> None:
    c = _case(cases, "vllm-0.24.0-hybrid-stock")
    row = next(r for r in c.rows if r.length == 32)
    s = report.scenario_for(c, row, V024)
    assert s["prompt_tokens"] == 32 and s["block_size_factor"] == 1
    assert s["groups"] == [
        {"kind": "mamba", "gpu_block_size": 16, "stored": [1], "mamba_cache_mode": "align"},
        {"kind": "full_attention", "gpu_block_size": 16, "stored": [0, 1]}]
    # only the state at token 32 is stored; the fix caps the hit at 16: nothing to load
    assert report.model_prediction(c, row) == report.Prediction(0, False)


def test_render(cases: list[report.Case], compared: list[report.Compared],
                tmp_path: Path) -> None:
    hf = report.load_hf_reference(RESULTS / "hf-reference.json")
    md = report.render_markdown(cases, compared, hf)
    assert "| 0.24.0 / mamba / stock / align | 64 |" in md
    assert "all-mode-two-token-tail" in md and "UNEXPLAINED" not in md
    assert "Findings from the control runs" in md
    report.render_plot(cases, compared, tmp_path / "hits.png")
    assert (tmp_path / "hits.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_main_writes_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report.main(["--out", str(tmp_path), "--no-sim"]) == 0
    assert (tmp_path / "report.md").exists() and (tmp_path / "hits.png").exists()
    assert "0 unexplained" in capsys.readouterr().out


def _write(folder: Path, name: str, data: object) -> None:
    (folder / name).write_text(data if isinstance(data, str) else json.dumps(data))


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(schema="x"), "schema"),
    (lambda d: d.update(error="RuntimeError: boom"), "the run failed"),
    (lambda d: d["lengths"][0].update(equal="yes"), "lengths[0].equal"),
    (lambda d: d["lengths"][0].update(stored=[[0]]), "lengths[0].stored"),
    (lambda d: d["groups"][0].pop("kind"), "groups[0].kind"),
])
def test_bad_result_files_give_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        mutate: object, message: str) -> None:
    d = json.loads((RESULTS / "vllm-0.24.0-hybrid-stock.json").read_text())
    mutate(d)  # type: ignore[operator]
    _write(tmp_path, "vllm-9.9.9-x.json", d)
    assert report.main(["--results", str(tmp_path), "--no-sim"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: vllm-9.9.9-x: ") and message in err and "\n" not in err


def test_unreadable_and_missing_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report.main(["--results", str(tmp_path)]) == 2
    assert "no vllm-*.json" in capsys.readouterr().err
    _write(tmp_path, "vllm-1.json", "{not json")
    assert report.main(["--results", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: vllm-1.json: ")


def test_driver_lengths_and_prompts() -> None:
    assert parse_lengths("17-20,32") == [17, 18, 19, 20, 32]
    for bad in ("20-17", "x", "0", ""):
        with pytest.raises(BadInput):
            parse_lengths(bad)
    prompts = make_prompts(list(range(17, 81)), 0, 512)
    assert len({tuple(p[:16]) for p in prompts.values()}) == 64
    assert first_diff([1, 2, 3], [1, 2, 3]) is None
    assert first_diff([1, 2, 3], [1, 5, 3]) == 1
    assert first_diff([1, 2], [1, 2, 3]) == 2


def test_driver_bad_input_exits_2(capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    assert driver_main(["--model", "mamba", "--lengths", "9-3", "--out", "x.json"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --lengths: expected e.g. 17-80 or 17,32,33, got '9-3'")
    assert driver_main(["--model", "mamba", "--connector", "none", "--out", "x.json"]) == 2
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    assert driver_main(["--model", "mamba", "--out", "x.json"]) == 2
    assert "VLLM_ENABLE_V1_MULTIPROCESSING=0" in capsys.readouterr().err
