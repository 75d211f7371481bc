"""Maximality on vLLM 0.33.0: the complete-chunk hits the lookup should find.

A hit of ``h`` tokens beyond the GPU prefix hit ends at token ``y = num_computed_tokens
+ h``. It is *valid* on 0.33.0 when it obeys every rule ``_lookup_complete_chunks``
states for a hit (offloading/scheduler.py:849-1040 of 0.33.0; lines below) and every
chunk it needs is ready in the store:

- the request: no in-flight transfers (:1247 defers it) and it reads the prefix cache
  (:1258 gives 0 otherwise);
- the caps: ``h <= max_num_new_tokens`` (:863), ``h <= max_load_tokens`` (:867);
- the last token: with sliding-window or Mamba groups ``y <= num_tokens - 1`` (:876);
- the Mamba chunk: with a Mamba group in mode align ``y`` is a multiple of its chunk,
  ``mamba_align_size`` (:877, :154): the state restored is the one saved at ``y``;
- the load cap's chunk-align: with ``max_load_tokens`` set ``y`` is a multiple of every
  group's ``tokens_per_chunk`` (:917);
- per group: the request has the key of the chunk holding token ``y - 1``
  (``y <= len(offload_keys) * tokens_per_chunk``, :914; so ``y <= num_tokens``, :862);
  the hit is at least one chunk (``h >= tokens_per_chunk``, :921, :994; so ``h > 0``);
  and every chunk the group needs is answered HIT (a HIT_PENDING or RETRY defers, :788,
  :797, :824, :830) and, with prefix caching on, is not being loaded (:1022; tracked
  only then, :641). The chunks a group needs run
  from ``num_computed_tokens // tokens_per_chunk`` (:943) to ``cdiv(y,
  tokens_per_chunk)``: every one for full attention (:773), the last
  ``load_window_size_in_chunks(y)`` of them for a sliding window (:117, :968, :1027),
  the last one (the chunk holding the state at ``y``) for Mamba (a window of 1 chunk,
  config.py:81).

The window is 0.33.0's own: ``cdiv(sliding_window, tokens_per_chunk)`` chunks
(config.py:64), widened by ``load_window_size_in_chunks`` at an unaligned end. When
``sliding_window = k * tokens_per_chunk + 1`` and ``y`` is chunk-aligned the allocator
keeps only ``k`` of them; a hit that only that narrower window would allow is not
counted (0.24.0's invariant-based definition counts it, hence its precondition
``window-not-one-past-blocks``, which has no 0.33.0 counterpart).

EAGLE groups give their trailing chunk away on purpose (:936, :984); the theorem assumes
none (precondition ``no-eagle``), and, with sliding-window or Mamba groups, no cap ending
before the prompt (``caps-reach-prompt``: such a cap still loses the last-token margin of
:876). Complete chunks only: a partial-tail hit
(``_lookup_partial_tail``, :1160) ends inside a chunk and is not a valid hit here; with
tails on the lookup answers its complete-chunk hit, a longer partial-tail hit (:1139) or
a deferral (:1150), and the proofs check that hit, when not deferred, against the valid
complete-chunk hits (``proofs.tail_layers_chunked.maximality_query``; the bounded
counterexample search: ``proofs.encoding_chunked.Scope``'s partial-tail templates).

The Z3 twin is ``proofs.encoding_chunked.valid_hit``; ``tests/test_maximality_chunked.py``
pins the two together. Each rule is one entry of ``RULES`` so that a test can drop it.
"""

from __future__ import annotations

from collections.abc import Callable

from model.layout import cdiv
from model.layout_chunked import ChunkGroup, ChunkLayout
from model.lookup_chunked import HIT, answer
from model.scenario import Group, Scenario


def needed_chunks(cfg: ChunkGroup, s: Scenario, end: int) -> range:
    """The chunks group ``cfg`` needs for a hit ending at token ``end``."""
    tpc = cfg.tokens_per_chunk
    start = s.num_computed_tokens // tpc  # scheduler.py:943
    stop = cdiv(end, tpc)  # scheduler.py:942, :1035
    window = cfg.load_window_size_in_chunks(end)  # scheduler.py:1027 (None: every chunk)
    return range(start if window is None else max(start, stop - window), max(start, stop))


def _needed(s: Scenario, layout: ChunkLayout, end: int,
            bad: Callable[[Group, int, int], bool]) -> bool:
    """No chunk any group needs for a hit ending at ``end`` is ``bad``."""
    return not any(bad(g, c, cfg.tokens_per_chunk)
                   for cfg, g in zip(layout.groups, s.groups, strict=True)
                   for c in needed_chunks(cfg, s, end))


Rule = Callable[[Scenario, ChunkLayout, int, int], bool]  # (s, layout, hit, end)

RULES: dict[str, Rule] = {
    "not-in-flight": lambda s, lo, h, y: not s.in_flight_transfers,  # scheduler.py:1247
    "reads-prefix-cache": lambda s, lo, h, y: not s.skip_reading_prefix_cache,  # :1258
    "new-tokens-cap": lambda s, lo, h, y: (
        s.max_num_new_tokens is None or h <= s.max_num_new_tokens),  # :863
    "load-cap": lambda s, lo, h, y: s.max_load_tokens is None or h <= s.max_load_tokens,
    "last-token": lambda s, lo, h, y: (  # scheduler.py:876
        not lo.sliding_window_groups or y <= s.num_tokens - 1),
    "mamba-align": lambda s, lo, h, y: (  # scheduler.py:877
        lo.mamba_align_size is None or y % lo.mamba_align_size == 0),
    "load-cap-chunks": lambda s, lo, h, y: (  # scheduler.py:917
        s.max_load_tokens is None or all(y % c.tokens_per_chunk == 0 for c in lo.groups)),
    "keyed": lambda s, lo, h, y: all(  # scheduler.py:914
        y <= (s.num_tokens // c.tokens_per_chunk) * c.tokens_per_chunk for c in lo.groups),
    "whole-chunk": lambda s, lo, h, y: all(  # scheduler.py:921, :994
        h >= c.tokens_per_chunk for c in lo.groups),
    "ready-hit": lambda s, lo, h, y: _needed(  # scheduler.py:788, :797, :801, :822-838
        s, lo, y, lambda g, c, tpc: answer(g, (c + 1) * tpc, tpc) != HIT),
    "not-being-loaded": lambda s, lo, h, y: not s.enable_prefix_caching or _needed(
        s, lo, y, lambda g, c, tpc: c in g.being_loaded),  # scheduler.py:1022, :641
}


def broken_rules(s: Scenario, layout: ChunkLayout, hit: int) -> list[str]:
    """The rules a hit of ``hit`` tokens breaks (empty: a valid hit)."""
    end = s.num_computed_tokens + hit
    return [name for name, rule in RULES.items() if not rule(s, layout, hit, end)]


def is_valid_hit(s: Scenario, layout: ChunkLayout, hit: int) -> bool:
    return not broken_rules(s, layout, hit)


def larger_valid_hit(s: Scenario, layout: ChunkLayout, hit: int | None) -> int | None:
    """The largest valid hit above ``hit`` (None if there is none, or the lookup deferred)."""
    if hit is None:
        return None
    for h in range(s.num_tokens - s.num_computed_tokens, hit, -1):
        if is_valid_hit(s, layout, h):
            return h
    return None
