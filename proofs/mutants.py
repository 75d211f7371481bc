"""A catalogue of semantic mutants of the ``vllm-0.24.0`` lookup, each a bug a vLLM
developer could make, applied to the model and the Z3 encoding together.

A mutant is a list of source edits (``Edit``: one exact piece of text in one function,
replaced). ``applied`` compiles each edited function in its own module and rebinds every
module-level name that pointed at the original (``from proofs.encoding import
group_step`` included), so the model, the encoding, the abstract loop and the tests all
run the mutant; leaving the context restores the originals. Production code carries no
mutant switch: an edit whose text no longer occurs fails loudly (``StaleMutant``).

``killer`` names the theorem expected to kill a mutant that changes a proved property
(the proofs must then kill it alone); the others must be killed by a test or by the
cross-check against the GPU measurements, or be proved equivalent (``equivalence``).
"""

from __future__ import annotations

import importlib
import inspect
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FunctionType
from typing import Any

ENV = "OLC_MUTANT"  # tests/conftest.py applies the mutant this names (pytest subprocesses)


class StaleMutant(Exception):
    """An edit's text does not occur exactly once: the code moved on, update the edit."""


@dataclass(frozen=True)
class Edit:
    module: str
    function: str
    old: str
    new: str


@dataclass(frozen=True)
class Mutant:
    name: str
    words: str
    model: tuple[Edit, ...]
    encoding: tuple[Edit, ...] = ()
    killer: str | None = None  # the theorem that must kill it (a proved property changes)
    # the tests expected to kill it (pytest node ids), run before the whole default suite
    tests: tuple[str, ...] = ()


L = "model.lookup"
LP = "model.load_plan"
LY = "model.layout"
E = "proofs.encoding"
GOLDEN = "tests/test_golden.py::test_model_gives_the_real_schedulers_recorded_answers"
GAPS = "tests/test_mutant_gaps.py::"
AB = "proofs.abstract"  # the layered proof's loop: its own copy of the loop's control


def _e(module: str, function: str, old: str, new: str) -> Edit:
    return Edit(module, function, old, new)


MUTANTS: tuple[Mutant, ...] = (
    Mutant("last-token-dropped", "the last prompt token is not kept back (no -1)",
           (_e(L, "lookup", "max_hit_size_tokens -= 1", "max_hit_size_tokens -= 0"),),
           (_e(E, "initial_max_hit_blocks", "m: z3.ArithRef = cfg.prompt - 1",
               "m: z3.ArithRef = cfg.prompt - 0"),),
           "leaves-last-token"),
    Mutant("last-token-minus-two", "two tokens kept back instead of one",
           (_e(L, "lookup", "max_hit_size_tokens -= 1", "max_hit_size_tokens -= 2"),),
           (_e(E, "initial_max_hit_blocks", "m: z3.ArithRef = cfg.prompt - 1",
               "m: z3.ArithRef = cfg.prompt - 2"),),
           "maximality"),
    Mutant("align-round-up", "max_hit_size_tokens rounded up to the Mamba size, not down",
           (_e(L, "lookup", "max_hit_size_tokens = round_down(max_hit_size_tokens, "
               "layout.mamba_align_size)", "max_hit_size_tokens = cdiv(max_hit_size_tokens, "
               "layout.mamba_align_size) * layout.mamba_align_size"),),
           (_e(E, "initial_max_hit_blocks", 'enc.floordiv(m, d.align, "rounded")',
               'enc.cdiv(m, d.align, "rounded")'),),
           "leaves-last-token"),
    Mutant("align-before-minus-one", "rounded before the -1 instead of after",
           (_e(L, "lookup", "        max_hit_size_tokens -= 1\n        if sem.align_at == "
               "\"max_hit\" and layout.mamba_align_size is not None:\n",
               "        if sem.align_at == \"max_hit\" and layout.mamba_align_size is not "
               "None:\n            max_hit_size_tokens = round_down(max_hit_size_tokens, "
               "layout.mamba_align_size)\n        max_hit_size_tokens -= 1\n        if False:\n"),),
           (_e(E, "initial_max_hit_blocks",
               'blocks = enc.floordiv(m, d.align, "rounded")\n'
               '        m = z3.If(d.align_on, d.align * blocks, m)',
               'blocks = enc.floordiv(cfg.prompt, d.align, "rounded")\n'
               '        m = z3.If(d.align_on, d.align * blocks - 1, m)'),),
           "no-partial-state"),
    Mutant("align-dropped", "0.24.0 without PR #44599's rounding (0.23.0's lookup)",
           (_e(L, "lookup", 'if sem.align_at == "max_hit" and layout.mamba_align_size',
               'if False and layout.mamba_align_size'),),
           (_e(E, "initial_max_hit_blocks", 'if sem.align_at == "max_hit":', "if False:"),),
           "no-partial-state"),
    Mutant("align-gpu-block-size", "aligned to the GPU block size, not the offloaded one",
           (_e(LY, "_mamba_align_size", "return align_groups[-1].gpu_block_size * cp * "
               "factor", "return align_groups[-1].gpu_block_size * cp"),),
           (_e(E, "derive", "align = obs[aligned[0]]", "align = cfg.gpu[aligned[0]]"),
            # the layered proof's queries see the align size through an Env
            _e(E, "derive", "align = env.align_gpu * factor", "align = env.align_gpu"),
            _e(E, "derive", "align = z3.If(mode == MODE_ALIGN, obs[g], align)",
               "align = z3.If(mode == MODE_ALIGN, cfg.gpu[g], align)")),
           "no-partial-state"),
    Mutant("align-all-mode-too", "mode all rounded as well as align (upstream's later fix)",
           (_e(LY, "_mamba_align_size", 'g.mamba_cache_mode == "align"',
               'g.mamba_cache_mode in ("align", "all")'),),
           (_e(E, "derive", "cfg.mode[g] == MODE_ALIGN for g in aligned",
               "cfg.mode[g] != MODE_NONE for g in aligned"),),
           # no theorem changes under its preconditions (mamba-mode-not-all excludes
           # 'all'); the real 0.24.0 answers do (mode 'all' is not rounded there)
           tests=(GOLDEN,)),
    Mutant("key-clamp-dropped", "no min(max_hit_size_tokens, num_keys * obs) clamp",
           (_e(L, "lookup", "max_hit_size_tokens = min(max_hit_size_tokens, num_keys * obs)",
               "max_hit_size_tokens = max_hit_size_tokens"),),
           (_e(E, "group_step", "m1 = zmin(st.m, d.cap[g])", "m1 = st.m"),
            _e(AB, "turn", "m1 = z3.If(s.m <= lp.cap(g), s.m, lp.cap(g))", "m1 = s.m")),
           # the hits are the same; only a deferral answers where 0 was due
           tests=(GAPS + "test_key_clamp_gives_zero_not_deferral",)),
    Mutant("num-blocks-key-min-dropped", "num_blocks not capped by the key count",
           (_e(L, "lookup", "num_blocks = min(cdiv(query_max, obs), num_keys)",
               "num_blocks = cdiv(query_max, obs)"),),
           (_e(E, "exact_lookup", 'e = zmin(enc.cdiv(query_max, obs, f"qend{g}"), keys)',
               'e = enc.cdiv(query_max, obs, f"qend{g}")'),)),
    Mutant("start-rounded-up", "start_block_idx rounded up instead of down",
           (_e(L, "lookup", "start_block_idx = num_computed_tokens // obs  # scheduler.py:527",
               "start_block_idx = cdiv(num_computed_tokens, obs)  # scheduler.py:527"),),
           (_e(E, "exact_lookup", "s = d.start[g]  # scheduler.py:527",
               's = enc.cdiv(cfg.computed, obs, f"start_up{g}")'),),
           "loads-stored-only"),
    Mutant("too-short-le", "the one-block check uses <= (a hit of exactly one block is 0)",
           (_e(L, "lookup", "if max_hit_size_tokens - num_computed_tokens < obs:",
               "if max_hit_size_tokens - num_computed_tokens <= obs:"),),
           (_e(E, "group_step", "too_short = m1 - nc < obs", "too_short = m1 - nc <= obs"),
            _e(AB, "turn", "too_short = m1 - lp.nc < lp.obs(g)",
               "too_short = m1 - lp.nc <= lp.obs(g)")),
           "maximality"),
    Mutant("shrank-check-dropped", "no return 0 when the hit shrinks below one block",
           (_e(L, "lookup", "if new_num_hit_tokens < obs:  # scheduler.py:562",
               "if False:  # scheduler.py:562"),),
           # a hit shrunk below a block is caught by the next group's one-block check or a
           # window group's re-run; it survives when the last group of a layout without a
           # sliding-window group shrinks it (the search's second layout, FA + Mamba)
           (_e(E, "group_step", "shrank = new_hit < obs", "shrank = z3.BoolVal(False)"),
            _e(AB, "turn", "shrank = new_hit < lp.obs(g)", "shrank = z3.BoolVal(False)")),
           "whole-blocks", tests=(GAPS + "test_hit_shrunk_below_one_block_is_zero",)),
    Mutant("cut-off-by-one", "the hit ends one block past the last hit block",
           (_e(L, "lookup", "obs * (start_block_idx + num_hit_blocks)",
               "obs * (start_block_idx + num_hit_blocks + 1)"),),
           (_e(E, "exact_lookup", "obs * (s + popped)", "obs * (s + popped + 1)"),),
           "loads-stored-only"),
    Mutant("tightened-le", "re-runs when the hit did not shrink (<= for <): loops forever",
           (_e(L, "lookup", "if new_num_hit_tokens < num_hit_tokens:",
               "if new_num_hit_tokens <= num_hit_tokens:"),),
           (_e(E, "group_step", "tightened = new_hit < st.num_hit",
               "tightened = new_hit <= st.num_hit"),
            _e(AB, "turn", "tightened = new_hit < s.num_hit", "tightened = new_hit <= s.num_hit")),
           "termination"),
    Mutant("sliding-rerun-dropped", "sliding-window groups not looked at again after the "
           "hit shrinks",
           (_e(L, "lookup", "lookup_groups = layout.sliding_window_groups",
               "lookup_groups = ()"),),
           (_e(E, "group_step", "next_sw = z3.And(tightened,", "next_sw = z3.And(False,"),
            _e(AB, "turn", "next_sw = z3.And(tightened,", "next_sw = z3.And(False,")),
           "loads-stored-only"),
    Mutant("looked-flag-never-set", "looked_up_sliding_window never set",
           (_e(L, "lookup", "looked_up_sliding_window |= window is not None",
               "looked_up_sliding_window |= False"),),
           (_e(E, "group_step", "looked=z3.Or(st.looked, z3.BoolVal(d.win[g] is not None))",
               "looked=st.looked"),
            _e(AB, "turn", "looked=z3.Or(s.looked, windowed)", "looked=s.looked")),
           "loads-stored-only"),
    Mutant("deferred-rerun-dropped", "after a deferral, a shrinking hit does not re-run "
           "every group",
           (_e(L, "lookup", "                    lookup_groups = layout.lookup_groups\n",
               "                    lookup_groups = ()\n"),),
           (_e(E, "group_step", "next_all = z3.And(tightened, defer)",
               "next_all = z3.And(False, defer)"),
            _e(AB, "turn", "next_all = z3.And(tightened, defer)",
               "next_all = z3.And(False, defer)")),
           # the request stays deferred (None) either way: only the lookups differ
           tests=(GAPS + "test_shrink_after_deferral_looks_at_every_group_again",)),
    Mutant("deferred-returned-as-hit", "a deferred lookup answers its hit instead of None",
           (_e(L, "lookup", "if defer_lookup:  # scheduler.py:582", "if False:  # :582"),),
           (_e(E, "result_of", "z3.Or(st.defer, z3.And(cfg.prefix_caching",
               "z3.Or(False, z3.And(cfg.prefix_caching"),
            # the abstract loop's summary then has to hold for deferred ends as well
            _e(AB, "summary",
               "z3.Implies(z3.And(z3.Not(s.halted), z3.Not(s.defer)), facts)",
               "z3.Implies(z3.Not(s.halted), facts)")),
           "loads-stored-only"),
    Mutant("deferred-counts-as-miss", "the prefix lookup stops at a deferred block",
           (_e(L, "_maximal_prefix_lookup", "hit_count = ans.first_miss(lo, hi) - lo",
               "hit_count = next((b for b in range(lo, hi) if b in ans.retry or (ans.ready "
               "is not None and b not in ans.ready)), hi) - lo"),),
           (_e(E, "prefix_lookup", "enc.forall(s, s + r, lambda i: st.not_false(i)),\n"
               "        z3.Or(r == n, z3.Not(st.not_false(s + r))),",
               "enc.forall(s, s + r, lambda i: st.confirmed(i)),\n"
               "        z3.Or(r == n, z3.Not(st.confirmed(s + r))),"),),
           # a smaller hit where the real answer is a deferral: no invariant breaks
           tests=(GOLDEN,)),
    Mutant("being-loaded-window-ignored", "blocks being loaded checked over the whole hit, "
           "not the window",
           (_e(L, "lookup", "hit_blocks = hit_blocks[-cfg.sliding_window_size_in_blocks:]",
               "hit_blocks = hit_blocks"),),
           (_e(E, "result_of", "            lo = zmax(lo, hi - win)\n", "            lo = lo\n"),),
           # more deferrals, never a different hit
           tests=(GOLDEN,)),
    Mutant("eagle-no-pop", "the volatile EAGLE block is not popped",
           (_e(L, "lookup", "num_hit_blocks -= 1", "num_hit_blocks -= 0"),),
           (_e(E, "exact_lookup", "popped = z3.If(unverified, r - 1, r)", "popped = r"),),
           # a larger hit that keeps I1-I4: maximality (no-eagle scope) cannot see it, and
           # no-eagle stays necessary (maximality without it: still a counterexample)
           tests=(GOLDEN,)),
    Mutant("eagle-pop-two", "two EAGLE blocks popped",
           (_e(L, "lookup", "num_hit_blocks -= 1", "num_hit_blocks -= 2"),),
           (_e(E, "exact_lookup", "popped = z3.If(unverified, r - 1, r)",
               "popped = z3.If(unverified, r - 2, r)"),),
           "loads-stored-only"),
    Mutant("eagle-window-plus-one-dropped", "an EAGLE window group needs only window hits",
           (_e(L, "lookup", "required_window = window + 1 if is_eagle_unverified else window",
               "required_window = window"),),
           (_e(E, "exact_lookup", "z3.If(unverified, win + 1, win)", "win"),),
           "loads-stored-only"),
    Mutant("eagle-verified-kept", "eagle_verified not cleared when the hit shrinks",
           (_e(L, "lookup", "                    eagle_verified.clear()  # scheduler.py:568",
               "                    pass"),),
           (_e(E, "group_step", "clear = z3.And(tightened, z3.Not(d.eagle[g]))",
               "clear = z3.BoolVal(False)"),),
           # the same hit, other lookups
           tests=(GAPS + "test_shrink_by_a_plain_group_re_verifies_eagle",)),
    Mutant("keys-gpu-block-size", "offload keys counted in GPU blocks, not offloaded ones",
           (_e(L, "_num_offload_keys", "num_tokens // cfg.offloaded_block_size",
               "num_tokens // cfg.gpu_block_size"),),
           (_e(E, "derive", 'enc.floordiv(cfg.prompt, obs[g], f"keys{g}")',
               'enc.floordiv(cfg.prompt, cfg.gpu[g], f"keys{g}")'),),
           # Z3's counterexamples to loads-stored-only store blocks past the request's
           # last key, which no scenario file holds (model/ does not reproduce them)
           tests=(GOLDEN,)),
    Mutant("window-gpu-block-size", "the window in GPU blocks, not offloaded blocks",
           (_e(LY, "resolve_layout", "_window_in_blocks(g.kind, g.sliding_window, obs)",
               "_window_in_blocks(g.kind, g.sliding_window, g.gpu_block_size)"),),
           (_e(E, "derive", 'enc.cdiv(w, obs[g], f"win{g}")',
               'enc.cdiv(w, cfg.gpu[g], f"win{g}")'),),
           "maximality"),
    Mutant("load-end-gpu-block-size", "the load's last block in GPU blocks",
           (_e(LP, "_group_load", "num_blocks = cdiv(num_cached_tokens, cfg.offloaded_block_size)",
               "num_blocks = cdiv(num_cached_tokens, cfg.gpu_block_size)"),),
           (_e(E, "load_plan", 'hi = enc.cdiv(end, d.obs[g], f"load_end{g}")',
               'hi = enc.cdiv(end, cfg.gpu[g], f"load_end{g}")'),),
           # loads blocks past the request's last key: never stored (model/invariants.py)
           "loads-stored-only"),
    Mutant("mamba-state-off-by-one", "the Mamba group skips every computed token, not all "
           "but the last",
           (_e(LP, "num_skipped_tokens", "return num_computed_tokens - 1",
               "return num_computed_tokens"),),
           (_e(E, "load_plan", "skipped = end - 1", "skipped = end"),),
           # the Mamba group then loads nothing: no state restored, so I1 holds, but a hit
           # that does restore the state is then valid and larger
           "maximality", tests=(GOLDEN,)),
    Mutant("factor-check-dropped", "start-up accepts block_size_factor != 1 with mixed GPU "
           "block sizes (base.py:507)",
           (_e(LY, "resolve_layout", "if s.block_size_factor != 1 and len(",
               "if False and len("),),
           (_e(E, "startup", "c.append(z3.Implies(cfg.factor != 1,",
               "c.append(z3.Implies(False,"),),
           # the layouts it lets in are outside every theorem's preconditions
           tests=(GAPS + "test_factor_needs_one_gpu_block_size",)),
    Mutant("group-order-windows-first", "sliding-window groups looked up before full "
           "attention",
           (_e(LY, "resolve_layout", "lookup_groups=tuple(full) + tuple(windowed)",
               "lookup_groups=tuple(windowed) + tuple(full)"),),
           (_e(E, "derive", "eagle, align, align_on, full + windowed,",
               "eagle, align, align_on, windowed + full,"),),
           # the same hits (the loop converges either way), other lookups
           tests=(GOLDEN,)),
)
BY_NAME = {m.name: m for m in MUTANTS}


def _rebind(old: Any, new: Any) -> list[tuple[Any, str, Any]]:
    """Point every project module's name for ``old`` at ``new``, and every default
    argument that holds it (``lookup=exact_lookup``); return what to undo."""
    undo: list[tuple[Any, str, Any]] = []
    for mod in list(sys.modules.values()):
        name = getattr(mod, "__name__", "")
        if not name.startswith(("model", "proofs", "sim", "tests", "test_")):
            continue
        for attr, value in list(vars(mod).items()):
            if value is old:
                undo.append((mod, attr, old))
                setattr(mod, attr, new)
            elif isinstance(value, FunctionType) and value.__defaults__ and any(
                    d is old for d in value.__defaults__):
                undo.append((value, "__defaults__", value.__defaults__))
                value.__defaults__ = tuple(new if d is old else d for d in value.__defaults__)
    return undo


def _compile(edits: list[Edit], module: Any, function: str, mutant: str) -> FunctionType:
    original = getattr(module, function)
    src = textwrap.dedent(inspect.getsource(original))
    for e in edits:
        if src.count(e.old) != 1:
            raise StaleMutant(f"mutant {mutant}: {e.module}.{e.function}: the text "
                              f"{e.old!r} occurs {src.count(e.old)} times (expected once)")
        src = src.replace(e.old, e.new)
    namespace: dict[str, Any] = {}
    code = compile(src, f"<mutant {mutant}: {module.__name__}.{function}>", "exec")
    exec(code, vars(module), namespace)  # noqa: S102 - the catalogue's own edits
    new = namespace[function]
    assert isinstance(new, FunctionType)
    if original.__defaults__ is not None:
        new.__defaults__ = original.__defaults__
    return new


@contextmanager
def applied(name: str | None) -> Iterator[Mutant | None]:
    """Run the body with mutant ``name`` applied to model and encoding (None: none)."""
    if name is None:
        yield None
        return
    if name not in BY_NAME:
        raise KeyError(f"mutant: unknown name {name!r}")
    m = BY_NAME[name]
    by_fn: dict[tuple[str, str], list[Edit]] = {}
    for e in m.model + m.encoding:
        by_fn.setdefault((e.module, e.function), []).append(e)
    undo: list[tuple[Any, str, Any]] = []
    _forget_proofs()
    try:
        for (mod_name, fn), edits in by_fn.items():
            module = importlib.import_module(mod_name)
            new = _compile(edits, module, fn, name)
            undo += _rebind(getattr(module, fn), new)
        yield m
    finally:
        for mod, attr, old in reversed(undo):
            setattr(mod, attr, old)
        _forget_proofs()


def _forget_proofs() -> None:
    """Queries proved in this process were proved of other code (the unmutated lookup
    or another mutant): ``proofs.check`` must not skip them under this one."""
    check = sys.modules.get("proofs.check")
    if check is not None:
        check._PROVED.clear()
        check._LEMMAS.clear()
        check._UNROLLED.clear()  # queries built by the other code
        check._LOOPS.clear()
        check._ANSWERS.clear()
    witness = sys.modules.get("proofs.witness")
    if witness is not None:
        witness._BUILT.clear()
        witness._FOUND.clear()
    for name in ("model.layout", "model.layout_chunked"):
        layout = sys.modules.get(name)
        if layout is not None:
            layout._LAYOUTS.clear()  # layouts resolved by the other code
    answers = sys.modules.get("model.answers_chunked")
    if answers is not None:
        answers._KEPT.clear()  # a store's answers built by the other code
    pinned = sys.modules.get("proofs.pinned_chunked")
    if pinned is not None:  # layouts bound to the other code's start-up and environment
        pinned._DONE.clear()
    premises = sys.modules.get("proofs.premises_chunked")
    if premises is not None:  # premise checks replayed through the other model/
        premises._HELD.clear()
        premises._REPLAYED.clear()


# ---- equivalent mutants: a Z3 proof that the mutated step computes the same value -------


def _num_blocks_key_min() -> tuple[str, Any]:
    """scheduler.py:504-524: after ``m = min(m0, keys * obs)`` the query end ``q`` is ``m``
    or (EAGLE window) ``min(m + obs, keys * obs)``; then ``cdiv(q, obs) <= keys`` and the
    ``min(.., keys)`` never binds, for every size."""
    import z3

    m0, keys, obs, c = z3.Ints("m0 keys obs c")
    eagle = z3.Bool("eagle")
    m = z3.If(m0 < keys * obs, m0, keys * obs)
    q = z3.If(eagle, z3.If(m + obs < keys * obs, m + obs, keys * obs), m)
    cdiv_q = c  # c = cdiv(q, obs): (c - 1) * obs < q <= c * obs
    claim = z3.Implies(
        z3.And(obs >= 1, keys >= 0, (c - 1) * obs < q, q <= c * obs),
        z3.If(c < keys, c, keys) == cdiv_q)
    return ("min(cdiv(q, obs), num_keys) == cdiv(q, obs) wherever the lookup computes it",
            claim)


EQUIVALENCES = {
    "num-blocks-key-min-dropped": _num_blocks_key_min,
}


def prove_equivalent(name: str, timeout_ms: int = 30_000) -> str | None:
    """'PROVED: ...' when Z3 proves the mutant equivalent, 'NOT PROVED: ...' otherwise;
    None when the catalogue claims no equivalence."""
    if name not in EQUIVALENCES:
        return None
    import z3

    words, claim = EQUIVALENCES[name]()
    s = z3.Solver()
    s.set("timeout", timeout_ms)
    s.add(z3.Not(claim))
    r = s.check()
    return f"{'PROVED' if r == z3.unsat else 'NOT PROVED (' + str(r) + ')'}: {words}"
