"""The real-configuration layout table (docs/layouts-vllm-0.33.0.*) and its templates."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

import releases
from model.evaluate import evaluate
from model.layout import Refused, resolve_layout
from model.real_layouts import (
    DEFAULT_TABLE,
    LayoutError,
    flags,
    load_templates,
    parse_table,
)
from model.semantics import get_semantics
from releases import vllm_0_24_0
from sim.layouts.cli import main, render_file
from sim.layouts.strategy import real_layout_scenarios

V024 = vllm_0_24_0.SEMANTICS.name

MD = DEFAULT_TABLE.with_suffix(".md")


def test_markdown_is_rendered_from_the_json() -> None:
    assert MD.read_text() == render_file(DEFAULT_TABLE), (
        "docs/layouts-vllm-0.33.0.md is stale: python -m sim.layouts --render")


def test_table_covers_the_required_architectures() -> None:
    ts = load_templates()
    seen = {(t.architecture, t.drafter) for t in ts if t.accepted}
    for arch in ("MambaForCausalLM", "Mamba2ForCausalLM", "JambaForCausalLM",
                 "NemotronHForCausalLM", "Qwen3NextForCausalLM", "FalconH1ForCausalLM",
                 "GraniteMoeHybridForCausalLM"):
        assert any(a == arch for a, _ in seen), arch
    assert ("Qwen3NextForCausalLM", "mtp") in seen
    assert ("Qwen3NextForCausalLM", "none") in seen
    assert {t.model for t in ts} >= {"nemotron-h", "nemotron-h-swa"}
    assert any(g.kind == "sliding_window" for t in ts for g in t.groups)
    assert {t.backend for t in ts} >= {"FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"}
    keys = [t.key for t in ts]
    assert len(keys) == len(set(keys))


def test_every_template_loads_as_a_scenario() -> None:
    """Accepted rows give valid scenarios whose groups are the row's, and 0.24.0's start-up
    checks either accept them or refuse them naming a check; refused rows name vLLM's."""
    for t in load_templates():
        if not t.accepted:
            assert t.refused_by and t.refused_by.startswith("vllm/"), t.key
            with pytest.raises(LayoutError):
                t.scenario_json(semantics=V024, prompt_tokens=16)
            continue
        prompt = math.lcm(*(g.block_size for g in t.groups)) * 2
        s = t.scenario(semantics=V024, prompt_tokens=prompt)
        assert [(g.kind, g.gpu_block_size, g.sliding_window, g.eagle) for g in s.groups] == [
            (g.kind, g.block_size, g.sliding_window, g.eagle) for g in t.groups]
        assert s.block_size_factor == (t.blocks_per_chunk or 1)
        assert s.hash_block_size == t.prefix_match_unit
        try:
            layout = resolve_layout(s, get_semantics(V024))
        except Refused as e:
            assert e.check.startswith("vllm/")
            continue
        # where 0.24.0 accepts, it resolves the same hash block size as 0.33.0 did
        assert layout.hash_block_size == t.hash_block_size, t.key


def test_flags() -> None:
    def row(groups: list[dict[str, object]], hash_size: int) -> dict[str, object]:
        return {"model": "m", "like": "l", "architecture": "A", "backend": "B",
                "drafter": "none", "blocks_per_chunk_config": None,
                "prefix_match_unit": None, "status": "accepted", "groups": groups,
                "hash_block_size": hash_size, "blocks_per_chunk": 1,
                "supports_partial_tail": False, "mamba_align_size": None}

    mamba = {"kind": "mamba", "block_size": 1040, "num_layers": 1,
             "mamba_cache_mode": "align", "eagle": False}
    swa = {"kind": "sliding_window", "block_size": 64, "num_layers": 1,
           "sliding_window": 1024, "eagle": True}
    full = {"kind": "full_attention", "block_size": 1040, "num_layers": 1, "eagle": False}
    mixed, same = parse_table({"rows": [row([mamba, swa], 16), row([mamba, full], 1040)]})
    assert flags(mixed).names() == (
        "mixed-block-sizes", "mamba-not-multiple", "mamba-partial-tail", "eagle")
    assert flags(same).names() == ()


def test_malformed_table_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = json.loads(DEFAULT_TABLE.read_text())
    del raw["rows"][3]["hash_block_size"]
    with pytest.raises(LayoutError, match=r"^rows\[3\]\.hash_block_size: required"):
        parse_table(raw)
    bad = tmp_path / "layouts-vllm-0.33.0.json"
    bad.write_text(json.dumps(raw))
    assert main(["--render", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "hash_block_size" in err
    assert main(["--vllm", "0.99.0", "--out", str(tmp_path)]) == 2
    assert "--vllm" in capsys.readouterr().err


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(real_layout_scenarios())
def test_generated_real_layout_scenarios_evaluate(s: object) -> None:
    from model.scenario import Scenario

    assert isinstance(s, Scenario)
    out = evaluate(s)
    assert out.refused is not None or out.hit_tokens is not None or out.lookup is not None


@pytest.mark.crosscheck
@pytest.mark.xdist_group("newest")  # the 0.33.0 env's fork server, as test_findings.py
def test_committed_table_matches_vllm_033() -> None:
    """Re-runs vLLM 0.33.0's own start-up code and compares with the committed JSON."""
    from sim.crosscheck.envs import env_python
    from sim.layouts.derive import derive, dumps

    if not env_python("0.33.0").exists():
        pytest.skip("no vLLM 0.33.0 environment (python -m sim.crosscheck.envs --vllm 0.33.0)")
    assert dumps(derive("0.33.0")) == DEFAULT_TABLE.read_text()


def test_scenario_files_one_per_accepted_row(tmp_path: Path) -> None:
    from model.scenario import iter_scenario_paths, load_scenario_file

    assert main(["--scenarios", str(tmp_path)]) == 0
    files = iter_scenario_paths([tmp_path])
    assert len(files) == sum(t.accepted for t in load_templates())
    for f in files:
        s = load_scenario_file(f)
        assert evaluate(s).lookup is not None or evaluate(s).refused is not None


def test_a_fix_takes_its_release_s_chunk_fields() -> None:
    """A fix of the chunked release reads a real layout's scenario as the release does
    (issue 22: the falcon-h1 bpc2 row gave a fix block_size_factor 2 and no chunk)."""
    newest = releases.newest()
    for t in load_templates():
        if not t.accepted:
            continue
        stock = t.scenario_json(semantics=newest.name, prompt_tokens=64)
        for fix in releases.fixes(of=newest.name):
            d = t.scenario_json(semantics=fix, prompt_tokens=64)
            assert (d["block_size_factor"], d.get("blocks_per_chunk")) == (
                stock["block_size_factor"], stock.get("blocks_per_chunk")), (t.key, fix)
