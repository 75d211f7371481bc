"""Command-line arguments for every CLI: bad input is one line naming the flag, exit 2.

``OneLineParser`` prints ``prog: error: argument --flag: why`` (no usage block) and exits
2; the converters refuse non-numbers, NaN, and numbers outside their bounds, naming the
limit, so no flag can ask for unbounded time or memory.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message.splitlines()[0]}\n")


def bounded_int(minimum: int, maximum: int, why: str = "") -> Callable[[str], int]:
    """An integer in [minimum, maximum]; ``why`` says where the maximum comes from."""
    def conv(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text[:40]!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {v}")
        if v > maximum:
            because = f" ({why})" if why else ""
            raise argparse.ArgumentTypeError(f"at most {maximum:,}{because}, got {text[:40]}")
        return v
    return conv


def bounded_float(minimum: float, maximum: float, why: str = "") -> Callable[[str], float]:
    """A finite number in (minimum, maximum]."""
    def conv(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text[:40]!r}") from None
        if not math.isfinite(v) or v <= minimum:
            raise argparse.ArgumentTypeError(f"must be a finite number > {minimum}, got {text}")
        if v > maximum:
            because = f" ({why})" if why else ""
            raise argparse.ArgumentTypeError(f"at most {maximum:g}{because}, got {text[:40]}")
        return v
    return conv


def nonempty_path(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("empty path")
    return Path(text)


def output_dir(text: str) -> Path:
    """A directory to write into: not empty, and not an existing file."""
    p = nonempty_path(text)
    if p.exists() and not p.is_dir():
        raise argparse.ArgumentTypeError(f"{p} exists and is not a directory")
    return p
