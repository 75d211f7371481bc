"""publish/cache.py: the main job's facts and pictures kept between runs, keyed by what
they are and by every file and library version they can depend on (a change is a miss,
never a stale answer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from publish import cache


@pytest.fixture
def cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PUBLISH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("OLC_MUTANT", raising=False)
    monkeypatch.setattr(cache, "_DIR", [])
    monkeypatch.setattr(cache, "_INPUTS", {})
    monkeypatch.setattr(cache, "HITS", {})
    assert cache.enable() == tmp_path / "cache"
    return tmp_path / "cache"


def test_a_fact_kept_is_given_back_equal(cached: Path) -> None:
    assert cache.fact("rerun") == (False, None)
    value = {"a": [[17, 16, True]], "b": None}
    cache.keep_fact("rerun", value)
    assert cache.fact("rerun") == (True, value)
    assert cache.HITS == {"facts": 1}
    assert cache.fact("seed_counterexample") == (False, None)  # another name: a miss


def test_a_picture_kept_is_copied_byte_for_byte(cached: Path, tmp_path: Path) -> None:
    drawn = tmp_path / "a.png"
    drawn.write_bytes(b"\x89PNG picture bytes")
    out = tmp_path / "b.png"
    assert not cache.picture("key", out) and not out.exists()
    cache.keep_picture("key", drawn)
    assert cache.picture("key", out)
    assert out.read_bytes() == drawn.read_bytes()
    assert not cache.picture("other key", tmp_path / "c.png")


def test_a_changed_input_file_is_a_miss(cached: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tmp_path / "tree"
    for pkg in cache.PACKAGES:
        (tree / pkg).mkdir(parents=True)
        (tree / pkg / "x.py").write_text(f"# {pkg}\n")
    for dep in {d for deps in cache.DEPENDS.values() for d in deps if d.endswith(".py")}:
        (tree / dep).write_text(f"# {dep}\n")
    monkeypatch.setattr(cache, "ROOT", tree)
    monkeypatch.setattr(cache, "_INPUTS", {})
    cache.keep_fact("rerun", [1])
    assert cache.fact("rerun") == (True, [1])
    (tree / "sim" / "x.py").write_text("# sim, changed\n")
    monkeypatch.setattr(cache, "_INPUTS", {})  # a new run hashes its inputs again
    assert cache.fact("rerun") == (False, None)
    (tree / "sim" / "x.py").write_text("# sim\n")  # back as it was: the entry again
    monkeypatch.setattr(cache, "_INPUTS", {})
    assert cache.fact("rerun") == (True, [1])
    # the simulator's facts do not read proofs/; a Z3 search's and the pictures' do not
    # read sim/
    cache.keep_fact("seed_counterexample", [2])
    cache.keep_picture("key", tree / "model" / "x.py")
    (tree / "proofs" / "x.py").write_text("# proofs, changed\n")
    monkeypatch.setattr(cache, "_INPUTS", {})
    assert cache.fact("rerun") == (True, [1])
    assert cache.fact("seed_counterexample") == (False, None)
    (tree / "sim" / "x.py").write_text("# sim, changed\n")
    monkeypatch.setattr(cache, "_INPUTS", {})
    assert cache.picture("key", tmp_path / "p.png")
    (tree / "model" / "x.py").write_text("# model, changed\n")
    monkeypatch.setattr(cache, "_INPUTS", {})
    assert not cache.picture("key", tmp_path / "p.png")


@pytest.mark.parametrize("env", [{"PUBLISH_CACHE": "off"},
                                 {"PUBLISH_CACHE": "", "OLC_MUTANT": "some-mutant"}])
def test_off_reads_and_writes_nothing(env: dict[str, str], tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(cache, "_DIR", [Path("/nonexistent")])
    assert cache.enable() is None and not cache.enabled()
    cache.keep_fact("rerun", [1])
    assert cache.fact("rerun") == (False, None)
    assert not any(tmp_path.rglob("*.json"))


def test_fact_part_gives_the_same_value_from_the_cache(cached: Path) -> None:
    from publish.facts import _compute, fact_part

    computed = fact_part("rerun")  # a miss: computed and kept
    assert cache.HITS == {}
    assert fact_part("rerun") == computed == _compute("rerun")  # a hit
    assert cache.HITS == {"facts": 1}
