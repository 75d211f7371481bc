"""Every committed counterexample replays through ``python -m model lookup`` with the
violation its report names (exit 1), and is a request the named release's engine can
produce (the model enforces the start-up checks and request rules)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model.cli import main
from model.evaluate import evaluate
from model.scenario import parse_scenario
from releases import vllm_0_24_0

V024 = vllm_0_24_0.SEMANTICS.name

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted((ROOT / "docs" / "counterexamples").glob("*.json"))


def test_there_are_counterexamples() -> None:
    assert FILES


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_counterexample_replays_with_its_violation(path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    theorem = path.stem.split("--")[0]  # THEOREM--SEMANTICS[--without-PRECONDITION]
    rc = main(["lookup", str(path)])
    out = capsys.readouterr()
    assert rc == 1, out.out + out.err
    o = evaluate(parse_scenario(json.loads(path.read_text())))
    assert o.refused is None
    assert theorem in {v.invariant for v in o.violations}, out.out
    if theorem == "maximality":
        raw = json.loads(path.read_text())
        assert f"not maximal: hit {o.hit_tokens}, a valid hit of {raw['valid_hit']} exists" \
            in out.out


def test_false_valid_hit_claim_is_bad_input(capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    raw = {"semantics": V024, "block_size_factor": 1, "prompt_tokens": 32,
           "num_computed_tokens": 0, "valid_hit": 31,
           "groups": [{"kind": "mamba", "gpu_block_size": 16, "mamba_cache_mode": "align",
                       "stored": "all"}]}
    f = tmp_path / "claim.json"
    f.write_text(json.dumps(raw))
    assert main(["lookup", str(f)]) == 2
    err = capsys.readouterr().err
    assert "valid_hit: 31 is not a valid hit" in err and len(err.strip().splitlines()) == 1
    raw["valid_hit"] = 16  # valid, but not above the lookup's hit: the claim is moot
    f.write_text(json.dumps(raw))
    assert main(["lookup", str(f)]) == 0
