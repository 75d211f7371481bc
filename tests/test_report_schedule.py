"""The run's schedule (proofs.results.run_all): longest first, side tasks marked first before
every pair, and a group longer than a process's share split in two. No solving: a stand-in
pool records the order."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

import proofs.results as runs
import publish.report as report
import releases
from model.semantics import MODEL_SEMANTICS
from proofs.theorems import THEOREMS
from releases import vllm_0_23_0, vllm_0_24_0

V023 = vllm_0_23_0.SEMANTICS.name
V024 = vllm_0_24_0.SEMANTICS.name


class _Order:
    def __init__(self) -> None:
        self.labels: list[str] = []

    def imap_unordered(self, fn: Any, todo: list[Any]) -> Iterator[Any]:
        self.labels = [label for label, *_ in todo]
        return iter(())


def _order(side: tuple[runs.Side, ...] = ()) -> list[str]:
    pool = _Order()
    runs.run_all(list(THEOREMS), list(MODEL_SEMANTICS), 1.0, True, 2, pool, side)
    return pool.labels


def test_longest_first_side_tasks_where_marked() -> None:
    side = (runs.Side("z3 first", print, (), 0.1, first=True),
            runs.Side("filler", print, (), 5.0))
    labels = _order(side)
    assert labels[0] == "z3 first"
    # each group's pairs: its theorems on the semantics of its part of the family
    # (runs.cluster) that the proofs encode
    parts: dict[str, int] = {}
    for c in (True, False):
        for name in releases.proved("chunked" if c else "block"):
            parts[runs.cluster(name)] = parts.get(runs.cluster(name), 0) + 1
    groups = {(part, ", ".join(g)): len(g) * n for part, n in parts.items()
              for g in runs.GROUPS[part != "older"]}
    weights = {f"{name} ({part}, {n} pairs)": runs.WEIGHT.get((part, name), 1.0)
               for (part, name), n in groups.items()}
    got = [(weights | {"filler": 5.0})[x] for x in labels[1:]]
    assert got == sorted(got, reverse=True)
    assert len(labels) == 1 + len(groups) + 1  # every group once


def test_every_theorem_in_one_group_per_family() -> None:
    for gs in runs.GROUPS.values():
        named = [t for g in gs for t in g]
        assert sorted(named) == sorted(set(named)) and set(named) <= set(THEOREMS)
    assert runs.group_of(True, "whole-blocks") == runs.group_of(True, "no-partial-state")
    assert runs.group_of(True, "maximality") == "maximality"


def test_a_group_longer_than_a_share_is_split(monkeypatch: pytest.MonkeyPatch) -> None:
    name = runs.group_of(True, "loads-stored-only")
    part = runs.cluster(releases.newest("chunked").name)
    monkeypatch.setitem(runs.WEIGHT, (part, name), 10_000)
    labels = _order()
    # its pairs: the group's theorems on every semantics of its part the proofs encode,
    # in halves (the longer half first)
    n = len(name.split(", ")) * sum(runs.cluster(s) == part for s in releases.proved("chunked"))
    assert set(labels[:2]) == {f"{name} ({part}, {n // 2} pairs, part 1 of 2)",
                               f"{name} ({part}, {n - n // 2} pairs, part 2 of 2)"}


def test_the_chunked_family_runs_in_two_parts() -> None:
    """The newest chunked release with its fixes in one part (the releases whose Mamba
    groups run mode 'all' in another: both processes busy); the block family whole."""
    newest = releases.newest("chunked")
    chunked = releases.proved("chunked")
    ours = {s for s in chunked if runs.cluster(s) == runs.cluster(newest.name)}
    assert newest.name in ours and set(releases.fixes(of=newest.name)) & set(chunked) <= ours
    assert {runs.cluster(s) for s in chunked} == {runs.MODE_ALL, runs.NOT_ALL}
    assert {runs.cluster(s) for s in releases.proved("block")} == {"older"}
    assert set(runs.WEIGHT) <= {(runs.cluster(s), ", ".join(g)) for s in releases.proved()
                                for g in runs.GROUPS[releases.get(s).chunked]}


class _Done:
    def __init__(self, value: float) -> None:
        self.value = value

    def get(self) -> float:
        return self.value


class _Now:
    """A stand-in pool that runs a task when it is put in."""

    def apply_async(self, fn: Any, args: tuple[Any, ...]) -> _Done:
        return _Done(fn(*args))

    def map(self, fn: Any, todo: list[Any], chunksize: int = 1) -> list[Any]:
        return [fn(x) for x in todo]


def test_a_picture_drawn_while_the_pairs_ran_is_copied_not_drawn_again(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    from pathlib import Path

    from proofs.check import Verdict

    drawn: list[str] = []

    def draw(d: report.Drawing) -> float:
        drawn.append(d.title)
        d.path.write_bytes(d.key().encode())
        return 1.0

    monkeypatch.setattr(report, "draw", draw)
    name = f"no-partial-state--{V023}"
    cex = json.loads((Path(__file__).parent.parent / "docs" / "counterexamples"
                      / f"{name}.json").read_text())
    row = runs.Row("no-partial-state", V023,
                   Verdict("COUNTEREXAMPLE", 0.0, cex), "fails", ())
    pool = _Now()
    early = report.EarlyPictures(pool, tmp_path / "scratch")
    early.rows([row])
    assert drawn == [report.picture_title("no-partial-state", V023)]
    queue: list[report.Drawing] = []
    report.write_report([row], tmp_path / "out", queue=queue)
    assert report.draw_all(queue, 2, pool, early) == 1.0
    assert len(drawn) == 1
    picture = (tmp_path / "out" / f"{name}.png").read_bytes()
    assert picture == queue[0].key().encode()


def test_the_spec_pictures_of_a_row_are_drawn_early_too(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the spec, a row's spec pictures go early as well: every picture write_spec
    would draw from the finished report.json (facts apart) is one of them, byte for byte
    (the same Drawing key), so draw_all copies it."""
    import json
    from pathlib import Path

    from proofs.check import Verdict
    from publish import spec

    monkeypatch.setattr(report, "draw", lambda d: 0.0)
    cexs = Path(__file__).parent.parent / "docs" / "counterexamples"
    rows = [runs.Row("maximality", V024, Verdict("PROVED", 0.0), "holds", (),
                     None, Verdict("COUNTEREXAMPLE", 0.0, json.loads(
                         (cexs / "maximality--vllm-0.24.0--accepted.json").read_text()))),
            runs.Row("no-partial-state", V023, Verdict("COUNTEREXAMPLE", 0.0, json.loads(
                (cexs / "no-partial-state--vllm-0.23.0.json").read_text())), "fails", ())]
    early = report.EarlyPictures(_Now(), tmp_path / "scratch", spec=True)
    for r in rows:
        early.rows([r])
    report.write_report(rows, tmp_path / "out", queue=[])
    results = spec.load_results(tmp_path / "out")
    later = spec.drawings(tmp_path / "out", spec.pictures(results))
    assert len(later) == 3  # two counterexamples and the scaled alt-round-num-hit
    assert all(d.key() in early.drawn for d in later)


def _fake_row(theorem: str, semantics: str, *_: Any) -> runs.Row:
    from proofs.check import Verdict

    return runs.Row(theorem, semantics, Verdict("PROVED", 0.0), "holds", ())


def test_a_groups_pair_line_is_printed_as_the_pair_ends(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A group runs its pairs one after another in one process: each pair's line is out
    before the next pair starts, not when the whole group ends (issue 26: nothing for
    90 s, then every row at once)."""
    printed_before: list[str] = []

    def run_one(theorem: str, semantics: str, *_: Any) -> runs.Row:
        printed_before.append(capsys.readouterr().err)
        return _fake_row(theorem, semantics)

    monkeypatch.setattr(runs, "run_one", run_one)
    pairs = [("termination", V024, 1.0, False), ("whole-blocks", V024, 1.0, False)]
    label, rows, _ = runs._work(("a group", pairs, runs.Live("stderr")))
    assert label == "a group" and [r.theorem for r in rows] == ["termination", "whole-blocks"]
    assert printed_before[0] == ""
    assert printed_before[1].startswith("termination") and V024 in printed_before[1]
    assert capsys.readouterr().err.startswith("whole-blocks")
    # no stream named: the caller prints the group's lines
    runs._work(("a group", pairs, runs.Live()))
    assert capsys.readouterr().err == ""


def test_each_pair_line_is_printed_once_by_a_pool_run(
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    """Two processes, two families: every pair's line on the progress stream exactly once
    (the processes print them; the parent does not again)."""
    monkeypatch.setattr(runs, "run_one", _fake_row)
    v033 = releases.newest().name
    theorems = ["termination", "whole-blocks"]
    rows = runs.run_all(theorems, [V024, v033], 1.0, False, 2, progress=sys.stderr)
    out, err = capfd.readouterr()
    assert out == ""
    lines = [line.split()[:2] for line in err.splitlines()[1:]]
    assert sorted(lines) == sorted([t, s] for t in theorems for s in (V024, v033))
    assert [(r.theorem, r.semantics) for r in rows] == [
        (t, s) for t in theorems for s in (V024, v033)]
