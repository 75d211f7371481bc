"""The generators of vLLM 0.33.0 scenarios that the conformance suites draw from
(tests/test_conformance_chunked.py, tests/test_proof_layers_chunked.py,
tests/test_proof_tails_chunked.py, bench/load_cap_loss.py): concrete requests as scenario
dicts, biased to the interesting cases (EAGLE, pending and deferred answers,
being-loaded chunks, caps, prefix caching off, partial tails), and the loop that keeps
the ones a suite's encoding covers. Each suite names its distribution (``ChunkDist``)
or tail generator; CONFORMANCE and LAYERS give a share (``multipass``) to short
staggered layouts whose lookups loop three or more passes (``multipass_dict``).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import releases
from model.evaluate import evaluate
from model.scenario import Scenario, parse_scenario
from proofs.turn_chunked import KINDS as TURN_KINDS

# the chunked semantics the encodings model (releases.proved)
SEMANTICS = releases.proved("chunked")
Draw = Callable[[random.Random, str], dict[str, Any]]


def some(rng: random.Random, n: int, p: float) -> list[int]:
    """Each of 0..n-1 with probability p."""
    return [i for i in range(n) if rng.random() < p]


def scenarios(draw: Draw, keep: Callable[[Scenario], bool], count: int,
              seed: int, semantics: Sequence[str] = SEMANTICS) -> list[Scenario]:
    """``count`` drawn scenarios that ``keep`` takes and model/ does not refuse, the
    ``semantics`` in turn (default: every chunked semantics the encodings model)."""
    return list(drawn(draw, keep, count, seed, semantics))


def drawn(draw: Draw, keep: Callable[[Scenario], bool], count: int,
          seed: int, semantics: Sequence[str] = SEMANTICS) -> Iterator[Scenario]:
    """``scenarios``' draw one at a time, the same scenarios in the same order: a suite
    that stops at the first disagreement draws no more than it reads."""
    rng = random.Random(seed)
    kept = 0
    while kept < count:
        s = parse_scenario(draw(rng, semantics[kept % len(semantics)]))
        if keep(s) and evaluate(s).refused is None:
            kept += 1
            yield s


def tally(drawn: Iterable[Scenario], conforms: Callable[..., None], wanted: Sequence[str],
          least: int, multipass: int = 0) -> Counter[str]:
    """``conforms(s, seen=...)`` on each drawn scenario, counting what they reach; each
    of ``wanted`` reached at least ``least`` times, lookups of three or more passes
    ("3+ passes") at least ``multipass`` times."""
    seen: Counter[str] = Counter()
    for s in drawn:
        conforms(s, seen=seen)
    for what in wanted:
        assert seen[what] >= least, f"{what}: only {seen[what]} of {seen['examples']}: {seen}"
    assert seen["3+ passes"] >= multipass, f"3+ passes: only {seen['3+ passes']}: {seen}"
    return seen


def _computed(rng: random.Random, prompt: int, unit: int) -> int:
    """Tokens already computed: a multiple of ``unit`` below the prompt, 3 times in 10."""
    if prompt > unit and rng.random() < 0.3:
        return unit * rng.randint(0, (prompt - 1) // unit)
    return 0


def _mark(rng: random.Random, g: dict[str, Any], over: Sequence[int], gate: float,
          marks: tuple[tuple[str, float], ...]) -> None:
    """Per field (pending, deferred, ...): with probability ``gate``, each of ``over``
    with the field's probability."""
    for name, p in marks:
        if rng.random() < gate:
            picked = [over[i] for i in some(rng, len(over), p)]
            if picked:
                g[name] = picked


def _request(rng: random.Random, semantics: str, prompt: int, computed: int,
             groups: list[dict[str, Any]], skip: float, in_flight: float | None,
             caps: float, **extra: Any) -> dict[str, Any]:
    """The request around the groups: skip_reading_prefix_cache, in-flight transfers
    (``None``: never drawn) and the two caps (those the release has), each with its
    probability."""
    out: dict[str, Any] = {"semantics": semantics, "block_size_factor": 1,
                           "prompt_tokens": prompt, "num_computed_tokens": computed,
                           "groups": groups, **extra}
    if rng.random() < skip:
        out["skip_reading_prefix_cache"] = True
        out["num_computed_tokens"] = 0
    if in_flight is not None and rng.random() < in_flight:
        out["in_flight_transfers"] = True
    steps = releases.get(semantics).steps  # only the caps the release has (C1, C2)
    if rng.random() < caps and steps.cap_new_tokens:
        out["max_num_new_tokens"] = rng.randint(0, prompt)
    if rng.random() < caps and steps.cap_load_tokens:
        out["max_load_tokens"] = rng.randint(0, prompt)
    return out


MODE_ALL = 0.4  # the share of mode "all" where a release has it and prefix caching is on


def _mamba_mode(rng: random.Random, semantics: str, caching: bool, mamba: bool) -> str:
    """The engine's one Mamba cache mode: "none" with prefix caching off; with it on
    "align", or "all" (``MODE_ALL`` of the time) in a release that has that mode
    (``ChunkSteps.mamba_all``, 0.28.0-0.31.0). No draw without a Mamba group."""
    if not caching:
        return "none"
    if mamba and releases.get(semantics).steps.mamba_all and rng.random() < MODE_ALL:
        return "all"
    return "align"


@dataclass(frozen=True)
class ChunkDist:
    """A distribution of requests on complete chunks (partial tails off)."""

    layouts: tuple[tuple[str, ...], ...] | None  # one of these; None: 1-4 groups, any kind
    sizes: tuple[int, ...]  # block sizes, in units of 1 or 2 tokens
    finding001: bool  # 3 in 10 multi-group Mamba layouts: Mamba block 2, the others 3
    prompt_chunks: int  # the prompt is at most this many of the largest chunk
    stored: tuple[float, ...]  # a group stores each chunk with one of these
    eagle: float
    pending: float
    skip: float
    caps: float
    multipass: float = 0.0  # this share from ``multipass_dict`` (layouts drawn, not given)


def chunk_dict(rng: random.Random, semantics: str, dist: ChunkDist,
               kinds: tuple[str, ...] | None = None) -> dict[str, Any]:
    """A request from ``dist`` (on ``kinds`` where given): block sizes that do not
    divide each other, EAGLE, pending and deferred answers, being-loaded chunks, caps,
    prefix caching off."""
    if kinds is None and dist.multipass and rng.random() < dist.multipass:
        return multipass_dict(rng, semantics, dist)
    if kinds is None:
        kinds = (rng.choice(dist.layouts) if dist.layouts is not None
                 else tuple(rng.choice(TURN_KINDS) for _ in range(rng.randint(1, 4))))
    unit = rng.choice((1, 1, 2))
    sizes = [unit * rng.choice(dist.sizes) for _ in kinds]
    mamba = [i for i, k in enumerate(kinds) if k == "mamba"]
    for i in mamba:  # scheduler.py:153: Mamba align groups share the chunk
        sizes[i] = sizes[mamba[0]]
    if dist.finding001 and mamba and len(kinds) > 1 and rng.random() < 0.3:
        # finding 001's class: a chunk that is not a multiple of the Mamba chunk
        sizes = [unit * (2 if k == "mamba" else 3) for k in kinds]
    if rng.random() < 0.3:
        sizes = [sizes[0]] * len(kinds)
    bpc = rng.choice((1, 1, 1, 2))
    caching = rng.random() < 0.85
    if not caching and mamba and len(kinds) > 1:
        sizes = [sizes[0]] * len(kinds)  # kv_cache_utils.py:878 then :892
    mode = _mamba_mode(rng, semantics, caching, bool(mamba))
    if mode == "all":  # kv_cache_utils.py:785 (0.31.0): the hash block backs off to the lcm,
        sizes = [sizes[0]] * len(kinds)  # which every block size must be a multiple of
    prompt = rng.randint(1, dist.prompt_chunks * max(sizes) * bpc)
    computed = _computed(rng, prompt, math.lcm(*sizes)) if caching else 0
    groups = []
    for kind, size in zip(kinds, sizes, strict=True):
        n = prompt // (size * bpc)
        g: dict[str, Any] = {"kind": kind, "gpu_block_size": size,
                             "stored": some(rng, n, rng.choice(dist.stored))}
        if kind == "sliding_window":
            g["sliding_window"] = rng.randint(1, 3 * size * bpc)
        if kind == "mamba":
            g["mamba_cache_mode"] = mode
        if rng.random() < dist.eagle:
            g["eagle"] = True
        _mark(rng, g, range(n), 0.4, (("pending", dist.pending), ("deferred", 0.05),
                                      ("being_loaded", 0.05)))
        groups.append(g)
    extra: dict[str, Any] = {}
    if bpc != 1:
        extra["blocks_per_chunk"] = bpc
    if not caching:
        extra["enable_prefix_caching"] = False
    return _request(rng, semantics, prompt, computed, groups, dist.skip, 0.04, dist.caps,
                    **extra)


MULTIPASS_TRIES = 200  # draws of ``staggered_dict`` per ``multipass_dict`` call


def staggered_dict(rng: random.Random, semantics: str, dist: ChunkDist) -> dict[str, Any]:
    """A short request on 2-4 groups of one block size, a sliding-window group among
    them, each group's store ending at its own chunk (a few holes; prefix caching off 2
    times in 10): a first group often HIT_PENDING on an early chunk (the lookup defers
    and re-runs every group), EAGLE groups (each pop lowers the bound again), so the
    groups lower the bound in turn."""
    layouts = [k for k in dist.layouts or () if len(k) >= 2 and "sliding_window" in k]
    if layouts:
        kinds = rng.choice(layouts)
    else:
        kinds = ("sliding_window",) + tuple(rng.choice(TURN_KINDS)
                                            for _ in range(rng.randint(1, 3)))
        kinds = tuple(rng.sample(kinds, len(kinds)))
    size = rng.choice((1, 1, 2)) * rng.choice((1, 2))
    n = rng.randint(3, 6)
    prompt = n * size + rng.randint(0, size - 1)
    caching = rng.random() < 0.8
    mode = _mamba_mode(rng, semantics, caching, "mamba" in kinds)  # one block size already
    groups = []
    for i, kind in enumerate(kinds):
        end = rng.randint(1, n)
        g: dict[str, Any] = {"kind": kind, "gpu_block_size": size, "stored": [
            c for c in range(n) if c < end or rng.random() < 0.3]}
        if kind == "sliding_window":
            g["sliding_window"] = rng.randint(1, 2 * size)
        if kind == "mamba":
            g["mamba_cache_mode"] = mode
        if rng.random() < 0.6:
            g["eagle"] = True
        if rng.random() < (0.6 if i == 0 else 0.2):
            g["pending"] = [rng.randrange(n)]
        groups.append(g)
    extra = {} if caching else {"enable_prefix_caching": False}
    return _request(rng, semantics, prompt, 0, groups, 0.0, None, 0.0, **extra)


def multipass_dict(rng: random.Random, semantics: str, dist: ChunkDist) -> dict[str, Any]:
    """The first of up to ``MULTIPASS_TRIES`` ``staggered_dict`` draws whose lookup loops
    three or more passes (scheduler.py:1001 and :1009 re-run groups when one lowers the
    bound), else the last draw."""
    for _ in range(MULTIPASS_TRIES):
        raw = staggered_dict(rng, semantics, dist)
        out = evaluate(parse_scenario(raw))
        if out.lookup is not None and out.lookup.passes >= 3:
            break
    return raw


# tests/test_conformance_chunked.py: the nine layouts of up to one group a kind
CONFORMANCE = ChunkDist(
    layouts=(("full_attention",), ("mamba",), ("sliding_window",),
             ("full_attention", "mamba"), ("sliding_window", "mamba"),
             ("mamba", "sliding_window"), ("full_attention", "sliding_window"),
             ("full_attention", "sliding_window", "mamba"),
             ("full_attention", "mamba", "sliding_window")),
    sizes=(1, 2, 3, 4), finding001=True, prompt_chunks=6, stored=(0.6, 0.85, 1.0),
    eagle=0.3, pending=0.06, skip=0.05, caps=0.15, multipass=0.25)
# tests/test_proof_layers_chunked.py: any layout of up to 4 groups (several of a kind)
LAYERS = ChunkDist(layouts=None, sizes=(1, 2, 3), finding001=False, prompt_chunks=5,
                   stored=(0.7, 0.9, 1.0), eagle=0.35, pending=0.08, skip=0.04, caps=0.2,
                   multipass=0.16)

_TAIL_CHUNK_MARKS = (("pending", 0.1), ("deferred", 0.05), ("being_loaded", 0.1))


def _ends(prompt: int, tph: int, block: int) -> list[int]:
    """The partial-tail key ends: each hash end that is not a chunk end."""
    return [p for p in range(tph, prompt + 1, tph) if p % block]


def tail_pair_dict(rng: random.Random, semantics: str) -> dict[str, Any]:
    """Partial tails on (full attention + Mamba align of one block size,
    ``prefix_match_unit`` a 2nd to 4th of it), biased to reach a partial-tail hit: most
    chunks and tail keys stored, some pending or deferred, EAGLE on the attention group
    (the proof margin), GPU hits, caps."""
    kinds = rng.choice((("full_attention", "mamba"), ("mamba", "full_attention")))
    tph = rng.choice((1, 1, 2, 3))
    block = tph * rng.choice((2, 3, 4))
    prompt = rng.randint(1, 4 * block)
    computed = _computed(rng, prompt, block)
    n = prompt // block
    ends = _ends(prompt, tph, block)
    groups = []
    for kind in kinds:
        g: dict[str, Any] = {"kind": kind, "gpu_block_size": block,
                             "stored": some(rng, n, rng.choice((0.7, 0.9, 1.0)))}
        if kind == "mamba":
            g["mamba_cache_mode"] = "align"
        if rng.random() < (0.4 if kind == "full_attention" else 0.1):
            g["eagle"] = True
        tails = some(rng, len(ends), rng.choice((0.5, 0.8, 1.0)))
        if tails:
            g["stored_tails"] = [ends[i] for i in tails]
        _mark(rng, g, ends, 0.3, (("pending_tails", 0.15), ("deferred_tails", 0.1)))
        _mark(rng, g, range(n), 0.2, _TAIL_CHUNK_MARKS)
        groups.append(g)
    return _request(rng, semantics, prompt, computed, groups, 0.05, None, 0.15,
                    hash_block_size=tph)


def tail_groups_dict(rng: random.Random, semantics: str) -> dict[str, Any]:
    """Partial tails on: 2-4 full-attention and Mamba align groups of one block size, a
    hash a half to a quarter of it; each group holds its keys up to a random hash
    position (often a shared one), a few more and fewer."""
    n = rng.randint(2, 4)
    kinds = ["mamba"] + [rng.choice(("full_attention", "mamba")) for _ in range(n - 1)]
    rng.shuffle(kinds)
    tph = rng.choice((1, 1, 2))
    block = tph * rng.randint(2, 4)
    prompt = rng.randint(1, 4 * block)
    computed = _computed(rng, prompt, block)
    shared = rng.randint(0, prompt // tph) * tph
    chunks = prompt // block
    edges = _ends(prompt, tph, block)
    groups = []
    for kind in kinds:
        upto = shared if rng.random() < 0.6 else rng.randint(0, prompt // tph) * tph
        g: dict[str, Any] = {"kind": kind, "gpu_block_size": block, "stored": [
            i for i in range(chunks) if (i + 1) * block <= upto or rng.random() < 0.1]}
        tails = [p for p in edges if (p <= upto and rng.random() < 0.9) or rng.random() < 0.1]
        if tails:
            g["stored_tails"] = tails
            if rng.random() < 0.2:
                g["pending_tails"] = rng.sample(tails, 1)
        if edges and rng.random() < 0.1:
            g["deferred_tails"] = rng.sample(edges, 1)
        if kind == "mamba":
            g["mamba_cache_mode"] = "align"
        if rng.random() < 0.3:
            g["eagle"] = True
        _mark(rng, g, range(chunks), 0.3, _TAIL_CHUNK_MARKS)
        groups.append(g)
    return _request(rng, semantics, prompt, computed, groups, 0.04, 0.04, 0.2,
                    hash_block_size=tph)
