"""Compare the GPU measurements with the model's and the simulator's predictions.

    python -m sim.gpu.report [--results sim/gpu/results] [--out DIR] [--no-sim]

Reads every ``vllm-*.json`` that ``sim/gpu/driver.py`` wrote (one per vLLM version,
model, mode and Mamba cache mode), and for every prompt length of every case whose
second request was a CPU hit builds the scenario the engine actually ran: the groups
and block sizes the engine reported, the offloaded blocks its CPU tier held when the
second request was looked up, and the tokens the GPU had already computed. It then
compares ``model.evaluate`` (hit tokens; corruption = a ``no-partial-state`` violation)
and ``python -m sim rerun`` (its own store model) with the measured hit and with
whether the second output differed from the cold one. Control cases (second request
served from the GPU prefix cache, ``second: gpu``) have no connector prediction; they are
listed apart. Writes ``report.md`` and ``hits.png`` into ``--out`` (default: the
results folder). Exit 0 when every disagreement is explained, 1 otherwise, 2 on bad
input.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model.args import OneLineParser, nonempty_path, output_dir
from model.scenario import MAX_TOKENS, ScenarioError, decode_json, read_bytes
from releases import vllm_0_23_0, vllm_0_24_0

SCHEMA = "sim-gpu-result/1"
HF_SCHEMA = "sim-gpu-hf-reference/1"
RESULTS = Path(__file__).resolve().parent / "results"
NO_PARTIAL_STATE = "no-partial-state"
KEY_LENGTHS = (17, 31, 32, 33, 47, 48, 49, 63, 64, 65, 79, 80)


class ResultError(ValueError):
    """A result file that does not follow the schema (one-line message)."""


@dataclass(frozen=True)
class Group:
    kind: str
    gpu_block_size: int
    offloaded_block_size: int | None
    mamba_cache_mode: str | None


@dataclass(frozen=True)
class Row:
    length: int
    equal: bool
    first_diff: int | None
    num_cached_tokens: int
    connector_hit: int | None
    num_computed_tokens: int | None
    stored: tuple[tuple[int, ...], ...] | None
    cold_tokens: tuple[int, ...] = ()
    hot_tokens: tuple[int, ...] = ()


@dataclass(frozen=True)
class Case:
    name: str
    vllm_version: str
    model: str
    mode: str
    requested_cache_mode: str
    second: str  # "cpu": the second request hits the CPU tier; "gpu": a control
    connector: str
    groups: tuple[Group, ...]
    gpu_seconds: float
    rows: tuple[Row, ...]

    @property
    def cache_mode(self) -> str | None:
        """The Mamba cache mode the engine ran with (0.33.0 ignores the requested one)."""
        modes = {g.mamba_cache_mode for g in self.groups if g.kind == "mamba"}
        return modes.pop() if len(modes) == 1 else None

    @property
    def semantics(self) -> str | None:
        """The model semantics of this binary and mode (None: the model has none)."""
        if self.second != "cpu":
            return None
        if self.vllm_version == "0.23.0" or self.mode == "fix-disabled":
            # fix disabled = 0.24.0 without PR #44599's round_down = 0.23.0's lookup
            return vllm_0_23_0.SEMANTICS.name
        if self.vllm_version == "0.24.0":
            return vllm_0_24_0.SEMANTICS.name
        return None

    @property
    def label(self) -> str:
        parts = [self.vllm_version, self.model, self.mode, self.cache_mode or "?"]
        if self.cache_mode != self.requested_cache_mode:
            parts[-1] += f" (asked {self.requested_cache_mode})"
        if self.second != "cpu":
            parts.append("GPU hit" + (", no connector" if self.connector == "none" else ""))
        return " / ".join(parts)


@dataclass(frozen=True)
class Prediction:
    hit: int | None
    corrupted: bool | None
    note: str = ""


@dataclass(frozen=True)
class Compared:
    case: Case
    row: Row
    model: Prediction
    sim: Prediction
    explanation: str | None

    @property
    def measured_corrupted(self) -> bool:
        return not self.row.equal

    def disagreements(self) -> list[str]:
        out = []
        for who, p in (("model", self.model), ("sim", self.sim)):
            if p.hit is not None and p.hit != self.row.connector_hit:
                out.append(f"{who} hit {p.hit} != measured {self.row.connector_hit}")
            if p.corrupted is not None and p.corrupted != self.measured_corrupted:
                out.append(f"{who} corrupted {p.corrupted} != measured "
                           f"{self.measured_corrupted}")
        return out


# ---- loading -------------------------------------------------------------------------

def _get(d: dict[str, Any], key: str, types: type | tuple[type, ...], where: str) -> Any:
    if key not in d:
        raise ResultError(f"{where}{key}: required field is missing")
    v = d[key]
    if not isinstance(v, types) or (isinstance(v, bool) and types is int):
        raise ResultError(f"{where}{key}: unexpected value {v!r}")
    return v


def _opt_int(d: dict[str, Any], key: str, where: str, minimum: int = 0) -> int | None:
    v = d.get(key)
    if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
        raise ResultError(f"{where}{key}: expected an integer or null, got {str(v)[:40]!r}")
    if v is not None and not minimum <= v <= MAX_TOKENS:
        raise ResultError(f"{where}{key}: expected {minimum} to {MAX_TOKENS:,} "
                          f"(scenario.MAX_TOKENS), got {v}")
    return v


def _count(d: dict[str, Any], key: str, where: str, minimum: int) -> int:
    v = _opt_int(d, key, where, minimum)
    if v is None:
        raise ResultError(f"{where}{key}: required field is missing")
    return v


def _tokens(d: dict[str, Any], key: str, where: str) -> tuple[int, ...]:
    v = _get(d, key, list, where)
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in v):
        raise ResultError(f"{where}{key}: expected a list of token ids")
    return tuple(v)


def parse_result(d: Any, name: str) -> Case:
    """A driver result (parsed JSON) -> Case; ResultError names the bad field."""
    if not isinstance(d, dict):
        raise ResultError(f"{name}: expected a JSON object")
    if d.get("schema") != SCHEMA:
        raise ResultError(f"{name}: schema: expected {SCHEMA!r}, got {d.get('schema')!r}")
    if d.get("error"):
        raise ResultError(f"{name}: the run failed: {d['error']}")
    groups = []
    for i, g in enumerate(_get(d, "groups", list, f"{name}: ")):
        w = f"{name}: groups[{i}]."
        if not isinstance(g, dict):
            raise ResultError(f"{w[:-1]}: expected an object")
        mode = g.get("mamba_cache_mode")
        if mode is not None and not isinstance(mode, str):
            raise ResultError(f"{w}mamba_cache_mode: expected a string, got {str(mode)[:40]!r}")
        groups.append(Group(_get(g, "kind", str, w), _count(g, "gpu_block_size", w, 1),
                            _opt_int(g, "offloaded_block_size", w, 1), mode))
    if not groups:
        raise ResultError(f"{name}: groups: empty")
    rows = []
    for i, r in enumerate(_get(d, "lengths", list, f"{name}: ")):
        w = f"{name}: lengths[{i}]."
        if not isinstance(r, dict):
            raise ResultError(f"{w[:-1]}: expected an object")
        stored = r.get("stored")
        if stored is not None:
            if not (isinstance(stored, list) and len(stored) == len(groups) and all(
                    isinstance(s, list) and all(isinstance(b, int) for b in s) for s in stored)):
                raise ResultError(f"{w}stored: expected one list of block indices per group")
            stored = tuple(tuple(s) for s in stored)
        rows.append(Row(_count(r, "length", w, 1), _get(r, "equal", bool, w),
                        _opt_int(r, "first_diff", w), _count(r, "num_cached_tokens", w, 0),
                        _opt_int(r, "connector_hit", w), _opt_int(r, "num_computed_tokens", w),
                        stored, _tokens(r, "cold_tokens", w), _tokens(r, "hot_tokens", w)))
    seconds = _get(d, "gpu_seconds", dict, f"{name}: ").get("total")
    if not isinstance(seconds, (int, float)):
        raise ResultError(f"{name}: gpu_seconds.total: expected a number")
    return Case(name, _get(d, "vllm_version", str, f"{name}: "), _get(d, "model", str, f"{name}: "),
                _get(d, "mode", str, f"{name}: "), _get(d, "mamba_cache_mode", str, f"{name}: "),
                d.get("second", "cpu"), d.get("connector", "offload"), tuple(groups),
                float(seconds), tuple(rows))


def load_results(folder: Path) -> list[Case]:
    files = sorted(folder.glob("vllm-*.json"))
    if not files:
        raise ResultError(f"{folder}: no vllm-*.json result files")
    cases = []
    for f in files:
        try:
            d = decode_json(read_bytes(f), f.name)
        except ScenarioError as e:
            raise ResultError(str(e)) from None
        cases.append(parse_result(d, f.stem))
    return cases


HFReference = dict[str, dict[int, tuple[int, ...]]]


def load_hf_reference(path: Path) -> HFReference | None:
    """transformers' greedy outputs (sim/gpu/hf_reference.py), or None if not there."""
    if not path.exists():
        return None
    try:
        d = decode_json(read_bytes(path), path.name)
        if d.get("schema") != HF_SCHEMA:
            raise ResultError(f"{path.name}: schema: expected {HF_SCHEMA!r}")
        return {kind: {int(n): tuple(t) for n, t in per.items()}
                for kind, per in d["models"].items()}
    except (OSError, KeyError, AttributeError, TypeError, ValueError) as e:
        if isinstance(e, ResultError):
            raise
        raise ResultError(f"{path.name}: {str(e).splitlines()[0] if str(e) else e!r}") from None


def hf_agreement(case: Case, hf: HFReference | None) -> tuple[str, str]:
    """'n/N' of lengths whose cold / second output equals transformers' greedy output."""
    ref = (hf or {}).get(case.model)
    if not ref:
        return "–", "–"
    rows = [r for r in case.rows if r.length in ref]
    cold = sum(r.cold_tokens == ref[r.length] for r in rows)
    hot = sum(r.hot_tokens == ref[r.length] for r in rows)
    return f"{cold}/{len(rows)}", f"{hot}/{len(rows)}"


# ---- predictions -------------------------------------------------------------------

def scenario_for(case: Case, row: Row, semantics: str) -> dict[str, Any]:
    """The scenario (model/scenario.py format) the engine ran for this length."""
    if row.stored is None:
        raise ResultError(f"{case.name}: length {row.length}: no store content recorded")
    factors = {(g.offloaded_block_size or g.gpu_block_size) // g.gpu_block_size
               for g in case.groups}
    if len(factors) != 1:
        raise ResultError(f"{case.name}: groups disagree on the block size factor")
    groups = []
    for g, stored in zip(case.groups, row.stored, strict=True):
        grp: dict[str, Any] = {"kind": g.kind, "gpu_block_size": g.gpu_block_size,
                               "stored": list(stored)}
        if g.kind == "mamba":
            grp["mamba_cache_mode"] = g.mamba_cache_mode
        groups.append(grp)
    return {"semantics": semantics, "block_size_factor": factors.pop(),
            "prompt_tokens": row.length, "num_computed_tokens": row.num_computed_tokens or 0,
            "groups": groups}


def model_prediction(case: Case, row: Row) -> Prediction:
    sem = case.semantics
    if sem is None:
        why = ("control run (GPU prefix-cache hit)" if case.second != "cpu"
               else f"no model semantics for vLLM {case.vllm_version}")
        return Prediction(None, None, why)
    from model.evaluate import evaluate
    from model.scenario import ScenarioError, parse_scenario

    try:
        out = evaluate(parse_scenario(scenario_for(case, row, sem)))
    except ScenarioError as e:
        return Prediction(None, None, f"model: {e}")
    if out.refused:
        return Prediction(None, None, f"model refuses: {out.refused}")
    bad = any(v.invariant == NO_PARTIAL_STATE for v in out.violations)
    return Prediction(out.hit_tokens, bad)


SimRunner = Callable[[str, int, int, int], dict[int, Prediction] | str]


def run_sim(semantics: str, attention_groups: int, lo: int, hi: int) -> dict[int, Prediction] | str:
    """``python -m sim rerun`` predictions per length, or why there are none."""
    cmd = [sys.executable, "-m", "sim", "rerun", "--semantics", semantics,
           "--lengths", f"{lo}-{hi}", "--json", "--attention-groups", str(attention_groups)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"sim: {e}"
    if p.returncode != 0:
        lines = (p.stderr or p.stdout).strip().splitlines()
        return f"sim: exit {p.returncode}: {lines[-1] if lines else ''}"
    out = {}
    for line in p.stdout.splitlines():
        d = json.loads(line)
        out[int(d["length"])] = Prediction(int(d["hit_tokens"]), bool(d["corrupted"]))
    return out


# ---- explanations of disagreements ---------------------------------------------------

@dataclass(frozen=True)
class Explanation:
    key: str
    applies: Callable[[Compared], bool]
    text: str


def _all_mode_two_token_tail(c: Compared) -> bool:
    r = c.row
    return (c.case.cache_mode == "all" and c.measured_corrupted and c.model.corrupted is False
            and r.connector_hit is not None and c.model.hit == r.connector_hit
            and r.length - r.connector_hit == 2 and r.first_diff == 1)


EXPLANATIONS = (
    Explanation(
        "all-mode-two-token-tail", _all_mode_two_token_tail,
        "Mamba cache mode `all` (Mamba-1: MambaForCausalLM and Jamba), vLLM 0.23.0 and 0.24.0: "
        "when exactly two prompt tokens are computed on top of a restored, block-aligned "
        "state (lengths 16k+2), the second output token differs from the cold run. The "
        "lookup is right (the hit equals the model's). Not the connector: the control runs "
        "`*-all-gpuhit` and `*-all-gpuhit-noconn` show the same divergence at the same "
        "lengths with a GPU prefix-cache hit and with no KV connector configured. A finding "
        "for vLLM's Mamba-1 `all` mode, outside the lookup that model/ describes."),
)


def explain(c: Compared) -> str | None:
    for e in EXPLANATIONS:
        if e.applies(c):
            return e.key
    return None


# ---- comparison ------------------------------------------------------------------------

def compare(cases: Sequence[Case], sim: SimRunner | None = run_sim) -> list[Compared]:
    sims: dict[tuple[str, int, int, int], dict[int, Prediction] | str] = {}
    out = []
    for case in cases:
        if case.second != "cpu":
            continue
        lengths = [r.length for r in case.rows]
        n_attn = sum(g.kind == "full_attention" for g in case.groups)
        sim_preds: dict[int, Prediction] | str
        if sim is None:
            sim_preds = "sim: not run (--no-sim)"
        elif case.semantics is None:
            sim_preds = f"sim: no semantics for vLLM {case.vllm_version}"
        elif case.cache_mode != "align":
            sim_preds = "sim: models Mamba align mode only"
        else:
            key = (case.semantics, n_attn, min(lengths), max(lengths))
            if key not in sims:
                sims[key] = sim(*key)
            sim_preds = sims[key]
        for row in case.rows:
            sp = (sim_preds.get(row.length, Prediction(None, None, "sim: no such length"))
                  if isinstance(sim_preds, dict) else Prediction(None, None, sim_preds))
            c = Compared(case, row, model_prediction(case, row), sp, None)
            if c.disagreements():
                c = Compared(case, row, c.model, c.sim, explain(c))
            out.append(c)
    return out


def unexplained(compared: Sequence[Compared]) -> list[Compared]:
    return [c for c in compared if c.disagreements() and c.explanation is None]


# ---- rendering ----------------------------------------------------------------------

def _fmt(v: object) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def _stored(row: Row, case: Case) -> str:
    if row.stored is None:
        return "–"
    return "; ".join(f"{g.kind[:4]} {','.join(map(str, s)) or '∅'}"
                     for g, s in zip(case.groups, row.stored, strict=True))


def _diverged(case: Case) -> str:
    bad = [f"{r.length}@{r.first_diff}" for r in case.rows if not r.equal]
    return ", ".join(bad) or "none"


def control_findings(cases: Sequence[Case]) -> list[str]:
    """Align-mode GPU-hit controls that diverge with the connector but not without it."""
    out = []
    plain = {(c.vllm_version, c.model, c.mode, c.cache_mode): c
             for c in cases if c.second == "gpu" and c.connector == "none"}
    for c in cases:
        if c.second != "gpu" or c.connector == "none" or c.cache_mode != "align":
            continue
        # only what the GPU prefix cache served alone (the connector added nothing)
        bad = [r for r in c.rows if not r.equal and r.connector_hit == 0]
        other = plain.get((c.vllm_version, c.model, c.mode, c.cache_mode))
        if not bad or other is None or any(not r.equal for r in other.rows):
            continue
        hits = {r.length: r.num_cached_tokens for r in other.rows}
        out.append(
            f"{c.label}: with the OffloadingConnector configured, the second request of "
            f"lengths {', '.join(str(r.length) for r in bad)} hits the GPU prefix cache for "
            f"{', '.join(str(r.num_cached_tokens) for r in bad)} tokens and its output "
            f"changes (first differing token {', '.join(str(r.first_diff) for r in bad)}); "
            f"with no connector configured the same lengths hit "
            f"{', '.join(str(hits.get(r.length)) for r in bad)} tokens and the output is "
            f"unchanged. The connector's own lookup returned "
            f"{', '.join(str(r.connector_hit) for r in bad)} for these requests, so this is "
            f"not the lookup model/ describes; cause not established.")
    return out


def render_markdown(cases: Sequence[Case], compared: Sequence[Compared],
                    hf: HFReference | None = None) -> str:
    by_case: dict[str, list[Compared]] = {}
    for c in compared:
        by_case.setdefault(c.case.name, []).append(c)
    lines = [
        "# GPU cross-check: cold output vs output after a CPU hit",
        "",
        "Generated by `python -m sim.gpu.report` from the driver's result files in this "
        "folder (`sim/gpu/driver.py`, one H200, tiny random-weight models, float32, "
        "block 16, OffloadingConnector CPU tier with offloaded block 16, prefix caching). "
        "Per length: a cold greedy run of 16 tokens, a reset of the GPU prefix cache that "
        "keeps the CPU tier, the same request again. *Hit* is what "
        "`OffloadingConnectorScheduler.get_num_new_matched_tokens` returned for the second "
        "request; *diverged* lists `length@first differing output token`. The model's "
        "prediction is `model.evaluate` on the scenario built from the store content the "
        "engine held; corruption predicted = a `no-partial-state` violation. *cold = HF* / "
        "*second = HF*: lengths whose output equals transformers' greedy output for the same "
        "weights (`hf-reference.json`, `python -m sim.gpu.hf_reference`), which shows which "
        "of two differing outputs is wrong. vLLM 0.33.0 has no model semantics (measured "
        "only), and it ignores `mamba_cache_mode` (only `align` exists there: "
        "vllm/config/cache.py:176, the flag is deprecated with no effect: "
        "vllm/engine/arg_utils.py:462), so its `all` case ran `align`.",
        "",
        "## Summary",
        "",
        "| case | lengths | GPU s | model semantics | hits = model | corruption = model "
        "| hits = sim | diverged (length@token) | cold = HF | second = HF |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for case in cases:
        if case.second != "cpu":
            continue
        cs = by_case.get(case.name, [])
        lines.append(
            f"| {case.label} | {len(case.rows)} | {case.gpu_seconds:.0f} | "
            f"{case.semantics or '– (' + (cs[0].model.note if cs else '') + ')'} | "
            f"{_agree(cs, 'model', 'hit')} | {_agree(cs, 'model', 'corrupted')} | "
            f"{_agree(cs, 'sim', 'hit')} | {_diverged(case)} | "
            f"{' | '.join(hf_agreement(case, hf))} |")
    controls = [c for c in cases if c.second != "cpu"]
    if controls:
        lines += ["", "## Control runs (second request served from the GPU prefix cache)", "",
                  "No CPU reset: the second request hits the GPU prefix cache "
                  "(`num_cached_tokens` below); the connector is configured unless the case "
                  "says *no connector*.", "",
                  "| case | GPU s | cached tokens at 18 / 32 / 33 / 48 / 80 | of which from the "
                  "connector | diverged (length@token) | cold = HF | second = HF |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for case in controls:
            hits = {r.length: r.num_cached_tokens for r in case.rows}
            conn = {r.length: r.connector_hit for r in case.rows}
            lines.append(f"| {case.label} | {case.gpu_seconds:.0f} | "
                         f"{' / '.join(_fmt(hits.get(n)) for n in (18, 32, 33, 48, 80))} | "
                         f"{' / '.join(_fmt(conn.get(n)) for n in (18, 32, 33, 48, 80))} | "
                         f"{_diverged(case)} | {' | '.join(hf_agreement(case, hf))} |")
        findings = control_findings(cases)
        if findings:
            lines += ["", "Findings from the control runs:", ""]
            lines += [f"- {f}" for f in findings]
    bad = [c for c in compared if c.disagreements()]
    lines += ["", "## Disagreements", ""]
    if not bad:
        lines.append("None: every measured hit and every measured (non-)corruption is what "
                     "the model and the simulator predict.")
    for key in sorted({c.explanation or "UNEXPLAINED" for c in bad}):
        group = [c for c in bad if (c.explanation or "UNEXPLAINED") == key]
        text = next((e.text for e in EXPLANATIONS if e.key == key), "Not explained.")
        lines.append(f"- **{key}** ({len(group)}): {text}")
        for c in group:
            lines.append(f"  - {c.case.label}, length {c.row.length}: "
                         f"{'; '.join(c.disagreements())}")
    lines += ["", "## Key lengths", ""]
    for case in cases:
        if case.second != "cpu":
            continue
        lines += [f"### {case.label}", "",
                  "| length | hit | cached | model hit | model corrupt | sim hit | sim corrupt "
                  "| output | CPU tier held (offloaded block indices) |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for c in by_case.get(case.name, []):
            r = c.row
            if r.length not in KEY_LENGTHS and r.equal and not c.disagreements():
                continue
            out = "same" if r.equal else f"differs at {r.first_diff}"
            lines.append(f"| {r.length} | {_fmt(r.connector_hit)} | {r.num_cached_tokens} | "
                         f"{_fmt(c.model.hit)} | {_fmt(c.model.corrupted)} | {_fmt(c.sim.hit)} "
                         f"| {_fmt(c.sim.corrupted)} | {out} | {_stored(r, case)} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _agree(cs: Sequence[Compared], who: str, what: str) -> str:
    preds = [getattr(getattr(c, who), what) for c in cs]
    n = sum(p is not None for p in preds)
    if n == 0:
        return "–"
    if what == "hit":
        ok = sum(p == c.row.connector_hit for p, c in zip(preds, cs, strict=True)
                 if p is not None)
    else:
        ok = sum(p == c.measured_corrupted for p, c in zip(preds, cs, strict=True)
                 if p is not None)
    return f"{ok}/{n}"


def render_plot(cases: Sequence[Case], compared: Sequence[Compared], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [c for c in cases if c.second == "cpu"]
    by_case: dict[str, list[Compared]] = {}
    for c in compared:
        by_case.setdefault(c.case.name, []).append(c)
    ncol = 3
    nrow = max(1, -(-len(shown) // ncol))
    fig, axes = plt.subplots(nrow, ncol, figsize=(5.2 * ncol, 3.6 * nrow), squeeze=False,
                             sharex=True, sharey=True)
    for ax, case in zip(axes.flat, shown, strict=False):
        cs = by_case.get(case.name, [])
        xs = [c.row.length for c in cs]
        ax.plot(xs, [x - 1 for x in xs], color="0.85", lw=1, label="length − 1")
        mx = [c.row.length for c in cs if c.model.hit is not None]
        ax.step(mx, [c.model.hit for c in cs if c.model.hit is not None], where="mid",
                color="tab:blue", lw=1.2, label="model")
        sx = [c.row.length for c in cs if c.sim.hit is not None]
        if sx:
            ax.plot(sx, [c.sim.hit for c in cs if c.sim.hit is not None], "+",
                    color="tab:orange", ms=5, label="sim")
        ok = [c for c in cs if c.row.equal]
        bad = [c for c in cs if not c.row.equal]
        ax.plot([c.row.length for c in ok], [c.row.connector_hit for c in ok], "o",
                mfc="none", color="tab:green", ms=4, label="measured, same output")
        ax.plot([c.row.length for c in bad], [c.row.connector_hit for c in bad], "x",
                color="tab:red", ms=6, mew=2, label="measured, output changed")
        ax.set_title(case.label, fontsize=8)
        ax.grid(alpha=0.3)
        ax.set_xticks(range(16, 81, 16))
    for ax in axes.flat[len(shown):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("prompt length (tokens)")
    for ax in axes[:, 0]:
        ax.set_ylabel("CPU hit (tokens)")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color="0.85", lw=1), Line2D([], [], color="tab:blue", lw=1.2),
               Line2D([], [], ls="", marker="+", color="tab:orange"),
               Line2D([], [], ls="", marker="o", mfc="none", color="tab:green"),
               Line2D([], [], ls="", marker="x", mew=2, color="tab:red")]
    labels = ["length − 1", "model", "sim", "measured, same output",
              "measured, output changed"]
    fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=8)
    fig.suptitle("OffloadingConnector hit of a re-sent prompt vs prompt length "
                 "(vLLM on one H200; block 16)", fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    ap = OneLineParser(prog="python -m sim.gpu.report",
                       description="GPU results vs model and simulator")
    ap.add_argument("--results", type=nonempty_path, default=RESULTS)
    ap.add_argument("--out", type=output_dir, default=None)
    ap.add_argument("--no-sim", action="store_true", help="skip python -m sim rerun")
    a = ap.parse_args(argv)
    try:
        cases = load_results(a.results)
        hf = load_hf_reference(a.results / "hf-reference.json")
        compared = compare(cases, None if a.no_sim else run_sim)
    except ResultError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = a.out or a.results
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(render_markdown(cases, compared, hf))
    render_plot(cases, compared, out / "hits.png")
    left = unexplained(compared)
    print(f"{len(compared)} comparisons, {sum(bool(c.disagreements()) for c in compared)} "
          f"disagreements, {len(left)} unexplained; wrote {out / 'report.md'}, "
          f"{out / 'hits.png'}")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
