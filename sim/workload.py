"""Seeded, reproducible request traces.

A trace is a list of ``Request`` sorted by arrival step. Requests of one conversation
share one ``TokenSeq`` (tokens and block hashes); a request is a prefix of it (its
prompt) followed by the reply that the next turn resends. Arrival steps are fixed by
the workload, so every semantics replays exactly the same trace.

Workloads:
  chat           multi-turn chats resending a growing history (system prompt, turns of
                 user message + reply); a turn is sometimes regenerated (sent again).
  shared-prefix  many requests sharing one system prompt, questions drawn from a
                 Zipf-popular pool, so popular questions repeat.
  random         random prompts of random lengths; some are resent later.
  rag            retrieval-augmented questions: a shared system prompt, then 1-3
                 documents drawn (Zipf-popular) from a shared pool in retrieval order,
                 then the question; requests sharing a top document share that prefix.
  agent          agent loops: a task, then steps that each append a tool result and
                 the model's action and resend the whole growing context; sessions
                 interleave.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from sim.ssm import VOCAB

WORKLOADS = ("chat", "shared-prefix", "random", "rag", "agent")


@dataclass
class TokenSeq:
    """Tokens and their block hash chain (``hashes[k]`` names the first k+1 blocks)."""

    tokens: NDArray[np.uint8]
    block_size: int
    hashes: list[int] = field(default_factory=list)

    def hashes_upto(self, num_blocks: int) -> list[int]:
        bs = self.block_size
        have = len(self.hashes)
        if num_blocks > have:
            prev = self.hashes[-1] if self.hashes else 0x5EED
            rows = self.tokens[have * bs:num_blocks * bs].reshape(-1, bs).tolist()
            for row in rows:
                prev = hash((prev, tuple(row)))
                self.hashes.append(prev)
        return self.hashes


@dataclass(frozen=True)
class Request:
    rid: int
    arrival: int  # engine step
    seq: TokenSeq
    prompt_len: int
    reply_len: int  # tokens decoded; the next turn resends seq.tokens[:prompt_len+reply_len]
    chat: bool = False  # the reply is resent (decode-phase states are worth caching)

    @property
    def tokens(self) -> NDArray[np.uint8]:
        return self.seq.tokens


def _toks(rng: np.random.Generator, n: int) -> NDArray[np.uint8]:
    return rng.integers(0, VOCAB, size=n, dtype=np.uint8)


def chat(n: int, seed: int, block_size: int = 16) -> list[Request]:
    rng = np.random.default_rng([seed, 1])
    systems = [_toks(rng, int(rng.integers(24, 120))) for _ in range(4)]
    out: list[Request] = []
    t = 0
    while len(out) < n:
        t += int(rng.integers(0, 12))  # a new conversation every ~5.5 steps
        parts = [systems[int(rng.integers(0, len(systems)))]]
        turns = int(rng.integers(2, 11))
        plan: list[tuple[int, int, int]] = []  # (arrival, prompt_len, reply_len)
        length = len(parts[0])
        when = t
        for _ in range(turns):
            user = _toks(rng, int(rng.integers(4, 60)))
            parts.append(user)
            length += len(user)
            sends = 2 if rng.random() < 0.15 else 1  # "regenerate": the same prompt again
            reply = int(rng.integers(8, 120))
            for k in range(sends):
                plan.append((when, length, reply))
                if k + 1 < sends:  # stop the answer early and regenerate it
                    when += int(rng.integers(2, 12))
                else:  # decode, then the user reads and types
                    when += reply + int(rng.integers(5, 40))
            parts.append(_toks(rng, reply))
            length += reply
        seq = TokenSeq(np.concatenate(parts), block_size)
        for arrival, p, r in plan:
            out.append(Request(0, arrival, seq, p, r, chat=True))
    return _finish(out, n)


def shared_prefix(n: int, seed: int, block_size: int = 16) -> list[Request]:
    rng = np.random.default_rng([seed, 2])
    system = _toks(rng, 250)
    pool = max(50, n // 10)
    questions: dict[int, TokenSeq] = {}
    weights = 1.0 / np.arange(1, pool + 1) ** 1.1
    picks = rng.choice(pool, size=n, p=weights / weights.sum())
    out = []
    for i, q in enumerate(picks.tolist()):
        seq = questions.get(q)
        if seq is None:
            qrng = np.random.default_rng([seed, 3, q])
            seq = TokenSeq(np.concatenate([system, _toks(qrng, int(qrng.integers(4, 80)))]),
                           block_size)
            questions[q] = seq
        out.append(Request(0, i, seq, len(seq.tokens), int(rng.integers(8, 120))))
    return _finish(out, n)


def random_prompts(n: int, seed: int, block_size: int = 16) -> list[Request]:
    rng = np.random.default_rng([seed, 4])
    out: list[Request] = []
    for i in range(n):
        if out and rng.random() < 0.1:  # resend an earlier prompt
            prev = out[int(rng.integers(max(0, len(out) - 500), len(out)))]
            out.append(Request(0, i, prev.seq, prev.prompt_len, prev.reply_len))
            continue
        p = int(rng.integers(16, 513))
        out.append(Request(0, i, TokenSeq(_toks(rng, p), block_size), p,
                           int(rng.integers(8, 120))))
    return _finish(out, n)


def rag(n: int, seed: int, block_size: int = 16) -> list[Request]:
    rng = np.random.default_rng([seed, 5])
    system = _toks(rng, 96)
    pool = max(40, n // 20)
    docs = [_toks(rng, int(rng.integers(60, 200))) for _ in range(pool)]
    weights = 1.0 / np.arange(1, pool + 1) ** 1.2
    out = []
    for i in range(n):
        k = int(rng.integers(1, 4))
        picked = rng.choice(pool, size=k, replace=False, p=weights / weights.sum())
        parts = [system, *(docs[int(d)] for d in picked), _toks(rng, int(rng.integers(8, 40)))]
        tokens = np.concatenate(parts)
        out.append(Request(0, i, TokenSeq(tokens, block_size), len(tokens),
                           int(rng.integers(8, 120))))
    return _finish(out, n)


def agent(n: int, seed: int, block_size: int = 16) -> list[Request]:
    rng = np.random.default_rng([seed, 6])
    system = _toks(rng, 160)  # the agent's instructions and tool descriptions
    out: list[Request] = []
    t = 0
    while len(out) < n:
        t += int(rng.integers(0, 20))
        parts = [system, _toks(rng, int(rng.integers(20, 80)))]  # the task
        when = t
        for _ in range(int(rng.integers(3, 16))):
            length = sum(len(x) for x in parts)
            action = int(rng.integers(10, 60))
            out.append(Request(0, when, TokenSeq(np.concatenate(parts), block_size), length,
                               action, chat=True))
            parts.append(_toks(rng, action))  # the action the model produced
            parts.append(_toks(rng, int(rng.integers(20, 200))))  # the tool's result
            when += action + int(rng.integers(2, 30))
    return _finish(out, n)


def _finish(reqs: list[Request], n: int) -> list[Request]:
    reqs = sorted(reqs, key=lambda r: r.arrival)[:n]
    return [Request(i, r.arrival, r.seq, r.prompt_len, r.reply_len, r.chat)
            for i, r in enumerate(reqs)]


GENERATORS: dict[str, Callable[[int, int, int], list[Request]]] = {
    "chat": chat,
    "shared-prefix": shared_prefix,
    "random": random_prompts,
    "rag": rag,
    "agent": agent,
}


def make_trace(workload: str, n: int, seed: int, block_size: int = 16) -> list[Request]:
    try:
        gen = GENERATORS[workload]
    except KeyError:
        raise ValueError(f"workload: unknown name {workload!r} "
                         f"(known: {', '.join(WORKLOADS)})") from None
    return gen(n, seed, block_size)
