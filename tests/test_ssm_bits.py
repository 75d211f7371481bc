"""The simulator's recurrence is the same bits on every machine (sim/ssm.py): its
weights and a state it advances, pinned by digest. CI's machine once counted 3 fewer
wrong states than this one because numpy's vectorised ``exp`` and BLAS differ by CPU; a
change that brings either back, or changes the weights, fails here on some machine."""

from __future__ import annotations

import hashlib

import numpy as np

from sim.ssm import Recurrence


def _digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


def test_weights_are_the_pinned_bits() -> None:
    rec = Recurrence.make()
    assert [_digest(a) for a in (rec.decay, rec.drive, rec.readout)] == [
        "308d131b5689ea23", "10e30b979f6251be", "d957eb5d955f954b"]


def test_an_advanced_state_and_its_tokens_are_the_pinned_bits() -> None:
    rec = Recurrence.make()
    tokens = (np.arange(100) * 37 % 64).astype(np.uint8)
    h = rec.advance(rec.zero(), tokens, 0, 100, 16)
    assert _digest(h) == DIGEST_H
    assert rec.greedy(h, 12) == TOKENS


DIGEST_H = "78065f1ac990dd01"
TOKENS = (57, 50, 50, 50, 47, 47, 47, 4, 4, 4, 8, 8)
