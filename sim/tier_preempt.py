"""Preemption and resume for the tier simulation (``sim.tier_sim``): which requests of a
trace are preempted, where, and when they resume. Seeded; every semantics of a run sees
the same plan.

What vLLM 0.33.0 does (``v1/core/sched/scheduler.py`` unless another file is named; the
connector is ``distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py``):

- ``_preempt_request`` frees the request's GPU blocks (:1817), sets
  ``num_computed_tokens = 0`` (:1822) and puts it back at the head of the waiting queue
  (:1842); the connector hears of it only through ``preempted_req_ids`` (:1733): it
  flushes the request's in-flight store jobs (connector :2136-2151), which the worker
  submits and waits for (offloading/worker.py:219-244), so they complete. The request is
  not finished: no ``on_request_finished``, and its ``ReqContext`` (and the manager's
  per-request record in it) stays; ``on_new_request`` runs once per request, when it is
  added (:2955).
- Resumed, it is a waiting request with ``num_computed_tokens == 0`` again (:1110): the
  GPU prefix cache, then ``get_num_new_matched_tokens`` (:1139-1141). The connector
  clears the request's block ids and restarts storing at chunk 0 ("offer every chunk
  again", connector :1241-1245), extends its keys to the request's current block hashes
  (:1254, prompt and the tokens decoded so far) and looks the tier up again over
  ``num_tokens`` (connector :862), i.e. prompt plus output; a hit is loaded and the rest
  recomputed as a prefill. Stores stay within the prompt (``offload_prompt_only``,
  connector :762-771), and the Mamba state kept is still the one at the prompt's replay
  boundary (``replay_boundaries(request.num_prompt_tokens, ...)``,
  v1/core/kv_cache_coordinator.py:368-372).

The simulation imposes the preemptions (the tier simulation runs one request at a time,
so there is no block-pool pressure to cause them): a request preempted mid-prefill is
preempted after a number of its prefill steps, one preempted mid-decode after a number of
output tokens; it resumes after a number of later requests have run, or just before the
first later request whose prompt begins with its whole prompt (a next turn or a resend
cannot come before the answer it extends). The GPU prefix cache stays cold, as in the
rest of the tier simulation: every resumed hit comes from the CPU tier (the freed GPU
blocks are taken to have been reused, which is why requests are preempted).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sim.ssm import VOCAB
from sim.workload import Request, TokenSeq

PREFILL = "prefill"
DECODE = "decode"
MAX_PREFILL_STEPS = 3  # a mid-prefill preemption comes after 1-3 prefill steps


@dataclass(frozen=True)
class Preemption:
    """Where one request is preempted and when it resumes. Mid-prefill: after
    ``prefill_steps`` prefill steps, when its prefill takes more steps than that; else
    (and for ``phase == DECODE``) mid-decode, after ``decoded`` output tokens."""

    phase: str
    prefill_steps: int
    decoded: int
    resume_after: int  # later requests that run before it resumes

    def __post_init__(self) -> None:
        if self.phase not in (PREFILL, DECODE):
            raise ValueError(f"phase: expected {PREFILL} or {DECODE}, got {self.phase!r}")
        if self.prefill_steps < 1 or self.decoded < 1 or self.resume_after < 0:
            raise ValueError("preemption: prefill_steps and decoded must be >= 1, "
                             "resume_after >= 0")


def plan(trace: Sequence[Request], rate: float, seed: int,
         resume_after: tuple[int, int] = (1, 8)) -> dict[int, Preemption]:
    """The preempted requests of ``trace`` by rid: each with probability ``rate``, half
    of them planned mid-prefill; ``resume_after`` (A, B): resumed after A-B later
    requests. The same draws are made for every request whatever the rate, so a higher
    rate preempts a superset."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate: expected 0..1, got {rate}")
    lo, hi = resume_after
    if not 0 <= lo <= hi:
        raise ValueError(f"resume_after: expected 0 <= A <= B, got {lo}-{hi}")
    rng = np.random.default_rng([seed, 8])
    draws = rng.random((len(trace), 5))
    out: dict[int, Preemption] = {}
    for req, (u, ph, st, dec, wait) in zip(trace, draws.tolist(), strict=True):
        if u >= rate:
            continue
        out[req.rid] = Preemption(
            PREFILL if ph < 0.5 else DECODE, 1 + int(st * MAX_PREFILL_STEPS),
            1 + int(dec * max(1, req.reply_len - 1)), lo + int(wait * (hi - lo + 1)))
    return out


def extends(later: Request, req: Request, hash_block: int) -> bool:
    """Whether ``later``'s prompt begins with ``req``'s whole prompt (to the last full
    hash block, and the same tokens after it)."""
    p = req.prompt_len
    if later.prompt_len < p:
        return False
    if later.seq is req.seq:
        return True
    n = p // hash_block
    if n and later.seq.hashes_upto(n)[n - 1] != req.seq.hashes_upto(n)[n - 1]:
        return False
    return bool(np.array_equal(later.seq.tokens[n * hash_block:p],
                               req.seq.tokens[n * hash_block:p]))


def resume_index(trace: Sequence[Request], i: int, p: Preemption, hash_block: int) -> int:
    """The trace index before which request ``i`` resumes."""
    due = min(len(trace), i + 1 + p.resume_after)
    for j in range(i + 1, due):
        if extends(trace[j], trace[i], hash_block):
            return j
    return due


def with_output(req: Request, decoded: int, seed: int) -> TokenSeq:
    """The request's tokens once it has decoded ``decoded`` tokens: its own sequence when
    that holds them (a chat turn's reply, resent by the next turn), else the prompt and
    seeded output tokens (the prompt's hashes carried over)."""
    end = req.prompt_len + decoded
    if len(req.seq.tokens) >= end:
        return req.seq
    rng = np.random.default_rng([seed, 9, req.rid])
    out = rng.integers(0, VOCAB, size=decoded, dtype=np.uint8)
    bs = req.seq.block_size
    n = req.prompt_len // bs
    return TokenSeq(np.concatenate([req.seq.tokens[:req.prompt_len], out]), bs,
                    list(req.seq.hashes_upto(n)[:n]))
