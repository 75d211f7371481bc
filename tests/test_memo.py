"""The run's shared solver answers (proofs/memo.py): a reused answer is the one a fresh
solve gives, an unknown is never kept, and a changed query (or solver setting) misses."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from pathlib import Path

import pytest
import z3

from proofs import memo


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setattr(memo, "KEEP_S", 0.0)  # keep every answer, however quick
    memo.use(tmp_path)
    yield tmp_path
    memo.use(None)


def _query(bound: int) -> list[z3.BoolRef]:
    x, y = z3.Ints("x y")
    return [x * x + y * y == 25, x > 0, y > 0, x + y < bound]


def _solver(q: list[z3.BoolRef], settings: memo.Settings = ()) -> z3.Solver:
    s = z3.Solver()
    for k, v in settings:
        s.set(k, v)
    s.add(*q)
    return s


def _fresh(q: list[z3.BoolRef]) -> z3.CheckSatResult:
    return _solver(q).check()


def test_a_reused_answer_is_the_fresh_one(folder: Path) -> None:
    for bound in (7, 8):  # 3 + 4 = 7: unsat below 8, sat at 8
        q = _query(bound)
        first = memo.check(_solver(q), "t")
        solved = memo.COUNTS.solved
        again = memo.check(_solver(_query(bound)), "t")  # the same query, built anew
        assert first == again == _fresh(q)
        assert memo.COUNTS.solved == solved  # answered from the folder
    assert memo.COUNTS.reused == 2 and memo.COUNTS.kept == 2


def _ask_in_another_process(bound: int, folder: Path) -> str:
    memo.use(None)  # a process of its own: its counts from 0
    memo.use(folder)
    got = str(memo.check(_solver(_query(bound)), "t"))
    memo.save_counts()
    return got


def test_another_process_reads_the_answer(folder: Path) -> None:
    memo.check(_solver(_query(7)), "t")
    with multiprocessing.get_context("fork").Pool(1) as pool:
        got = pool.apply(_ask_in_another_process, (7, folder))
    assert got == "unsat"
    memo.save_counts()
    n = memo.total(folder)  # both processes' counts
    assert (n.solved, n.reused, n.kept) == (1, 1, 1)


def test_a_changed_query_or_setting_misses(folder: Path) -> None:
    memo.check(_solver(_query(7)), "t")
    assert memo.lookup("t", (), _query(7)) == z3.unsat
    assert memo.lookup("t", (), _query(9)) is None  # one assertion differs
    assert memo.lookup("t", (), _query(7)[:-1]) is None  # one fewer
    assert memo.lookup("t", (), list(reversed(_query(7)))) is None  # another order
    assert memo.lookup("t", (("smt.arith.nl.grobner", False),), _query(7)) is None
    assert memo.lookup("other solver", (), _query(7)) is None


def test_the_digest_decides_not_the_fingerprint(folder: Path) -> None:
    """A line under the query's file name whose text digest differs (a hash collision
    of the structural hashes) is not its answer."""
    q = _query(7)
    (folder / memo.fingerprint("t", (), q)).write_text(f"{'0' * 64} sat 1.0 1\n")
    assert memo.lookup("t", (), q) is None
    assert memo.check(_solver(q), "t") == z3.unsat


def test_unknown_is_never_kept(folder: Path) -> None:
    q = _query(7)
    s = z3.Tactic("skip").solver()  # decides nothing: unknown
    s.add(*q)
    assert memo.check(s, "skip") == z3.unknown
    assert memo.COUNTS.kept == 0 and not list(folder.iterdir())
    memo.keep("t", (), q, z3.unknown, 5.0)
    assert not list(folder.iterdir())


def test_only_the_answer_asked_for(folder: Path) -> None:
    """Where a sat answer's model is read, only unsat is taken from the folder."""
    q = _query(8)
    assert memo.check(_solver(q), "t") == z3.sat  # kept
    assert memo.lookup("t", (), q) == z3.sat
    assert memo.lookup("t", (), q, only=z3.unsat) is None
    s = _solver(q)
    assert memo.check(s, "t", only=z3.unsat) == z3.sat
    assert s.model() is not None  # solved here: a model to read


def test_off_without_a_folder(tmp_path: Path) -> None:
    memo.use(None)
    q = _query(7)
    assert memo.check(_solver(q), "t") == z3.unsat
    assert memo.lookup("t", (), q) is None and memo.COUNTS.kept == 0
