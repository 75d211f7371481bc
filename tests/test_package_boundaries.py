"""``proofs/`` stands alone: no module under it imports ``sim`` (the simulator), ``vllm``
or ``publish`` (the report and spec builder, which imports ``proofs``), at the top or
inside a function, by an import statement or by ``importlib.import_module("...")``.
Static: the sources are parsed, not imported."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = ("sim", "vllm", "publish")


def imported(source: str) -> list[tuple[int, str]]:
    """Every module ``source`` imports (absolute names), with its line."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name)
                       and node.func.id in ("import_module", "__import__")))):
            out.append((node.lineno, node.args[0].value))
    return out


def forbidden(source: str) -> list[str]:
    return [f"line {line}: {name}" for line, name in imported(source)
            if name.split(".")[0] in FORBIDDEN]


def test_proofs_imports_neither_sim_nor_vllm_nor_publish() -> None:
    modules = sorted((ROOT / "proofs").rglob("*.py"))
    assert len(modules) > 20  # the package is there
    bad = {p.relative_to(ROOT).as_posix(): found for p in modules
           if (found := forbidden(p.read_text(encoding="utf-8")))}
    assert not bad, bad


def test_the_check_sees_every_kind_of_import() -> None:
    source = ("import sim.runner\n"
              "from vllm.config import VllmConfig\n"
              "def f():\n"
              "    from publish.spec import render\n"
              "    importlib.import_module('sim.gpu.report')\n"
              "import simulator, model.sim, publishing\n"
              "from . import sim\n")
    assert forbidden(source) == ["line 1: sim.runner", "line 2: vllm.config",
                                 "line 4: publish.spec", "line 5: sim.gpu.report"]


def test_no_module_or_file_is_named_after_a_release() -> None:
    """Names carry roles (issue 22): no file in model/ proofs/ sim/ bench/ tests/ is
    named ``*_v0NN*``; a release's number belongs to its own module in releases/."""
    tracked = subprocess.run(["git", "ls-files", "model", "proofs", "sim", "bench", "tests"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout
    named = [f for f in tracked.split() if re.search(r"_v0\d\d", Path(f).name)]
    assert not named, named
