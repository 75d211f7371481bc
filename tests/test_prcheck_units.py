"""The PR check's pure parts: the tree, the overlay, the cited-line diff, the tree's
answer in model terms, the report and the exit status (no vLLM needed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from model.scenario import parse_scenario
from releases import vllm_0_24_0
from sim.crosscheck import cli, prcheck
from sim.crosscheck.citediff import diff_citations
from sim.crosscheck.prcheck import Change, Nearest, PRResult, Side, model_side, tree_side
from sim.crosscheck.prreport import render
from sim.crosscheck.tree import (
    SCHEDULER,
    Tree,
    TreeError,
    build_overlay,
    find_package,
    release_tuple,
    tree_version,
)

V024 = vllm_0_24_0.SEMANTICS.name

SEED = dict(prcheck.SEED)


def _tree(root: Path, scheduler: str = "x = 1\n", version: str | None = "0.24.0") -> Path:
    (root / "vllm" / SCHEDULER).parent.mkdir(parents=True, exist_ok=True)
    (root / "vllm" / SCHEDULER).write_text(scheduler)
    (root / "vllm" / "__init__.py").write_text("")
    if version:
        (root / "vllm" / "_version.py").write_text(
            f"__version__: str\n__version__ = version = '{version}'\n")
    return root


def test_tree_version_and_errors(tmp_path: Path) -> None:
    t = find_package(_tree(tmp_path / "a"))
    assert (t.version, t.version_source) == ("0.24.0", "vllm/_version.py")
    assert find_package(_tree(tmp_path / "b", version=None) / "vllm").version is None
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "PKG-INFO").write_text("Name: vllm\nVersion: 0.25.0rc1\n")
    assert tree_version(tmp_path / "c") == ("0.25.0rc1", "PKG-INFO")
    assert release_tuple("0.25.0rc1.dev3+g1") == (0, 25, 0)
    with pytest.raises(TreeError, match="^--vllm-source: .* does not exist"):
        find_package(tmp_path / "missing")
    with pytest.raises(TreeError, match="^--vllm-source: no vllm/"):
        find_package(tmp_path / "c")


def test_overlay_lays_the_tree_over_the_release(tmp_path: Path) -> None:
    rel = _tree(tmp_path / "rel", "release = True\n") / "vllm"
    (rel / "v1" / "core").mkdir(parents=True)
    (rel / "v1" / "core" / "gone.py").write_text("old\n")
    (rel / "v1" / "engine").mkdir(parents=True)
    (rel / "v1" / "engine" / "core.py").write_text("engine\n")
    (rel / "_C.abi3.so").write_bytes(b"\0compiled")
    tree = _tree(tmp_path / "tree", "tree = True\n") / "vllm"
    (tree / "v1" / "core").mkdir(parents=True)
    (tree / "v1" / "core" / "new.py").write_text("new\n")
    out = build_overlay(rel, tree, tmp_path / "ov") / "vllm"
    assert (out / SCHEDULER).read_text() == "tree = True\n"
    assert not (out / SCHEDULER).is_symlink()
    assert (out / "v1" / "core" / "new.py").exists()
    assert not (out / "v1" / "core" / "gone.py").exists()  # the tree removed it
    assert (out / "v1" / "engine").is_symlink()  # outside the overlay: the release's
    assert os.path.realpath(out / "_C.abi3.so") == str((rel / "_C.abi3.so").resolve())
    assert (rel / SCHEDULER).read_text() == "release = True\n"  # the release is untouched


def test_cited_lines_followed_into_the_tree(tmp_path: Path) -> None:
    from model.citations import cited_lines

    path, line = cited_lines("0.24.0")["leave_last_token"]
    rel, tree = tmp_path / "rel", tmp_path / "tree"
    for root in (rel, tree):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
    old = [f"line {i}" for i in range(1, 800)]
    (rel / path).write_text("\n".join(old) + "\n")
    new = ["inserted", *old]
    new[line] = "changed"  # old line `line` sits at index `line` after the insertion
    (tree / path).write_text("\n".join(new) + "\n")
    by_key = {c.key: c for c in diff_citations("0.24.0", rel, tree)}
    assert by_key["leave_last_token"].status == "changed"
    moved = by_key["lookup"]  # another line of the same file: one line down
    assert (moved.status, moved.tree_line) == ("moved", cited_lines("0.24.0")["lookup"][1] + 1)
    assert by_key["hash_lcm"].status == "not in tree"


def test_tree_answer_in_model_terms() -> None:
    s = parse_scenario(SEED)
    # the 0.23.0 answer to the seed: a 31-token hit loading offloaded block 1
    new = tree_side(s, V024, {"refused": None, "hit": 31, "loads": [[0, [1]]]})
    assert {n for n, _ in new.violations} == {"no-partial-state"}
    old = model_side(s, V024)
    assert (old.hit, old.violations) == (16, ())
    crash = tree_side(s, V024, {"refused": None, "hit": 16, "loads": None,
                                         "load_error": "AssertionError at vllm/x.py:1"})
    assert crash.broken == {prcheck.CRASH}
    refused = parse_scenario({  # 0.24.0 refuses a factor with mixed block sizes
        "semantics": V024, "block_size_factor": 2, "prompt_tokens": 64,
        "num_computed_tokens": 0,
        "groups": [{"kind": "full_attention", "gpu_block_size": 8, "stored": "all"},
                   {"kind": "full_attention", "gpu_block_size": 16, "stored": "all"}]})
    accepted = tree_side(refused, V024,
                         {"refused": None, "hit": 32, "loads": [[0, [0, 1]], [1, [0]]]})
    assert not accepted.judged and accepted.broken == set()
    assert model_side(refused, V024).refused is not None


def _result(changes: list[Change]) -> PRResult:
    tree = Tree(Path("/t"), Path("/t/vllm"), "0.24.0", "vllm/_version.py")
    return PRResult(tree, Nearest("0.24.0", "declared", {"0.24.0": 0}), changes=changes)


def test_report_and_exit_status() -> None:
    assert _result([]).exit_code == 0
    assert "no modelled behaviour changed (exit 0)" in render(_result([]))
    old = Side(None, 16, {0: (0,)}, None, ())
    new = Side(None, 31, {0: (1,)}, None, (("no-partial-state", "state at 32, hit 31"),))
    quiet = Change("hit", 3, SEED, ("hit: model 16 vs real 31",), old,
                   Side(None, 31, {0: (1,)}, None, ()), ())
    assert _result([quiet]).exit_code == 1
    breaking = Change("hit | breaks no-partial-state", 1, SEED,
                      ("hit: model 16 vs real 31",), old, new, ("no-partial-state",))
    r = _result([quiet, breaking])
    assert r.exit_code == 3
    text = render(r)
    assert text.startswith("## offload-lookup-check PR check: a changed behaviour breaks")
    assert "**no-partial-state**: state at 32, hit 31" in text
    assert "| hit tokens | 16 | 31 |" in text


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--vllm-source", str(tmp_path / "nope")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("error: --vllm-source:")
    assert cli.main(["--vllm-source", str(_tree(tmp_path / "t")), "--base", "9.9"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: --base:")


def test_nearest_release_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rel23 = _tree(tmp_path / "r23", "a\nb\nc\n") / "vllm"
    rel24 = _tree(tmp_path / "r24", "a\nb\nd\n") / "vllm"
    pkgs = {"0.23.0": rel23, "0.24.0": rel24}
    monkeypatch.setattr(prcheck, "source_package", pkgs.get)
    branch = find_package(_tree(tmp_path / "b", "a\nb\nd\ne\n", version=None))
    near = prcheck.nearest_release(branch)
    assert near.version == "0.24.0" and near.distances == {"0.23.0": 2, "0.24.0": 1}
    declared = find_package(_tree(tmp_path / "d", "a\nb\nd\n", version="0.23.0"))
    assert prcheck.nearest_release(declared).version == "0.23.0"  # metadata wins
    assert prcheck.nearest_release(branch, "0.23.0").reason == "given by --base"
    monkeypatch.setattr(prcheck, "source_package", lambda v: None)
    newer = find_package(_tree(tmp_path / "n", version="0.24.1.dev3"))
    assert prcheck.nearest_release(newer).version == "0.24.0"  # newest not newer
