"""The semantics the model covers, as the registry (``releases``) declares them.

Views by family for the callers that take one lookup family: ``SEMANTICS`` (the block
lookup of 0.23.0/0.24.0 and its alternatives), ``CHUNKED_SEMANTICS`` (0.33.0 and its
fixes), ``MODEL_SEMANTICS`` (all). Each semantics is one module of ``releases``.
"""

from __future__ import annotations

import releases
from releases.base import AlignAt, AlignFrom, Semantics

__all__ = ["AlignAt", "AlignFrom", "Semantics", "SEMANTICS", "CHUNKED_SEMANTICS",
           "MODEL_SEMANTICS", "get_semantics"]

MODEL_SEMANTICS: dict[str, Semantics] = releases.all_semantics()
SEMANTICS: dict[str, Semantics] = {n: s for n, s in MODEL_SEMANTICS.items() if not s.chunked}
CHUNKED_SEMANTICS: dict[str, Semantics] = {n: s for n, s in MODEL_SEMANTICS.items()
                                           if s.chunked}


def get_semantics(name: str) -> Semantics:
    return releases.get(name)
