"""``python -m proofs --sabotage``: one-line changes of the proofs' glue and of ``model/``
(issue 23), each of which must turn ``python -m proofs`` red.

Each sabotage copies ``model/``, ``proofs/``, ``releases/`` and ``docs/counterexamples/``
(``proofs.pinned_violation_chunked`` reads them) to a fresh directory, replaces one line
there (the line must be written exactly once), and runs ``python -m proofs`` in that copy
for the theorem and semantics the change affects (no necessity checks: the verdict, its
over-accepted-layouts row and its witness). It is caught when that run fails; the check
that caught it is the run's own words (the audit's or the pinned layouts' or pinned
counterexamples' FAILED line, a missing witness, or the row's note). A sabotage nothing
catches is listed with the reason it is not caught (``uncaught``: known gaps, reported,
not failed).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import releases

ROOT = Path(__file__).resolve().parent.parent
COPIED = ("model", "proofs", "releases", "docs/counterexamples")


def _newest() -> str:
    return releases.newest().name


def _older() -> str:
    """The older family's newest release the proofs encode."""
    return releases.newest_proved(releases.get(releases.releases()[0]).family).name


def _older_with(flag: str) -> Callable[[], str]:
    """The older family's newest release the proofs encode that has the override
    ``flag`` (a field of ``releases.base.Semantics``)."""
    def name() -> str:
        family = releases.get(releases.releases()[0]).family
        return next(n for n in reversed(releases.releases(family))
                    if n in releases.proved(family) and getattr(releases.get(n), flag))
    return name


def _chunked_without(step: str) -> Callable[[], str]:
    """The newest chunked release the proofs encode without the lookup switch ``step``
    (a field of ``releases.base.ChunkSteps``: vLLM 0.29.0's ``load_windows``)."""
    def name() -> str:
        return next(n for n in reversed(releases.releases("chunked"))
                    if n in releases.proved("chunked")
                    and not getattr(releases.get(n).steps, step))
    return name


@dataclass(frozen=True)
class Sabotage:
    name: str
    path: str  # the file, relative to the repository root
    old: str  # the line (or lines) replaced, written exactly once in the file
    new: str
    theorem: str
    semantics: Callable[[], str]  # the semantics the change affects
    uncaught: str = ""  # why nothing catches it (a known gap), or ""


SABOTAGES: tuple[Sabotage, ...] = (
    Sabotage(
        "an extra fact in the abstract turn (0.33.0)",
        "proofs/abstract_chunked.py",
        "    nxt = s.next\n",
        "    uses.append(lp.ok(g, m2))  # type: ignore[arg-type]\n    nxt = s.next\n",
        "loads-stored-only", _newest,
    ),
    Sabotage(
        "a guard dropped from an assumed fact: post without its guard (issue 23's example)",
        "proofs/abstract_chunked.py",
        "            uses.append(use(name, t, lp.ok(g, m2)))\n",
        "            uses.append(lp.ok(g, m2))  # type: ignore[arg-type]\n",
        "loads-stored-only", _newest,
    ),
    Sabotage(
        "a bare fact added to the loop's step query (0.33.0)",
        "proofs/abstract_chunked.py",
        "         + shape(z3.Not(step_goal))),\n",
        "         + [lp.ok(s.k, after.m)] + shape(z3.Not(step_goal))),\n",
        "loads-stored-only", _newest,
    ),
    Sabotage(
        "a lemma this proof does not prove (down, assumed without loads-stored-only)",
        "proofs/abstract_chunked.py",
        '    if "down" in assumed(lp.reround, lp.rerun, lp.aligned, lp.stored):\n',
        "    if True:\n",
        "no-partial-state", _newest,
    ),
    Sabotage(
        "a contradictory premise in one loop query only (0.33.0)",
        "proofs/abstract_chunked.py",
        "         base + shape(invariant(lp, s, g), s.k < lp.n)\n",
        "         base + shape(invariant(lp, s, g), s.k < lp.n, s.k < 0)\n",
        "termination", _newest,
    ),
    Sabotage(
        "a guard dropped from an assumed fact: post (older family)",
        "proofs/abstract.py",
        '    uses: list[Use | Together] = [use("post", t, lp.ok(g, m2)), '
        'use("no-hit-not-deferred", t),\n',
        '    uses: list[Use | Together] = [lp.ok(g, m2), use("no-hit-not-deferred", t),\n',
        "loads-stored-only", _older,
    ),
    Sabotage(
        "a guard dropped from an assumed fact: keeps (0.33.0 maximality layer)",
        "proofs/maximality_layers_chunked.py",
        "        use(\"keeps\", t, c),\n",
        "        t.m2 >= c,\n",
        "maximality", _newest,
    ),
    Sabotage(
        "a bare fact in the partial-tail key loop (tail layer)",
        "proofs/tail_layers_chunked.py",
        '            + assume([use("key-ready", s, t, ok(k))])\n',
        "            + [ok(k)]\n",
        "termination", _newest,
    ),
    Sabotage(
        "a vacuous property step (its violation dropped): a statement known false proved",
        "proofs/layers_chunked.py",
        "    violation = turn_chunked.VIOLATIONS[thm](enc, cfg, d, r)\n",
        "    violation = z3.BoolVal(False)\n",
        "no-partial-state", _newest,
    ),
    Sabotage(
        "a vacuous whole-blocks step (its violation dropped)",
        "proofs/layers_chunked.py",
        "    violation = z3.And(turn_chunked.active(r), r.hit < d.tpc[0])\n",
        "    violation = z3.BoolVal(False)\n",
        "whole-blocks", _newest,
    ),
    Sabotage(
        "a tightened per-group environment (derive: every block the Mamba block)",
        "proofs/turn_chunked.py",
        "        enc.add(z3.Implies(z3.And(env.has_mamba, z3.Or(z3.Not(cfg.prefix_caching),\n",
        "        enc.add(z3.Implies(z3.And(env.has_mamba, z3.Or(z3.BoolVal(True),\n",
        "termination", _newest,
    ),
    Sabotage(
        "a tightened start-up rule (startup: its prefix-caching guard dropped)",
        "proofs/turn_chunked.py",
        "        c.append(z3.Implies(z3.Or(z3.Not(cfg.prefix_caching), cfg.mamba_all),\n",
        "        c.append(z3.Implies(z3.BoolVal(True),\n",
        "termination", _newest,
    ),
    Sabotage(
        "model/: a Mamba load restores no state (load_chunked)",
        "model/load_chunked.py",
        "            state = boundary if boundary is not None else num_gpu_blocks * tpb\n",
        "            state = boundary if boundary is not None else None\n",
        "termination", _newest,
    ),
    Sabotage(
        "a contradictory premise in the lemma queries (layers_chunked.lemma_turn)",
        "proofs/layers_chunked.py",
        '    helpers = division_facts(x.enc, t.ends) if name == "post" else []\n',
        '    helpers = division_facts(x.enc, t.ends) if name == "post" else [x.cfg.bpc < 1]\n',
        "termination", _newest,
    ),
    Sabotage(
        "a premise excluding different block sizes in the maximality lemma queries "
        "(every chunk the Mamba chunk)",
        "proofs/maximality_layers_chunked.py",
        "    helpers = monotone_instances(enc, ends, d.tpc[0])\n",
        "    helpers = monotone_instances(enc, ends, d.tpc[0]) + [d.tpc[0] == d.align]\n",
        "maximality", _newest,
    ),
    Sabotage(
        "a premise excluding a GPU hit in one partial-tail lemma query (key-ready)",
        "proofs/tail_layers_chunked.py",
        "        more.append(b >= 1)\n",
        "        more += [b >= 1, tc.base.computed == 0]\n",
        "termination", _newest,
    ),
    Sabotage(
        "the engine's local-tail choice loading the connector's answer over a kept tail",
        "proofs/turn_chunked.py",
        "    return Result(r.deferred, z3.If(keeps_tail(tail, r), z3.IntVal(0), r.hit))\n",
        "    return Result(r.deferred, r.hit)\n",
        "no-partial-state", _newest,
    ),
    Sabotage(
        "a guard dropped from down (assumed for windowed groups, proved for full attention)",
        "proofs/abstract_chunked.py",
        '        out += [use("down", a, b, lp.ok(g, a), lp.ok(g, b), when=full, group=g)\n',
        '        out += [use("down", a, b, lp.ok(g, a), lp.ok(g, b), group=g)\n',
        "loads-stored-only", _newest,
    ),
    Sabotage(
        "down assumed of any group, its group unnamed (older family)",
        "proofs/abstract.py",
        '                out.append(use("down", a, b, lp.ok(g, a), lp.ok(g, b), when=full, '
        'group=g))\n',
        '                out.append(use("down", a, b, lp.ok(g, a), lp.ok(g, b), when=_in(lp, g)))'
        '\n',
        "loads-stored-only", _older,
    ),
    Sabotage(
        "blocks_per_chunk not read by the encoding (0.26.0 on: the chunk is the "
        "block_size factor alone)",
        "proofs/encoding.py",
        "    return steps.chunk_blocks(TurnArith(enc), cfg.factor, cfg.bpc, cfg.bpc_set)\n",
        "    return cfg.factor\n",
        "no-partial-state", _older_with("offloading_config"),
    ),
    Sabotage(
        "0.27.0's load slack not read by the encoding (valid hits as 0.26.0's)",
        "proofs/theorems.py",
        "            c.append(ld.pending <= steps.load_window_limit(win, d.factor,\n"
        "                                                           sem.load_window_slack))\n",
        "            c.append(ld.pending <= steps.load_window_limit(win, d.factor, 0))\n",
        "maximality", _older_with("load_window_slack"),
        uncaught="no verdict depends on it: maximality holds with the slack and without "
        "(0.26.0 and 0.27.0 both proved), and its witness needs no hit only the slack makes "
        "valid; tests/test_conformance_offloading.py catches it (the valid hits differ)",
    ),
    Sabotage(
        "0.29.0's plain window not read by the bounded encoding (its first run needs the "
        "load window, as 0.30.0's)",
        "proofs/encoding_chunked.py",
        "        if sem.steps.load_windows:  # the first run needs the load window (from "
        "0.30.0)\n",
        "        if True:\n",
        "loads-stored-only", _chunked_without("load_windows"),
    ),
)


@dataclass(frozen=True)
class Outcome:
    sabotage: Sabotage
    caught: bool
    by: str  # the check that caught it (its words), or why not
    seconds: float


def _caught_by(out: str, err: str) -> str:
    """The check that turned the run red, in its own words."""
    for line in err.splitlines():
        if "FAILED:" in line or "vacuous" in line or line.strip().startswith("no witness"):
            return line.strip()
    bad = [ln for ln in out.splitlines() if " NO " in f" {ln} "]
    if bad:  # the row that missed its expectation, then its note on stderr
        notes = [ln.strip() for ln in err.splitlines() if ln.startswith("    ")]
        return "; ".join([bad[0].strip(), *notes[:1]])
    for line in err.splitlines():
        if line.strip():
            return line.strip()
    return out.strip().splitlines()[-1] if out.strip() else "(no output)"


def run_one(s: Sabotage, timeout_s: float) -> Outcome:
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sabotage-") as tmp:
        for d in COPIED:
            shutil.copytree(ROOT / d, Path(tmp) / d,
                            ignore=shutil.ignore_patterns("__pycache__"))
        f = Path(tmp) / s.path
        text = f.read_text()
        if text.count(s.old) != 1:
            return Outcome(s, False, f"the line is no longer written once in {s.path}: "
                           f"{s.old.strip()!r}", time.monotonic() - t0)
        f.write_text(text.replace(s.old, s.new))
        cmd = [sys.executable, "-m", "proofs", "--semantics", s.semantics(), "--theorem",
               s.theorem, "--no-necessity", "--jobs", "1", "--timeout", str(timeout_s)]
        r = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
    if r.returncode == 0:
        return Outcome(s, False, "python -m proofs stays green", time.monotonic() - t0)
    return Outcome(s, True, _caught_by(r.stdout, r.stderr), time.monotonic() - t0)


def parse_part(text: str) -> tuple[int, int]:
    """``K/N`` (0 <= K < N <= 64) as (K, N); ValueError naming the form otherwise."""
    k, sep, n = text.partition("/")
    if not (sep and k.isdigit() and n.isdigit() and 0 <= int(k) < int(n) <= 64):
        raise ValueError(f"expected K/N with 0 <= K < N <= 64, got {text[:40]!r}")
    return int(k), int(n)


def selected(names: Sequence[str] = (), part: tuple[int, int] = (0, 1)) -> list[Sabotage]:
    """The sabotages whose name contains one of ``names`` (all when none), and of those
    the ``part`` K/N: every N-th from the K-th, in the catalogue's order (CI runs one part
    a day in turn; the N parts together are the whole selection)."""
    named = [s for s in SABOTAGES if not names or any(n in s.name for n in names)]
    return named[part[0]::part[1]]


def main(names: Sequence[str] = (), jobs: int = 2, timeout_s: float = 120.0,
         part: tuple[int, int] = (0, 1)) -> int:
    """Run the sabotages (``names``: those whose name contains one of them; ``part``: K/N
    of those, ``selected``); 0 when each is caught, or is a known gap that stays uncaught
    (listed with its reason)."""
    todo = selected(names, part)
    bad = 0
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        for o in pool.map(lambda s: run_one(s, timeout_s), todo):
            s = o.sabotage
            where = f"{s.path}; {s.theorem} on {s.semantics()}"
            if o.caught:
                # a known gap caught this time is not a failure: its catch is not reliable
                verdict = "CAUGHT" if not s.uncaught else "GAP (caught this time)"
                print(f"{verdict:<9} {s.name} ({where}, {o.seconds:.0f}s)\n    by: {o.by}",
                      flush=True)
            elif s.uncaught and o.by == "python -m proofs stays green":
                print(f"{'GAP':<9} {s.name} ({where}, {o.seconds:.0f}s)\n"
                      f"    nothing catches it: {s.uncaught}", flush=True)
            else:
                print(f"{'MISSED':<9} {s.name} ({where}, {o.seconds:.0f}s)\n    {o.by}",
                      flush=True)
                bad += 1
    scope = "" if part == (0, 1) else f" (part {part[0]}/{part[1]} of {len(SABOTAGES)})"
    print(f"{'FAIL' if bad else 'PASS'}: {len(todo) - bad} of {len(todo)} sabotages{scope} "
          "caught or listed as known gaps")
    return 1 if bad else 0
