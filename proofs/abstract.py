"""The convergence loop over abstract lookups, for proofs that hold for any number of passes.

Z3 cannot prove the whole loop at once when every size is symbolic (nonlinear integer
arithmetic and store facts together time out). So a proof has three layers, each a set
of small unsatisfiable queries:

1. Per-group lemmas on the exact encoding of one turn (``proofs.encoding.group_step``):
   ``post``: after a turn that neither deferred nor stopped, the group's store confirms
   what a hit ending at the new ``max_hit_size_tokens`` needs from it (``OK_g``), and
   ``keeps``: a turn never takes ``max_hit_size_tokens`` below a valid larger hit.
2. The loop with each lookup replaced by its lemmas (this module): linear arithmetic,
   the same ``group_step`` code, and two uninterpreted predicates per group,
   ``OK_g(y)`` and ``MUL_g(y)`` ("y is a multiple of group g's offloaded block size").
   An invariant between passes is proved to hold after pass 1 and to be kept by every
   pass that schedules another; at the loop's end a summary of ``OK`` and ``MUL`` facts
   holds for the final hit.
3. The property itself, from the summary interpreted exactly, with the load plan.

Every real run of the loop is a run of the abstract loop (the lemmas say so), so a
property proved this way holds for the real lookup, for every number of passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import z3

from model.semantics import Semantics
from proofs.encoding import (
    FA,
    NEXT_ALL,
    NEXT_NONE,
    NEXT_SW,
    Config,
    Derived,
    Enc,
    Outcome,
    State,
    finished,
    fresh_state,
    next_pass,
    run_pass,
    symbolic_config,
    zmin,
)


@dataclass
class Abstract:
    enc: Enc
    cfg: Config
    d: Derived
    m0: z3.ArithRef
    ok: tuple[z3.FuncDeclRef, ...]
    mul: tuple[z3.FuncDeclRef, ...]
    candidate: z3.ArithRef | None  # maximality: nc + the larger valid hit
    quiet: bool  # the store defers nothing
    premises: list[z3.BoolRef] = field(default_factory=list)
    mterms: list[z3.ArithRef] = field(default_factory=list)

    def lookup(self, enc: Enc, cfg: Config, d: Derived, st: State, g: int,
               m1: z3.ArithRef, unverified: z3.BoolRef) -> Outcome:
        """A lookup known only through its lemmas."""
        deferred = z3.BoolVal(False) if self.quiet else enc.fresh_bool(f"a_deferred{g}")
        no_hit = enc.fresh_bool(f"a_no_hit{g}")
        cut = enc.fresh_int(f"a_cut{g}")
        m2 = zmin(m1, cut)
        too_short = m1 - cfg.computed < d.obs[g]
        enc.add(
            z3.Implies(no_hit, z3.Not(deferred)),
            self.mul[g](cut),
            # lemma post(g)
            z3.Implies(z3.And(z3.Not(too_short), z3.Not(deferred), z3.Not(no_hit)),
                       self.ok[g](m2)),
        )
        if self.candidate is not None:  # lemma keeps(g)
            enc.add(z3.Implies(m1 >= self.candidate, z3.And(
                z3.Not(no_hit), z3.Or(deferred, cut >= self.candidate))))
        self.mterms += [m1, m2]
        return Outcome(deferred, no_hit, cut)

    def closure(self, extra: Sequence[z3.ArithRef]) -> list[z3.BoolRef]:
        """Full-attention facts are downward closed (lemma down(g)): instances."""
        terms = list(self.mterms) + list(extra)
        out = []
        for g, k in enumerate(self.cfg.kinds):
            if k != FA:
                continue
            for a in terms:
                for b in terms:
                    if a is not b:
                        out.append(z3.Implies(z3.And(a <= b, self.ok[g](b)), self.ok[g](a)))
        return out


def abstract(kinds: Sequence[str], sem: Semantics, maximal: bool, quiet: bool) -> Abstract:
    enc = Enc()
    cfg = symbolic_config(kinds, tag="_a")
    n = len(kinds)
    obs = tuple(z3.Int(f"a_obs{g}") for g in range(n))
    cap = tuple(z3.Int(f"a_cap{g}") for g in range(n))
    full = tuple(g for g, k in enumerate(kinds) if k == FA)
    windowed = tuple(g for g, k in enumerate(kinds) if k != FA)
    d = Derived(
        obs=obs, keys=cap, cap=cap,
        win=tuple(None if k == FA else z3.IntVal(1) for k in kinds),
        start=tuple(z3.IntVal(0) for _ in kinds),
        eagle=tuple(z3.And(cfg.eagle[g], z3.BoolVal(sem.eagle)) for g in range(n)),
        align=z3.Int("a_align"), align_on=z3.BoolVal(False),
        order=full + windowed, windowed=windowed,
    )
    ok = tuple(z3.Function(f"OK{g}", z3.IntSort(), z3.BoolSort()) for g in range(n))
    mul = tuple(z3.Function(f"MUL{g}", z3.IntSort(), z3.BoolSort()) for g in range(n))
    a = Abstract(enc, cfg, d, z3.Int("a_m0"), ok, mul,
                 z3.Int("a_candidate") if maximal else None, quiet)
    a.premises += [o >= 1 for o in obs] + [cfg.computed >= 0]
    a.premises += [mul[g](cap[g]) for g in range(n)]
    if a.candidate is not None:
        # a valid larger hit: at least a block of every group, within keys and M0
        # (lemma valid-bounds, proofs.layers)
        a.premises += [a.candidate - cfg.computed >= o for o in obs]
        a.premises += [a.candidate <= c for c in cap] + [a.candidate <= a.m0]
    return a


def invariant(a: Abstract, st: State) -> z3.BoolRef:
    """Between passes (scheduler.py:482): what every later pass may start from."""
    cfg, d = a.cfg, a.d
    c = [
        st.num_hit == st.m - cfg.computed,
        st.m - cfg.computed >= 1,
        st.m <= a.m0,
        z3.Not(st.halted),
        z3.Or(st.next == NEXT_ALL, st.next == NEXT_SW),
        z3.Or([st.m == a.m0] + [a.mul[g](st.m) for g in range(len(cfg.kinds))]),
    ]
    c += [st.m <= cap for cap in d.cap]
    c += [z3.Implies(st.next == NEXT_SW, a.ok[g](st.m))
          for g, k in enumerate(cfg.kinds) if k == FA]
    if a.candidate is not None:
        c.append(st.m >= a.candidate)
    return z3.And(c)


def summary(a: Abstract, st: State) -> z3.BoolRef:
    """What holds when the loop ends with a hit (not stopped, not deferred)."""
    cfg, d = a.cfg, a.d
    n = len(cfg.kinds)
    nc = cfg.computed
    facts = [st.m - nc >= 1, st.m <= a.m0]
    facts += [st.m <= cap for cap in d.cap]
    facts += [a.ok[g](st.m) for g in range(n)]
    facts.append(z3.Or([st.m == a.m0] + [a.mul[g](st.m) for g in range(n)]))
    facts.append(z3.Or([st.m - nc >= o for o in d.obs]))
    done = z3.Implies(z3.And(z3.Not(st.halted), z3.Not(st.defer)), z3.And(facts))
    if a.candidate is None:
        return done
    return z3.And(done, z3.Not(st.halted), z3.Or(st.defer, st.m >= a.candidate))


def obligations(a: Abstract, termination: bool) -> list[tuple[str, list[z3.BoolRef]]]:
    """(name, query) pairs; each query must be unsatisfiable."""
    enc, cfg, d = a.enc, a.cfg, a.d
    n = len(cfg.kinds)
    init = State(a.m0, z3.IntVal(0), z3.BoolVal(False), z3.BoolVal(False),
                 tuple(z3.BoolVal(False) for _ in range(n)), z3.IntVal(NEXT_NONE),
                 z3.BoolVal(False))
    st1 = run_pass(enc, cfg, d, init, d.order, a.lookup)
    sigma = fresh_state(enc, n, "sigma")
    nxt = next_pass(enc, cfg, d, sigma, a.lookup)
    out = [
        ("loop: invariant after pass 1", [z3.Not(finished(st1)), z3.Not(invariant(a, st1))]),
        ("loop: invariant kept by a pass",
         [invariant(a, sigma), z3.Not(finished(nxt)), z3.Not(invariant(a, nxt))]),
    ]
    if termination:
        out.append(("loop: each scheduled pass lowers max_hit_size_tokens",
                    [invariant(a, sigma), z3.Not(finished(nxt)),
                     z3.Not(z3.And(nxt.m < sigma.m, nxt.m - cfg.computed >= 1))]))
    else:
        out += [
            ("loop: summary when pass 1 is the last", [finished(st1), z3.Not(summary(a, st1))]),
            ("loop: summary when a later pass is the last",
             [invariant(a, sigma), finished(nxt), z3.Not(summary(a, nxt))]),
        ]
    terms = [a.m0, sigma.m, st1.m, nxt.m] + ([a.candidate] if a.candidate is not None else [])
    return [(name, a.premises + q + enc.cons + a.closure(terms)) for name, q in out]
