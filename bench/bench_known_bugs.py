"""Known-bug benchmark of the PR check (``python -m sim.crosscheck --vllm-source``).

Each known alignment bug is a small unified diff under ``bench/known_bugs/`` (header
lines ``# bug:``, ``# release:``, ``# invariant:``) re-introduced into a copy of that
release's Python tree (the overlaid paths only), then checked by the PR check with
generated scenarios only (no seed case, no corpus: the fuzz has to find it), stopping
at the first scenario that breaks an invariant.  A control row checks the unchanged
release tree (exit 0 expected).  Prints a Markdown table: bug, patch, detected or not,
seconds to detect (from the start of the check: release choice, overlay, harness start,
scenarios), the first breaking scenario (shrunk; with ``--out FILE`` also written as a
replayable scenario file under ``FILE-stem-scenarios/BUG/``, named in the table).
Exit 1 if a bug goes undetected or the control reports a change.

    python bench/bench_known_bugs.py [--quick] [--sources DIR] [--out FILE]

``--sources``: where the releases' sources are: ``DIR/vllm-X/`` (an unpacked wheel),
``DIR/vllm-X-*.whl`` (as ``pip download --no-deps vllm==X -d DIR`` leaves it), or an
installed ``vllm`` package directory.  Without it each release's wheel is looked for in
``$CROSSCHECK_WHEELS``, ``../wheels`` and ``<venvs>/wheels``, and fetched into the last
with ``pip download --no-deps`` when none has it.
Needs the release environments (``python -m sim.crosscheck.envs``).

A bug on a release without a model (``# scenario:`` header, e.g. vLLM #51094 reverted on
0.28.0) runs its reproduction on the real schedulers instead (``knownbugs.detect_on_real``:
the patched release, the release that ships it, and the unpatched control).

Exit 0 every bug detected and every control clean; 1 a bug undetected or a control
reporting a change; 2 bad input or missing sources (one ``error:`` line).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.crosscheck.envs import modelled_releases  # noqa: E402
from sim.crosscheck.knownbugs import (  # noqa: E402
    GONE_BECAUSE,
    NEEDS_RELEASE,
    BugError,
    apply_patch,
    detect_on_real,
    find_sources,
    load_bugs,
    release_tree,
)
from sim.crosscheck.prcheck import (  # noqa: E402
    EXIT_BROKEN,
    EXIT_SAME,
    check_tree,
    write_scenarios,
)
from sim.crosscheck.prreport import compact  # noqa: E402
from sim.crosscheck.tree import find_package, release_tuple  # noqa: E402


def scenario_dir(out: Path, bug: str) -> Path:
    """Where ``--out FILE`` puts a bug's shrunk scenarios (``prcheck.write_scenarios``)."""
    return out.with_name(f"{out.stem}-scenarios") / bug


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="exit codes: 0 every bug detected, every control "
                                 "clean; 1 a bug undetected or a control changed; 2 bad "
                                 "input or missing sources (one error line)")
    ap.add_argument("--quick", action="store_true",
                    help="CI mode: a smaller control run (300 scenarios, not 2000)")
    ap.add_argument("--sources", type=Path, default=None, metavar="DIR",
                    help="releases' wheels or unpacked trees (default: found in "
                    "$CROSSCHECK_WHEELS, ../wheels or <venvs>/wheels, else fetched by pip)")
    ap.add_argument("--examples", type=int, default=5000,
                    help="most generated scenarios per bug (default: %(default)s)")
    ap.add_argument("--only", action="append", default=[], help="run only this bug")
    ap.add_argument("--out", type=Path, default=None,
                    help="also write the table here (and its JSON beside it), and each "
                    "bug's shrunk scenarios as replayable files under "
                    "OUT-stem-scenarios/BUG/")
    args = ap.parse_args(argv)
    modelled = modelled_releases()
    bugs = [b for b in load_bugs() if not args.only or b.name in args.only]
    rows = []
    results = []
    ok = True
    if args.sources is not None and not args.sources.is_dir():
        print(f"error: --sources: {args.sources} is not a directory", file=sys.stderr)
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="known-bugs-"))

    def sources(version: str) -> Path:
        return args.sources if args.sources is not None else find_sources(version)

    try:
        versions = sorted({b.release for b in bugs if b.release in modelled})
        for v in versions:  # control: the unchanged release tree must exit 0
            tree = find_package(release_tree(sources(v), v, scratch / f"vllm-{v}"))
            t0 = time.monotonic()
            r = check_tree(tree, examples=300 if args.quick else 2000, corpus=None)
            dt = time.monotonic() - t0
            good = r.exit_code == EXIT_SAME
            ok &= good
            rows.append(f"| control: unchanged vLLM {v} | — | exit {r.exit_code} "
                        f"({'ok' if good else 'CHANGES REPORTED'}) | {dt:.0f} s for "
                        f"{r.checked} scenarios | — |")
            results.append({"bug": f"control-{v}", "exit": r.exit_code,
                            "seconds": round(dt, 1), "scenarios": r.checked})
        for b in bugs:
            patch = f"`{b.patch.relative_to(ROOT)}`" if b.patch else "—"
            if b.release not in modelled and b.scenario is not None:
                # no model of the release: its reproduction on the real schedulers
                # (the patched release, the stock host, the unpatched control)
                found = detect_on_real(b, scratch)
                for d in found:
                    ok &= d.ok
                    state = ("yes" if d.seen else "NO") if d.expect_broken else (
                        "clean (ok)" if not d.seen else "BROKEN")
                    shown = patch if d.label.startswith(f"vLLM {b.release} +") else "—"
                    rows.append(f"| {b.name}: {d.label} | {shown} | {state} (real hit "
                                f"{d.hit}, breaks {', '.join(d.broken) or 'nothing'}) | "
                                f"{d.seconds:.1f} (light env, one scenario) | "
                                f"`{b.scenario}` |")
                    results.append({"bug": b.name, "run": d.label, "version": d.version,
                                    "detected" if d.expect_broken else "clean":
                                    d.seen if d.expect_broken else not d.seen,
                                    "hit": d.hit, "breaks": list(d.broken),
                                    "seconds": d.seconds})
                continue
            if b.release not in modelled:
                rows.append(f"| {b.what} | {patch} | not run: vLLM {b.release} is not "
                            f"modelled (modelled: {', '.join(modelled)}) | — | — |")
                continue
            assert b.patch is not None
            dest = release_tree(sources(b.release), b.release, scratch / b.name)
            apply_patch(b.patch, dest)
            r = check_tree(find_package(dest), examples=args.examples, corpus=None,
                           stop_first=True, shrink_budget=200)
            broken = {inv for c in r.changes for inv in c.new_broken}
            detected = r.exit_code == EXIT_BROKEN and b.invariant in broken
            ok &= detected
            first = next((c for c in r.changes if b.invariant in c.new_broken), None)
            scen = (f"`{json.dumps(compact(first.scenario), sort_keys=True)}`" if first
                    else "—")
            if first is not None and args.out is not None:  # the scenarios as files
                write_scenarios(r, scenario_dir(args.out, b.name))
                scen += f" (`{r.scenario_files[r.changes.index(first)]}`)"
            secs = (f"{r.first_break_s:.1f} (start-up {r.startup_s:.1f}, then "
                    f"{r.checked} scenarios)" if r.first_break_s is not None else "—")
            rows.append(f"| {b.name}: {b.what} | {patch} | "
                        f"{'yes' if detected else 'NO'} (exit {r.exit_code}, breaks "
                        f"{', '.join(sorted(broken)) or 'nothing'}) | {secs} | {scen} |")
            results.append({"bug": b.name, "exit": r.exit_code, "detected": detected,
                            "seconds": r.first_break_s, "startup_seconds": r.startup_s,
                            "scenarios": r.checked,
                            "first": r.first_break,
                            "shrunk": first.scenario if first else None})
        for name, what, fixed, gone in NEEDS_RELEASE:
            if any(b.name == name for b in bugs) or (args.only and name not in args.only):
                continue
            hosts = [m for m in modelled
                     if release_tuple(fixed) <= release_tuple(m) < release_tuple(gone)]
            why = (f"no patch for vLLM {hosts[-1]} under bench/known_bugs/ yet" if hosts
                   else f"needs a modelled release from {fixed} to before {gone} "
                   f"(modelled: {', '.join(modelled)}; {GONE_BECAUSE[name]})")
            rows.append(f"| {name}: {what} | — | not run: {why} | — | — |")
    except BugError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    table = "\n".join([
        "| bug | patch | detected | seconds to detect (from the start of the check) | "
        "first breaking scenario (shrunk) |",
        "| --- | --- | --- | --- | --- |", *rows])
    print(table)
    if args.out is not None:
        args.out.write_text(table + "\n")
        args.out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
