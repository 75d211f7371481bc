"""The theorems, each stated once in words and once in Z3, with its preconditions.

A theorem is a *violation* formula over the lookup's result and load plan: PROVED means
no configuration, prompt, GPU hit and store content (all sizes unbounded) satisfies it
under the start-up checks and the theorem's preconditions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import z3

import releases
from model.semantics import Semantics
from proofs.encoding import (
    FA,
    MAMBA,
    MODE_ALIGN,
    MODE_ALL,
    SW,
    Config,
    Derived,
    Enc,
    Result,
    Store,
    load_plan,
)
from releases import steps

# the layout the counterexample search unrolls (proofs use any layout: proofs.abstract)
TEMPLATE = (FA, SW, MAMBA)


@dataclass(frozen=True)
class Context:
    """What a property may look at: the configuration, the loop's end and the result."""

    enc: Enc
    cfg: Config
    d: Derived
    sem: Semantics
    result: Result
    m0: z3.ArithRef  # the initial max_hit_size_tokens
    only_group: int | None = None  # a proof split by group looks at this group alone


@dataclass(frozen=True)
class Precondition:
    name: str
    words: str
    formula: Callable[[Config, Derived], z3.BoolRef]
    # can a real vLLM configuration break it? with the code that says so
    in_vllm: str
    # a request property the model enforces by default (replay without enforcing)
    runtime: bool = False
    # True: not claimed necessary; it bounds what the proof covers (Z3 answers unknown
    # beyond it), and the report says so
    scope: bool = False


PRECONDITIONS: dict[str, Precondition] = {
    p.name: p
    for p in (
        Precondition(
            "gpu-hit-aligned",
            "num_computed_tokens is a multiple of every group's GPU block size",
            lambda c, d: z3.And([c.computed == b * z3.Int(f"computed_in_blocks{g}")
                                 for g, b in enumerate(c.gpu)]),
            "Always holds: GPU prefix-cache hits are whole blocks of the scheduler block size, "
            "the lcm of the group block sizes (vllm/v1/core/kv_cache_utils.py:641).",
            runtime=True,
        ),
        Precondition(
            "gpu-hit-leaves-last-token",
            "num_computed_tokens < prompt_tokens",
            lambda c, d: c.computed < c.prompt,
            "Always holds: the GPU prefix hit is capped at prompt_tokens - 1 "
            "(vllm/v1/core/kv_cache_manager.py:227).",
            runtime=True,
        ),
        Precondition(
            "gpu-hit-needs-prefix-caching",
            "num_computed_tokens is 0 with prefix caching off or skip_reading_prefix_cache",
            lambda c, d: z3.Implies(z3.Or(z3.Not(c.prefix_caching), c.skip_reading),
                                    c.computed == 0),
            "Always holds: get_computed_blocks finds no GPU hit then "
            "(vllm/v1/core/kv_cache_manager.py:218).",
            runtime=True,
        ),
        Precondition(
            "mamba-mode-not-all",
            "no Mamba group uses mamba_cache_mode 'all'",
            lambda c, d: z3.And([m != MODE_ALL for m in c.mode if m is not None]),
            "Can break: 'all' is the default for models that support Mamba prefix caching "
            "(vllm/model_executor/models/config.py:420); vLLM issue #51094, fixed in 0.28.0.",
        ),
        Precondition(
            "align-divides-blocks",
            "every group's offloaded block size is a multiple of the Mamba offloaded block size",
            lambda c, d: z3.Or(z3.Not(d.align_on), z3.And(
                [o == d.align * z3.Int(f"blocks_per_align{g}") for g, o in enumerate(d.obs)])),
            "Not checked by vLLM: start-up asks only that every group's block size is a "
            "multiple of hash_block_size (vllm/v1/core/kv_cache_utils.py:665, "
            "vllm/v1/kv_offload/base.py:493) and schedules in multiples of their lcm "
            "(vllm/v1/core/kv_cache_utils.py:641). It holds for the hybrids vLLM 0.23.0 and "
            "0.24.0 build with prefix caching on (Mamba mode 'all' or 'align'), which give "
            "the Mamba group cache_config.block_size "
            "(vllm/model_executor/models/config.py:453) like the attention groups; on 0.33.0 "
            "a Mamba hybrid with sliding-window attention on FlashInfer breaks it "
            "(docs/findings/001-mamba-state-past-hit-end.md).",
        ),
        Precondition(
            "same-block-size",
            "every group has the same GPU block size",
            lambda c, d: z3.And([b == c.gpu[0] for b in c.gpu] + (
                [] if d.outside_align_gpu is None else
                [z3.Implies(d.align_on, d.outside_align_gpu == c.gpu[0])])),
            "Can break: groups may have different block sizes (vllm/v1/core/kv_cache_utils.py:641 "
            "schedules in their lcm); scheduler.py:138 names DeepSeek V4 (MLA + SWA groups).",
        ),
        Precondition(
            "window-whole-blocks",
            "every sliding window is a whole number of offloaded blocks",
            lambda c, d: z3.And([w == d.obs[g] * z3.Int(f"window_in_blocks{g}")
                                 for g, w in enumerate(c.window) if w is not None]),
            "Can break: sliding windows are model-defined token counts (e.g. 4096 with block 16 "
            "is whole, but nothing requires it: scheduler.py:98 rounds up).",
        ),
        Precondition(
            "window-not-one-past-blocks",
            "no sliding window is one token more than a whole number of offloaded blocks",
            lambda c, d: z3.And([
                w - 1 != d.obs[g] * ((w - 1) / d.obs[g])
                for g, w in enumerate(c.window) if w is not None]),
            "Can break, but rarely: 0.24.0's lookup asks for cdiv(sliding_window, B) blocks "
            "(scheduler.py:98; 0.33.0 widens it where the hit does not end on a chunk, "
            "scheduler.py:117) while the load needs the sliding_window - 1 tokens before "
            "the hit's end (single_type_kv_cache_manager.py:796), one block fewer when "
            "sliding_window = k*B + 1 (e.g. 4097 with block 16, or any window with block 1).",
        ),
        Precondition(
            "no-eagle",
            "no group is an EAGLE/MTP draft group",
            lambda c, d: z3.And([z3.Not(e) for e in d.eagle]),
            "Can break: EAGLE/MTP speculative decoding marks the groups that hold the "
            "drafter's layers (0.24.0: scheduler.py:169-180; 0.33.0: scheduler.py:208); with "
            "no group marked, 0.24.0 treats every group as one, 0.33.0 none "
            "(scheduler.py:218 of 0.33.0); their trailing block (chunk) is given away on "
            "purpose.",
        ),
        Precondition(
            "full-chunk-within-windowed",
            "every full-attention group's offloaded block is at most the offloaded block of "
            "some sliding-window or Mamba group; in a layout with neither, every "
            "full-attention group's offloaded block is the same",
            lambda c, d: z3.And([z3.Or([d.obs[g] <= d.obs[h] for h in d.windowed])
                                 if d.windowed else d.obs[g] == d.obs[0]
                                 for g in range(len(c.kinds)) if g not in d.windowed]),
            "Not checked by vLLM, and not needed for correct output: a hit that ends inside a "
            "full-attention chunk loads that chunk's GPU blocks and the engine recomputes the "
            "tokens past the hit (docs/findings/002-hit-inside-a-chunk.md). It holds for every "
            "layout of docs/layouts-vllm-0.33.0.md: in align mode the Mamba group takes "
            "cache_config.block_size, as full-attention layers do, and blocks_per_chunk is one "
            "value for every group; a layout of full-attention groups alone has one block "
            "size in every row (two sizes there can end the hit inside a chunk: "
            "tests/scenarios/vllm-0.33.0-whole-blocks).",
        ),
        Precondition(
            "caps-reach-prompt",
            "with sliding-window or Mamba groups, every cap set (max_load_tokens, "
            "max_num_new_tokens: vLLM 0.33.0's; older releases have none) reaches the "
            "prompt's end: num_computed_tokens + cap >= prompt_tokens",
            lambda c, d: z3.BoolVal(True),  # the 0.23.0/0.24.0 encoding has no caps
            "Can break: max_load_tokens is a request's kv_transfer_params entry "
            "(offloading/scheduler.py:385 of 0.33.0), and the connector passes "
            "max_num_new_tokens when a KV-cache group is not offloaded "
            "(_max_loadable_tokens in offloading_connector.py; it always ends before "
            "the prompt). A cap below the prompt still loses the last-token margin "
            "(scheduler.py:876 subtracts 1 after the caps, :863-870), then the Mamba or "
            "load-cap round-down (:877, :917) can lose a whole chunk (finding 003; its "
            "fix, alt-v033-cap-min, needs no such precondition).",
        ),
        Precondition(
            "nothing-deferred-or-loading",
            "the store defers no lookup and no block is being loaded",
            lambda c, d: z3.BoolVal(True),  # applied to the store in theorems.py
            "Can break: asynchronous stores defer lookups (scheduler.py:396-401) and other "
            "requests' loads are tracked (scheduler.py:590).",
        ),
    )
}


def _quiet(s: Store, i: z3.ArithRef) -> z3.BoolRef:
    return z3.And(z3.Not(s.deferred(i)), z3.Not(s.loading(i)))


def _loadable(s: Store, prefix_caching: z3.BoolRef, i: z3.ArithRef) -> z3.BoolRef:
    """Stored, not deferred, and not being loaded (which only counts with prefix caching)."""
    return z3.And(s.stored(i), z3.Not(s.deferred(i)),
                  z3.Not(z3.And(prefix_caching, s.loading(i))))


def precondition_formula(name: str, enc: Enc, cfg: Config, d: Derived) -> z3.BoolRef:
    if name == "nothing-deferred-or-loading":
        # every block of every group: instantiated like the other store facts
        return z3.And([enc.forall(z3.IntVal(0), d.keys[g] + 1, partial(_quiet, s))
                       for g, s in enumerate(cfg.stores)])
    return PRECONDITIONS[name].formula(cfg, d)


# --- the properties (violations) ----------------------------------------------------


def _active(ctx: Context) -> z3.BoolRef:
    return z3.And(z3.Not(ctx.result.deferred), ctx.result.hit > 0)


def violates_no_partial_state(ctx: Context) -> z3.BoolRef:
    """I1: a restored Mamba state sits exactly where the hit ends."""
    mamba = [g for g, k in enumerate(ctx.cfg.kinds)
             if k == MAMBA and ctx.only_group in (None, g)]
    loads = load_plan(ctx.enc, ctx.cfg, ctx.d, ctx.result.hit, mamba)
    end = ctx.cfg.computed + ctx.result.hit
    bad = [
        z3.And(z3.Or(ctx.cfg.mode[g] == MODE_ALIGN, ctx.cfg.mode[g] == MODE_ALL),
               loads[g].lo < loads[g].hi,
               # the state restored is not the hit's end, or not from the offloaded
               # block's last sub-block (model/invariants.py)
               z3.Or(loads[g].state_position != end,
                     loads[g].state_position != loads[g].hi * ctx.d.obs[g]))
        for g in mamba
    ]
    return z3.And(_active(ctx), z3.Or(bad)) if bad else z3.BoolVal(False)


def violates_loads_stored_only(ctx: Context) -> z3.BoolRef:
    """I2: the load reads only blocks the store holds."""
    groups = None if ctx.only_group is None else [ctx.only_group]
    loads = load_plan(ctx.enc, ctx.cfg, ctx.d, ctx.result.hit, groups)
    bad = []
    for g, load in loads.items():
        i = ctx.enc.fresh_int(f"unstored{g}")
        bad.append(z3.And(load.lo <= i, i < load.hi,
                          z3.Not(ctx.cfg.stores[g].stored(i))))
    return z3.And(_active(ctx), z3.Or(bad))


def violates_leaves_last_token(ctx: Context) -> z3.BoolRef:
    """I3: with sliding-window or Mamba groups the last prompt token is recomputed."""
    end = ctx.cfg.computed + ctx.result.hit
    return z3.And(ctx.d.any_windowed, _active(ctx), end > ctx.cfg.prompt - 1)


def violates_whole_blocks(ctx: Context) -> z3.BoolRef:
    """I4: a non-zero hit covers at least one offloaded block of every group."""
    obs = ctx.d.obs if ctx.only_group is None else (ctx.d.obs[ctx.only_group],)
    return z3.And(_active(ctx), z3.Or([ctx.result.hit < o for o in obs]))


def valid_hit(ctx: Context, h: z3.ArithRef) -> z3.BoolRef:
    """``model.maximality.is_valid_hit`` in Z3."""
    enc, cfg, d, sem = ctx.enc, ctx.cfg, ctx.d, ctx.sem
    end = cfg.computed + h
    loads = load_plan(enc, cfg, d, h, None if ctx.only_group is None else [ctx.only_group])
    c = [h > 0, end <= cfg.prompt,
         z3.Implies(d.any_windowed, end <= cfg.prompt - 1)]  # I3
    if sem.skip_reading_check:
        c.append(z3.Not(cfg.skip_reading))
    if sem.in_flight_check:
        c.append(z3.Not(cfg.in_flight))
    for g, k in enumerate(cfg.kinds):
        if ctx.only_group not in (None, g):
            continue
        ld = loads[g]
        c.append(ld.hi <= d.keys[g])  # the request has the keys
        c.append(h >= d.obs[g])  # I4
        c.append(enc.forall(ld.lo, ld.hi, partial(_loadable, cfg.stores[g], cfg.prefix_caching)))
        win = d.win[g]
        if win is not None:  # scheduler.py:728's assertion holds (0.27.0: :918-922)
            c.append(ld.pending <= steps.load_window_limit(win, d.factor,
                                                           sem.load_window_slack))
        if k == MAMBA:
            mode = cfg.mode[g]
            c.append(z3.Implies(z3.And(z3.Or(mode == MODE_ALIGN, mode == MODE_ALL),
                                       ld.lo < ld.hi),
                                z3.And(ld.state_position == end,
                                       ld.state_position == ld.hi * d.obs[g])))
    return z3.And(c)


@dataclass(frozen=True)
class Theorem:
    name: str
    words: str
    violation: Callable[[Context], z3.BoolRef] | None  # None: termination
    preconditions: tuple[str, ...]
    # whether the property needs the store facts of the loop's summary
    uses_store: bool = True
    # whether the property needs only that the hit ends on a Mamba alignment boundary
    aligned: bool = False
    # prove the final step group by group and case by case (smaller queries)
    split: bool = False
    # split further: the loaded blocks lie within the confirmed ones (arithmetic only)
    containment: bool = False

    # Expectations are declared by each semantics' module (``releases``), as a delta
    # over its parent's; the theorem reads them there.

    @property
    def expected(self) -> dict[str, bool]:
        """Per semantics the theorem covers: True = expected to hold under its
        preconditions."""
        return {n: s.expect[self.name].holds for n, s in releases.all_semantics().items()
                if self.name in s.expect}

    def _expect(self, semantics: str) -> releases.Expect:
        return releases.get(semantics).expect[self.name]

    def holds_over_accepted(self, semantics: str) -> bool:
        """Expected to hold over every layout the release's start-up checks accept."""
        e = self._expect(semantics)
        return e.holds if e.accepted is None else e.accepted

    def pre(self, semantics: str) -> tuple[str, ...]:
        """The preconditions the theorem is checked under on ``semantics``."""
        e = self._expect(semantics)
        return self.preconditions if e.pre is None else e.pre

    def covers(self, semantics: str) -> bool:
        """Whether ``python -m proofs`` checks the theorem on ``semantics``."""
        return self.name in releases.get(semantics).expect


# the engine's request rules: every result assumes them (proofs.check.check), and the
# counterexample search never leaves them out
RUNTIME = ("gpu-hit-aligned", "gpu-hit-leaves-last-token", "gpu-hit-needs-prefix-caching")


THEOREMS: dict[str, Theorem] = {
    t.name: t
    for t in (
        Theorem(
            "no-partial-state",
            "Whenever a hit restores a Mamba state (cache mode align or all), the state was "
            "saved exactly at num_computed_tokens + hit.",
            violates_no_partial_state,
            ("mamba-mode-not-all", "align-divides-blocks"),
            uses_store=False,
            aligned=True,
        ),
        Theorem(
            "loads-stored-only",
            "Every block the load reads is held by the store.",
            violates_loads_stored_only,
            ("same-block-size",),
            split=True,
            containment=True,
        ),
        Theorem(
            "leaves-last-token",
            "With sliding-window or Mamba groups the hit ends before the last prompt token.",
            violates_leaves_last_token,
            (),
            uses_store=False,
        ),
        Theorem(
            "whole-blocks",
            "A non-zero hit is at least one offloaded block of every group.",
            violates_whole_blocks,
            ("same-block-size",),
            uses_store=False,
        ),
        Theorem(
            "termination",
            "The convergence loop stops: every pass that schedules another lowers "
            "max_hit_size_tokens, which stays above num_computed_tokens while the loop runs.",
            None,
            (),
        ),
        Theorem(
            "maximality",
            "No larger hit than the one returned would keep the invariants for the same store.",
            None,  # built in proofs.check (it needs the candidate in the invariant)
            ("no-eagle", "window-not-one-past-blocks"),
        ),
    )
}
