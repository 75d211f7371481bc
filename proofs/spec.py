"""The reviewers' reference spec (``docs/spec.md``, ``docs/spec.html``), generated.

    python -m proofs --report docs/     # runs the proofs, then writes the spec next to them
    python -m proofs.spec docs/         # re-renders from the committed results (no Z3 run)

``render(code, results)`` is a pure function: ``CodeFacts`` is what the code states
(theorems, preconditions, semantics, citations, model source lines, the model's own
words and pictures for the worked examples, the committed GPU results) and ``Results``
is what running the tools produced (``report.json`` from the proofs, ``spec-facts.json``
with the seed-layout counterexample and the simulator's numbers). Nothing run-dependent
(timings, dates, paths of this machine) reaches the spec, so regenerating it from the
same inputs gives the same bytes; ``tests/test_spec.py`` checks exactly that.
"""

from __future__ import annotations

import html
import inspect
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model import citations, invariants, load_plan, lookup, maximality
from model.citations import _LINES
from model.evaluate import evaluate
from model.explain import draw_png, explain, token_line
from model.scenario import parse_scenario
from model.semantics import SEMANTICS
from proofs import abstract, theorems
from proofs.theorems import PRECONDITIONS, THEOREMS

ROOT = Path(__file__).resolve().parent.parent
FACTS = "spec-facts.json"
SEED_FILE = "tests/scenarios/seed-boundary-32.json"
GPU_RESULTS = "sim/gpu/results"
VLLM_TAG = "https://github.com/vllm-project/vllm/blob/v{version}/vllm/{path}#L{line}"
RELEASES = ("0.23.0", "0.24.0")
# alt-cache-config-block-size is left out: with a correct cache_config.mamba_block_size
# it is 0.24.0, and how stale a real value is, nobody knows
SIM_SEMANTICS = ("vllm-0.23.0", "vllm-0.24.0", "alt-round-num-hit")
SIM_REQUESTS = 5000
SIM_KEYS = ("requests", "lookups", "cpu_hit_requests", "prompt_tokens", "cpu_hit_tokens",
            "oracle_hit_tokens", "given_away_tokens", "above_oracle", "missing_loads",
            "wrong_state", "corrupted", "corrupted_direct", "corrupted_inherited",
            "corrupted_divergence")
RERUN_LENGTHS = range(17, 81)
# alt-round-num-hit's failure at vLLM-like sizes: GPU block 16, offloaded block 32, a GPU hit
# of one GPU block (a whole GPU block, but not a whole offloaded block)
ALT_SCALED: dict[str, Any] = {
    "semantics": "alt-round-num-hit", "block_size_factor": 2, "prompt_tokens": 64,
    "num_computed_tokens": 16,
    "groups": [{"kind": "full_attention", "gpu_block_size": 16, "stored": "all"},
               {"kind": "mamba", "gpu_block_size": 16, "mamba_cache_mode": "align",
                "stored": "all"}]}
GPU_LENGTHS = (31, 32, 33, 47, 48, 49, 64, 65)

# --- a tiny document model, rendered to markdown and to HTML ---------------------------


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    head: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Code:
    text: str
    lang: str = ""


@dataclass(frozen=True)
class Image:
    alt: str
    src: str


Block = Heading | Para | Bullets | Table | Code | Image


def to_markdown(blocks: Sequence[Block]) -> str:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append("#" * b.level + " " + b.text)
        elif isinstance(b, Para):
            out.append(b.text)
        elif isinstance(b, Bullets):
            out.append("\n".join(f"- {item}" for item in b.items))
        elif isinstance(b, Table):
            cells = [[c.replace("|", "\\|") for c in row] for row in (b.head, *b.rows)]
            lines = ["| " + " | ".join(cells[0]) + " |",
                     "|" + "|".join(" --- " for _ in b.head) + "|"]
            lines += ["| " + " | ".join(row) + " |" for row in cells[1:]]
            out.append("\n".join(lines))
        elif isinstance(b, Code):
            out.append(f"```{b.lang}\n{b.text.rstrip()}\n```")
        else:
            out.append(f"![{b.alt}]({b.src})")
    return "\n\n".join(out) + "\n"


_INLINE = re.compile(r"`([^`]+)`|\[([^\]]+)\]\(([^)\s]+)\)|\*\*([^*]+)\*\*|\*([^*\s][^*]*)\*")


def _inline(text: str) -> str:
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[pos:m.start()]))
        if m.group(1) is not None:
            out.append(f"<code>{html.escape(m.group(1))}</code>")
        elif m.group(2) is not None:
            href = html.escape(m.group(3), quote=True)
            out.append(f'<a href="{href}">{_inline(m.group(2))}</a>')
        elif m.group(4) is not None:
            out.append(f"<strong>{_inline(m.group(4))}</strong>")
        else:
            out.append(f"<em>{_inline(m.group(5))}</em>")
        pos = m.end()
    out.append(html.escape(text[pos:]))
    return "".join(out)


def slug(text: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to dashes."""
    plain = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", text).lower()
    return re.sub(r"[^a-z0-9 _-]", "", plain).replace(" ", "-")


_CSS = ("body{font-family:sans-serif;max-width:70em;margin:2em auto;padding:0 1em;"
        "line-height:1.45}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #bbb;padding:.25em .5em;vertical-align:top}"
        "th{background:#eee}pre{background:#f6f6f6;padding:.6em;overflow-x:auto}"
        "code{background:#f2f2f2}img{max-width:100%}")


def to_html(blocks: Sequence[Block], title: str) -> str:
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"]
    for b in blocks:
        if isinstance(b, Heading):
            out.append(f'<h{b.level} id="{slug(b.text)}">{_inline(b.text)}</h{b.level}>')
        elif isinstance(b, Para):
            out.append(f"<p>{_inline(b.text)}</p>")
        elif isinstance(b, Bullets):
            out.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            head = "".join(f"<th>{_inline(c)}</th>" for c in b.head)
            rows = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>"
                           for r in b.rows)
            out.append(f"<table><tr>{head}</tr>{rows}</table>")
        elif isinstance(b, Code):
            out.append(f"<pre><code>{html.escape(b.text.rstrip())}</code></pre>")
        else:
            out.append(f'<p><img src="{html.escape(b.src, quote=True)}" '
                       f'alt="{html.escape(b.alt, quote=True)}"></p>')
    out.append("</body></html>")
    return "\n".join(out) + "\n"


# --- the inputs -------------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    """One scenario under one semantics, as ``python -m model lookup --explain`` shows it."""

    scenario: dict[str, Any]
    semantics: str
    hit: int | None
    violations: tuple[str, ...]
    words: str  # model.explain.explain
    picture: tuple[str, ...]  # model.explain.token_line
    state_at: int | None  # the Mamba state position the load brings (None: no load)
    refused: str | None  # why a real engine would not produce this request (or None)


def example(scenario: dict[str, Any], semantics: str | None = None) -> Example:
    s = parse_scenario(scenario)
    o = evaluate(s, semantics, enforce=False)
    state = next((ld.state_position for ld in o.loads if ld.state_position is not None), None)
    real = evaluate(s, semantics)
    return Example(scenario, o.semantics, o.hit_tokens,
                   tuple(v.invariant for v in o.violations), explain(s, o),
                   tuple(token_line(s, o)), state, real.refused)


@dataclass(frozen=True)
class CodeFacts:
    """What the code says (cheap to compute; no solver, no simulator)."""

    anchors: dict[str, str]  # name -> relative link to the model/proofs source line
    seed: dict[str, Any]  # the seed's scenario file (one Mamba align group, block 16)
    examples: dict[str, Example]  # "seed@vllm-0.23.0", ... and every counterexample
    gpu: dict[str, dict[int, tuple[int | None, bool]]]  # case -> length -> (hit, same output)


@dataclass(frozen=True)
class Results:
    """What running the tools produced (read back from the committed files)."""

    rows: tuple[dict[str, Any], ...]  # report.json's results
    facts: dict[str, Any] = field(default_factory=dict)  # spec-facts.json

    def row(self, theorem: str, semantics: str) -> dict[str, Any] | None:
        return next((r for r in self.rows
                     if r["theorem"] == theorem and r["semantics"] == semantics), None)


def _anchor(obj: Any) -> str:
    src = inspect.getsourcefile(obj)
    assert src is not None
    rel = Path(src).resolve().relative_to(ROOT).as_posix()
    return f"../{rel}#L{inspect.getsourcelines(obj)[1]}"


ANCHORED: dict[str, Any] = {
    "lookup": lookup.lookup,
    "get_num_new_matched_tokens": lookup.get_num_new_matched_tokens,
    "load_plan": load_plan.load_plan,
    "group_load": load_plan._group_load,
    "num_skipped_tokens": load_plan.num_skipped_tokens,
    "no-partial-state": invariants.no_partial_state,
    "loads-stored-only": invariants.loads_stored_only,
    "leaves-last-token": invariants.leaves_last_token,
    "whole-blocks": invariants.whole_blocks,
    "maximality": maximality.is_valid_hit,
    "termination": lookup.lookup,
    "violates_no_partial_state": theorems.violates_no_partial_state,
    "violates_loads_stored_only": theorems.violates_loads_stored_only,
    "violates_leaves_last_token": theorems.violates_leaves_last_token,
    "violates_whole_blocks": theorems.violates_whole_blocks,
    "valid_hit": theorems.valid_hit,
    "PRECONDITIONS": theorems.precondition_formula,
    "z3:no-partial-state": theorems.violates_no_partial_state,
    "z3:loads-stored-only": theorems.violates_loads_stored_only,
    "z3:leaves-last-token": theorems.violates_leaves_last_token,
    "z3:whole-blocks": theorems.violates_whole_blocks,
    "z3:maximality": theorems.valid_hit,
    "z3:termination": abstract.obligations,
}


def _scenarios_of(results: Results) -> list[dict[str, Any]]:
    out = []
    for r in results.rows:
        if r.get("counterexample"):
            out.append(r["counterexample"])
        out += [p["counterexample_when_dropped"] for p in r["preconditions"]
                if p.get("counterexample_when_dropped")]
    for key in ("seed_counterexample", "alt_round_num_hit_counterexample"):
        if results.facts.get(key):
            out.append(results.facts[key])
    return out


def _key(scenario: dict[str, Any], semantics: str | None = None) -> str:
    return json.dumps([scenario, semantics], sort_keys=True)


def _gpu_case(path: Path) -> dict[int, tuple[int | None, bool]]:
    data = json.loads(path.read_text())
    return {r["length"]: (r.get("connector_hit"), bool(r["equal"])) for r in data["lengths"]}


def gather_code_facts(results: Results, root: Path = ROOT) -> CodeFacts:
    seed = json.loads((root / SEED_FILE).read_text())
    examples: dict[str, Example] = {}
    for sem in RELEASES:
        examples[f"seed@vllm-{sem}"] = example(seed, f"vllm-{sem}")
    for name in ("alt-round-num-hit", "vllm-0.24.0"):
        examples[f"scaled@{name}"] = example(ALT_SCALED, name)
    for scen in _scenarios_of(results):
        examples[_key(scen)] = example(scen)
        examples[_key(scen, "vllm-0.24.0")] = example(scen, "vllm-0.24.0")
    gpu = {}
    for name in ("vllm-0.23.0-mamba-stock", "vllm-0.24.0-mamba-stock",
                 "vllm-0.24.0-mamba-fix-disabled", "vllm-0.23.0-hybrid-stock",
                 "vllm-0.24.0-hybrid-stock", "vllm-0.24.0-mamba-stock-all"):
        path = root / GPU_RESULTS / f"{name}.json"
        if path.exists():
            gpu[name] = _gpu_case(path)
    anchors = {name: _anchor(obj) for name, obj in ANCHORED.items()}
    return CodeFacts(anchors, seed, examples, gpu)


def load_results(directory: Path) -> Results:
    report = json.loads((directory / "report.json").read_text())
    facts_path = directory / FACTS
    facts = json.loads(facts_path.read_text()) if facts_path.exists() else {}
    return Results(tuple(report["results"]), facts)


# --- the expensive facts: one Z3 search and the simulator (spec-facts.json) --------------


def collect_facts() -> dict[str, Any]:
    """Run what the spec quotes besides the proofs (about ten seconds)."""
    from model.semantics import get_semantics
    from proofs.check import counterexample
    from sim.config import EngineConfig
    from sim.rerun import rerun_one
    from sim.runner import RunSpec, run_side_by_side

    thm = THEOREMS["no-partial-state"]
    v = counterexample(thm, get_semantics("vllm-0.23.0"), thm.preconditions, 120_000,
                       sizes=[((16, 16, 16), 1)])
    # the review alternative on requests a real engine produces (GPU hit whole GPU blocks)
    alt = counterexample(thm, get_semantics("alt-round-num-hit"),
                         thm.preconditions + theorems.RUNTIME, 120_000)
    sim: dict[str, Any] = {}
    for label, attention in (("chat", 0), ("chat-hybrid", 1)):
        config = EngineConfig(attention_groups=attention)
        spec = RunSpec("chat", SIM_REQUESTS, 0, SIM_SEMANTICS, config)
        summaries = run_side_by_side(spec, 2, show_progress=False)
        sim[label] = {
            "workload": "chat", "requests": SIM_REQUESTS, "seed": 0,
            "attention_groups": attention, "block_size": config.block_size,
            "semantics": {s.semantics: {k: getattr(s, k) for k in SIM_KEYS}
                          | {"no_partial_state": s.violations["no-partial-state"]}
                          for s in summaries},
        }
    rerun = {}
    for sem in ("vllm-0.23.0", "vllm-0.24.0"):
        rows = [rerun_one(n, sem, EngineConfig()) for n in RERUN_LENGTHS]
        rerun[sem] = [[r.length, r.hit_tokens, r.corrupted] for r in rows]
    return {"seed_counterexample": v.counterexample if v.status == "COUNTEREXAMPLE" else None,
            "alt_round_num_hit_counterexample": (alt.counterexample
                                                 if alt.status == "COUNTEREXAMPLE" else None),
            "sim": sim, "rerun": rerun}


# --- the spec ---------------------------------------------------------------------------

TITLE = "KV-offloading lookup for Mamba align mode: reviewers' reference spec"


def _vllm(version: str, key: str, short: bool = False) -> str:
    """A link to the release's source line: ``scheduler.py:470`` (``:470`` if short)."""
    table = _LINES.get(version, {})
    if key not in table:
        return "–"
    path, line = table[key]
    url = VLLM_TAG.format(version=version, path=path, line=line)
    label = f":{line}" if short else f"{path.rsplit('/', 1)[-1]}:{line}"
    return f"[`{label}`]({url})"


def _both(key: str) -> str:
    """``scheduler.py:467`` (0.24.0) with 0.23.0's line beside it where the step exists."""
    if key not in _LINES["0.23.0"]:
        return f"{_vllm('0.24.0', key)} (0.24.0 only)"
    return f"{_vllm('0.24.0', key)} (0.23.0: {_vllm('0.23.0', key, short=True)})"


def _link(code: CodeFacts, name: str, label: str | None = None) -> str:
    target = code.anchors[name]
    return f"[`{label or target.removeprefix('../').split('#')[0]}`]({target})"


def _status(r: dict[str, Any] | None) -> str:
    if r is None:
        return "not run"
    word = {"PROVED": "proved", "COUNTEREXAMPLE": "counterexample", "UNKNOWN": "unknown"}
    s = word.get(r["status"], r["status"])
    return s if r["matches"] else f"**{s} (expected {r['expected']}: MISMATCH)**"


def _cex_file(theorem: str, semantics: str, without: str | None = None) -> str:
    base = f"{theorem}--{semantics}" + (f"--without-{without}" if without else "")
    return base


def _scenario_words(s: dict[str, Any]) -> str:
    """A one-line description of a scenario file."""
    parts = []
    for i, g in enumerate(s["groups"]):
        kind = {"full_attention": "full attention", "sliding_window":
                f"sliding window {g.get('sliding_window')}", "mamba":
                f"Mamba {g.get('mamba_cache_mode')}"}[g["kind"]]
        stored = g["stored"]
        held = "all stored" if stored == "all" else f"stored {stored}"
        parts.append(f"g{i} {kind}, GPU block {g['gpu_block_size']}, {held}")
    extra = ""
    if s.get("mamba_block_size") is not None:
        extra = f", `cache_config.mamba_block_size` = {s['mamba_block_size']}"
    return (f"prompt {s['prompt_tokens']} tokens, GPU hit {s['num_computed_tokens']}, "
            f"block_size_factor {s['block_size_factor']}{extra}; " + "; ".join(parts))


# Sections. Each returns blocks; the text is plain words plus formulas in code spans.


def _layout_words() -> str:
    return ("every layout the release accepts: any number of groups of each kind "
            "(full attention, sliding window, Mamba; none of a kind included, so a pure "
            "Mamba model, full attention + Mamba hybrids and several Mamba groups), each "
            "with its own block size, EAGLE on any of them; the loop is proved for any "
            "number of groups (`proofs/abstract.py`), the per-group lemmas and the final "
            "step for a group of each kind in an unknown layout (`proofs/layers.py`). "
            "Everything else (block sizes, `block_size_factor`, window, cache mode, "
            "prompt length, GPU hit, store content, request flags) is symbolic and "
            "unbounded")


def _guarantee_words(results: Results) -> str:
    """What the proofs say about no-partial-state on 0.24.0, from the report."""
    thm = THEOREMS["no-partial-state"]
    r = results.row("no-partial-state", "vllm-0.24.0")
    if r is None or r["status"] != "PROVED":
        return (f"The guarantee 0.24.0 is meant to give, `no-partial-state`, is "
                f"**{_status(r)}** in this report.")
    pre = [p for p in thm.preconditions if not PRECONDITIONS[p].runtime]
    needed = [q["name"] for q in r["preconditions"] if q.get("necessary")]
    cond = "; ".join(PRECONDITIONS[p].words for p in pre)
    shown = ("each of them is shown necessary by a counterexample when it is dropped"
             if set(pre) <= set(needed) else
             f"shown necessary by a counterexample: {', '.join(needed) or 'none'}")
    return ("The guarantee 0.24.0 gives, `no-partial-state` (a restored Mamba state is the "
            "one saved where the hit ends), is proved below for every block size, prompt "
            "length, GPU hit and store content, **provided**: " + cond + f" ({shown}; see "
            "[Where 0.24.0's guarantee holds](#where-0240s-guarantee-holds)). Scope: "
            + _layout_words() + ".")


def _intro(code: CodeFacts, results: Results) -> list[Block]:
    old, new = code.examples["seed@vllm-0.23.0"], code.examples["seed@vllm-0.24.0"]
    T = code.seed["prompt_tokens"]
    B = code.seed["groups"][0]["gpu_block_size"] * code.seed["block_size_factor"]
    return [
        Heading(1, TITLE),
        Para("Generated by `python -m proofs --report docs/` (or `python -m proofs.spec "
             "docs/` from the committed results) from `model/`, `proofs/`, "
             "`docs/report.json` and `docs/spec-facts.json`. Do not edit by hand: "
             "`tests/test_spec.py` fails when this file differs from what the code "
             "produces. Model references link to the line of this repository's reference "
             "model that implements the step."),
        Para(_legend()),
        Heading(2, "The answer in brief"),
        Para("vLLM's KV-offloading connector decides, for a new request, how many prompt "
             "tokens beyond the GPU prefix-cache hit it loads from the offload store (the "
             f"CPU tier): `OffloadingConnectorScheduler._lookup` ({_both('lookup')}). For a "
             "Mamba layer the store holds no per-token KV entries but **one recurrent state "
             "per offloaded block**: block `i` holds the state after the first `(i+1)·B` "
             "tokens (*the state at token* `(i+1)·B` below). A hit "
             "of `h` tokens restores the state of the last block it loads, so the hit must "
             "end exactly on a block boundary, or the engine continues from a state that "
             "belongs to another position."),
        Para(f"A {T}-token prompt, one Mamba group in `mamba_cache_mode=\"align\"`, block "
             f"{B}, every block stored (`{SEED_FILE}`):"),
        Bullets((
            f"**vLLM 0.23.0 answers {old.hit} tokens.** With a sliding-window or Mamba "
            "group the lookup leaves the last prompt token out, to be recomputed, so the hit "
            f"window ends at `{T} - 1 = {T - 1}` ({_both('leave_last_token')}); the Mamba group is "
            "looked up like a sliding window of one block, which only asks that the block "
            f"holding the window's last token is stored. It is, so the hit is {old.hit}. "
            f"The load then brings that block, with the state at token {old.state_at}; "
            f"the engine takes it as the state at token {old.hit} and computes the last "
            f"prompt token (number {old.hit}, counting from 0) on top of it, so that token "
            "enters the recurrent state twice, and the output is wrong.",
            f"**vLLM 0.24.0 answers {new.hit} tokens.** PR #44599 rounds the window's end "
            f"down to a multiple of the Mamba offloaded block size before any group is "
            f"looked up: `⌊{T - 1} / {B}⌋·{B} = {(T - 1) // B * B}` "
            f"({_vllm('0.24.0', 'mamba_round_down')}). The load brings block 0, with the "
            f"state at token {new.state_at}, exactly where the hit ends; tokens "
            f"{new.hit}-{T - 1} are computed as usual.",
            "The real schedulers give the same answers (`sim/crosscheck` runs this case "
            "against vLLM 0.23.0 and 0.24.0 every time), and so does the real engine on a "
            f"GPU, where 0.23.0's {old.hit}-token hit changes the generated text "
            "([the cost section](#what-the-fix-costs-in-hits)).",
        )),
        Para(_guarantee_words(results)),
    ]


def _inputs() -> list[Block]:
    rows = (
        ("`prompt_tokens`", "`T`", "the request's prompt length "
         "(`len(request.prompt_token_ids)`)"),
        ("`num_computed_tokens`", "`c`", "the GPU prefix-cache hit passed to "
         "`get_num_new_matched_tokens`; a multiple of every GPU block size and `< T` "
         "(a real engine cannot produce anything else)"),
        ("`block_size_factor`", "`f`", "offloaded block = `f` GPU blocks (the connector's "
         "`block_size` extra config divided by the GPU block size)"),
        ("`groups[g].kind`", "", "the KV-cache group's spec: `full_attention` "
         "(`FullAttentionSpec`), `sliding_window` (`SlidingWindowSpec`), `mamba` "
         "(`MambaSpec`)"),
        ("`groups[g].gpu_block_size`", "`b_g`", "the group's `kv_cache_spec.block_size`; "
         "its offloaded block size is `B_g = b_g·f`"),
        ("`groups[g].sliding_window`", "`w_g`", "window in tokens (sliding-window groups)"),
        ("`groups[g].mamba_cache_mode`", "", "`none`, `align` or `all` (Mamba groups)"),
        ("`groups[g].eagle`", "", "the group is an EAGLE/MTP draft group "
         "(`KVCacheGroupSpec.is_eagle_group`; read by 0.24.0 only)"),
        ("`groups[g].stored`", "`S_g`", "offloaded block indices the store holds "
         "(`\"all\"`: every one); block `i` covers tokens `[i·B_g, (i+1)·B_g)`"),
        ("`groups[g].deferred`", "", "blocks whose `OffloadingManager.lookup` answers "
         "`None` (an asynchronous store has not decided yet)"),
        ("`groups[g].being_loaded`", "", "blocks another request is loading "
         "(`_blocks_being_loaded`, tracked only with prefix caching on)"),
        ("`enable_prefix_caching`", "", "`cache_config.enable_prefix_caching` "
         "(default true)"),
        ("`skip_reading_prefix_cache`", "", "the request's sampling parameter "
         "(0.24.0 answers 0)"),
        ("`in_flight_transfers`", "", "the request still has transfers in flight "
         "(0.24.0 defers it)"),
        ("`mamba_block_size`", "", "`cache_config.mamba_block_size`; read only by the "
         "review alternative `alt-cache-config-block-size`"),
        ("`hash_block_size`", "", "`cache_config.hash_block_size` override"),
        ("`description`", "", "free text; not read by the model"),
        ("`expect`", "", "`{\"hit_tokens\": N or null, \"violations\": [names]}`: "
         "`python -m model lookup` exits 1 when the result differs"),
    )
    kinds = (
        "`full_attention`: every token's KV entries are needed, so the hit is the longest "
        "run of stored blocks from the GPU hit on (a prefix lookup).",
        "`sliding_window`: only the last `w_g` tokens are needed, so the hit may end "
        "after any run of `W_g = ⌈w_g / B_g⌉` stored blocks (a window lookup, scanning "
        "from the end).",
        "`mamba`: one recurrent state per request. The offloading scheduler treats it as "
        "a window of one block (`W_g = 1`); offloaded block `i` carries the state after "
        "token `(i+1)·B_g`. `align` saves states only at block boundaries of the "
        "scheduled chunks; `all` saves one at every block boundary (for a 32-token prompt the GPU "
        "run's CPU tier holds both Mamba blocks, against block 1 alone in `align`), but "
        "0.23.0 and 0.24.0 round the hit for `align` groups only "
        "(`resolve_mamba_align_size` reads only those); `none` restores no state.",
    )
    return [
        Heading(2, "The inputs"),
        Para("A *scenario* (a JSON file; `python -m model lookup FILE --explain` runs it) "
             "fixes one lookup: the engine's KV-cache groups, the request, and what the "
             "store holds. Its fields, with the symbols the formulas below use:"),
        Table(("field", "symbol", "meaning"), rows),
        Para("Group kinds:"),
        Bullets(kinds),
        Para("Semantics (which code the model follows):"),
        Table(("semantics", "what"), tuple((f"`{s.name}`", s.summary)
                                            for s in SEMANTICS.values())),
    ]


def _lookup_section(code: CodeFacts) -> list[Block]:
    steps = (
        f"Start ({_both('leave_last_token')}): `M = T`, or `M = T - 1` when any group "
        "has a window (sliding-window or Mamba groups): then the hit leaves the last prompt "
        "token out, to be recomputed.",
        f"0.24.0 only ({_vllm('0.24.0', 'mamba_round_down')}): if some Mamba group is in "
        "`align` mode, `M = ⌊M / A⌋·A` with `A` the offloaded block size of the align "
        f"groups, found by scanning the KV-cache groups ({_vllm('0.24.0', 'mamba_align_size')}; "
        f"all align groups must agree, {_vllm('0.24.0', 'mamba_align_assert')}).",
        f"Order ({_both('lookup_groups')}): full-attention groups first, then windowed "
        "groups by window size, largest first.",
        f"Each group's turn ({_both('block_cap')}): `M = min(M, K_g·B_g)` with "
        "`K_g = ⌊T / B_g⌋` keys; if `M - c < B_g` the answer is 0. It queries the blocks "
        f"`[⌊c / B_g⌋, ⌈M / B_g⌉)` ({_both('start_block')}); a prefix lookup counts stored "
        f"blocks from the start ({_both('prefix_lookup')}), a window lookup finds the last "
        f"run of `W_g` stored blocks ({_both('sliding_window_lookup')}). No hit: 0. "
        f"Otherwise `M = min(M, B_g·(⌊c / B_g⌋ + n))` for the `n` blocks found "
        f"({_both('new_hit')}), and `M - c < B_g` again answers 0.",
        f"0.24.0 only: an EAGLE/MTP draft group ({_vllm('0.24.0', 'eagle_verified')}) with a "
        f"window asks one block more ({_vllm('0.24.0', 'eagle_query')}) and drops the last "
        f"block of its hit again ({_vllm('0.24.0', 'eagle_pop')}).",
        f"Convergence ({_both('tightened')}): when a turn lowers the hit, the groups "
        "whose answer may depend on it are asked again (all groups after a deferred "
        "answer, else the windowed groups), until a pass changes nothing.",
        f"Result: `h = M - c`; `None` (try later) if the store deferred an answer "
        f"({_both('deferred')}) or a hit block is being loaded ({_both('being_loaded')}).",
        "`alt-round-num-hit` only: after the loop `h = ⌊h / A⌋·A` (the review "
        "alternative).",
    )
    plan = (
        f"For each group (`update_state_after_alloc`, {_both('after_alloc')}), the engine "
        "has allocated GPU blocks for `c + h` tokens. Blocks outside a sliding window and "
        "every Mamba block except the one holding the running state are null "
        f"placeholders ({_both('sw_skipped')}; {_both('mamba_skipped')}). The load starts "
        f"at the first GPU block that is neither null nor already cached "
        f"({_both('first_pending')}) and reads offloaded blocks up to "
        f"`⌈(c + h) / B_g⌉` ({_both('keys_to_load')}).",
        "So a Mamba group loads exactly one offloaded block, the one that contains token "
        "`c + h - 1`: block `⌈(c + h) / B_m⌉ - 1`, holding the state after token "
        "`⌈(c + h) / B_m⌉·B_m`. That equals `c + h` **only if `B_m` divides `c + h`**.",
    )
    return [
        Heading(2, "The lookup"),
        Para(f"Modelled by {_link(code, 'lookup', 'model/lookup.py: lookup')} and "
             f"{_link(code, 'get_num_new_matched_tokens', 'get_num_new_matched_tokens')}. "
             "Symbols: `M` is `max_hit_size_tokens` (the hit window's end, in tokens from "
             "the prompt start), `h` is `num_hit_tokens` (tokens beyond the GPU hit `c`), "
             "`B_g` the offloaded block size of group `g`."),
        Bullets(steps),
        Heading(2, "The load plan"),
        Para(f"Modelled by {_link(code, 'load_plan', 'model/load_plan.py: load_plan')}."),
        Bullets(plan),
    ]


INVARIANT_WORDS = {
    "no-partial-state": ("I1", "A restored Mamba state (mode `align` or `all`) was saved "
                         "exactly where the hit ends.",
                         "for every Mamba align/all group `m` with a non-empty load: "
                         "`⌈(c + h) / B_m⌉·B_m = c + h`",
                         ("mamba_round_down", "keys_to_load", "mamba_skipped")),
    "loads-stored-only": ("I2", "The load reads only blocks the store holds (vLLM "
                          "asserts otherwise when preparing the load).",
                          "every block `i` a group `g` loads has `i ∈ S_g`",
                          ("prefix_lookup", "sliding_window_lookup", "first_pending",
                           "keys_to_load")),
    "leaves-last-token": ("I3", "With sliding-window or Mamba groups the last prompt "
                          "token is recomputed.",
                          "`h > 0` and a windowed group exists ⇒ `c + h ≤ T - 1`",
                          ("leave_last_token",)),
    "whole-blocks": ("I4", "A non-zero hit covers at least one offloaded block of every "
                     "group.", "`h > 0` ⇒ `h ≥ B_g` for every group `g`",
                     ("less_than_block_pre", "new_hit")),
    "maximality": ("", "No larger hit than the one returned would keep I1-I4 for the "
                   "same store (a smaller one is safe but gives hits away).",
                   "no `h' > h` is *valid*: I1-I4 hold for `h'`, the request has the keys, "
                   "nothing it loads is deferred or being loaded, and the load fits the "
                   "window assertion", ("lookup", "mamba_round_down")),
    "termination": ("", "The convergence loop stops.",
                    "every pass that schedules another lowers `M`, and `M - c ≥ 1` while "
                    "the loop runs", ("lookup_loop", "tightened", "rerun_all", "rerun_sw")),
}


def _invariants(code: CodeFacts) -> list[Block]:
    rows = []
    for name, (num, words, formula, keys) in INVARIANT_WORDS.items():
        vllm = "; ".join(_both(k) for k in keys)
        rows.append((f"{num} `{name}`".strip(), words, formula,
                     _link(code, name, name), vllm))
    return [
        Heading(2, "The contract"),
        Para("Each invariant is checked on every model run "
             f"({_link(code, 'no-partial-state', 'model/invariants.py')}) and stated once "
             "more in Z3 (`proofs/theorems.py`); a *theorem* says the property holds for "
             "every configuration, prompt, GPU hit and store content, all sizes unbounded, "
             "under its preconditions."),
        Table(("property", "in words", "formula", "model", "vLLM code it constrains"),
              tuple(rows)),
    ]


def _results_table(code: CodeFacts, results: Results) -> list[Block]:
    sems = list(SEMANTICS)
    head = ("theorem", "preconditions", *(f"`{s}`" for s in sems))
    rows = []
    for name, thm in THEOREMS.items():
        pre = ", ".join(f"`{p}`" for p in thm.preconditions) or "none"
        cells = []
        for s in sems:
            r = results.row(name, s)
            cell = _status(r)
            if r is not None and r.get("counterexample"):
                cell += f" ([picture]({_cex_file(name, s)}.png))"
            cells.append(cell)
        rows.append((f"`{name}`", pre, *cells))
    pre_rows = []
    row24 = {name: results.row(name, "vllm-0.24.0") for name in THEOREMS}
    for p, pc in PRECONDITIONS.items():
        used = [n for n, t in THEOREMS.items() if p in t.preconditions]
        shown = []
        for n in used:
            r = row24[n]
            entry = next((q for q in (r or {}).get("preconditions", []) if q["name"] == p),
                         None)
            if pc.scope:
                shown.append(f"`{n}` (scope: bounds what the proof covers, not claimed "
                             "necessary)")
            elif entry and entry.get("necessary"):
                shown.append(f"`{n}` ([counterexample without it]"
                             f"({_cex_file(n, 'vllm-0.24.0', p)}.png))")
            elif entry and entry.get("necessary") is False:
                shown.append(f"`{n}` (not shown necessary)")
            else:
                shown.append(f"`{n}`")
        pre_rows.append((f"`{p}`", pc.words, pc.in_vllm, ", ".join(shown) or "–"))
    return [
        Heading(2, "Results: every theorem on every semantics"),
        Para("From `docs/report.json` (`python -m proofs`). *proved*: no configuration "
             "satisfying the start-up checks and the preconditions violates it; "
             "*counterexample*: the smallest violating scenario, replayed through the "
             "model, pictured in the linked PNG and saved under `counterexamples/`. "
             "Expected outcomes are declared in `proofs/theorems.py`; a mismatch is bold. "
             f"Z3 statements: {_link(code, 'violates_no_partial_state', 'proofs/theorems.py')}"
             f"; model twins: {_link(code, 'maximality', 'model/maximality.py')}."),
        Table(head, tuple(rows)),
        Para("Every result, with the code it checks: the model's checker and the Z3 "
             "statement in this repository, and the vLLM lines of the semantics' release "
             "(the review alternatives follow 0.24.0's code)."),
        Table(("theorem", "semantics", "result", "expected", "preconditions", "model / Z3",
               "vLLM lines"), tuple(_detail_rows(code, results))),
        Heading(3, "Preconditions"),
        Para("For `vllm-0.24.0` every precondition of a proved theorem is dropped in turn; "
             "a counterexample then shows it necessary. A *scope* precondition is not a "
             "claim about vLLM: it bounds what the proof covers (beyond it Z3 gives no "
             "answer). The *in vLLM* column says whether a real vLLM configuration can "
             "violate it "
             f"({_link(code, 'PRECONDITIONS', 'proofs/theorems.py: PRECONDITIONS')})."),
        Table(("precondition", "meaning", "in vLLM", "needed by (0.24.0)"), tuple(pre_rows)),
    ]


def _detail_rows(code: CodeFacts, results: Results) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for name, thm in THEOREMS.items():
        pre = ", ".join(f"`{p}`" for p in thm.preconditions) or "none"
        links = f"{_link(code, name, 'model')}, {_link(code, 'z3:' + name, 'Z3')}"
        for sem in SEMANTICS.values():
            r = results.row(name, sem.name)
            if r is None:
                continue
            keys = [k for k in INVARIANT_WORDS[name][3] if k in _LINES[sem.base_version]]
            vllm = ", ".join(_vllm(sem.base_version, k) for k in keys)
            rows.append((f"`{name}`", f"`{sem.name}`", _status(r), str(r["expected"]), pre, links,
                         f"{sem.base_version}: {vllm}"))
    return rows


def _example_blocks(ex: Example, picture: str | None = None) -> list[Block]:
    out: list[Block] = []
    if picture:
        out.append(Image(f"{ex.semantics}: hit {ex.hit}", picture))
    out.append(Code(ex.words))
    return out


def _story(code: CodeFacts, results: Results) -> list[Block]:
    out: list[Block] = [Heading(2, "The PR #44599 story, with this project's artefacts")]
    old, new = code.examples["seed@vllm-0.23.0"], code.examples["seed@vllm-0.24.0"]
    T = code.seed["prompt_tokens"]
    B = code.seed["groups"][0]["gpu_block_size"] * code.seed["block_size_factor"]
    out += [
        Heading(3, f"The bug: a {T}-token prompt, Mamba block {B}"),
        Para(f"The seed scenario (`{SEED_FILE}`: {_scenario_words(code.seed)}), exactly "
             "as `python -m model lookup --explain` prints it. On 0.23.0:"),
        *_example_blocks(old),
        Para(f"Step by step: `M = {T} - 1 = {T - 1}` (the Mamba group counts as a window "
             f"group, so the last token is recomputed); the Mamba group's window lookup asks "
             f"blocks `[0, ⌈{T - 1}/{B}⌉) = [0, {-(-(T - 1) // B)})`, finds its one-block "
             f"window at the last one and keeps `M = {T - 1}`; the hit is {old.hit}. The "
             f"load plan needs the block containing token {T - 2} (the last hit token, "
             f"counting from 0), which carries the state at token {old.state_at}. On "
             f"0.24.0 the window is first rounded down, "
             f"`M = ⌊{T - 1}/{B}⌋·{B} = {(T - 1) // B * B}`:"),
        *_example_blocks(new),
    ]
    seed_cex = results.facts.get("seed_counterexample")
    if seed_cex:
        ex, fixed = code.examples[_key(seed_cex)], code.examples[_key(seed_cex, "vllm-0.24.0")]
        out += [
            Para("The Z3 search finds the same thing on its own. Asked for the smallest "
                 "prompt that breaks `no-partial-state` on `vllm-0.23.0` with every block "
                 f"size fixed to {B} (`proofs.check.counterexample(..., sizes=[(({B}, {B}, "
                 f"{B}), 1)])`; the proofs' group template is full attention, sliding "
                 f"window, Mamba), it returns: {_scenario_words(seed_cex)}. Hit {ex.hit}, "
                 f"state at token {ex.state_at} (triangle: the restored state, red when it "
                 "is not where the hit ends):"),
            Image("no-partial-state fails on vllm-0.23.0", "spec-seed-vllm-0.23.0.png"),
            Code("\n".join(ex.picture)),
            Para(f"The same scenario on `vllm-0.24.0`: hit {fixed.hit}, state at token "
                 f"{fixed.state_at}, no violation."),
            Image("the same scenario on vllm-0.24.0", "spec-seed-vllm-0.24.0.png"),
            Code("\n".join(fixed.picture)),
        ]
    r = results.row("no-partial-state", "vllm-0.23.0")
    if r and r.get("counterexample"):
        ex = code.examples[_key(r["counterexample"])]
        out += [Para("Over all small block sizes the smallest counterexample is smaller still "
                     f"({_scenario_words(r['counterexample'])}): hit {ex.hit}, state at "
                     f"token {ex.state_at}."),
                Image("minimal counterexample",
                      f"{_cex_file('no-partial-state', 'vllm-0.23.0')}.png")]
    out += [
        Heading(3, "Why not round `num_hit_tokens` instead"),
        Para("The review first considered rounding the result, `h = num_hit_tokens`, down "
             "to the Mamba block size after the loop (semantics `alt-round-num-hit`). Two "
             "things go wrong. `h` counts tokens beyond the GPU hit `c`, and `c` is whole "
             "GPU blocks but not necessarily whole offloaded blocks (`block_size_factor` > "
             "1), so `c + ⌊h / A⌋·A` need not be a boundary. And rounding after the loop "
             "moves the end of the hit below where the loop confirmed the stored blocks: "
             "a window group (sliding window, or Mamba with its one-block window) checked "
             "the blocks ending at the old end, not the ones ending at the new end, so the "
             "load may read blocks the store does not hold. Rounding "
             "`max_hit_size_tokens` before the loop has neither problem: `M` is an absolute "
             "position, and every group is then looked up against the rounded end."),
    ]
    alt = results.facts.get("alt_round_num_hit_counterexample")
    if alt:
        ex = code.examples[_key(alt)]
        out += [Para("A counterexample with a GPU hit a real engine produces (whole GPU "
                     f"blocks; Z3 with the `gpu-hit-*` preconditions added): "
                     f"{_scenario_words(alt)}. Hit {ex.hit}, state at token {ex.state_at}:"),
                Image("no-partial-state fails on alt-round-num-hit", "spec-alt-round-num-hit.png"),
                Code(ex.words)]
    alt, fixed = code.examples["scaled@alt-round-num-hit"], code.examples["scaled@vllm-0.24.0"]
    c, T = ALT_SCALED["num_computed_tokens"], ALT_SCALED["prompt_tokens"]
    A = ALT_SCALED["groups"][1]["gpu_block_size"] * ALT_SCALED["block_size_factor"]
    out.append(Para(
        f"The same at vLLM-like sizes ({_scenario_words(ALT_SCALED)}): `alt-round-num-hit` "
        f"answers {alt.hit}, so the hit ends at token {c + (alt.hit or 0)}, but the Mamba "
        f"load brings the state after token {alt.state_at}; violated: "
        f"{', '.join(f'`{v}`' for v in alt.violations) or 'none'}. 0.24.0 answers "
        f"{fixed.hit}: its window end `⌊{T - 1}/{A}⌋·{A} = {(T - 1) // A * A}` is less than "
        f"one offloaded block past the GPU hit {c}, so there is nothing it can load "
        "correctly."))
    out += _alternative(code, results, "alt-round-num-hit")
    out += [
        Heading(3, "Why the size comes from the KV-cache groups"),
        Para("The review also considered `cache_config.mamba_block_size` as the alignment "
             "size (semantics `alt-cache-config-block-size`; scenario field "
             "`mamba_block_size`). That field is not the offloaded block size: the PR "
             "author found it not updated on a real deployment, and it knows nothing of "
             "`block_size_factor`. Rounding to a size that is not a multiple of the Mamba "
             "offloaded block size does not end the hit on a boundary. 0.24.0 scans the "
             "KV-cache groups for the align groups' offloaded block size instead "
             f"({_vllm('0.24.0', 'mamba_align_size')})."),
    ]
    out += _alternative(code, results, "alt-cache-config-block-size")
    out += _cost(code, results)
    return out


def _alternative(code: CodeFacts, results: Results, sem: str) -> list[Block]:
    out: list[Block] = []
    for name in THEOREMS:
        r = results.row(name, sem)
        if not r or not r.get("counterexample"):
            continue
        ex = code.examples[_key(r["counterexample"])]
        viol = ", ".join(f"`{v}`" for v in ex.violations) or "none"
        note = ""
        if ex.refused:
            note = (" (Its GPU hit is not one a real engine produces; the theorem does not "
                    "assume `gpu-hit-aligned`, which keeps the search small.)")
        out += [Para(f"The proofs' counterexample to `{name}` on `{sem}`: "
                     f"{_scenario_words(r['counterexample'])}. Hit {ex.hit}; violated: "
                     f"{viol}.{note}"),
                Image(f"{name} fails on {sem}", f"{_cex_file(name, sem)}.png"),
                Code(ex.words)]
    return out


def _scope_note(preconditions: Sequence[str]) -> str:
    scoped = [PRECONDITIONS[p] for p in preconditions if PRECONDITIONS[p].scope]
    return "".join(f" The proof covers only the case where {p.words} ({p.in_vllm})"
                   for p in scoped)


def _sim_table(run: dict[str, Any]) -> Table:
    rows = []
    for s in SIM_SEMANTICS:
        v = run["semantics"].get(s)
        if v is None:
            continue
        other = v["corrupted"] - v["corrupted_direct"]
        rows.append((f"`{s}`", f"{v['cpu_hit_requests']:,}", f"{v['cpu_hit_tokens']:,}",
                     f"{v['oracle_hit_tokens']:,}", f"{v['given_away_tokens']:,}",
                     f"{v['above_oracle']:,}", f"{v['no_partial_state']:,}",
                     f"{v['missing_loads']:,}", f"{v['corrupted_direct']:,}", f"{other:,}"))
    return Table(("semantics", "requests with a CPU hit", "CPU hit tokens",
                  "best correct CPU hit tokens", "given away", "lookups above best",
                  "`no-partial-state` violations", "loads of unstored blocks",
                  "outputs corrupted by the lookup", "outputs corrupted otherwise"),
                 tuple(rows))


def _cost(code: CodeFacts, results: Results) -> list[Block]:
    out: list[Block] = [Heading(3, "What the fix costs in hits")]
    r = results.row("maximality", "vllm-0.24.0")
    pre = ", ".join(f"`{p}`" for p in THEOREMS["maximality"].preconditions)
    out.append(Para(f"`maximality` on `vllm-0.24.0`: **{_status(r)}** (preconditions {pre})."
                    " Where it applies, 0.24.0 never answers less than the largest hit that "
                    "keeps I1-I4 for the store it sees: every token it gives up against "
                    "0.23.0 is a token 0.23.0 should not have loaded." + _scope_note(
                        THEOREMS["maximality"].preconditions)))
    sim = results.facts.get("sim", {})
    labels = {"chat": "pure Mamba", "chat-hybrid": "hybrid (one attention group + Mamba)"}
    for label, run in sim.items():
        out += [Para(f"Simulator, `{run['workload']}` workload (multi-turn chats resending "
                     f"their history), {labels.get(label, label)}, {run['requests']:,} "
                     f"requests, seed {run['seed']}, block {run['block_size']}: `python -m "
                     f"sim run --workload chat --requests {run['requests']} "
                     f"--attention-groups {run['attention_groups']} --semantics "
                     f"{','.join(SIM_SEMANTICS)}`. *Best correct* is, per lookup, the "
                     "largest hit that keeps every invariant for the store at that moment "
                     "(`sim/oracle.py`); each semantics runs the same requests, but its "
                     "own store content, so the totals differ."),
                _sim_table(run)]
    if "chat-hybrid" in sim:
        out.append(Para("The hybrid's *corrupted otherwise* outputs on 0.24.0 and the "
                        "alternatives do not come from the offloading lookup: 0.24.0 hands "
                        "the connector the longest of the per-group GPU prefix hits, which "
                        "can lie past the Mamba group's own hit (vLLM issue #46453; "
                        "`sim/gpu_cache.py`), so the request starts without the right "
                        "state. No lookup change fixes that."))
    rerun = results.facts.get("rerun", {})
    if rerun:
        def hits(sem: str) -> str:
            return ", ".join(f"{n}→{h}{' (wrong output)' if bad else ''}"
                             for n, h, bad in rerun.get(sem, []) if n % 16 in (0, 1))
        out.append(Para(
            "Why 0.24.0 gets no hit at all for a prompt ending exactly on a block boundary "
            "that is sent a second time: in align mode the engine saves the Mamba state "
            "only where a scheduled chunk ends, so a prompt prefilled in one chunk leaves "
            "only the state at its own end, and 0.24.0 may load at most `T - 16` tokens "
            "(the last token is recomputed, then the hit rounds down), whose state was "
            "never saved. The best correct hit there is 0 too. Simulator, cold run then "
            "the same prompt again (`python -m sim rerun --semantics S --lengths 17-80`), "
            f"prompt length → hit, at and just past each boundary: 0.23.0: "
            f"{hits('vllm-0.23.0')}; 0.24.0: {hits('vllm-0.24.0')}."))
    if code.gpu:
        cases = list(code.gpu)
        gpu_rows: list[tuple[str, ...]] = []
        for n in GPU_LENGTHS:
            cells = []
            for c in cases:
                hit, same = code.gpu[c].get(n, (None, True))
                cells.append("–" if hit is None else f"{hit}{'' if same else ' (differs)'}")
            gpu_rows.append((str(n), *cells))
        out += [Para("The real engine agrees (`sim/gpu/results/report.md`: one H200, tiny "
                     "random-weight Mamba-1 and Jamba-style hybrid models, block 16, the "
                     "OffloadingConnector's CPU tier; cold run, GPU prefix cache reset, "
                     "same prompt again). Connector hit per prompt length, *(differs)* "
                     "where the second output differs from the cold one. Cases are "
                     "`version-model-mode[-all]`: `fix-disabled` is 0.24.0 with "
                     "`resolve_mamba_align_size` made to return None, `-all` runs "
                     "`mamba_cache_mode=\"all\"`:"),
                Table(("length", *(f"`{c.removeprefix('vllm-')}`" for c in cases)),
                      tuple(gpu_rows)),
                Para("So the fix's price is the exact-boundary hits, and every one of them "
                     "was wrong on 0.23.0. Getting them back needs the engine to keep a "
                     "state on a block boundary before the prompt's end, not a different "
                     "lookup: vLLM 0.33.0's CPU tier holds the Mamba block ending at token "
                     "16 for a 32-token prompt and hits 16 tokens with the right output "
                     "(`sim/gpu/results/report.md`, *Key lengths*).")]
    return out


def _all_mode(code: CodeFacts) -> str:
    hit, same = code.gpu.get("vllm-0.24.0-mamba-stock-all", {}).get(32, (None, True))
    if hit is None:
        return ""
    return (f": on the GPU, 0.24.0 in `all` mode still hits {hit} tokens for a 32-token "
            f"prompt{'' if same else ' and the output changes'} "
            "(`sim/gpu/results/report.md`)")


def _guarantee(code: CodeFacts, results: Results) -> list[Block]:
    items = []
    for name, thm in THEOREMS.items():
        r = results.row(name, "vllm-0.24.0")
        pre = [p for p in thm.preconditions if not PRECONDITIONS[p].runtime]
        cond = ("; ".join(PRECONDITIONS[p].words + (" (proof scope)" if PRECONDITIONS[p].scope
                                                     else "") for p in pre) if pre
                else "any configuration the start-up checks accept")
        acc = (r or {}).get("over_accepted_layouts") or {}
        if pre and acc.get("status") == "COUNTEREXAMPLE":
            items.append(f"`{name}`: fails for some layout 0.24.0 accepts (counterexample: "
                         f"`counterexamples/{name}--vllm-0.24.0--accepted.json`); "
                         f"{_status(r)} with: {cond}.")
        else:
            items.append(f"`{name}` ({_status(r)}): {cond}.")
    return [
        Heading(2, "Where 0.24.0's guarantee holds"),
        Para("Each theorem on `vllm-0.24.0`: first its verdict over every layout the "
             "release's start-up checks accept, then the conditions under which it is "
             "proved (preconditions that a real engine always satisfies, such as the GPU "
             "hit being whole blocks, are left out). Where the precondition table links a "
             "counterexample, dropping that condition breaks the theorem."),
        Bullets(tuple(items)),
        Para("Scope of the proofs: " + _layout_words() + "."),
        Para("In configuration terms: the fix protects Mamba models and hybrids run with "
             "`mamba_cache_mode=\"align\"` whose other groups use offloaded block sizes that "
             "are multiples of the Mamba offloaded block size (the hybrids vLLM builds in "
             "align mode give every group the same block size). It does not protect "
             "`mamba_cache_mode=\"all\"`" + _all_mode(code) + "."),
    ]


CI_WORKFLOW = "docs/ci/offload-lookup-check.yml"

REGRESSION_TEMPLATE = '''\
# A regression test for vLLM's own suite (e.g. tests/v1/kv_connector/unit/), built from a
# counterexample scenario of this project. Written against vLLM 0.24.0; it builds the real
# OffloadingConnectorScheduler as sim/crosscheck/adapters/harness.py does, with a stub
# store that answers from the scenario.
import torch

from vllm.config import CacheConfig, DeviceConfig, KVTransferConfig, VllmConfig
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
    OffloadingConnectorScheduler,
)
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import (
    get_request_block_hasher,
    init_none_hash,
    resolve_kv_cache_block_sizes,
)
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
    SlidingWindowSpec,
)
from vllm.v1.kv_offload import base
from vllm.v1.request import Request

SCENARIO = __SCENARIO__


class _Stored(base.LoadStoreSpec):
    @staticmethod
    def medium() -> str:
        return "CPU"


class _StoreStub(base.OffloadingManager):
    def __init__(self):
        self.answers = {}  # offload key -> True (stored) / None (deferred) / False

    def lookup(self, key, req_context):
        return self.answers.get(key, False)

    def prepare_load(self, keys, req_context):
        return _Stored()

    def prepare_store(self, keys, req_context):
        return None

    def on_new_request(self, req_context):
        return base.RequestOffloadingContext()


class _Spec(base.OffloadingSpec):
    store = _StoreStub()

    def get_manager(self):
        return self.store

    def get_handlers(self, kv_caches):
        raise NotImplementedError


def _group_spec(g, i):
    # distinct head counts: the hybrid coordinator merges groups with equal specs
    kw = dict(block_size=g["gpu_block_size"], num_kv_heads=i + 1, head_size=8,
              dtype=torch.float16)
    if g["kind"] == "full_attention":
        return FullAttentionSpec(**kw)
    if g["kind"] == "sliding_window":
        return SlidingWindowSpec(**kw, sliding_window=g["sliding_window"])
    return MambaSpec(block_size=g["gpu_block_size"], shapes=((4, 8 * (i + 1)),),
                     dtypes=(torch.float16,), mamba_cache_mode=g["mamba_cache_mode"])


def test_offloading_lookup_regression():
    s = SCENARIO
    sizes = [g["gpu_block_size"] for g in s["groups"]]
    factor = s["block_size_factor"]
    extra = {} if factor == 1 else {"block_size": sizes[0] * factor}
    cache = dict(block_size=min(sizes),
                 enable_prefix_caching=s.get("enable_prefix_caching", True))
    for key in ("hash_block_size", "mamba_block_size"):  # cache_config overrides, if any
        if s.get(key) is not None:
            cache[key] = s[key]
    vllm_config = VllmConfig(
        device_config=DeviceConfig("cpu"),
        cache_config=CacheConfig(**cache),
        kv_transfer_config=KVTransferConfig(kv_connector="OffloadingConnector",
                                            kv_role="kv_both",
                                            kv_connector_extra_config=extra),
    )
    kv_cache_config = KVCacheConfig(
        num_blocks=1024, kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(layer_names=[f"layer.{i}"],
                                          kv_cache_spec=_group_spec(g, i),
                                          is_eagle_group=g.get("eagle", False))
                         for i, g in enumerate(s["groups"])])
    spec = _Spec(vllm_config, kv_cache_config)
    _Spec.store = _StoreStub()
    scheduler = OffloadingConnectorScheduler(spec)

    _, hash_block_size = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
    hash_fn = get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    request = Request(request_id="r0",
                      prompt_token_ids=[(7 * t + 3) % 30000 for t in range(s["prompt_tokens"])],
                      sampling_params=SamplingParams(max_tokens=1), pooling_params=None,
                      block_hasher=get_request_block_hasher(hash_block_size, hash_fn))
    # offloaded block i of group g is keyed by the block hash at its end
    for g, group in enumerate(s["groups"]):
        per_block = group["gpu_block_size"] * factor // spec.hash_block_size
        for i, h in enumerate(request.block_hashes[per_block - 1::per_block]):
            held = group["stored"] == "all" or i in group["stored"]
            answer = None if i in group.get("deferred", []) else held
            _Spec.store.answers[base.make_offload_key(h, g)] = answer
    scheduler.on_new_request(request)

    hit, _ = scheduler.get_num_new_matched_tokens(request, s["num_computed_tokens"])

    end = s["num_computed_tokens"] + (hit or 0)
    for group in s["groups"]:
        if group["kind"] == "mamba" and group["mamba_cache_mode"] == "align" and hit:
            # a restored Mamba state is the one saved at an offloaded block's end
            assert end % (group["gpu_block_size"] * factor) == 0, (hit, end)
    assert hit == __EXPECTED_HIT__
'''


def regression_test(scenario: dict[str, Any], expected_hit: int | None) -> str:
    """The template filled in for one scenario (what the spec shows)."""
    body = json.dumps({k: v for k, v in scenario.items() if k != "semantics"})
    return (REGRESSION_TEMPLATE.replace("__SCENARIO__", body)
            .replace("__EXPECTED_HIT__", repr(expected_hit)))


def _ci(code: CodeFacts, results: Results) -> list[Block]:
    seed_cex = results.facts.get("seed_counterexample") or code.seed
    fixed = code.examples.get(_key(seed_cex, "vllm-0.24.0")) or code.examples[
        "seed@vllm-0.24.0"]
    return [
        Heading(2, "Use it in your CI"),
        Para("The commands (Python 3.11+, from a checkout of this repository):"),
        Code("python -m pip install -e .\n"
             "python -m pytest                      # fast suite, includes this spec's "
             "staleness test\n"
             "python -m proofs --report report/     # every theorem x semantics; exit 0 iff "
             "all match expectations\n"
             "python -m sim.crosscheck --vllm 0.24.0 --examples 2000 \\\n"
             "    --scenarios tests/scenarios --scenarios docs/counterexamples"
             "   # the model vs the real scheduler\n"
             "python -m model lookup SCENARIO.json --explain           # one scenario in "
             "words and a picture", "sh"),
        Para(f"A ready GitHub Actions workflow: [`{CI_WORKFLOW}`](ci/offload-lookup-check.yml)"
             " (copy it to `.github/workflows/`). It runs the proofs and the cross-check "
             "against the real scheduler of a pinned vLLM release (`VLLM_VERSION`; the "
             "cross-check builds `.venvs/vllm-X` with the CPU build of torch and the pinned "
             "requirements in `sim/crosscheck/requirements/`, so a new release needs a "
             "requirements file and a semantics before it can be pinned)."),
        Para("To check a change to the offloading scheduler, write the scenario that worries "
             "you as a JSON file, run `python -m model lookup FILE --explain`, and run "
             "`python -m sim.crosscheck --vllm X --scenarios DIR` to replay it on the real "
             "scheduler."),
        Heading(3, "From a counterexample to a regression test in vLLM"),
        Para("`sim/crosscheck` drives the real scheduler through a subprocess protocol "
             "(`sim/crosscheck/adapters/harness.py`), not through a function vLLM's suite "
             "could import, so this project ships no generator; instead here is a pytest "
             "function, written for this project from how the harness builds the "
             "scheduler: real `VllmConfig`, `KVCacheConfig` and group specs, the real "
             "`OffloadingSpec` base constructor and scheduler, a `Request` hashed by vLLM's "
             "own block hasher, and a stub store that answers `lookup` from the scenario. "
             "Paste a counterexample (`docs/counterexamples/*.json`, or one the "
             "cross-check shrank into `tests/scenarios/crosscheck/`) as `SCENARIO` and the "
             "hit the fixed code must return (`python -m model lookup FILE --semantics "
             "vllm-0.24.0`) as the expected hit. Below it is filled in with the block-16 "
             f"counterexample above: on 0.24.0 the hit is {fixed.hit} and the test passes; "
             f"on 0.23.0 the hit is {code.examples.get(_key(seed_cex), fixed).hit} and the "
             "Mamba assertion fails. `python -m pytest -m crosscheck tests/test_spec.py` "
             "runs exactly this function against both real schedulers."),
        Para("It covers the fields a counterexample to the lookup's invariants uses "
             "(groups, block sizes, `block_size_factor`, prompt, GPU hit, stored and "
             "deferred blocks, `cache_config` overrides); for `being_loaded`, in-flight "
             "transfers or `skip_reading_prefix_cache`, set the scheduler state up as "
             "`sim/crosscheck/adapters/harness.py` does. To check the load plan as well, "
             "allocate the request's blocks with `KVCacheManager.allocate_slots` and call "
             "`update_state_after_alloc`, again as the harness does."),
        Code(regression_test(seed_cex, fixed.hit), "python"),
    ]


FILES = (citations.SCHED, citations.BASE, citations.UTILS, citations.SINGLE, citations.CORE,
         citations.KVM)


def _legend() -> str:
    names = "; ".join(f"`{f.rsplit('/', 1)[-1]}` is `vllm/{f}`" for f in FILES)
    return (f"vLLM references name a file and line of vLLM 0.24.0, with 0.23.0's line in "
            f"parentheses where the step exists there too, each linked to the release tag "
            f"on GitHub: {names}. Every cited line is in the table at the end.")


def _citations() -> list[Block]:
    rows = tuple((f"`{k}`", f"`vllm/{_LINES['0.24.0'][k][0]}`",
                  *(_vllm(v, k, short=True) for v in RELEASES)) for k in _LINES["0.24.0"])
    return [
        Heading(2, "Every cited vLLM line, per release"),
        Para("From `model/citations.py` (line numbers read from the PyPI wheels; links "
             "point at the release tags). A dash: the step does not exist in that "
             "release."),
        Table(("step", "file", *(f"vLLM {v}" for v in RELEASES)), rows),
    ]


def render(code: CodeFacts, results: Results) -> tuple[str, str]:
    """The spec as (markdown, HTML); a pure function of its two arguments."""
    blocks: list[Block] = []
    blocks += _intro(code, results)
    blocks += _inputs()
    blocks += _lookup_section(code)
    blocks += _invariants(code)
    blocks += _results_table(code, results)
    blocks += _guarantee(code, results)
    blocks += _story(code, results)
    blocks += _ci(code, results)
    blocks += _citations()
    contents = Bullets(tuple(f"[{b.text}](#{slug(b.text)})" for b in blocks
                             if isinstance(b, Heading) and b.level == 2))
    blocks.insert(2, contents)
    return to_markdown(blocks), to_html(blocks, TITLE)


# --- writing ----------------------------------------------------------------------------


def _draw(scenario: dict[str, Any], semantics: str, path: Path, title: str) -> None:
    s = parse_scenario(scenario)
    draw_png(s, evaluate(s, semantics, enforce=False), path, title)


def write_spec(directory: Path, facts: dict[str, Any] | None = None) -> tuple[Path, Path]:
    """Write spec.md and spec.html into ``directory`` (next to report.json); with
    ``facts`` also (re)write spec-facts.json and the seed pictures."""
    if facts is not None:
        (directory / FACTS).write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n")
        seed_cex = facts.get("seed_counterexample")
        if seed_cex:
            for sem in RELEASES:
                _draw(seed_cex, f"vllm-{sem}", directory / f"spec-seed-vllm-{sem}.png",
                      f"{seed_cex['prompt_tokens']}-token prompt, block 16, on vLLM {sem}")
        alt = facts.get("alt_round_num_hit_counterexample")
        if alt:
            _draw(alt, "alt-round-num-hit", directory / "spec-alt-round-num-hit.png",
                  "alt-round-num-hit")
    results = load_results(directory)
    md, page = render(gather_code_facts(results), results)
    md_path, html_path = directory / "spec.md", directory / "spec.html"
    md_path.write_text(md)
    html_path.write_text(page)
    return md_path, html_path


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m proofs.spec DIR [--facts]``: re-render DIR/spec.md from DIR/report.json."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m proofs.spec", description=main.__doc__)
    p.add_argument("directory", type=Path)
    p.add_argument("--facts", action="store_true",
                   help="also re-run the seed-layout search and the simulator")
    a = p.parse_args(argv)
    if not (a.directory / "report.json").exists():
        print(f"{a.directory}/report.json: missing (run python -m proofs --report "
              f"{a.directory})", file=sys.stderr)
        return 2
    md, page = write_spec(a.directory, collect_facts() if a.facts else None)
    print(f"spec: {md} {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
