"""After ``mutmut run``: fail unless the run is complete, the score is at least the one
measured (``.ci/mutmut-score.json``) and every surviving mutant is one explained there.

A survivor is named by its function and its edit (the lines mutmut changed), not by
mutmut's running number, so an unrelated change to the module does not shift the list.
Exit 0 when all holds; 1 otherwise, with a line per reason.

    python .ci/check_mutmut.py [--write]   # --write: record this run as the baseline
"""

from __future__ import annotations

import difflib
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / ".ci" / "mutmut-score.json"
NAME = re.compile(r"^\s*(\S+__mutmut_\d+): (.+)$")


def statuses() -> dict[str, str]:
    out = subprocess.run(["mutmut", "results", "--all", "true"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return {m.group(1): m.group(2).strip() for line in out.splitlines()
            if (m := NAME.match(line))}


def edits(module: str) -> dict[str, str]:
    """mutant name -> 'function: -old | +new' from mutmut's mutated copy of ``module``."""
    path = ROOT / "mutants" / module
    src = path.read_text()
    funcs = {m.group(1): m.group(0) for m in re.finditer(
        r"^def (x_\w+?__mutmut_(?:orig|\d+))\(.*?(?=^def |^class |^mutants_|^@|\Z)",
        src, re.S | re.M)}
    dotted = module.removesuffix(".py").replace("/", ".")
    out = {}
    for name, body in funcs.items():
        if name.endswith("__mutmut_orig"):
            continue
        base = name.rsplit("__mutmut_", 1)[0]
        orig = funcs[base + "__mutmut_orig"].splitlines()
        new = body.replace(name, base + "__mutmut_orig").splitlines()
        changed = [ln[0] + ln[1:].strip() for ln in difflib.unified_diff(
            orig, new, lineterm="", n=0) if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
        out[f"{dotted}.{name}"] = f"{base.removeprefix('x_')}: {' | '.join(changed)}"
    return out


def main() -> int:
    write = "--write" in sys.argv[1:]
    st = statuses()
    base = json.loads(BASELINE.read_text())
    edit = edits(base["module"])
    total = len(st)
    done = {k: v for k, v in st.items() if v != "not checked"}
    killed = sum(v in ("killed", "timeout") for v in done.values())
    survivors: dict[str, list[str]] = {}  # edit -> mutants (two may make one edit)
    for k, v in done.items():
        if v == "survived":
            survivors.setdefault(edit.get(k, k), []).append(k)
    other = sorted(f"{k}: {v}" for k, v in done.items()
                   if v not in ("killed", "timeout", "survived"))
    n_surv = sum(map(len, survivors.values()))
    score = f"{killed}/{total} killed (timeouts count as killed), {n_surv} survived"
    print(f"mutmut on {base['module']}: {score}")
    if write:
        explained = base.get("survivors", {})
        base.update(total=total, killed=killed, survivors={
            e: {"mutants": len(survivors[e]),
                "why": explained.get(e, {}).get("why", "UNEXPLAINED")}
            for e in sorted(survivors)})
        BASELINE.write_text(json.dumps(base, indent=1) + "\n")
        print(f"baseline written to {BASELINE}")
        return 0
    bad = []
    if len(done) < total:
        bad.append(f"incomplete: {total - len(done)} of {total} mutants not checked")
    if other:
        bad.append(f"{len(other)} mutants neither killed nor survived: {other[:5]}")
    if killed * base["total"] < base["killed"] * total:
        bad.append(f"score dropped: {killed}/{total} < {base['killed']}/{base['total']}")
    for e, names in sorted(survivors.items()):
        known = base["survivors"].get(e, {}).get("mutants", 0)
        if len(names) > known:
            bad.append(f"unexplained survivor ({', '.join(names)}): {e}")
    for line in bad:
        print("FAIL: " + line)
    if not bad:
        print(f"PASS: at least the measured {base['killed']}/{base['total']}, and every "
              f"survivor explained in {BASELINE.relative_to(ROOT)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
