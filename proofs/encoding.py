"""Z3 encoding of the lookup and the load plan, step by step beside ``model/``.

Every size is a symbolic, unbounded integer: the groups' GPU block sizes, the
``block_size_factor``, the prompt length, ``num_computed_tokens``, the sliding window and
``cache_config.mamba_block_size``. The store is symbolic too: for each group three
uninterpreted predicates over block indices say which blocks are stored, deferred and
being loaded. A group's lookup is encoded exactly by what its scan returns (the facts
over index ranges are universally quantified), and one group's turn in the convergence
loop (``group_step``) mirrors ``model.lookup.lookup`` line for line.

The loop may run any number of passes (interleaved window groups can ping-pong the hit
down block by block), so passes are never unrolled to a guessed bound for a proof:
``proofs.theorems`` proves the result of the *last* pass from any state satisfying an
inductive invariant, and checks that the invariant holds after pass 1 and is kept by
every pass that schedules another. Counterexamples come from exact unrolling (``bmc``),
and every one is replayed through ``model/``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

import z3

from model.semantics import Semantics
from proofs import terms as zt
from proofs.arith import TurnArith
from proofs.terms import is_bool_term, is_int_term
from releases import steps

FA, SW, MAMBA = "full_attention", "sliding_window", "mamba"
MODE_NONE, MODE_ALIGN, MODE_ALL = 0, 1, 2
MODES = {"none": MODE_NONE, "align": MODE_ALIGN, "all": MODE_ALL}
NEXT_NONE, NEXT_ALL, NEXT_SW = 0, 1, 2

Pred = Callable[[z3.ArithRef], z3.BoolRef]


@dataclass(frozen=True)
class Store:
    """What the manager answers for one group's block ``i``."""

    stored: Pred
    deferred: Pred
    loading: Pred

    def confirmed(self, i: z3.ArithRef) -> z3.BoolRef:
        """``lookup`` returns True: stored and not deferred."""
        stored, deferred = self.stored(i), self.deferred(i)
        s, d = _literal(stored), _literal(deferred)
        if s is not None and d is not None:  # a concrete store (proofs.conformance)
            return z3.BoolVal(s and not d)
        return z3.And(stored, z3.Not(deferred))

    def not_false(self, i: z3.ArithRef) -> z3.BoolRef:
        """``lookup`` does not return False (True or None)."""
        stored, deferred = self.stored(i), self.deferred(i)
        s, d = _literal(stored), _literal(deferred)
        if s is not None and d is not None:
            return z3.BoolVal(s or d)
        return z3.Or(stored, deferred)


_LITERALS: dict[int, bool] = {}


def _literal(b: z3.BoolRef) -> bool | None:
    """``b``'s value if it is the literal True or False (only a concrete store answers
    so: the bounded encoding then leaves out instances that cannot matter), else None.
    By id: the two literals are hash-consed, and this runs for every block instance."""
    if not _LITERALS:
        _LITERALS.update({z3.BoolVal(True).get_id(): True, z3.BoolVal(False).get_id(): False})
    return _LITERALS.get(b.get_id())


@dataclass(frozen=True)
class Config:
    """A configuration of groups (kinds fixed, everything else symbolic) and its store."""

    kinds: tuple[str, ...]
    gpu: tuple[z3.ArithRef, ...]
    factor: z3.ArithRef  # block_size_factor: the extra config's token block_size / block
    prompt: z3.ArithRef
    computed: z3.ArithRef
    window: tuple[z3.ArithRef | None, ...]  # sliding_window in tokens (SW groups)
    mode: tuple[z3.ArithRef | None, ...]  # mamba_cache_mode (Mamba groups)
    eagle: tuple[z3.BoolRef, ...]
    prefix_caching: z3.BoolRef
    skip_reading: z3.BoolRef
    in_flight: z3.BoolRef
    mamba_block_size: z3.ArithRef
    stores: tuple[Store, ...]
    # kv_connector_extra_config["blocks_per_chunk"] (vLLM 0.26.0 on: offloading/config.py:
    # 70) and whether it is set; read only for a semantics with ``offloading_config``
    bpc: z3.ArithRef = z3.IntVal(1)
    bpc_set: z3.BoolRef = z3.BoolVal(False)


def symbolic_config(kinds: Sequence[str], tag: str = "") -> Config:
    """Fresh symbols for every size, flag and store predicate of ``kinds``."""
    n = len(kinds)

    def ints(name: str) -> tuple[z3.ArithRef, ...]:
        return tuple(z3.Int(f"{name}{i}{tag}") for i in range(n))

    stores = tuple(
        Store(
            z3.Function(f"stored{i}{tag}", z3.IntSort(), z3.BoolSort()),
            z3.Function(f"deferred{i}{tag}", z3.IntSort(), z3.BoolSort()),
            z3.Function(f"loading{i}{tag}", z3.IntSort(), z3.BoolSort()),
        )
        for i in range(n)
    )
    return Config(
        kinds=tuple(kinds),
        gpu=ints("gpu_block_size"),
        factor=z3.Int(f"block_size_factor{tag}"),
        prompt=z3.Int(f"prompt_tokens{tag}"),
        computed=z3.Int(f"num_computed_tokens{tag}"),
        window=tuple(z3.Int(f"sliding_window{i}{tag}") if k == SW else None
                     for i, k in enumerate(kinds)),
        mode=tuple(z3.Int(f"mamba_cache_mode{i}{tag}") if k == MAMBA else None
                   for i, k in enumerate(kinds)),
        eagle=tuple(z3.Bool(f"eagle{i}{tag}") for i in range(n)),
        prefix_caching=z3.Bool(f"enable_prefix_caching{tag}"),
        skip_reading=z3.Bool(f"skip_reading_prefix_cache{tag}"),
        in_flight=z3.Bool(f"in_flight_transfers{tag}"),
        mamba_block_size=z3.Int(f"mamba_block_size{tag}"),
        stores=stores,
        bpc=z3.Int(f"blocks_per_chunk{tag}"),
        bpc_set=z3.Bool(f"blocks_per_chunk_set{tag}"),
    )


@dataclass(frozen=True)
class _Fact:
    """A quantified store fact ``for every i in [lo, hi): body(i)``, held back by a handle."""

    handle: z3.BoolRef
    lo: z3.ArithRef
    hi: z3.ArithRef
    body: Callable[[z3.ArithRef], z3.BoolRef]
    witness: z3.ArithRef


@dataclass
class Enc:
    """Collects the defining constraints of fresh helper symbols, and the store facts.

    Store facts over index ranges are never handed to Z3 as quantifiers (its quantifier
    and nonlinear engines together answer ``unknown``). Two exact-enough renderings:

    * ``bound=None`` (proofs): each fact gets a handle ``q``; ``q`` implies the fact at
      every block index the query mentions, and ``not q`` gives a witness block that
      breaks it. Every model of the real formula extends to one of these constraints,
      so *unsat* here is a proof for every store. A *sat* answer may be spurious.
    * ``bound=N`` (counterexample search): the request has at most ``N`` offloaded blocks
      per group, and a fact is the conjunction over the blocks ``0..N-1``: exact for
      such stores, with every size still symbolic and unbounded.
    """

    bound: int | None = None
    # also instantiate each store fact at the ends of every range (slower, stronger)
    rich: bool = False
    cons: list[z3.BoolRef] = field(default_factory=list)
    counter: itertools.count[int] = field(default_factory=itertools.count)
    facts: list[_Fact] = field(default_factory=list)
    # extra block indices to instantiate store facts at (per store group name)
    hints: dict[str, list[z3.ArithRef]] = field(default_factory=dict)
    # (kind, x's id, d's id) -> (x, d, quotient): x and d are kept so their ids stay theirs
    memo: dict[tuple[str, int, int], tuple[z3.ArithRef, z3.ArithRef, z3.ArithRef]] = field(
        default_factory=dict)
    inst: dict[Pred, list[tuple[int, z3.BoolRef, bool | None]]] = field(default_factory=dict)
    # (a fact's index in ``facts``, the index term's id) -> the instance ``grounded`` built:
    # a second grounding of a query over the same facts (a lemma query and its premises
    # audit, proofs.layers_chunked) builds each instance once (the instance holds its
    # index term, so the id stays that term's)
    ground: dict[tuple[int, int], z3.BoolRef] = field(default_factory=dict)
    # a fact's index in ``facts`` -> its witness clause and the store groups its body
    # reads (``grounded``'s, built once per encoding)
    ground_facts: dict[int, tuple[z3.BoolRef, set[str]]] = field(default_factory=dict)

    def fresh_int(self, name: str) -> z3.ArithRef:
        return z3.Int(f"{name}!{next(self.counter)}")

    def fresh_bool(self, name: str) -> z3.BoolRef:
        return z3.Bool(f"{name}!{next(self.counter)}")

    def add(self, *c: z3.BoolRef) -> None:
        self.cons.extend(c)

    def floordiv(self, x: z3.ArithRef, d: z3.ArithRef, name: str = "q") -> z3.ArithRef:
        """``x // d`` for ``d > 0`` (one symbol per distinct ``x`` and ``d``)."""
        key = ("floor", x.get_id(), d.get_id())  # equal terms share an id (hash-consed)
        if key not in self.memo:
            q = self.fresh_int(name)
            self.add(q * d <= x, x < (q + 1) * d)
            self.memo[key] = (x, d, q)
        return self.memo[key][2]

    def cdiv(self, x: z3.ArithRef, d: z3.ArithRef, name: str = "c") -> z3.ArithRef:
        """``cdiv(x, d)`` (vllm/utils/math_utils.py) for ``d > 0`` (one symbol per
        distinct ``x`` and ``d``, so the solver need not prove two quotients equal)."""
        key = ("ceil", x.get_id(), d.get_id())  # equal terms share an id (hash-consed)
        if key not in self.memo:
            q = self.fresh_int(name)
            self.add((q - 1) * d < x, x <= q * d)
            self.memo[key] = (x, d, q)
        return self.memo[key][2]

    def forall(self, lo: z3.ArithRef, hi: z3.ArithRef,
               body: Callable[[z3.ArithRef], z3.BoolRef]) -> z3.BoolRef:
        """``for every i in [lo, hi): body(i)``."""
        if self.bound is not None:
            out = []
            for c in range(self.bound):
                b = body(z3.IntVal(c))
                if _literal(b) is not True:  # a concrete store: an instance that holds goes
                    out.append(z3.Implies(z3.And(lo <= c, c < hi), b))
            return z3.And(out)
        fact = _Fact(self.fresh_bool("forall"), lo, hi, body, self.fresh_int("breaks_at"))
        self.facts.append(fact)
        return fact.handle

    def exists_gap(self, p: z3.ArithRef, v: z3.ArithRef, ok: Callable[[z3.ArithRef], z3.BoolRef],
                   skolem: z3.FuncDeclRef) -> z3.BoolRef:
        """``some q in [p, p + v) has not ok(q)``; ``skolem(p)`` names it in proof mode."""
        if self.bound is not None:
            gaps = []
            first = p.as_long() if z3.is_int_value(p) else None
            for c, b, known in self.instances(ok):
                if known is None:
                    gaps.append(z3.And(p <= c, c < p + v, z3.Not(b)))
                elif not known and (first is None or first <= c):
                    # a concrete store's gap (an instance that cannot hold goes)
                    gaps.append(z3.And(p <= c, c < p + v))
            return z3.Or(gaps)
        q = skolem(p)
        if not (is_int_term(p) and is_int_term(v)):
            return z3.And(p <= q, q < p + v, z3.Not(ok(q)))
        # the same term through the C API (``proofs.terms``), built in the same order
        lo, hi, b = zt.le(p, q), zt.lt(q, zt.add(p, v)), ok(q)
        return zt.and_(lo, hi, zt.not_(b)) if is_bool_term(b) else z3.And(lo, hi, z3.Not(b))

    def instances(self, pred: Pred) -> list[tuple[int, z3.BoolRef, bool | None]]:
        """``pred`` at every block index below the bound: (index, term, its literal
        value or None), built once per predicate (a window scan asks for it per start)."""
        assert self.bound is not None
        if pred not in self.inst:
            terms = [pred(z3.IntVal(c)) for c in range(self.bound)]
            self.inst[pred] = [(c, t, _literal(t)) for c, t in enumerate(terms)]
        return self.inst[pred]

    def grounded(self, query: Sequence[z3.BoolRef]) -> list[z3.BoolRef]:
        """The facts' constraints: each instantiated at every index that the query (and
        the facts' witnesses) apply the same group's store predicates to; in ``rich``
        mode also at the ends of every range, and once more at the indices the first
        instances bring (a Skolem gap inside a window, say)."""
        if self.bound is not None:
            return []
        for k, f in enumerate(self.facts):
            if k not in self.ground_facts:
                self.ground_facts[k] = (
                    z3.Or(f.handle, z3.And(f.lo <= f.witness, f.witness < f.hi,
                                           z3.Not(f.body(f.witness)))),
                    _store_names(f.body(z3.Int("probe"))))
        out: list[z3.BoolRef] = [self.ground_facts[k][0] for k in range(len(self.facts))]
        terms = _applied_indices(list(query) + out)
        for name, more in self.hints.items():
            terms.setdefault(name, []).extend(more)
        names = [self.ground_facts[k][1] for k in range(len(self.facts))]
        if self.rich:
            for f, groups in zip(self.facts, names, strict=True):
                for name in groups:  # a range's ends, as candidates
                    terms.setdefault(name, []).extend([f.lo, f.hi - 1])
        hinted = {t.get_id() for more in self.hints.values() for t in more}
        # the facts whose instances ``_instance`` may build through the C API
        fast = [is_bool_term(f.handle) and is_int_term(f.lo) and is_int_term(f.hi)
                for f in self.facts]
        done: set[tuple[int, int]] = set()
        for round_no in range(2):
            new: list[z3.BoolRef] = []
            follow: list[z3.BoolRef] = []  # instances whose new indices get a round 2
            for k, (f, groups) in enumerate(zip(self.facts, names, strict=True)):
                for name in groups:
                    for t in terms.get(name, ()):
                        tid = t.get_id()
                        if (k, tid) in done:
                            continue
                        done.add((k, tid))
                        inst = self.ground.get((k, tid))
                        if inst is None:
                            inst = self.ground[(k, tid)] = _instance(f, t, fast[k])
                        new.append(inst)
                        if self.rich or tid in hinted:
                            follow.append(inst)
            out += new
            if round_no == 0:
                terms = {}
                for name, more in _applied_indices(follow).items():
                    terms.setdefault(name, []).extend(more)
        return out


def _instance(f: _Fact, t: z3.ArithRef, fast: bool) -> z3.BoolRef:
    """``Implies(And(handle, lo <= t, t < hi), body(t))``: through the C API (the same
    term, ``proofs.terms``) when the fact's parts and ``t`` allow it."""
    if not (fast and is_int_term(t)):
        return z3.Implies(z3.And(f.handle, f.lo <= t, t < f.hi), f.body(t))
    # built in the same order as z3's operators would (new terms get ids in that order)
    guard = zt.and_(f.handle, zt.le(f.lo, t), zt.lt(t, f.hi))
    b = f.body(t)
    return zt.implies(guard, b) if is_bool_term(b) else z3.Implies(guard, b)


# z3's C API as its Python module exports it (public, error-checked)
_KIND, _ID, _NARGS, _ARG, _DECL, _DECL_NAME, _SYMBOL, _ARITY = (
    z3.Z3_get_ast_kind, z3.Z3_get_ast_id, z3.Z3_get_app_num_args, z3.Z3_get_app_arg,
    z3.Z3_get_app_decl, z3.Z3_get_decl_name, z3.Z3_get_symbol_string, z3.Z3_get_arity)
_APP = z3.Z3_APP_AST


def _store_applications(roots: Sequence[z3.ExprRef]) -> list[tuple[str, z3.ExprRef]]:
    """Every distinct application of a store predicate under ``roots``: (its group, its
    argument), in depth-first order. Walked on raw ASTs through the C API (no Python
    wrapper per node: the queries have tens of thousands of nodes); only the arguments
    found are wrapped, by ``ExprRef.arg``."""
    ctx = z3.main_ctx()
    ref = ctx.ref()
    seen: set[int] = set()
    groups: dict[int, str | None] = {}  # by the declaration's AST id
    out: list[tuple[str, z3.ExprRef]] = []
    stack = [r.as_ast() for r in roots]
    while stack:
        a = stack.pop()
        k = _ID(ref, a)
        if k in seen:
            continue
        seen.add(k)
        if _KIND(ref, a) != _APP:
            continue
        n = _NARGS(ref, a)
        if n == 1:
            decl = _DECL(ref, a)
            addr = _ID(ref, decl)  # a declaration is an AST too
            if addr not in groups:
                name = _SYMBOL(ref, _DECL_NAME(ref, decl))
                groups[addr] = _store_group_name(
                    name.decode() if isinstance(name, bytes) else str(name),
                    int(_ARITY(ref, decl)))
            g = groups[addr]
            if g is not None:
                out.append((g, z3.ExprRef(a, ctx).arg(0)))
        stack.extend(_ARG(ref, a, i) for i in range(n))
    return out


def _store_group_name(name: str, arity: int) -> str | None:
    for prefix in ("stored", "deferred", "loading"):
        if name.startswith(prefix) and arity == 1:
            return name[len(prefix):]
    return None


def _store_names(e: z3.ExprRef) -> set[str]:
    return {g for g, _ in _store_applications([e])}


def _applied_indices(roots: Sequence[z3.ExprRef]) -> dict[str, list[z3.ArithRef]]:
    out: dict[str, list[z3.ArithRef]] = {}
    ids: set[tuple[str, int]] = set()
    for g, arg in _store_applications(roots):
        if z3.is_var(arg) or (g, arg.get_id()) in ids:
            continue
        ids.add((g, arg.get_id()))
        out.setdefault(g, []).append(arg)
    return out


def _negated(pred: Pred, i: z3.ArithRef) -> z3.BoolRef:
    return z3.Not(pred(i))


def zmin(a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
    return z3.If(a <= b, a, b)


def zmax(a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
    return z3.If(a >= b, a, b)


@dataclass(frozen=True)
class Derived:
    """Per-group quantities fixed at start-up and per request (layout.py, lookup.py)."""

    obs: tuple[z3.ArithRef, ...]  # offloaded block size
    keys: tuple[z3.ArithRef, ...]  # len(offload_keys) = prompt // obs
    cap: tuple[z3.ArithRef, ...]  # len(offload_keys) * obs: no hit beyond it
    win: tuple[z3.ArithRef | None, ...]  # sliding_window_size_in_blocks (None: prefix)
    start: tuple[z3.ArithRef, ...]  # num_computed_tokens // obs
    eagle: tuple[z3.BoolRef, ...]  # is_eagle_group under this semantics
    align: z3.ArithRef  # the Mamba alignment size (when align_on)
    align_on: z3.BoolRef  # whether the semantics rounds at all
    order: tuple[int, ...]  # _lookup_groups
    windowed: tuple[int, ...]  # _sliding_window_groups
    any_windowed: z3.BoolRef  # the layout has a sliding-window or Mamba group
    # the GPU block size of a Mamba align group outside ``cfg`` (with an Env), when
    # align_on: what a precondition on every group's block size says of it too
    outside_align_gpu: z3.ArithRef | None = None
    # GPU blocks per offloaded block (``releases.steps.chunk_blocks``): the
    # block_size_factor, or from 0.26.0 blocks_per_chunk where it is set
    factor: z3.ArithRef = z3.IntVal(1)


@dataclass(frozen=True)
class Env:
    """What the rest of an unknown layout contributes to a proof about a few of its
    groups (``proofs.abstract``): whether it has a windowed group, whether it rounds to
    a Mamba alignment size, and the GPU block size of the Mamba align group that sets
    that size. ``derive`` ties them to the groups at hand as the start-up checks do."""

    any_windowed: z3.BoolRef
    align_on: z3.BoolRef
    align_gpu: z3.ArithRef


def symbolic_env(tag: str = "") -> Env:
    return Env(z3.Bool(f"layout_has_windowed{tag}"), z3.Bool(f"layout_rounds{tag}"),
               z3.Int(f"align_group_gpu_block_size{tag}"))


def check_order(kinds: Sequence[str]) -> None:
    """Templates list full-attention groups, then at most one sliding-window group, then
    Mamba groups: the window sort (scheduler.py:342, stable, largest first) then keeps
    index order, since a Mamba window is 1 block and a sliding window at least 1."""
    rank = {FA: 0, SW: 1, MAMBA: 2}
    if list(kinds) != sorted(kinds, key=rank.__getitem__) or list(kinds).count(SW) > 1:
        raise ValueError(f"template {kinds}: expected full_attention*, sliding_window?, mamba*")


def derive(enc: Enc, cfg: Config, sem: Semantics, env: Env | None = None) -> Derived:
    """The derived quantities of ``cfg``'s groups: the whole layout (``env`` None), or a
    few groups of an unknown layout (``env``: what the rest contributes)."""
    if env is None:
        check_order(cfg.kinds)
    n = len(cfg.kinds)
    factor = chunk_factor(enc, cfg, sem)
    obs = tuple(cfg.gpu[g] * factor for g in range(n))
    keys = tuple(enc.floordiv(cfg.prompt, obs[g], f"keys{g}") for g in range(n))
    win: list[z3.ArithRef | None] = []
    for g, k in enumerate(cfg.kinds):
        if k == SW:
            w = cfg.window[g]
            assert w is not None
            win.append(enc.cdiv(w, obs[g], f"win{g}"))  # scheduler.py:98
        elif k == MAMBA:
            win.append(z3.IntVal(1))  # scheduler.py:102
        else:
            win.append(None)
    start = tuple(enc.floordiv(cfg.computed, obs[g], f"start{g}") for g in range(n))
    aligned = [g for g, k in enumerate(cfg.kinds) if k == MAMBA]
    # resolve_mamba_align_size (scheduler.py:108): the align groups' offloaded size; the
    # start-up constraints make all Mamba align groups agree, so the first one stands
    align_on = z3.Or([cfg.mode[g] == MODE_ALIGN for g in aligned]) if aligned else z3.BoolVal(False)
    if sem.align_from == "cache_config":
        align = cfg.mamba_block_size
    elif aligned:
        align = obs[aligned[0]]
    else:
        align = z3.IntVal(1)
    full = tuple(g for g, k in enumerate(cfg.kinds) if k == FA)
    windowed = tuple(g for g, k in enumerate(cfg.kinds) if k != FA)
    any_windowed: z3.BoolRef = z3.BoolVal(bool(windowed))
    if env is not None:
        # the layout has these groups, and maybe more: rounding is on if one of them is
        # a Mamba align group; the size comes from some align group (scheduler.py:108)
        enc.add(z3.Implies(align_on, env.align_on), env.align_gpu >= 1)
        if windowed:
            enc.add(env.any_windowed)
        enc.add(z3.Implies(env.align_on, env.any_windowed))  # align groups are Mamba
        any_windowed, align_on = env.any_windowed, env.align_on
        if sem.align_from != "cache_config":
            align = env.align_gpu * factor
        for g, k in enumerate(cfg.kinds):
            # kv_cache_utils.py:655 / base.py:493: a Mamba group has the smallest block
            # size; base.py:507: block_size_factor > 1 needs one block size
            enc.add(z3.Implies(env.align_on, env.align_gpu <= cfg.gpu[g]),
                    z3.Implies(z3.And(env.align_on, cfg.factor != 1),
                               env.align_gpu == cfg.gpu[g]))
            mode = cfg.mode[g]
            if k == MAMBA and sem.align_assert and mode is not None:
                # scheduler.py:121: every Mamba align group has the align size
                enc.add(z3.Implies(mode == MODE_ALIGN, env.align_gpu == cfg.gpu[g]))
                if sem.align_from != "cache_config":  # the same, said to the solver
                    align = z3.If(mode == MODE_ALIGN, obs[g], align)
    if sem.align_at == "none":
        align_on = z3.BoolVal(False)
    eagle = tuple(z3.And(cfg.eagle[g], z3.BoolVal(sem.eagle)) for g in range(n))
    cap = tuple(k * o for k, o in zip(keys, obs, strict=True))
    return Derived(obs, keys, cap, tuple(win), start, eagle, align, align_on, full + windowed,
                   windowed, any_windowed, None if env is None else env.align_gpu, factor)


def chunk_factor(enc: Enc, cfg: Config, sem: Semantics) -> z3.ArithRef:
    """GPU blocks per offloaded block: from 0.26.0 (``offloading_config``)
    blocks_per_chunk where it is set, else block_size_factor (``releases.steps.
    chunk_blocks``, the step model/layout.py reads)."""
    if not sem.offloading_config:
        return cfg.factor
    return steps.chunk_blocks(TurnArith(enc), cfg.factor, cfg.bpc, cfg.bpc_set)


def startup(cfg: Config, sem: Semantics) -> z3.BoolRef:
    """Layouts the release accepts at start-up (model/layout.py), for these templates."""
    n = len(cfg.kinds)
    c = [cfg.factor >= 1, cfg.prompt >= 1, cfg.computed >= 0, cfg.mamba_block_size >= 1]
    c += [cfg.gpu[g] >= 1 for g in range(n)]
    c += [w >= 1 for w in cfg.window if w is not None]  # scheduler.py:97
    c += [z3.And(m >= MODE_NONE, m <= MODE_ALL) for m in cfg.mode if m is not None]
    smallest = cfg.gpu[0]
    for g in range(1, n):
        smallest = zmin(smallest, cfg.gpu[g])
    for g, k in enumerate(cfg.kinds):
        if k == MAMBA and n > 1:
            # kv_cache_utils.py:655 backs the hash block size off to the lcm when a Mamba
            # group's block size is not the cache block size (the smallest); base.py:493
            # then needs every block size divisible by that lcm: all equal
            c.append(z3.Or(cfg.gpu[g] == smallest, z3.And([x == cfg.gpu[0] for x in cfg.gpu])))
    # base.py:507: an offloaded block_size needs one GPU block size
    c.append(z3.Implies(cfg.factor != 1, z3.And([x == cfg.gpu[0] for x in cfg.gpu])))
    mamba = [g for g, k in enumerate(cfg.kinds) if k == MAMBA]
    if sem.align_assert:  # scheduler.py:121: Mamba align groups agree on the size
        for a, b in itertools.combinations(mamba, 2):
            c.append(z3.Implies(z3.And(cfg.mode[a] == MODE_ALIGN, cfg.mode[b] == MODE_ALIGN),
                                cfg.gpu[a] == cfg.gpu[b]))
    if sem.offloading_config:
        c += offloading_config_startup(cfg, mamba)
    return z3.And(c)


def offloading_config_startup(cfg: Config, mamba: Sequence[int]) -> list[z3.BoolRef]:
    """0.26.0 on (model/layout.py ``_chunk_factor``, ``check_mamba_modes``):
    blocks_per_chunk is positive and not set beside a token block_size (offloading/
    config.py:64-73); the engine runs every Mamba group in its one mode, "all" or
    "align" with prefix caching on and "none" with it off (model_executor/models/
    config.py:559-561, 596; config/cache.py:139)."""
    c = [z3.Implies(cfg.bpc_set, z3.And(cfg.bpc >= 1, cfg.factor == 1))]
    modes = [m for m in (cfg.mode[g] for g in mamba) if m is not None]
    c += [a == b for a, b in itertools.combinations(modes, 2)]
    c += [z3.If(cfg.prefix_caching, m != MODE_NONE, m == MODE_NONE) for m in modes]
    return c


# --- one group's lookup (scheduler.py:388, 407) ------------------------------------


def prefix_lookup(enc: Enc, st: Store, s: z3.ArithRef, e: z3.ArithRef
                  ) -> tuple[z3.ArithRef, z3.BoolRef]:
    """``_maximal_prefix_lookup`` over blocks [s, e): (hit count, deferred)."""
    n = zmax(e - s, 0)
    r = enc.fresh_int("prefix_hits")
    deferred = enc.fresh_bool("prefix_deferred")
    wit = enc.fresh_int("prefix_deferred_at")
    enc.add(
        r >= 0, r <= n,
        enc.forall(s, s + r, lambda i: st.not_false(i)),
        z3.Or(r == n, z3.Not(st.not_false(s + r))),
        z3.Implies(deferred, z3.And(s <= wit, wit < s + r, st.deferred(wit))),
        z3.Implies(z3.Not(deferred), enc.forall(s, s + r, lambda i: z3.Not(st.deferred(i)))),
    )
    return r, deferred


def _no_run(enc: Enc, st: Store, lo: z3.ArithRef, e: z3.ArithRef, v: z3.ArithRef) -> z3.BoolRef:
    """No ``v`` consecutive confirmed blocks start in [lo, e - v]: every such window has a
    gap, given by a fresh Skolem function."""
    gap = z3.Function(f"gap!{next(enc.counter)}", z3.IntSort(), z3.IntSort())
    return enc.forall(lo, e - v + 1, lambda p: enc.exists_gap(p, v, st.confirmed, gap))


def window_lookup(enc: Enc, st: Store, s: z3.ArithRef, e: z3.ArithRef, v: z3.ArithRef
                  ) -> tuple[z3.ArithRef, z3.BoolRef]:
    """``_sliding_window_lookup`` over [s, e) with window ``v``: (end index - s, deferred).

    Scanning down from e - 1, the scan stops at the last run of ``v`` confirmed blocks
    (its end ``j``); if there is none it returns the run of confirmed blocks at ``s``.
    """
    found = enc.fresh_bool("window_found")
    j = enc.fresh_int("window_end")
    deferred = enc.fresh_bool("window_deferred")
    wit = enc.fresh_int("window_deferred_at")
    scanned_from = z3.If(found, j - v, s)
    enc.add(
        z3.Implies(found, z3.And(
            s + v <= j, j <= e,
            enc.forall(j - v, j, st.confirmed),
            z3.Or(j == e, z3.Not(st.confirmed(j))),
            _no_run(enc, st, j + 1, e, v),
        )),
        z3.Implies(z3.Not(found), z3.And(
            s <= j, j <= zmax(e, s),
            enc.forall(s, j, st.confirmed),
            z3.Or(j >= e, z3.Not(st.confirmed(j))),
            _no_run(enc, st, s, e, v),
        )),
        z3.Implies(deferred, z3.And(scanned_from <= wit, wit < e,
                                    st.deferred(wit))),
        z3.Implies(z3.Not(deferred), enc.forall(scanned_from, e,
                                                lambda i: z3.Not(st.deferred(i)))),
    )
    return j - s, deferred


# --- the convergence loop (scheduler.py:452) ---------------------------------------


@dataclass(frozen=True)
class State:
    """The loop's variables between two group turns."""

    m: z3.ArithRef  # max_hit_size_tokens
    num_hit: z3.ArithRef
    defer: z3.BoolRef
    looked: z3.BoolRef  # looked_up_sliding_window (this pass)
    verified: tuple[z3.BoolRef, ...]  # eagle_verified
    next: z3.ArithRef  # lookup_groups for the next pass: none, all, sliding-window
    halted: z3.BoolRef  # returned 0 early


def initial_max_hit(enc: Enc, cfg: Config, d: Derived, sem: Semantics) -> z3.ArithRef:
    return initial_max_hit_blocks(enc, cfg, d, sem)[0]


def initial_max_hit_blocks(enc: Enc, cfg: Config, d: Derived, sem: Semantics
                           ) -> tuple[z3.ArithRef, z3.ArithRef | None]:
    """max_hit_size_tokens before the loop, and (when rounded) its multiple of the
    alignment size."""
    m: z3.ArithRef = cfg.prompt - 1  # scheduler.py:467
    blocks = None
    if sem.align_at == "max_hit":
        blocks = enc.floordiv(m, d.align, "rounded")
        m = z3.If(d.align_on, d.align * blocks, m)  # scheduler.py:470
    return z3.If(d.any_windowed, m, cfg.prompt), blocks


def initial_state(enc: Enc, cfg: Config, d: Derived, sem: Semantics) -> State:
    n = len(cfg.kinds)
    return State(initial_max_hit(enc, cfg, d, sem), z3.IntVal(0), z3.BoolVal(False),
                 z3.BoolVal(False), tuple(z3.BoolVal(False) for _ in range(n)),
                 z3.IntVal(NEXT_NONE), z3.BoolVal(False))


def fresh_state(enc: Enc, n: int, name: str) -> State:
    """An arbitrary state (for the inductive step)."""
    return State(enc.fresh_int(f"{name}_m"), enc.fresh_int(f"{name}_num_hit"),
                 enc.fresh_bool(f"{name}_defer"), enc.fresh_bool(f"{name}_looked"),
                 tuple(enc.fresh_bool(f"{name}_verified{g}") for g in range(n)),
                 enc.fresh_int(f"{name}_next"), z3.BoolVal(False))


def select(c: z3.BoolRef, a: State, b: State) -> State:
    return State(z3.If(c, a.m, b.m), z3.If(c, a.num_hit, b.num_hit), z3.If(c, a.defer, b.defer),
                 z3.If(c, a.looked, b.looked),
                 tuple(z3.If(c, x, y) for x, y in zip(a.verified, b.verified, strict=True)),
                 z3.If(c, a.next, b.next), z3.If(c, a.halted, b.halted))


@dataclass(frozen=True)
class Outcome:
    """What one group's lookup does to the hit (scheduler.py:524-559)."""

    deferred: z3.BoolRef  # num_hit_blocks is None
    no_hit: z3.BoolRef  # num_hit_blocks == 0: return 0
    cut: z3.ArithRef  # offloaded_block_size * (start_block_idx + num_hit_blocks)


LookupFn = Callable[["Enc", Config, "Derived", State, int, z3.ArithRef, z3.BoolRef], Outcome]


def exact_lookup(enc: Enc, cfg: Config, d: Derived, st: State, g: int, m1: z3.ArithRef,
                 unverified: z3.BoolRef) -> Outcome:
    """The group's lookup against the symbolic store, exactly."""
    obs, keys, win = d.obs[g], d.keys[g], d.win[g]
    query_max = m1
    if win is not None:  # scheduler.py:518: an EAGLE window group queries one more block
        query_max = z3.If(unverified, zmin(m1 + obs, d.cap[g]), m1)
    e = zmin(enc.cdiv(query_max, obs, f"qend{g}"), keys)  # scheduler.py:524
    s = d.start[g]  # scheduler.py:527
    if win is None:
        r, deferred = prefix_lookup(enc, cfg.stores[g], s, e)
    else:
        r, deferred = window_lookup(enc, cfg.stores[g], s, e, z3.If(unverified, win + 1, win))
    popped = z3.If(unverified, r - 1, r)  # scheduler.py:552
    return Outcome(deferred, z3.And(z3.Not(deferred), r == 0), obs * (s + popped))


@dataclass(frozen=True)
class StepInfo:
    """One turn's intermediate values, for the per-step lemmas."""

    m1: z3.ArithRef
    too_short: z3.BoolRef
    outcome: Outcome
    m2: z3.ArithRef


def group_step(enc: Enc, cfg: Config, d: Derived, st: State, g: int,
               lookup: LookupFn = exact_lookup) -> tuple[State, StepInfo]:
    """One group's turn (scheduler.py:486-580), as ``model.lookup.lookup`` takes it."""
    obs = d.obs[g]
    nc = cfg.computed
    unverified = z3.And(d.eagle[g], z3.Not(st.verified[g]))
    m1 = zmin(st.m, d.cap[g])  # scheduler.py:504
    too_short = m1 - nc < obs  # scheduler.py:507
    out = lookup(enc, cfg, d, st, g, m1, unverified)
    deferred = out.deferred
    m2 = z3.If(deferred, m1, zmin(m1, out.cut))  # scheduler.py:556
    verified = list(st.verified)
    verified[g] = z3.Or(st.verified[g], z3.And(z3.Not(deferred), unverified))  # :554
    defer = z3.Or(st.defer, deferred)  # scheduler.py:550
    new_hit = m2 - nc  # scheduler.py:561
    shrank = new_hit < obs  # scheduler.py:562
    tightened = new_hit < st.num_hit  # scheduler.py:566
    clear = z3.And(tightened, z3.Not(d.eagle[g]))  # scheduler.py:568
    verified = [z3.And(v, z3.Not(clear)) for v in verified]
    next_all = z3.And(tightened, defer)  # scheduler.py:569
    next_sw = z3.And(tightened, z3.Not(defer), st.looked, st.next == NEXT_NONE)  # :574
    nxt = z3.If(next_all, z3.IntVal(NEXT_ALL), z3.If(next_sw, z3.IntVal(NEXT_SW), st.next))
    after = State(
        m=m2,
        num_hit=new_hit,
        defer=z3.If(next_all, z3.BoolVal(False), defer),
        looked=z3.Or(st.looked, z3.BoolVal(d.win[g] is not None)),  # scheduler.py:579
        verified=tuple(verified),
        next=nxt,
        halted=z3.BoolVal(False),
    )
    stop_early = State(m1, st.num_hit, st.defer, st.looked, st.verified, st.next,
                       z3.BoolVal(True))
    stop_late = replace(stop_early, m=m2)
    res = select(too_short, stop_early, select(out.no_hit, stop_early,
                                               select(shrank, stop_late, after)))
    return select(st.halted, st, res), StepInfo(m1, too_short, out, m2)


def run_pass(enc: Enc, cfg: Config, d: Derived, st: State, groups: Sequence[int],
             lookup: LookupFn = exact_lookup) -> State:
    """One pass of ``while lookup_groups`` (scheduler.py:482-485) over ``groups``."""
    st = replace(st, looked=z3.BoolVal(False), next=z3.IntVal(NEXT_NONE))
    for g in groups:
        st, _ = group_step(enc, cfg, d, st, g, lookup)
    return st


def next_pass(enc: Enc, cfg: Config, d: Derived, st: State,
              lookup: LookupFn = exact_lookup) -> State:
    """The pass ``st.next`` schedules: every group, or the sliding-window groups."""
    every = run_pass(enc, cfg, d, st, d.order, lookup)
    windowed = run_pass(enc, cfg, d, st, d.windowed, lookup)
    return select(st.next == NEXT_ALL, every, windowed)


def finished(st: State) -> z3.BoolRef:
    return z3.Or(st.halted, st.next == NEXT_NONE)


# --- after the loop: deferral, blocks being loaded, the result ------------------------


@dataclass(frozen=True)
class Result:
    deferred: z3.BoolRef  # the connector answers None
    hit: z3.ArithRef  # num_hit_tokens when not deferred


def result_of(enc: Enc, cfg: Config, d: Derived, sem: Semantics, st: State) -> Result:
    """Lines 582-622 (483-521) and get_num_new_matched_tokens (scheduler.py:662, 673)."""
    hit = z3.If(st.halted, z3.IntVal(0), st.num_hit)
    if sem.align_at == "num_hit":
        hit = z3.If(d.align_on, d.align * enc.floordiv(hit, d.align, "rounded_hit"), hit)
    end = cfg.computed + hit
    busy = []
    for g in range(len(cfg.kinds)):  # scheduler.py:590: a hit block is being loaded
        hi = enc.cdiv(end, d.obs[g], f"busy_end{g}")
        lo = d.start[g]
        win = d.win[g]
        if win is not None:
            lo = zmax(lo, hi - win)
        flag = enc.fresh_bool(f"busy{g}")
        wit = enc.fresh_int(f"busy_at{g}")
        enc.add(
            z3.Implies(flag, z3.And(lo <= wit, wit < hi,
                                    cfg.stores[g].loading(wit))),
            z3.Implies(z3.Not(flag), enc.forall(lo, hi, partial(_negated,
                                                                cfg.stores[g].loading))),
        )
        busy.append(flag)
    converged = z3.Not(st.halted)
    deferred = z3.And(converged, z3.Or(st.defer, z3.And(cfg.prefix_caching, z3.Or(busy))))
    if sem.skip_reading_check:
        hit = z3.If(cfg.skip_reading, z3.IntVal(0), hit)
        deferred = z3.And(deferred, z3.Not(cfg.skip_reading))
    if sem.in_flight_check:
        deferred = z3.Or(deferred, cfg.in_flight)
    return Result(deferred, hit)


# --- the load plan (update_state_after_alloc, scheduler.py:683) -----------------------


@dataclass(frozen=True)
class GroupLoad:
    lo: z3.ArithRef  # first loaded offloaded block
    hi: z3.ArithRef  # one past the last
    state_position: z3.ArithRef  # Mamba groups: the restored state's token position
    # (model/load_plan.py: the end of the last GPU block the worker fills)
    pending: z3.ArithRef  # GPU blocks to fill (scheduler.py:725)


def load_plan(enc: Enc, cfg: Config, d: Derived, hit: z3.ArithRef,
              groups: Sequence[int] | None = None) -> dict[int, GroupLoad]:
    """The blocks a hit of ``hit`` tokens loads, per group (model/load_plan.py)."""
    end = cfg.computed + hit
    loads = {}
    for g, kind in enumerate(cfg.kinds):
        if groups is not None and g not in groups:
            continue
        bs = cfg.gpu[g]
        num_gpu_blocks = enc.cdiv(end, bs, f"gpu_blocks{g}")  # scheduler.py:711
        if kind == SW:
            w = cfg.window[g]
            assert w is not None
            skipped = zmax(z3.IntVal(0), end - w + 1)  # single_type_kv_cache_manager.py:796
        elif kind == MAMBA:
            skipped = end - 1  # single_type_kv_cache_manager.py:1266
        else:
            skipped = z3.IntVal(0)
        skipped_blocks = enc.floordiv(skipped, bs, f"skipped{g}")
        local = enc.floordiv(cfg.computed, bs, f"local{g}")
        first = zmin(zmax(skipped_blocks, local), num_gpu_blocks)  # scheduler.py:716
        hi = enc.cdiv(end, d.obs[g], f"load_end{g}")  # scheduler.py:734
        lo = enc.floordiv(first, d.factor, f"load_start{g}")  # scheduler.py:737
        # instances of (x // a) // b == x // (a * b) (proofs.layers.arithmetic_lemmas)
        enc.add(
            z3.Implies(first == skipped_blocks,
                       lo == enc.floordiv(skipped, d.obs[g], f"skipped_offloaded{g}")),
            z3.Implies(first == local, lo == d.start[g]),
        )
        pending = num_gpu_blocks - first
        lo = z3.If(z3.And(hit > 0, pending > 0), lo, hi)
        # the worker fills GPU blocks [first, num_gpu_blocks) from sub-blocks of the loaded
        # offloaded blocks (gpu_worker.py:321, block index scheduler.py:749): a Mamba
        # state is the one saved at the end of the last GPU block filled
        loads[g] = GroupLoad(lo, hi, num_gpu_blocks * bs, pending)
    return loads


def ok_range(enc: Enc, d: Derived, g: int, y: z3.ArithRef) -> tuple[z3.ArithRef, z3.ArithRef]:
    """The blocks the lookup confirms for a hit ending at token ``y``: the prefix from
    the GPU hit (full attention), or the last ``window`` blocks before ``cdiv(y, obs)``
    (sliding window, Mamba)."""
    hi = enc.cdiv(y, d.obs[g], f"ok_end{g}")
    lo = d.start[g]
    win = d.win[g]
    if win is not None:
        lo = zmax(lo, hi - win)
    return lo, hi


def ok_facts(enc: Enc, cfg: Config, d: Derived, g: int, y: z3.ArithRef) -> z3.BoolRef:
    """``OK_g(y)``: the store confirms the blocks of ``ok_range``."""
    lo, hi = ok_range(enc, d, g, y)
    return enc.forall(lo, hi, cfg.stores[g].confirmed)
