"""Fast tests of issue 24's pieces: the light envs' recipe hashing, alias detection, the
bisect table with a stubbed runner, and the command's bad input (no vLLM runs here)."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import pytest

import releases
from sim.crosscheck import bisect, envs
from sim.crosscheck.cli import main, update_doc

ROOT = Path(__file__).resolve().parent.parent
F001 = ROOT / "tests/scenarios/vllm-0.33.0-breaks/attention-block-not-multiple-of-mamba-block.json"
MAX = (ROOT / "tests/scenarios/vllm-0.33.0-maximality"
       / "jamba-flash-attn-eagle-pops-a-stored-chunk.json")


# ---- recipe hashing -------------------------------------------------------------------

def test_base_recipe_keys_on_requirements(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    monkeypatch.setenv("CROSSCHECK_VENVS", str(tmp_path))
    first = envs.base_dir()
    assert first.parent == tmp_path and first.name.startswith("base-")
    assert envs.base_dir() == first  # stable
    reqs = tmp_path / "shared-base.txt"
    reqs.write_text(envs.BASE_REQUIREMENTS.read_text() + "extra-package==1.0\n")
    monkeypatch.setattr(envs, "BASE_REQUIREMENTS", reqs)
    assert envs.base_dir() != first  # a changed recipe is a new folder


def test_given_base_is_its_own_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                      ) -> None:
    monkeypatch.setenv("CROSSCHECK_VENVS", str(tmp_path))
    built = envs.light_recipe("0.28.0", "aa" * 32)
    monkeypatch.setenv(envs.BASE_ENV, str(tmp_path / "full-env"))
    assert envs.base_dir() == (tmp_path / "full-env").resolve()
    assert envs.light_recipe("0.28.0", "aa" * 32)["base"] != built["base"]
    with pytest.raises(RuntimeError, match="not a usable base"):
        envs.ensure_base()


def test_light_recipe_keys_on_wheel_and_base(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CROSSCHECK_VENVS", str(tmp_path))
    a = envs.light_recipe("0.28.0", "aa" * 32)
    assert a["base"] == envs.base_dir().name.removeprefix("base-")
    assert envs._recipe_key(a) == envs._recipe_key(dict(a))
    assert envs._recipe_key(a) != envs._recipe_key(envs.light_recipe("0.28.0", "bb" * 32))
    assert envs._recipe_key(a) != envs._recipe_key(envs.light_recipe("0.29.0", "aa" * 32))


def test_releases_and_aliases() -> None:
    assert envs.ALL_RELEASES[0] == "0.23.0" and envs.ALL_RELEASES[-1] == "0.33.0"
    assert len(envs.ALL_RELEASES) == 13
    assert set(envs.ALIASES) == {"0.25.1", "0.27.1"}
    assert not set(envs.ALIASES) & set(envs.built_releases())
    assert envs.canonical("0.27.1") == "0.27.0" and envs.canonical("0.30.0") == "0.30.0"
    with pytest.raises(ValueError, match="not a known release"):
        envs.canonical("0.22.0")


# ---- alias detection ------------------------------------------------------------------

def _wheel(folder: Path, version: str, scheduler: bytes) -> None:
    with zipfile.ZipFile(folder / f"vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl",
                         "w") as z:
        z.writestr(envs.SCHEDULER_PATH, scheduler)


def test_alias_evidence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CROSSCHECK_WHEELS", str(tmp_path))
    _wheel(tmp_path, "0.25.0", b"same text")
    _wheel(tmp_path, "0.25.1", b"same text")
    alias, target, sha = envs.alias_evidence("0.25.1")
    assert (alias, target) == ("0.25.1", "0.25.0") and len(sha) == 64
    _wheel(tmp_path, "0.27.0", b"one text")
    _wheel(tmp_path, "0.27.1", b"another text")
    with pytest.raises(ValueError, match="differs"):
        envs.alias_evidence("0.27.1")


# ---- the bisect table, stubbed runner -------------------------------------------------

def _stub(version: str, cases: Any) -> list[dict[str, Any]]:
    """The answers the real schedulers give the finding-001 scenario (full 3 + Mamba 2):
    hit 3, the Mamba state saved at token 4 loaded; 0.32.0 refuses (to test the row)."""
    out = []
    for _ in cases:
        if version == "0.32.0":
            out.append({"refused": "ValueError at vllm/x.py:1: no", "hit": None})
        elif bisect.chunked(version):
            out.append({"refused": None, "hit": 3, "loads": [[0, [3]], [1, [4]]],
                        "gpu": [[1, 1], [0, 1]], "tail_boundary": None})
        else:
            out.append({"refused": None, "hit": 3, "loads": [[0, [0]], [1, [1]]],
                        "copies": [[[0, 0, 0]], [[1, 0, 1]]]})
    return out


def test_bisect_table_stubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CROSSCHECK_WHEELS", str(tmp_path))
    for v in ("0.25.0", "0.25.1", "0.27.0", "0.27.1"):
        _wheel(tmp_path, v, b"x" if v.startswith("0.25") else b"y")
    lines: list[str] = []
    ran: list[str] = []

    def runner(version: str, cases: Any) -> list[dict[str, Any]]:
        ran.append(version)
        return _stub(version, cases)

    b = bisect.run_bisect([F001], runner=runner, say=lines.append)
    assert ran == list(envs.built_releases())  # aliases are not run
    assert len(lines) == len(envs.ALL_RELEASES)
    assert any("0.25.1: alias of 0.25.0" in ln for ln in lines)
    text = bisect.render(b, command="python -m sim.crosscheck --bisect X", root=ROOT)
    assert text.startswith("<!-- generated by `python -m sim.crosscheck --bisect X`")
    rows = [ln for ln in text.splitlines() if ln.startswith("| 0.")]
    assert len(rows) == len(envs.ALL_RELEASES)
    row = {r.split(" | ")[0][2:]: r for r in rows}
    modelled = set(releases.versions())  # a release without a module: real side only
    for v in envs.built_releases():
        assert ("none: real scheduler only" in row[v]) == (v not in modelled), row[v]
    assert "= 0.27.0 (`scheduler.py` sha256" in row["0.27.1"]
    assert "refused" in row["0.32.0"]
    assert "**no-partial-state**" in row["0.28.0"] and "state at 4" in row["0.28.0"]
    assert "**no-partial-state**" in row["0.25.0"]  # block family: from the worker copies
    assert ("Affected: breaks **no-partial-state** on 0.23.0 - 0.31.0, 0.33.0; layout "
            "refused at start-up by 0.32.0.") in text
    assert bisect.affected(b, "no-partial-state")[0] == [
        v for v in envs.ALL_RELEASES if v != "0.32.0"]


def test_bisect_maximality_and_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CROSSCHECK_WHEELS", str(tmp_path))

    def runner(version: str, cases: Any) -> list[dict[str, Any]]:
        if version == "0.30.0":
            raise RuntimeError("env broken\nmore")
        return [{"refused": None, "hit": 80 if version == "0.33.0" else 160, "loads": None}
                for _ in cases]

    b = bisect.run_bisect([MAX], versions=("0.30.0", "0.31.0", "0.33.0"), runner=runner,
                          say=lambda m: None)
    assert b.cells[(0, "0.33.0")].breaks is not None
    assert "maximality" in (b.cells[(0, "0.33.0")].breaks or ())
    assert "maximality" not in (b.cells[(0, "0.31.0")].breaks or ())
    assert b.cells[(0, "0.30.0")].error == "RuntimeError: env broken"
    assert b.cells[(0, "0.31.0")].missing == ()
    assert "harness error: RuntimeError: env broken" in bisect.render(b)


def test_rotation_covers_the_releases_not_pinned() -> None:
    pool = envs.rotation_pool()
    assert set(pool) == set(envs.VERSIONS) - set(envs.pinned_versions()) and pool
    assert {envs.release_of_the_day(d) for d in range(1, 367)} == set(pool)
    # the bisect's release of the day is the cross-check's
    for d in (3, 200):
        assert bisect.parse_versions("rotate", day_of_year=d) == (pool[d % len(pool)],)
        assert set(envs.ci_versions(d)) == set(envs.pinned_versions()) | {pool[d % len(pool)]}
    assert len(bisect.parse_versions("rotate")) == 1
    assert bisect.parse_versions(None) == envs.ALL_RELEASES


def test_missing_fields_by_release() -> None:
    from model.scenario import load_scenario_file

    cap = load_scenario_file(ROOT / "tests/scenarios/vllm-0.33.0-maximality"
                             / "mamba-load-cap-loses-a-chunk.json")
    assert bisect.missing_fields(cap, "0.30.0") == ["max_load_tokens"]
    assert bisect.missing_fields(cap, "0.31.0") == []
    c = bisect.cell(cap, "0.28.0", {"refused": None, "hit": 32, "loads": None})
    assert c.missing == ("max_load_tokens",) and c.how.startswith("max_load_tokens: not a")


def test_update_doc_replaces_section(tmp_path: Path) -> None:
    doc = tmp_path / "f.md"
    doc.write_text("# title\n\ntext\n")
    update_doc(doc, "TABLE 1")
    update_doc(doc, "TABLE 2")
    text = doc.read_text()
    assert text.count("## Affected releases") == 1 and "TABLE 2" in text
    assert "TABLE 1" not in text and text.startswith("# title\n\ntext\n")


@pytest.mark.parametrize("argv, message", [
    (["--bisect", "no/such.json"], "no such file"),
    (["--bisect", str(F001), "--releases", "0.22.0"], "unknown release"),
    (["--bisect", str(F001), "--update-doc", "no/such.md"], "no such file"),
    (["--bisect", str(F001), "--section", "README.md"], "is not DOC=FILE"),
    (["--bisect", str(F001), "--section", f"README.md={MAX}"], "not one of the --bisect"),
])
def test_bisect_bad_input(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
                          ) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


def test_bisect_bad_scenario(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"prompt_tokens": 3}')
    assert main(["--bisect", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --bisect:")
