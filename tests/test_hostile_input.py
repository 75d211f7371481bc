"""Hostile input: the scenario loader and every CLI answer malformed and adversarial
input with one line naming the field and exit 2, never a traceback, a silent default or
unbounded time or memory (Hypothesis fuzzing, in-process; a few subprocess checks)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from model.args import bounded_float, bounded_int, output_dir
from model.evaluate import evaluate
from model.scenario import (
    GROUP_FIELDS,
    MAX_TOKENS,
    TOP_FIELDS,
    ScenarioError,
    decode_json,
    parse_scenario,
)
from releases import alt_round_num_hit, vllm_0_23_0, vllm_0_24_0
from tests.replay import remember

V023 = vllm_0_23_0.SEMANTICS.name
V024 = vllm_0_24_0.SEMANTICS.name
ROUND_NUM_HIT = alt_round_num_hit.SEMANTICS.name

ROOT = Path(__file__).resolve().parent.parent
VALID: dict[str, Any] = {
    "semantics": V024, "block_size_factor": 1, "prompt_tokens": 64,
    "num_computed_tokens": 0,
    "groups": [
        {"kind": "mamba", "gpu_block_size": 16, "mamba_cache_mode": "align", "stored": "all"},
        {"kind": "full_attention", "gpu_block_size": 16, "stored": [0, 1, 2]},
        {"kind": "sliding_window", "gpu_block_size": 16, "sliding_window": 32,
         "stored": [1, 2], "deferred": [3], "being_loaded": [0]}],
}
FIELD_NAMES = [f.name for f in TOP_FIELDS] + ["colour"]
GROUP_NAMES = [f.name for f in GROUP_FIELDS] + ["colour"]

json_scalars = st.one_of(
    st.none(), st.booleans(), st.text(max_size=8),
    st.integers(-3, 70), st.integers(-(10**40), 10**40), st.sampled_from([0, -1, 2**24, 2**24 + 1,
                                                                          10**10, 10**30]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["all", "align", "none", "mamba", "sliding_window", V023]))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8)


@st.composite
def hostile_scenarios(draw: st.DrawFn) -> Any:
    raw: Any = json.loads(json.dumps(VALID))
    for _ in range(draw(st.integers(1, 3))):
        target = raw
        names = FIELD_NAMES
        if draw(st.booleans()) and isinstance(raw, dict) and isinstance(raw.get("groups"), list) \
                and raw["groups"]:
            i = draw(st.integers(0, len(raw["groups"]) - 1))
            target, names = raw["groups"][i], GROUP_NAMES
        if not isinstance(target, dict):
            break
        name = draw(st.sampled_from(names))
        action = draw(st.sampled_from(["set", "set", "delete"]))
        if action == "delete":
            target.pop(name, None)
        else:
            target[name] = draw(json_values)
    if draw(st.integers(0, 9)) == 0:
        raw = draw(json_values)
    return raw


def one_line(msg: str) -> bool:
    return bool(msg) and "\n" not in msg.strip() and "Traceback" not in msg


def names_a_field(msg: str) -> bool:
    """One line that starts with the offending field's path, e.g. ``groups[1].stored: ...``."""
    if not one_line(msg):
        return False
    head = msg.split(": ")[0]
    last = head.split(".")[-1].split("[")[0]
    return last in {*FIELD_NAMES, *GROUP_NAMES, "scenario", "hit_tokens", "violations"} \
        or msg.endswith(")") and "unknown field" in msg


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_scenarios())
def test_loader_refuses_or_evaluates_quickly(raw: Any) -> None:
    remember(raw if isinstance(raw, dict) else {"raw": raw})
    t0 = time.monotonic()
    try:
        s = parse_scenario(raw)
    except ScenarioError as e:
        assert names_a_field(str(e)), str(e)
        return
    try:
        o = evaluate(s)  # refused, deferred or a hit
    except ScenarioError as e:  # e.g. a false valid_hit claim, or blocks_per_chunk given to
        # a release without the option: the model refuses it in one line naming the field
        assert names_a_field(str(e)), str(e)
        return
    assert o.refused is None or one_line(o.refused)
    assert time.monotonic() - t0 < 5  # bounded by groups and listed blocks, not tokens


@settings(max_examples=100)
@given(st.binary(max_size=200) | st.text(max_size=100).map(str.encode))
def test_decode_json_only_refuses(data: bytes) -> None:
    try:
        decode_json(data, "f.json")
    except ScenarioError as e:
        assert one_line(str(e)) and str(e).startswith("f.json: ")


@pytest.mark.parametrize(("text", "message"), [
    ('{"a": 1, "a": 2}', "a: duplicate key"),
    ("[" * 100_000 + "]" * 100_000, "nested deeper than"),
    ('{"prompt_tokens": NaN}', "NaN is not a JSON number"),
    ('{"prompt_tokens": ' + "9" * 5000 + "}", "not JSON"),
])
def test_decode_json_refuses_hostile_text(text: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        decode_json(text.encode(), "f.json")
    with pytest.raises(ScenarioError, match="not UTF-8"):
        decode_json(b'{"description": "\xff"}', "f.json")


@pytest.mark.parametrize(("patch", "message"), [
    ({"prompt_tokens": 10**30}, r"^prompt_tokens: at most 16,777,216 \(longer than any"),
    ({"prompt_tokens": 10**10}, r"^prompt_tokens: at most"),
    ({"groups": [VALID["groups"][1]] * 1_000_000}, r"^groups: at most 512 groups"),
    ({"semantics": None}, r"^semantics: expected one of"),
    ({"expect": {"hit": 3}}, r"^expect\.hit: unknown field"),
    ({"expect": {"hit_tokens": "3"}}, r"^expect\.hit_tokens"),
])
def test_named_refusals(patch: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse_scenario({**VALID, **patch})


def test_group_refusals() -> None:
    g = {"kind": "mamba", "gpu_block_size": 16, "stored": "all"}
    with pytest.raises(ScenarioError, match=r"^groups\[0\]\.mamba_cache_mode: required field "
                                            "is missing"):
        parse_scenario({**VALID, "groups": [g]})
    g = {"kind": "full_attention", "gpu_block_size": 16, "stored": [0, 10**12]}
    with pytest.raises(ScenarioError, match=r"^groups\[0\]\.stored: block 1000000000000 lies "
                                            "past the prompt"):
        parse_scenario({**VALID, "groups": [g]})
    g = {"kind": "full_attention", "gpu_block_size": 16, "stored": [1, 1]}
    with pytest.raises(ScenarioError, match="listed twice"):
        parse_scenario({**VALID, "groups": [g]})


def test_missing_semantics_takes_the_flag() -> None:
    raw = {k: v for k, v in VALID.items() if k != "semantics"}
    with pytest.raises(ScenarioError, match="^semantics: required field is missing"):
        parse_scenario(raw)
    assert parse_scenario(raw, V023).semantics == V023


def test_largest_prompt_answers_quickly() -> None:
    raw = {**VALID, "prompt_tokens": MAX_TOKENS}
    t0 = time.monotonic()
    for sem in (V023, V024, ROUND_NUM_HIT):
        evaluate(parse_scenario(raw), sem)
    assert time.monotonic() - t0 < 5


# ---- the CLIs, in-process ----------------------------------------------------------------

def run_main(main: Callable[[list[str]], int], argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def _mains() -> dict[str, Callable[[list[str]], int]]:
    from model.cli import main as model_main
    from proofs.__main__ import main as proofs_main
    from publish.__main__ import main as publish_main
    from sim.cli import main as sim_main
    from sim.crosscheck.cli import main as crosscheck_main
    from sim.gpu.report import main as gpu_main
    return {"model": model_main, "proofs": proofs_main,  # type: ignore[dict-item]
            "publish": publish_main, "sim": sim_main,  # type: ignore[dict-item]
            "crosscheck": crosscheck_main, "gpu": gpu_main}  # type: ignore[dict-item]


HOSTILE_ARGV = [
    ("model", ["lookup", ""]), ("model", ["lookup", "/no/such/file.json"]),
    ("model", ["lookup", "EMPTY_DIR", "--json"]), ("model", ["lookup", "X", "--semantics", "v"]),
    ("model", []), ("model", ["lookup", "BAD_UTF8"]), ("model", ["lookup", "DEEP"]),
    ("model", ["lookup", "HUGE"]), ("model", ["lookup", "DUP"]),
    ("proofs", ["--timeout", "nan"]), ("proofs", ["--timeout", "inf"]),
    ("proofs", ["--timeout", "-1"]), ("proofs", ["--jobs", "0"]),
    ("proofs", ["--jobs", "10000000000"]), ("proofs", ["--semantics", "vllm-9"]),
    ("proofs", ["--theorem", "nope"]), ("proofs", ["--report", "report"]),
    ("proofs", ["--mutants"]), ("publish", ["--timeout", "nan"]), ("publish", ["--jobs", "0"]),
    ("publish", ["--semantics", "vllm-9"]), ("publish", ["--theorem", "nope"]),
    ("publish", ["--report", ""]), ("publish", ["--report", "BAD_UTF8"]),
    ("publish", ["--mutants", "--mutant", "no-such"]),
    ("sim", ["run", "--workload", "chat", "--requests", "10000000000", "--semantics",
             V024]),
    ("sim", ["run", "--workload", "nope", "--requests", "3", "--semantics", V024]),
    ("sim", ["run", "--workload", "chat", "--requests", "3", "--semantics", ""]),
    ("sim", ["run", "--workload", "chat", "--requests", "3", "--semantics", V024,
             "--fail-on-corruption", "vllm-9"]),
    ("sim", ["rerun", "--semantics", V024, "--lengths", "1-1000000000"]),
    ("sim", ["rerun", "--semantics", V024, "--lengths", "5", "--block-size", "-3"]),
    ("sim", ["rerun", "--semantics", V024, "--lengths", "5",
             "--attention-groups", "1000000"]),
    ("sim", ["rerun", "--semantics", V024, "--lengths", "5", "--store-latency",
             "1-99999999999"]),
    ("sim", []),
    ("crosscheck", ["--vllm", "9.9.9"]), ("crosscheck", ["--vllm", ""]),
    ("crosscheck", ["--examples", "-5"]), ("crosscheck", ["--scenarios", ""]),
    ("crosscheck", ["--scenarios", "EMPTY_DIR"]), ("crosscheck", ["--scenarios", "DEEP"]),
    ("crosscheck", ["--scenarios", "/no/such/file.json"]),
    ("gpu", ["--results", ""]), ("gpu", ["--results", "EMPTY_DIR", "--no-sim"]),
    ("gpu", ["--results", "GPU_DIR", "--no-sim"]), ("gpu", ["--out", "BAD_UTF8"]),
]


@pytest.fixture(scope="module")
def files() -> Any:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d)
        (p / "empty").mkdir()
        (p / "bad.json").write_bytes(b'{"semantics": "\xff\xfe"}')
        (p / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
        (p / "huge.json").write_text(json.dumps({**VALID, "prompt_tokens": 10**30}))
        (p / "dup.json").write_text(f'{{"semantics": "{V024}", "semantics": "x"}}')
        (p / "gpu").mkdir()
        (p / "gpu" / "vllm-0.24.0-x.json").write_text('{"schema": "sim-gpu-result/1", '
                                                      '"groups": [{"kind": "mamba", '
                                                      '"gpu_block_size": 0}]}')
        yield {"EMPTY_DIR": p / "empty", "BAD_UTF8": p / "bad.json", "DEEP": p / "deep.json",
               "HUGE": p / "huge.json", "DUP": p / "dup.json", "X": p / "huge.json",
               "GPU_DIR": p / "gpu"}


@pytest.mark.parametrize(("cli", "argv"), HOSTILE_ARGV)
def test_cli_refuses_in_one_line(cli: str, argv: list[str], files: dict[str, Path]) -> None:
    argv = [str(files.get(a, a)) for a in argv]
    code, out, err = run_main(_mains()[cli], argv)
    assert code == 2, (out, err)
    text = err.strip() or out.strip()
    assert one_line(text), text
    if "--json" in argv:
        assert "error" in json.loads(out)


@settings(max_examples=100)
@given(st.text(max_size=30))
def test_flag_converters_refuse_or_bound(text: str) -> None:
    for conv, lo, hi in ((bounded_int(1, 64), 1, 64), (bounded_float(0, 86400), 0, 86400)):
        try:
            v = conv(text)
        except argparse.ArgumentTypeError as e:
            assert one_line(str(e))
        else:
            assert lo <= v <= hi
    try:
        output_dir(text)
    except argparse.ArgumentTypeError as e:
        assert one_line(str(e))


def test_entry_points_in_subprocesses(files: dict[str, Path]) -> None:
    """The real entry points (not just main()): one line, exit 2, no traceback."""
    for args in (["model", "lookup", str(files["HUGE"]), str(files["DEEP"])],
                 ["sim.crosscheck", "--vllm", "9.9.9"]):
        r = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                           text=True, check=False, timeout=60)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert all(one_line(x) for x in r.stderr.splitlines())
