"""A small deterministic selective state-space recurrence (numpy).

The stand-in for a Mamba layer: a state vector ``h`` carried token by token,
``h <- a[x] * h + b[x]`` with a token-dependent ("selective") decay ``a[x]`` in (0, 1),
and greedy next-token choice ``argmax(W @ h)``. Weights are random but fixed
(seeded), so every run computes the same states bit for bit, on every machine: the
weights use no vectorised transcendental (numpy's SIMD ``exp`` differs by an ulp between
CPUs) and the logits no BLAS call (its summation order depends on the CPU's kernel); only
elementwise IEEE operations and numpy's fixed-order sums remain.

States are advanced in segments that break at absolute block boundaries: a state at
a block boundary is then the same float vector whichever earlier boundary the
computation started from, so "a correct load" and "cold" agree exactly, and any
difference is the load's fault.
"""

from __future__ import annotations

import functools
import itertools
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Context, Decimal

import numpy as np
from numpy.typing import NDArray

Vector = NDArray[np.float64]
VOCAB = 64
STATE_DIM = 16
BLOCK_CACHE = 100_000  # block contents whose ``_segment`` factors a recurrence keeps
GREEDY_CACHE = 100_000  # states whose ``greedy_margin`` a recurrence keeps


@dataclass(frozen=True)
class Recurrence:
    decay: NDArray[np.float64]  # (VOCAB, STATE_DIM), values in (0, 1)
    drive: NDArray[np.float64]  # (VOCAB, STATE_DIM)
    readout: NDArray[np.float64]  # (VOCAB, STATE_DIM)
    # per block content: the two factors of ``_segment`` (bounded: cleared when full)
    _blocks: dict[bytes, tuple[Vector, Vector]] = field(
        default_factory=dict, compare=False, repr=False)
    # per (state, n): ``greedy_margin``'s answer (bounded: cleared when full)
    _greedy: dict[tuple[bytes, int], tuple[tuple[int, ...], float]] = field(
        default_factory=dict, compare=False, repr=False)

    @staticmethod
    def make(seed: int = 20240612) -> Recurrence:
        """The recurrence of ``seed``: one shared (read-only) object per seed in a
        process, so that engines run one after another share its caches."""
        return _make(seed)

    def zero(self) -> Vector:
        return np.zeros(STATE_DIM)

    def _segment(self, h: Vector, tokens: NDArray[np.uint8]) -> Vector:
        # h_end = prod(a) * h + sum_i b_i * prod_{j>i} a_j: both factors depend on the
        # block's tokens alone, so they are computed once per block content (re-sent
        # chats advance the same blocks again); the result is the same float vector
        key = tokens.tobytes()
        factors = self._blocks.get(key)
        if factors is None:
            a = self.decay[tokens]
            b = self.drive[tokens]
            suffix = np.cumprod(a[::-1], axis=0)[::-1]  # prod_{j>=i} a_j
            tail = np.empty_like(suffix)
            tail[:-1] = suffix[1:]
            tail[-1] = 1.0
            factors = (suffix[0].copy(), (b * tail).sum(axis=0))
            if len(self._blocks) >= BLOCK_CACHE:
                self._blocks.clear()
            self._blocks[key] = factors
        out: Vector = factors[0] * h + factors[1]
        return out

    def advance(self, h: Vector, tokens: NDArray[np.uint8], start: int, end: int,
                block_size: int) -> Vector:
        """The state after tokens[start:end], from ``h`` (the state at ``start``).

        Whole blocks go through the closed form, partial blocks token by token, so the
        result does not depend on where chunks split a partial block.
        """
        pos = start
        while pos < end:
            nxt = min(end, (pos // block_size + 1) * block_size)
            if pos % block_size == 0 and nxt - pos == block_size:
                h = self._segment(h, tokens[pos:nxt])
            else:
                for tok in tokens[pos:nxt].tolist():
                    h = self.decay[tok] * h + self.drive[tok]
            pos = nxt
        return h

    def greedy(self, h: Vector, n: int) -> tuple[int, ...]:
        """``n`` greedy tokens generated from state ``h`` (fed back one by one)."""
        return tuple(itertools.islice(self._tokens(h), n))

    def greedy_margin(self, h: Vector, n: int) -> tuple[tuple[int, ...], float]:
        """``greedy(h, n)`` and its smallest margin: over the steps, how far the largest
        logit lies above the second largest (0 on a tie). A function of the state's bits
        and ``n``: kept per (state, n) (runs of one workload meet the same cold states)."""
        key = (h.tobytes(), n)
        got = self._greedy.get(key)
        if got is None:
            rows: list[Vector] = []
            tokens = tuple(itertools.islice(self._tokens(h, rows), n))
            top2 = np.partition(np.array(rows), -2, axis=1)[:, -2:]
            got = tokens, float((top2[:, 1] - top2[:, 0]).min())
            if len(self._greedy) >= GREEDY_CACHE:
                self._greedy.clear()
            self._greedy[key] = got
        return got

    def greedy_differs(self, h: Vector, expected: Sequence[int]) -> bool:
        """``greedy(h, len(expected)) != tuple(expected)``, generating tokens only up to
        the first one that differs."""
        # the generator is endless: zip stops at the end of ``expected``
        return any(a != b for a, b in zip(self._tokens(h), expected, strict=False))

    def surely_same_greedy(self, h: Vector, c: Vector, c_margin: float) -> bool:
        """True only if ``greedy(h, n) == greedy(c, n)`` for the n steps that
        ``greedy_margin(c, n)`` measured ``c_margin`` over (any n): a rounding-error bound,
        so that a state within float noise of ``c`` need not be generated from. False
        means "not shown": the caller generates the tokens.

        While both take the same tokens, with e_t = max|h_t - c_t|, u = 2**-53, A = max
        decay, B = max|drive|, C >= max|c_t| (|c_0|, and 2B/(1-A) bounds the rest):
        fl(fl(a*x) + b) gives e_{t+1} <= A(1+4u) e_t + 4u(2AC + B), so every e_t <= E =
        e_0 + 4u(2AC + B)/(1 - A(1+4u)); a logit fl(R @ x) is within gamma_16 |R||x| of
        R @ x in any summation order, so logits of h_t and c_t differ by at most
        rho E + gamma_16 rho (2C + E) (rho: the largest row sum of |readout|). A margin
        above twice that keeps every argmax; 3x leaves room for this bound's own rounding.
        """
        u = 2.0 ** -53
        e0 = float(np.abs(h - c).max())
        big_a, big_b, rho = self._bounds
        a_up = big_a * (1 + 4 * u)
        if not (np.isfinite(e0) and np.isfinite(c_margin) and a_up < 1):
            return False
        big_c = max(float(np.abs(c).max()), 2 * big_b / (1 - big_a))
        e = e0 * (1 + 2 * u) + 4 * u * (2 * big_a * big_c + big_b) / (1 - a_up)
        gamma = 16 * u / (1 - 16 * u)  # STATE_DIM products summed
        return c_margin > 3 * (rho * e + gamma * rho * (2 * big_c + e))

    @functools.cached_property
    def _bounds(self) -> tuple[float, float, float]:
        assert self.readout.shape[1] <= 16  # gamma_16 above
        return (float(self.decay.max()), float(np.abs(self.drive).max()),
                float(np.abs(self.readout).sum(axis=1).max()))

    def _tokens(self, h: Vector, logits_rows: list[Vector] | None = None) -> Iterator[int]:
        # row views taken once (numpy's per-call overhead is most of this loop's cost)
        readout, decay, drive = self.readout, list(self.decay), list(self.drive)
        while True:
            # not ``readout @ h``: BLAS picks a summation order by CPU
            logits = (readout * h).sum(axis=1)
            tok = int(logits.argmax())
            if logits_rows is not None:
                logits_rows.append(logits)
            yield tok
            h = decay[tok] * h + drive[tok]


_EXACT = Context(prec=40)


def _sigmoid(z: NDArray[np.float64]) -> NDArray[np.float64]:
    """1 / (1 + exp(-z)) elementwise, in 40-digit decimals rounded once to the nearest
    float: the same bits on every machine (numpy's ``exp`` is not)."""
    one = Decimal(1)
    out = [float(_EXACT.divide(one, _EXACT.add(one, _EXACT.exp(Decimal(-float(x))))))
           for x in z.ravel()]
    return np.array(out, dtype=np.float64).reshape(z.shape)


@functools.cache
def _make(seed: int) -> Recurrence:
    rng = np.random.default_rng(seed)
    decay = _sigmoid(3.0 + rng.normal(size=(VOCAB, STATE_DIM)))
    rec = Recurrence(decay, rng.normal(size=(VOCAB, STATE_DIM)),
                     rng.normal(size=(VOCAB, STATE_DIM)))
    for a in (rec.decay, rec.drive, rec.readout):
        a.setflags(write=False)  # shared by every engine of the process
    return rec


@dataclass
class ColdStates:
    """Cold states at block boundaries, cached per prefix (block hash), LRU-bounded.

    Recomputing an evicted entry gives the same floats, so the bound is only a
    memory limit; it never changes a result.
    """

    rec: Recurrence
    block_size: int
    capacity: int = 200_000
    _cache: OrderedDict[int, Vector] = field(default_factory=OrderedDict)
    computed_blocks: int = 0

    def at_boundary(self, tokens: NDArray[np.uint8], hashes: Sequence[int], k: int) -> Vector:
        """The cold state after the first ``k`` blocks (``hashes[k-1]`` names the prefix)."""
        bs = self.block_size
        j = k
        h = None
        while j > 0:
            h = self._cache.get(hashes[j - 1])
            if h is not None:
                self._cache.move_to_end(hashes[j - 1])
                break
            j -= 1
        if h is None:
            h = self.rec.zero()
        while j < k:
            h = self.rec.advance(h, tokens, j * bs, (j + 1) * bs, bs)
            self.computed_blocks += 1
            j += 1
            self._cache[hashes[j - 1]] = h
            if len(self._cache) > self.capacity:
                self._cache.popitem(last=False)
        return h

    def at(self, tokens: NDArray[np.uint8], hashes: Sequence[int], pos: int) -> Vector:
        """The cold state after ``tokens[:pos]``."""
        k = pos // self.block_size
        h = self.at_boundary(tokens, hashes, k)
        return self.rec.advance(h, tokens, k * self.block_size, pos, self.block_size)
