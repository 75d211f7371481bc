"""CI's seeded subset of the conformance-marked suites.

Each conformance suite draws its scenarios from a fixed seed. ``CONFORMANCE_SHARE`` (a
number in (0, 1]; unset means 1) keeps that share of each draw and scales each coverage
floor the suite asserts by the same share, so the subset is the same on every run and
still fails when a feature goes unreached. ``.ci/run`` sets it to fit CI's budget; the
full sets are one command: ``python -m pytest -m conformance -n 2``.
"""

from __future__ import annotations

import math
import os

VAR = "CONFORMANCE_SHARE"


def parse_share(text: str | None) -> float:
    """The share ``text`` names; ValueError naming ``CONFORMANCE_SHARE`` otherwise."""
    if text is None or text == "":
        return 1.0
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 < value <= 1.0:  # also rejects nan
        raise ValueError(f"{VAR}: expected a number in (0, 1], got {text[:40]!r}")
    return value


def part(full: int) -> int:
    """``full`` examples (or a coverage floor of ``full``) cut to the share: at least 1."""
    return max(1, math.ceil(full * parse_share(os.environ.get(VAR))))
