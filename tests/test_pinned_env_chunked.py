"""Issue 23 item 2: the layered 0.33.0 proof's per-group environment (``turn_chunked.derive``
with an ``Env``) and start-up rules (``turn_chunked.startup``, ``tail_chunked.startup`` of a
few groups) admit every generated layout ``model/`` accepts, partial tails off and on
(``proofs.pinned_chunked.admits``, ``admits_tails``); ``python -m proofs`` asks the same of
its fixed layouts (different block sizes, non-zero GPU hits, Mamba in and out of align
mode: ``pinned_chunked.query``). A tightened environment is caught.
"""

from __future__ import annotations

from typing import Any

import pytest
import z3

from proofs import pinned_chunked, turn_chunked
from tests import test_proof_layers_chunked as tails_off
from tests import test_proof_tails_chunked as tails_on
from tests.subset import part

EXAMPLES = 8  # the default suite: a few seconds
MANY = part(100)  # -m conformance (.ci/run: CONFORMANCE_SHARE, tests/subset.py)


def _tails_off(count: int, seed: int) -> None:
    for s in tails_off.scenarios(count, seed):
        assert pinned_chunked.admits(pinned_chunked.layout_of(s)) is None, s


def _tails_on(count: int, seed: int) -> None:
    for s in tails_on.scenarios(count, seed):
        assert pinned_chunked.admits_tails(s) is None, s


def test_environment_admits_generated_layouts() -> None:
    _tails_off(EXAMPLES, 3)
    _tails_on(EXAMPLES, 3)


@pytest.mark.conformance
@pytest.mark.timeout(1200)
def test_environment_admits_generated_layouts_many() -> None:
    _tails_off(MANY, 4)
    _tails_on(MANY, 4)


def test_fixed_layouts_are_admitted_and_varied() -> None:
    assert pinned_chunked.check(tails_off.V033) is None
    sizes = [{g["gpu_block_size"] for g in lay[4]} for lay in pinned_chunked.LAYOUTS]
    assert any(len(s) >= 2 for s in sizes) and any(lay[2] > 0 for lay in pinned_chunked.LAYOUTS)


def test_tightened_environment_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every group's block made the Mamba group's: a layout with different block sizes
    (fixed layout 0: full attention 16 beside Mamba 32) is no longer admitted."""
    real = turn_chunked.derive

    def tightened(enc: Any, cfg: Any, env: Any = None) -> Any:
        d = real(enc, cfg, env)
        if env is not None:
            enc.add(*(z3.Implies(env.has_mamba, g == env.mamba_gpu) for g in cfg.gpu))
        return d

    monkeypatch.setattr(turn_chunked, "derive", tightened)
    assert pinned_chunked.admits(pinned_chunked.LAYOUTS[0]) is not None
