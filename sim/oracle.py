"""The best correct hit for a lookup: what an ideal connector would load.

With one Mamba (align) group and full-attention groups, all of one block size: the
hit may end at a block boundary ``e`` only if the store holds the Mamba block ending at
``e`` (the state saved there) and every attention block from the GPU hit up to ``e``,
and ``e`` leaves the last prompt token to be recomputed. The oracle is the largest
such ``e`` beyond the GPU hit. A semantics that answers less gives tokens away; one
that answers more loads something that is not the state at the end of its hit.
"""

from __future__ import annotations

from model.scenario import Scenario


def oracle_hit(s: Scenario) -> int:
    """Tokens beyond ``s.num_computed_tokens`` that a correct load could bring."""
    bs = s.groups[0].gpu_block_size * s.block_size_factor
    start = s.num_computed_tokens // bs
    attention = [g for g in s.groups if g.kind != "mamba"]
    mamba = [g for g in s.groups if g.kind == "mamba"]
    # attention prefix: how far every attention group holds consecutive blocks
    reach = (s.prompt_tokens - 1) // bs
    for g in attention:
        b = start
        while b < reach and g.holds(b) and b not in g.deferred:
            b += 1
        reach = b
    for b in range(reach - 1, start - 1, -1):
        if all(g.holds(b) and b not in g.deferred for g in mamba):
            return (b + 1) * bs - s.num_computed_tokens
    return 0
