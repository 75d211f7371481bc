"""``python -m sim run|rerun``: bad input gives one line naming the flag and exit 2."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from model.args import bounded_int, output_dir
from model.scenario import MAX_GROUPS, MAX_TOKENS
from model.semantics import CHUNKED_SEMANTICS, MODEL_SEMANTICS, SEMANTICS
from releases import alt_cache_config_block_size
from sim.config import EngineConfig
from sim.report import table, write_report
from sim.rerun import parse_lengths, rerun_one
from sim.runner import RunSpec, parse_semantics, run_side_by_side
from sim.tier import POLICIES
from sim.tier_layouts import LAYOUTS
from sim.tier_run import TierGrid, run_grid
from sim.tier_run import table as tier_table
from sim.tier_run import write_report as write_tier_report
from sim.tier_sim import check_dense
from sim.workload import WORKLOADS

DEFAULT_LAYOUT = next(iter(LAYOUTS))  # finding 001's GPU-checked layout


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message.splitlines()[0])


def _positive(minimum: int = 1, maximum: int = MAX_TOKENS,
              why: str = "scenario.MAX_TOKENS, beyond any max_model_len") -> Callable[[str], int]:
    return bounded_int(minimum, maximum, why)


def _range_arg() -> Callable[[str], tuple[int, int]]:
    def conv(text: str) -> tuple[int, int]:
        parts = text.split("-")
        try:
            lo, hi = (int(parts[0]), int(parts[-1])) if len(parts) <= 2 else (0, -1)
        except ValueError:
            lo, hi = 0, -1
        if lo < 1 or hi < lo or hi > 1_000_000:
            raise argparse.ArgumentTypeError(
                f"expected A-B with 1 <= A <= B <= 1,000,000 steps, got {text[:40]!r}")
        return lo, hi
    return conv


def _engine_flags(p: argparse.ArgumentParser, default_gpu: int) -> None:
    p.add_argument("--block-size", type=_positive(), default=16)
    p.add_argument("--attention-groups", type=_positive(0, MAX_GROUPS - 1, "scenario.MAX_GROUPS"),
                   default=0,
                   help="full-attention groups beside the Mamba group (default 0: pure Mamba)")
    p.add_argument("--gpu-blocks", type=_positive(), default=default_gpu)
    p.add_argument("--cpu-blocks", type=_positive(), default=32768)
    p.add_argument("--max-num-batched-tokens", type=_positive(),
                   default=2048)
    p.add_argument("--max-num-seqs", type=_positive(1, 1_000_000, "a million sequences"),
                   default=128)
    p.add_argument("--long-prefill-token-threshold",
                   type=_positive(0), default=0)
    p.add_argument("--store-latency", type=_range_arg(), default=(2, 8),
                   help="steps until a store completes, A-B (default 2-8)")
    p.add_argument("--load-latency", type=_range_arg(), default=(1, 4))
    p.add_argument("--cache-mamba-block-size",
                   type=_positive(), default=None,
                   help="cache_config.mamba_block_size for "
                        f"{alt_cache_config_block_size.SEMANTICS.name} "
                        "(default: the block size; set it to model a stale value)")


def _config(a: argparse.Namespace) -> EngineConfig:
    if a.max_num_batched_tokens < a.block_size:
        raise UsageError(f"--max-num-batched-tokens: must be >= the block size "
                         f"{a.block_size}, got {a.max_num_batched_tokens}")
    return EngineConfig(
        block_size=a.block_size, attention_groups=a.attention_groups,
        gpu_blocks=a.gpu_blocks, cpu_blocks=a.cpu_blocks,
        max_num_batched_tokens=a.max_num_batched_tokens, max_num_seqs=a.max_num_seqs,
        long_prefill_token_threshold=a.long_prefill_token_threshold,
        store_latency=a.store_latency, load_latency=a.load_latency,
        cache_mamba_block_size=a.cache_mamba_block_size,
        verify_clean=getattr(a, "verify_clean", False), seed=getattr(a, "seed", 0))


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m sim", description="Simulate KV-offloading workloads "
                "(run) or predict the second-send hit per prompt length (rerun).")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    run = sub.add_parser("run", help="simulate a workload under several semantics")
    run.add_argument("--workload", required=True, help=f"one of {', '.join(WORKLOADS)}")
    run.add_argument("--requests", type=_positive(1, 10_000_000, "ten million requests"),
                     required=True)
    run.add_argument("--semantics", required=True, help="comma-separated names")
    run.add_argument("--seed", type=_positive(0, 2**63 - 1, "a 64-bit seed"), default=0)
    run.add_argument("--report", type=output_dir, default=None,
                     help="write JSON and PNG here")
    run.add_argument("--jobs", type=_positive(1, 64, "64 processes"), default=None,
                     help="processes (default: min(#semantics, #cpus))")
    run.add_argument("--no-progress", action="store_true")
    run.add_argument("--verify-clean", action="store_true",
                     help="also run the recurrence on clean paths and check them")
    run.add_argument("--fail-on-corruption", default="", metavar="NAMES",
                     help="comma-separated semantics expected clean: exit 1 if any of them "
                          "corrupts an output or breaks an invariant")
    _engine_flags(run, 128)
    # chunked (vLLM 0.33.0 family) semantics run through the CPU tier (sim.tier_sim)
    run.add_argument("--layout", default=DEFAULT_LAYOUT,
                     help=f"chunked semantics: one of {', '.join(LAYOUTS)}")
    run.add_argument("--tier-chunks", type=_int_list, default=(64, 256, 1024),
                     help="chunked semantics: CPU tier sizes in chunks, comma-separated")
    run.add_argument("--tier-policy", type=_policy_list, default=tuple(POLICIES),
                     help="chunked semantics: eviction policies, comma-separated (lru,arc)")
    run.add_argument("--preempt", type=_rate, default=0.0, metavar="SHARE",
                     help="chunked semantics: preempt this share of the requests (0-1) "
                          "mid-prefill or mid-decode and resume them later, looking up the "
                          "CPU tier again (sim.tier_preempt)")
    run.add_argument("--resume-after", type=_resume_range, default=(1, 8), metavar="A-B",
                     help="chunked semantics, with --preempt: a preempted request resumes "
                          "after A-B later requests (default 1-8)")
    rr = sub.add_parser("rerun", help="the hit of a prompt sent again after a cold run")
    rr.add_argument("--semantics", required=True)
    rr.add_argument("--lengths", required=True, help="A-B, inclusive")
    rr.add_argument("--json", action="store_true", help="one JSON object per line")
    rr.add_argument("--fail-on-corruption", default="", metavar="NAMES",
                    help="the semantics, if expected clean: exit 1 on any corrupted output "
                         "or violation")
    rr.add_argument("--keep-gpu-cache", action="store_true",
                    help="do not clear the GPU prefix cache before the second send (control "
                         "run; --json then adds gpu_hit_tokens)")
    _engine_flags(rr, 128)
    return p


def _int_list(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        vals = ()
    if not vals or any(not 1 <= v <= 10_000_000 for v in vals):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated sizes in 1..10,000,000, got {text[:40]!r}")
    return vals


def _rate(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a share in 0..1, got {text[:40]!r}")
    return v


def _resume_range(text: str) -> tuple[int, int]:
    parts = text.split("-")
    try:
        lo, hi = (int(parts[0]), int(parts[-1])) if len(parts) <= 2 else (0, -1)
    except ValueError:
        lo, hi = 0, -1
    if lo < 0 or hi < lo or hi > 1_000_000:
        raise argparse.ArgumentTypeError(
            f"expected A-B with 0 <= A <= B <= 1,000,000 requests, got {text[:40]!r}")
    return lo, hi


def _policy_list(text: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [n for n in names if n not in POLICIES]
    if not names or bad:
        raise argparse.ArgumentTypeError(
            f"unknown policy {', '.join(bad) or text!r} (known: {', '.join(POLICIES)})")
    return names


def _run_tier(a: argparse.Namespace, names: tuple[str, ...]) -> int:
    """Chunked semantics: the workload through the CPU tier (``sim.tier_run``)."""
    layout = LAYOUTS.get(a.layout)
    if layout is None:
        raise UsageError(f"--layout: unknown name {a.layout!r} (known: {', '.join(LAYOUTS)})")
    try:
        check_dense(layout)
    except ValueError as e:
        raise UsageError(f"--layout: {e}") from None
    if a.max_num_batched_tokens < layout.scheduler_block:
        raise UsageError(f"--max-num-batched-tokens: must be >= the layout's scheduler block "
                         f"{layout.scheduler_block}, got {a.max_num_batched_tokens}")
    if a.report is not None and a.report.exists() and not a.report.is_dir():
        raise UsageError(f"--report: {a.report} exists and is not a directory")
    clean = _clean_names(a.fail_on_corruption, names)
    grid = TierGrid(layout, a.workload, a.requests, a.seed, names, a.tier_chunks,
                    a.tier_policy, a.max_num_batched_tokens, a.preempt, a.resume_after)
    summaries = run_grid(grid, show_progress=not a.no_progress)
    preempt = (f", {a.preempt:.0%} preempted and resumed after {a.resume_after[0]}-"
               f"{a.resume_after[1]} requests (prefill steps of {grid.step_tokens} tokens)"
               if a.preempt else "")
    print(f"layout {layout.name} ({layout.summary}); workload {a.workload}{preempt}, "
          f"{a.requests:,} requests, seed {a.seed}")
    print(tier_table(summaries))
    if a.report is not None:
        try:
            jpath, ppath = write_tier_report(a.report, grid, summaries)
        except OSError as e:
            raise UsageError(f"--report: cannot write to {a.report} ({e.strerror})") from None
        print(f"report: {jpath} {ppath}")
    bad = [f"{s.semantics} (tier {s.tier_chunks}, {s.policy}): {s.corrupted} corrupted, "
           f"{s.missing_loads} loads of unstored chunks"
           for s in summaries if s.semantics in clean and (s.corrupted or s.missing_loads)]
    return _verdict(clean, bad)


def _run(a: argparse.Namespace) -> int:
    if a.workload not in WORKLOADS:
        raise UsageError(f"--workload: unknown name {a.workload!r} "
                         f"(known: {', '.join(WORKLOADS)})")
    try:
        names = parse_semantics(a.semantics, list(MODEL_SEMANTICS))
    except ValueError as e:
        raise UsageError(str(e)) from None
    chunked = [n for n in names if n in CHUNKED_SEMANTICS]
    if chunked and len(chunked) != len(names):
        raise UsageError(f"--semantics: chunked semantics ({', '.join(chunked)}) run through "
                         "the CPU tier and cannot be mixed with the others")
    if chunked:
        return _run_tier(a, names)
    if a.preempt:
        raise UsageError("--preempt: only the chunked semantics (the CPU tier) model "
                         "preemption")
    config = _config(a)
    if a.report is not None and a.report.exists() and not a.report.is_dir():
        raise UsageError(f"--report: {a.report} exists and is not a directory")
    clean = _clean_names(a.fail_on_corruption, names)
    spec = RunSpec(a.workload, a.requests, a.seed, names, config)
    jobs = a.jobs or min(len(names), os.cpu_count() or 1)
    summaries = run_side_by_side(spec, jobs, show_progress=not a.no_progress)
    print(f"workload {a.workload}, {a.requests:,} requests, seed {a.seed}")
    print(table(summaries))
    if a.report is not None:
        try:
            jpath, ppath = write_report(a.report, summaries, workload=a.workload,
                                        requests=a.requests, seed=a.seed, config=config)
        except OSError as e:
            raise UsageError(f"--report: cannot write to {a.report} ({e.strerror})") from None
        print(f"report: {jpath} {ppath}")
    bad = [f"{s.semantics}: {s.corrupted} corrupted, {sum(s.violations.values())} violations, "
           f"{s.missing_loads} loads of unstored blocks, {s.assertions} vLLM assertions"
           for s in summaries if s.semantics in clean and (
               s.corrupted or any(s.violations.values()) or s.missing_loads or s.assertions)]
    return _verdict(clean, bad)


def _clean_names(text: str, names: Sequence[str]) -> tuple[str, ...]:
    """``--fail-on-corruption``'s names: each must be one of the run's semantics."""
    clean = tuple(n.strip() for n in text.split(",") if n.strip())
    for n in clean:
        if n not in names:
            raise UsageError(f"--fail-on-corruption: {n!r} is not among --semantics "
                             f"({', '.join(names)})")
    return clean


def _verdict(clean: Sequence[str], bad: Sequence[str], total: str = "") -> int:
    if not clean:
        return 0
    for line in bad:
        print(f"  expected clean: {line}")
    total = total or f"{len(clean)} semantics"
    print(f"verdict: {'FAIL' if bad else 'PASS'}: {len(bad)} of {total} expected clean "
          f"({', '.join(clean)}) corrupted an output or broke an invariant")
    return 1 if bad else 0


def _rerun(a: argparse.Namespace) -> int:
    try:
        names = parse_semantics(a.semantics, list(SEMANTICS))
        lengths = parse_lengths(a.lengths)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if len(names) != 1:
        raise UsageError("--semantics: rerun takes exactly one name")
    clean = _clean_names(a.fail_on_corruption, names)
    bad: list[str] = []
    config = _config(a)
    if not a.json:
        print(f"semantics {names[0]}, block {config.block_size}, "
              f"{config.attention_groups} attention group(s) + Mamba align")
        print("length  GPU hit  hit  corrupted  stored Mamba blocks  violations / cause")
    for n in lengths:
        r = rerun_one(n, names[0], config, keep_gpu_cache=a.keep_gpu_cache)
        if clean and (r.corrupted or r.violations or r.missing_load):
            bad.append(f"length {n}: hit {r.hit_tokens}, corrupted {str(r.corrupted).lower()}, "
                       f"violations {','.join(r.violations) or '-'}")
        if a.json:
            print(json.dumps(r.to_json(with_gpu_hit=a.keep_gpu_cache)))
        else:
            why = ",".join(r.violations) or (r.cause or "-")
            if r.missing_load:
                why += "  (vLLM asserts: load of an unstored block)"
            print(f"{n:6d} {r.gpu_hit:8d} {r.hit_tokens:4d}  {str(r.corrupted).lower():9s}  "
                  f"{','.join(map(str, r.stored_blocks)) or '-':19s}  {why}")
    if a.json and clean:
        for line in bad:
            print(json.dumps({"expected_clean": names[0], "failure": line}))
        print(json.dumps({"verdict": "FAIL" if bad else "PASS", "semantics": names[0],
                          "failures": len(bad)}))
        return 1 if bad else 0
    return _verdict(clean, [f"{names[0]}: {b}" for b in bad], f"{len(lengths)} lengths")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        a = build_parser().parse_args(argv)
        if a.command == "run":
            return _run(a)
        if a.command == "rerun":
            return _rerun(a)
        raise UsageError("command: expected run or rerun")
    except UsageError as e:
        print(f"python -m sim: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
