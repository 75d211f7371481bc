"""A sabotaged copy of a module: its source with one step replaced, loaded in-process
(the conformance suites' check that they catch a missing step)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def sabotaged_copy(module: ModuleType, old: str, new: str, label: str) -> ModuleType:
    """``module`` with its one ``old`` text replaced by ``new``; ``label`` names the
    copy (``sabotaged_<label>``)."""
    source = Path(str(module.__file__)).read_text()
    assert source.count(old) == 1, f"sabotage {label}: the step is no longer written as {old!r}"
    spec = importlib.util.spec_from_loader(f"sabotaged_{label.replace('-', '_')}",
                                           loader=None)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    mod.__source__ = source.replace(old, new)  # its text (proofs.conformance_ints reads it)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    try:
        exec(compile(source.replace(old, new), f"<{label}>", "exec"), mod.__dict__)
    finally:
        del sys.modules[spec.name]
    return mod
