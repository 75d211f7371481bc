"""``python -m sim.crosscheck``: the model against the real vLLM scheduler, per version.

For each ``--vllm`` version: make/reuse its environment, start the harness, check the
seed's boundary case, replay every scenario file under ``--scenarios``, run
``--examples`` Hypothesis scenarios (a disagreement is shrunk and written under
``--out``), time the real scheduler and the model side by side, and run the fixed
benchmark.  Exits 1 on any disagreement.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import releases
from model.args import OneLineParser, bounded_int, nonempty_path, output_dir
from model.evaluate import evaluate
from model.scenario import (
    Scenario,
    ScenarioError,
    iter_scenario_paths,
    load_scenario_file,
    parse_scenario,
    scenario_to_json,
)
from model.semantics import get_semantics
from releases import vllm_0_23_0
from sim.crosscheck import envs
from sim.crosscheck.client import RealScheduler
from sim.crosscheck.compare import Verdict, compare, model_view
from sim.crosscheck.envs import ROOT, VERSIONS
from sim.crosscheck.mapping import fix_for, semantics_for, to_case
from sim.crosscheck.shrink import shrink, signature

OUT_DIR = ROOT / "tests" / "scenarios" / "crosscheck"
SEED = {  # the seed's boundary case: real 0.23.0 hits 31 tokens, real 0.24.0 hits 16
    "semantics": releases.newest("block").name, "block_size_factor": 1, "prompt_tokens": 32,
    "num_computed_tokens": 0,
    "groups": [{"kind": "mamba", "gpu_block_size": 16, "mamba_cache_mode": "align",
                "stored": "all"}],
}
# the seed's real hit: 31 before PR #44599, 16 on every release from it on (each release's
# real scheduler, 0.24.0-0.33.0, answers 16)
SEED_HIT = {v: 31 if v == vllm_0_23_0.SEMANTICS.base_version else 16
            for v in releases.versions()}
BENCH = {  # 4,096-token prompt, two groups, everything stored, nothing on the GPU
    "semantics": releases.newest("block").name, "block_size_factor": 1, "prompt_tokens": 4096,
    "num_computed_tokens": 0,
    "groups": [{"kind": "full_attention", "gpu_block_size": 16, "stored": "all"},
               {"kind": "mamba", "gpu_block_size": 16, "mamba_cache_mode": "align",
                "stored": "all"}],
}


@dataclass
class Tally:
    version: str
    agreed: int = 0
    refused_both: int = 0
    preconditions: int = 0
    disagreements: list[tuple[Scenario, Verdict]] = field(default_factory=list)
    real_seconds: float = 0.0
    model_seconds: float = 0.0
    timed: int = 0
    seen: set[str] = field(default_factory=set)
    # what the agreeing, non-refused scenarios exercised
    hits: int = 0
    deferred: int = 0
    zero: int = 0
    load_plans: int = 0
    # 0.33.0's dimensions among the agreeing, accepted scenarios (name -> count)
    dims: Counter[str] = field(default_factory=Counter)
    # load plans whose worker copies start inside an offloaded block (sub-block skip),
    # and requests with output tokens or context parallelism
    sub_block_plans: int = 0
    resumed: int = 0
    context_parallel: int = 0
    # scenario files using a field the target release's model does not cover (for
    # example valid_hit, which only the 0.23.0/0.24.0 models read), replayed elsewhere
    out_of_model: list[Path] = field(default_factory=list)

    def line(self, label: str) -> str:
        speed = ""
        if self.timed and self.real_seconds and self.model_seconds:
            r, m = self.timed / self.real_seconds, self.timed / self.model_seconds
            speed = f"; lookups/s real {r:,.0f} vs model {m:,.0f} (model {m / r:.1f}x)"
        return (f"vLLM {self.version} {label}: {self.agreed} agree "
                f"({self.refused_both} refused by both, {self.hits} hits with "
                f"{self.load_plans} load plans ({self.sub_block_plans} starting mid-block), "
                f"{self.zero} zero, {self.deferred} deferred, {self.resumed} resumed, "
                f"{self.context_parallel} with context parallelism, "
                f"{self.preconditions} past a model precondition), "
                f"{len(self.disagreements)} disagree{self._skipped()}{speed}{self._dims()}")

    def _skipped(self) -> str:
        n = len(self.out_of_model)
        return f", {n} not modelled for this release (skipped)" if n else ""

    def _dims(self) -> str:
        if not self.dims:
            return ""
        return "; exercised: " + ", ".join(f"{k} {v}" for k, v in sorted(self.dims.items()))


def v033_dims(s: Scenario, result: dict[str, Any]) -> list[str]:
    """Which of 0.33.0's new dimensions an accepted scenario exercised."""
    if not get_semantics(s.semantics).chunked:
        return []
    out = []
    if result.get("tail_boundary") is not None:
        out.append("partial-tail hits")
    if (s.blocks_per_chunk or 1) > 1 or s.block_size_factor > 1:
        out.append("multi-block chunks")
    if len({g.gpu_block_size for g in s.groups}) > 1:
        out.append("mixed block sizes")
    if any(g.eagle for g in s.groups):
        out.append("EAGLE groups")
    if any(g.pending or g.pending_tails for g in s.groups):
        out.append("HIT_PENDING answers")
    if any(g.deferred or g.deferred_tails for g in s.groups):
        out.append("RETRY answers")
    if any(g.stored_tails for g in s.groups):
        out.append("stored tail keys")
    if s.max_num_new_tokens is not None or s.max_load_tokens is not None:
        out.append("caps")
    if any(g.stored is not None for g in s.groups):
        out.append("evicted keys")
    if any(g.mamba_cache_mode == "all" for g in s.groups):
        out.append("Mamba mode all")  # accepted by 0.28.0-0.31.0 only
    computed = result.get("connector_tokens")
    if result.get("gpu_hit_real") and computed is not None and computed != s.num_computed_tokens:
        # a GPU hit at hash-block granularity (not a multiple of the scheduler block)
        out.append("fine GPU hits")
        if result.get("local_tail_kept"):
            out.append("fine GPU hits keeping their local tail")
        elif result.get("loads") is not None:
            out.append("fine GPU hits loading past the tail")
    sem = get_semantics(s.semantics)
    if sem.kind == "fix":
        # a fix's semantics: where the fixed real scheduler differs from the release itself
        stock = evaluate(s, releases.by_version(sem.base_version).name)
        if stock.hit_tokens != result.get("hit"):
            out.append("hit changed by the fix")
        if any(v.invariant == "no-partial-state" for v in stock.violations):
            out.append("0.33.0 itself breaks no-partial-state")
    return out


def semantics_lines() -> list[str]:
    """One line per registered semantics: name, vLLM release, what the real side runs (the
    release, the release with a fix's diff applied, or nothing: checked by the model and
    the proofs only)."""
    out = []
    for name in releases.names():
        version = get_semantics(name).base_version
        try:
            fix = fix_for(version, name)
            real = f"real {version}" + (f" with fix {fix}" if fix else "")
        except ValueError:
            real = "no real counterpart (model and proofs only)"
        modelled = "" if version in VERSIONS else f" (no environment for {version})"
        out.append(f"{name}\tvLLM {version}\t{real}{modelled}")
    return out


def _say(msg: str) -> None:
    print(msg, flush=True)


def check_one(real: RealScheduler, s: Scenario, tally: Tally,
              check_lookups: bool = True) -> Verdict:
    sem = real.semantics
    s = s.with_semantics(sem)
    mv = model_view(s, sem)
    result = real.run(to_case(s))
    verdict = compare(mv, result, check_lookups=check_lookups)
    key = json.dumps(scenario_to_json(s), sort_keys=True)
    if key in tally.seen:
        return verdict
    tally.seen.add(key)
    if verdict.agree:
        tally.agreed += 1
        tally.refused_both += result.get("refused") is not None
        tally.preconditions += mv.precondition is not None
        if result.get("refused") is None:
            hit = result.get("hit")
            tally.deferred += hit is None
            tally.zero += hit == 0
            tally.hits += bool(hit)
            tally.load_plans += result.get("loads") is not None
            tally.dims.update(v033_dims(s, result))
            if mv.precondition is None:
                # the model's verdict on a run the real scheduler matched step for step
                tally.dims.update(f"breaks {v}" for v in mv.violations
                                  if get_semantics(s.semantics).chunked)
            tally.sub_block_plans += any(group and group[0][1] != 0
                                         for group in result.get("copies") or [])
            tally.resumed += s.output_tokens > 0
            tally.context_parallel += s.context_parallel_size > 1
        if result.get("refused") is None and "t_lookup" in result and mv.seconds:
            tally.real_seconds += result["t_lookup"]
            tally.model_seconds += mv.seconds
            tally.timed += 1
    else:
        tally.disagreements.append((s, verdict))
    return verdict


def write_disagreement(s: Scenario, verdict: Verdict, version: str, out_dir: Path) -> Path:
    data = scenario_to_json(s)
    data["description"] = (f"crosscheck disagreement with the real vLLM {version} "
                           f"scheduler: " + "; ".join(verdict.diffs))
    text = json.dumps(data, sort_keys=True)
    name = f"vllm-{version}-{hashlib.sha256(text.encode()).hexdigest()[:10]}.json"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / name
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def disagreement_signature(real: RealScheduler, raw: dict[str, Any],
                           check_lookups: bool) -> str | None:
    """For the shrinker: the kind of disagreement on ``raw``, None if both sides agree."""
    s = parse_scenario(raw)
    sem = real.semantics
    verdict = compare(model_view(s, sem), real.run(to_case(s)), check_lookups=check_lookups)
    return None if verdict.agree else signature(verdict.diffs)


def run_hypothesis(real: RealScheduler, n: int, seed: int | None, tally: Tally,
                   check_lookups: bool, progress_every: int = 1000,
                   ) -> list[tuple[str, Scenario, Verdict]]:
    """Check ``n`` distinct generated scenarios on both sides (all of them: a disagreement
    does not stop the run); return one shrunk scenario per kind of disagreement.

    Hypothesis draws the same scenario more than once now and then, so it runs in
    batches (seeds ``seed``, ``seed + 1``, ...; default 0: reproducible) until ``n``
    distinct scenarios have been checked.
    """
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    from sim.crosscheck.gen import scenarios

    t0 = time.monotonic()
    base = 0 if seed is None else seed
    start = len(tally.seen)
    last = [start]

    def checked() -> int:
        return len(tally.seen) - start

    for batch in range(100):
        want = n - checked()
        if want <= 0:
            break

        @settings(max_examples=max(50, want * 3 // 2), deadline=None, database=None,
                  suppress_health_check=list(HealthCheck), phases=[Phase.generate])
        @given(scenarios(semantics_for(real.version)))
        def prop(s: Scenario) -> None:
            if checked() >= n:
                return
            check_one(real, s, tally, check_lookups)
            if checked() - last[0] >= progress_every:
                last[0] = checked()
                rate = checked() / (time.monotonic() - t0)
                _say(f"  vLLM {real.version}: {checked()} scenarios checked ({rate:.0f}/s), "
                     f"{tally.agreed} agree, {len(tally.disagreements)} disagree")

        hseed(base + batch)(prop)()
    kinds: dict[str, tuple[Scenario, Verdict]] = {}
    for s, verdict in tally.disagreements:
        kinds.setdefault(signature(verdict.diffs), (s, verdict))
    out = []
    for sig, (s, _) in kinds.items():
        small = shrink(scenario_to_json(s),
                       lambda raw: disagreement_signature(real, raw, check_lookups))
        s_small = parse_scenario(small)
        mv = model_view(s_small, real.semantics)
        verdict = compare(mv, real.run(to_case(s_small)), check_lookups=check_lookups)
        out.append((sig, s_small, verdict))
    return out


def replay(real: RealScheduler, paths: list[Path], tally: Tally,
           check_lookups: bool) -> list[tuple[Path, Verdict]]:
    bad = []
    for p in paths:
        try:
            s = load_scenario_file(p)
        except ScenarioError as e:
            _say(f"  skip {p}: {e}")
            continue
        try:
            verdict = check_one(real, s, tally, check_lookups)
        except ScenarioError as e:
            # the file's own release models the field; this one does not, so there is
            # nothing to compare (the file is replayed under its own release elsewhere)
            tally.out_of_model.append(p)
            _say(f"  not modelled for {real.semantics}: {p.name}: {e}")
            continue
        if not verdict.agree:
            bad.append((p, verdict))
    return bad


def bench(real: RealScheduler, calls: int) -> tuple[float, float]:
    """Lookups/s (1 / the median call) of the real scheduler and of the model on the
    fixed benchmark; the real side excludes building the Request, the model side
    excludes resolving the layout (both are start-up work)."""
    from sim.crosscheck.compare import timed_lookup

    sem_name = real.semantics
    s = parse_scenario(dict(BENCH, semantics=sem_name))
    r = real.bench(to_case(s), calls)
    per_call = [timed_lookup(s, sem_name, clock=time.perf_counter) for _ in range(calls)]
    per_call.sort()
    # median calls on both sides: robust to other load on the machine
    return 1 / r["median"], 1 / per_call[len(per_call) // 2]


# the example in --semantics' help
_FIX = releases.fix_for("001")


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(prog="python -m sim.crosscheck", description=__doc__)
    ap.add_argument("--vllm", default=",".join(VERSIONS),
                    help="comma-separated vLLM versions, or all (default: %(default)s)")
    ap.add_argument("--examples", type=bounded_int(0, 10_000_000), default=2000,
                    help="distinct generated scenarios per version (default: %(default)s)")
    ap.add_argument("--scenarios", action="append", default=[], metavar="DIR",
                    type=nonempty_path,
                    help="replay every scenario file under DIR (repeatable)")
    ap.add_argument("--out", type=output_dir, default=OUT_DIR,
                    help="where shrunk disagreements are written (default: %(default)s)")
    ap.add_argument("--seed", type=bounded_int(0, 2**63 - 1), default=None,
                    help="first Hypothesis seed (default 0; runs are reproducible)")
    ap.add_argument("--bench-calls", type=bounded_int(0, 1_000_000), default=2000,
                    help="calls for the fixed benchmark (0 skips it)")
    ap.add_argument("--light", action="store_true",
                    help="run each release in its light environment (the shared base plus "
                    "the release's .py files, sim/crosscheck/envs.py) instead of its full one")
    ap.add_argument("--no-lookups", action="store_true",
                    help="do not compare the order of manager.lookup calls")
    ap.add_argument("--list-semantics", action="store_true",
                    help="list every registered semantics (releases/, OLC_SEMANTICS "
                    "plugins too) with the vLLM release it is checked against and its "
                    "real side, then exit")
    ap.add_argument("--semantics", default=None, metavar="NAME",
                    help="an alt semantics with a real counterpart, checked against the "
                    f"release with that fix applied ({_FIX.name}: vLLM {_FIX.base_version} "
                    f"with {_FIX.fix_diff}); one --vllm version only")
    pr = ap.add_argument_group(
        "PR check", "check a vLLM source tree (branch, unpacked sdist/wheel, .whl, "
        ".tar.gz) against its nearest modelled release; prints a Markdown report and "
        "writes each shrunk scenario as a replayable file under OUT/pr-check/ (--out); "
        "exit 0 nothing modelled changed, 1 behaviour changed, no invariant broken, 2 bad "
        "input (one error line, no report), 3 a changed behaviour breaks an invariant")
    pr.add_argument("--vllm-source", type=Path, metavar="PATH", help="the tree to check")
    pr.add_argument("--base", default=None, help="check against this modelled release "
                    "(default: the nearest, see sim/crosscheck/README.md)")
    pr.add_argument("--report", type=Path, default=None, metavar="FILE",
                    help="write the Markdown report here (default: stdout)")
    pr.add_argument("--no-corpus", action="store_true",
                    help="generated scenarios only (no seed case, no scenario files)")
    bi = ap.add_argument_group(
        "bisect", "run scenario files on every release's real scheduler, 0.23.0-0.33.0 "
        "(light envs), and print the affected-releases table (sim/crosscheck/bisect.py); "
        "--report F also writes it as Markdown; exit 0, 2 bad input (one error line)")
    bi.add_argument("--bisect", nargs="+", metavar="FILE", default=None,
                    help="scenario files")
    bi.add_argument("--releases", default=None, metavar="V,V",
                    help="only these releases (default: every release 0.23.0-0.33.0)")
    bi.add_argument("--update-doc", type=Path, default=None, metavar="DOC",
                    help="replace (or append) DOC's generated '## Affected releases' section")
    bi.add_argument("--section", action="append", default=[], metavar="DOC=FILE[,FILE]",
                    help="as --update-doc, with the tables of these --bisect files only "
                    "(repeatable: one run fills several docs)")
    args = ap.parse_args(argv)
    if args.list_semantics:
        for line in semantics_lines():
            print(line)
        return 0
    if args.bisect is not None:
        return bisect_cli(args, argv)
    if args.vllm_source is not None:
        return pr_check(args)
    versions = (list(VERSIONS) if args.vllm.strip() == "all"
                else [v.strip() for v in args.vllm.split(",") if v.strip()])
    unsupported = [v for v in versions if v not in VERSIONS]
    if not versions or unsupported:
        ap.error(f"argument --vllm: unsupported version {(unsupported or [''])[0]!r} "
                 f"(supported: {', '.join(VERSIONS)})")
    try:
        paths = iter_scenario_paths(args.scenarios) if args.scenarios else []
        for p in paths:  # bad input is refused before any environment starts
            load_scenario_file(p)
    except ScenarioError as e:
        ap.error(f"argument --scenarios: {e}")
    if args.semantics is not None:
        if len(versions) != 1:
            ap.error("--semantics: takes exactly one --vllm version")
        try:
            fix_for(versions[0], args.semantics)
        except ValueError as e:
            ap.error(str(e))
    check_lookups = not args.no_lookups
    failed = False
    summary = []
    for version in versions:
        t0 = time.monotonic()
        _say(f"== vLLM {version}: starting the real scheduler")
        python = envs.ensure_light_env(version) if args.light else None
        with RealScheduler(version, semantics=args.semantics, python=python) as real:
            _say(f"  harness up in {time.monotonic() - t0:.0f}s" + (
                f"; model {real.semantics} vs real {version} with fix {real.fix}"
                if real.fix else ""))
            label = version if real.fix is None else f"{version}+fix{real.fix}"
            seed_result = real.run(to_case(parse_scenario(SEED)))
            want = SEED_HIT.get(version)
            ok = want is None or seed_result.get("hit") == want
            _say(f"  seed boundary case (Mamba align, block 16, 32 tokens): real hit "
                 f"{seed_result.get('hit')}" + (f" (expected {want})" if want else ""))
            failed |= not ok
            if paths:
                tally_files = Tally(label)
                bad = replay(real, paths, tally_files, check_lookups)
                _say("  " + tally_files.line(f"scenario files ({len(paths)})"))
                for p, v in bad:
                    _say(f"  DISAGREE {p}: {'; '.join(v.diffs)}")
                failed |= bool(bad)
                summary.append(tally_files.line("scenario files"))
            tally = Tally(label)
            if args.examples > 0:
                t1 = time.monotonic()
                found = run_hypothesis(real, args.examples, args.seed, tally, check_lookups)
                dt = time.monotonic() - t1
                _say("  " + tally.line(f"generated ({dt:.0f}s)"))
                for sig, small, verdict in found:
                    n_kind = sum(signature(v.diffs) == sig for _, v in tally.disagreements)
                    path = write_disagreement(small, verdict, label, args.out)
                    _say(f"  DISAGREE x{n_kind} [{sig}] shrunk -> {path}: "
                         f"{'; '.join(verdict.diffs)}")
                failed |= bool(found) or bool(tally.disagreements)
                summary.append(tally.line("generated"))
            if args.bench_calls > 0:
                real_rate, model_rate = bench(real, args.bench_calls)
                line = (f"vLLM {version} benchmark (4,096-token prompt, two groups, a new "
                        f"request per call): real {real_rate:,.0f} lookups/s, model "
                        f"{model_rate:,.0f} lookups/s, model/real {model_rate / real_rate:.1f}x")
                _say("  " + line)
                summary.append(line)
    _say("== summary")
    for line in summary:
        _say("  " + line)
    _say("  result: " + ("DISAGREEMENTS (see above)" if failed else "all agree"))
    return 1 if failed else 0


SECTION_START = "<!-- affected-releases: begin -->"
SECTION_END = "<!-- affected-releases: end -->"


def bisect_cli(args: argparse.Namespace, argv: list[str] | None) -> int:
    """``--bisect``: the affected-releases table; bad input -> one line, exit 2."""
    import shlex

    from sim.crosscheck.bisect import BisectError, load_files, parse_versions, render, run_bisect

    sections: list[tuple[Path, list[int]]] = []
    try:
        versions = parse_versions(args.releases)
        paths, _ = load_files(args.bisect)  # refused before any environment starts
        if args.update_doc is not None:
            sections.append((args.update_doc, list(range(len(paths)))))
        index = {p.resolve(): i for i, p in enumerate(paths)}
        for spec in args.section:
            doc, sep, files = spec.partition("=")
            if not sep or not files:
                raise BisectError(f"--section: {spec!r} is not DOC=FILE[,FILE]")
            picked = []
            for f in files.split(","):
                if Path(f).resolve() not in index:
                    raise BisectError(f"--section: {f} is not one of the --bisect files")
                picked.append(index[Path(f).resolve()])
            sections.append((Path(doc), picked))
        for doc, _ in sections:
            if not doc.is_file():
                raise BisectError(f"--update-doc/--section: {doc}: no such file")
    except BisectError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    words = sys.argv[1:] if argv is None else argv
    command = "python -m sim.crosscheck " + " ".join(shlex.quote(w) for w in words)
    result = run_bisect(args.bisect, versions)
    text = render(result, command=command, root=ROOT)
    print(text)
    if args.report is not None:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(text + "\n")
        _say(f"report: {args.report}")
    for doc, picked in sections:
        update_doc(doc, render(result, command=command, root=ROOT, only=picked))
        _say(f"updated: {doc} (## Affected releases)")
    return 0


def update_doc(doc: Path, table: str) -> None:
    """Replace the doc's generated section (between the markers), or append it."""
    body = (f"{SECTION_START}\n## Affected releases\n\n"
            "*Generated* — do not edit by hand — by `python -m sim.crosscheck --bisect "
            "FILE... --section DOC=FILE...` (the exact command is in the HTML comment "
            "below and in docs/guide.md § Every release), on the real schedulers of every "
            "release 0.23.0-0.33.0 (light environments, `sim/crosscheck/bisect.py`). "
            "*start-up*: the release's own "
            "start-up checks on the scenario's layout (its block sizes as given; whether a "
            "real model configuration of that release plans such a layout is not asked "
            "here); *breaks*: `model.invariants` on the real hit and load (and "
            "`maximality` where the hit is below the file's `valid_hit`, a claim checked "
            "on the 0.33.0 model). Releases without a model in `releases/` ran the real "
            "scheduler only.\n\n"
            f"{table}\n{SECTION_END}")
    text = doc.read_text()
    if SECTION_START in text and SECTION_END in text:
        head, rest = text.split(SECTION_START, 1)
        tail = rest.split(SECTION_END, 1)[1]
        text = head + body + tail
    else:
        text = text.rstrip("\n") + "\n\n" + body + "\n"
    doc.write_text(text)


def pr_check(args: argparse.Namespace) -> int:
    """``--vllm-source``: the PR check (see ``prcheck.py``); bad input -> one line, 2."""
    from sim.crosscheck.client import HarnessError
    from sim.crosscheck.prcheck import CORPUS, EXIT_BAD_INPUT, check_tree, write_scenarios
    from sim.crosscheck.prreport import render
    from sim.crosscheck.tree import TreeError, find_package

    if args.examples < 0 or args.examples > 1_000_000:
        print(f"error: --examples: {args.examples} is not in 0..1000000", file=sys.stderr)
        return EXIT_BAD_INPUT
    corpus = None if args.no_corpus else [Path(p) for p in args.scenarios or CORPUS]
    import tempfile

    try:
        with tempfile.TemporaryDirectory(prefix="pr-check-") as scratch:
            # a .whl / .tar.gz is unpacked under scratch, removed afterwards
            tree = find_package(args.vllm_source, Path(scratch))
            result = check_tree(tree, examples=args.examples, seed=args.seed or 0,
                                corpus=corpus, base=args.base)
    except TreeError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except HarnessError as e:
        # the exception the harness died of (the last "...Error: ..." line of its log)
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        errors = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception)\b", ln)]
        why = (errors or lines or ["the harness failed"])[-1][:300]
        print(f"error: --vllm-source: the tree's files do not run on the release's "
              f"environment: {why}", file=sys.stderr)
        return EXIT_BAD_INPUT
    files = write_scenarios(result, args.out / "pr-check")
    if files:
        _say(f"{len(files)} scenario file(s) under {args.out / 'pr-check'}")
    text = render(result)
    if args.report is not None:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(text + "\n")
        _say(f"report: {args.report} (exit {result.exit_code})")
    else:
        print(text)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
