"""bench/bench_proofs.py's comparison of two runs' results: the seconds may move, nothing
else (a verdict, a note, a counterexample file) may."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def _bench() -> ModuleType:
    path = ROOT / "bench" / "bench_proofs.py"
    spec = importlib.util.spec_from_file_location("bench_proofs", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_proofs", mod)  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _report(at: Path) -> Path:
    (at / "counterexamples").mkdir(parents=True)
    shutil.copy(ROOT / "docs" / "report.json", at / "report.json")
    for f in sorted((ROOT / "docs" / "counterexamples").glob("*.json"))[:3]:
        shutil.copy(f, at / "counterexamples" / f.name)
    return at


def test_only_the_seconds_may_differ(tmp_path: Path) -> None:
    same = _bench().same_results
    a, b = _report(tmp_path / "a"), _report(tmp_path / "b")
    assert same(a, b) == []
    doc = json.loads((b / "report.json").read_text())
    doc["results"][0]["seconds"] += 5.0
    (b / "report.json").write_text(json.dumps(doc))
    assert same(a, b) == []
    row = doc["results"][1]
    row["status"] = "UNKNOWN"
    (b / "report.json").write_text(json.dumps(doc))
    assert same(a, b) == [
        f"report.json rows differ: {row['theorem']} on {row['semantics']}"]
    shutil.copy(a / "report.json", b / "report.json")
    cex = sorted((b / "counterexamples").iterdir())[0]
    cex.write_text(cex.read_text().replace("1", "2", 1))
    assert same(a, b) == [f"counterexamples/{cex.name} differs"]
    cex.unlink()
    assert same(a, b) == ["counterexample files: 3 against 2"]
