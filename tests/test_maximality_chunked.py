"""Maximality on vLLM 0.33.0: ``model.maximality_chunked`` (the valid complete-chunk hits)
against its Z3 twin ``proofs.encoding_chunked.valid_hit`` on generated concrete scenarios
(every hit 0 .. prompt of each), and sabotages: dropping any one rule from either side
must make them disagree. Every input is fixed, so no solver runs.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import replace
from functools import partial
from pathlib import Path
from types import ModuleType

import pytest
import z3

from model import maximality_chunked
from model.cli import main as model_main
from model.evaluate import evaluate
from model.layout_chunked import ChunkLayout
from model.scenario import Scenario, ScenarioError, parse_scenario
from proofs import check_chunked, encoding_chunked
from proofs.conformance_chunked import concrete, in_scope, valid_hits
from releases import vllm_0_33_0
from tests import gen_chunked as gen
from tests.subset import part
from tests.test_conformance_chunked import ENCODING_SABOTAGES, sabotaged

V033 = vllm_0_33_0.SEMANTICS.name

EXAMPLES = 120  # the default suite: about 4 s for the file


def _model_hits(s: Scenario) -> frozenset[int]:
    o = evaluate(s)
    assert isinstance(o.layout, ChunkLayout)
    return frozenset(h for h in range(0, s.num_tokens + 1)
                     if maximality_chunked.is_valid_hit(s, o.layout, h))


def _caps_reach_prompt(s: Scenario) -> bool:
    """The precondition over the scenario (proofs/check_chunked.py has its Z3 formula)."""
    if not any(g.kind != "full_attention" for g in s.groups):
        return True
    return all(cap is None or s.num_computed_tokens + cap >= s.num_tokens
               for cap in (s.max_num_new_tokens, s.max_load_tokens))


def _agree(items: list[Scenario], mod: ModuleType = encoding_chunked) -> Counter[str]:
    seen: Counter[str] = Counter()
    for s in items:
        model, enc = _model_hits(s), valid_hits(s, mod)
        assert model == enc, f"valid hits: model {sorted(model)} vs encoding {sorted(enc)} on {s}"
        seen["examples"] += 1
        seen["with a valid hit"] += bool(model)
        o = evaluate(s)
        above = o.hit_tokens is not None and any(h > o.hit_tokens for h in model)
        seen["valid hit above the lookup's"] += above
        # the theorem on the model, past the proof's bounded scope (more chunks per
        # group): with its preconditions no lookup answers below a valid hit
        if not any(g.eagle for g in s.groups) and _caps_reach_prompt(s):
            seen["under no-eagle, caps-reach-prompt"] += 1
            assert not above, f"maximality fails under its preconditions on {s}"
    return seen


def _all_stored(s: Scenario) -> Scenario:
    """``s`` with every group storing "all" (a key past the request's last is then
    answered HIT too: only the ``keyed`` rule keeps a hit from using it)."""
    return replace(s, groups=tuple(replace(g, stored=None) for g in s.groups))


def scenarios(count: int, seed: int) -> list[Scenario]:
    """The conformance draw less its multipass share (those lookups rarely hit; the rule
    witnesses below come from these draws)."""
    dist = replace(gen.CONFORMANCE, multipass=0.0)
    return gen.scenarios(partial(gen.chunk_dict, dist=dist), in_scope, count, seed)


_DRAWN = scenarios(EXAMPLES, seed=11)
GENERATED = [x for i, s in enumerate(_DRAWN)
             for x in ((s, _all_stored(s)) if i % 3 == 0 else (s,))]


def test_valid_hit_v033_conforms_to_model() -> None:
    seen = _agree(GENERATED)
    assert seen["with a valid hit"] >= EXAMPLES // 5, seen


@pytest.mark.parametrize("name", ["no-eagle", "caps-reach-prompt"])
def test_maximality_preconditions_v033_conform(name: str) -> None:
    """The Z3 formulas of maximality's 0.33.0 preconditions (proofs/check_chunked.py) say
    what the plain predicates say, on every generated scenario; both values occur."""
    plain = {"no-eagle": lambda s: not any(g.eagle for g in s.groups),
             "caps-reach-prompt": _caps_reach_prompt}[name]
    seen = set()
    for s in GENERATED:
        scope, cfg, order = concrete(s)
        enc = encoding_chunked.ChunkEnc(scope)
        d = encoding_chunked.derive(enc, cfg, order)
        got = z3.is_true(z3.simplify(check_chunked.precondition(name, enc, cfg, d)))
        assert got == plain(s), f"{name}: encoding {got} vs model {plain(s)} on {s}"
        seen.add(got)
    assert seen == {True, False}, seen


# --- sabotages: one rule dropped from either side ------------------------------------


def _encoding_without(rule: str) -> ModuleType:
    """proofs/encoding_chunked.py with the line of ``rule`` (its trailing comment) removed."""
    source = Path(encoding_chunked.__file__).read_text()
    lines = [ln for ln in source.splitlines() if ln.rstrip().endswith(f"# {rule}")]
    assert len(lines) == 1, f"{rule}: not one line of valid_hit ends with '# {rule}'"
    old = lines[0]
    new = re.sub(r"c\.append\(.*\)  #", "pass  #", old)
    assert new != old
    ENCODING_SABOTAGES[f"valid-{rule}"] = (old, new)
    try:
        return sabotaged(f"valid-{rule}")
    finally:
        del ENCODING_SABOTAGES[f"valid-{rule}"]


def _rules_but(rule: str) -> dict[str, maximality_chunked.Rule]:
    return {k: v for k, v in maximality_chunked.RULES.items() if k != rule}


def _witness(rule: str) -> Scenario:
    """The first generated scenario whose valid hits change when ``rule`` is dropped:
    the generated set must have one for every rule (else the rule goes untested)."""
    for s in GENERATED:
        layout = evaluate(s).layout
        assert isinstance(layout, ChunkLayout)
        rest = _rules_but(rule).values()
        y0 = s.num_computed_tokens
        if any(maximality_chunked.is_valid_hit(s, layout, h)
               != all(r(s, layout, h, y0 + h) for r in rest)
               for h in range(0, s.num_tokens + 1)):
            return s
    raise AssertionError(f"no generated scenario depends on rule {rule!r}")


@pytest.mark.parametrize("rule", list(maximality_chunked.RULES))
def test_dropping_a_rule_from_the_encoding_is_caught(rule: str) -> None:
    s = _witness(rule)
    _agree([s])  # the real encoding agrees there
    with pytest.raises(AssertionError, match="valid hits: model"):
        _agree([s], _encoding_without(rule))


@pytest.mark.parametrize("rule", list(maximality_chunked.RULES))
def test_dropping_a_rule_from_the_model_is_caught(rule: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    s = _witness(rule)
    monkeypatch.setattr(maximality_chunked, "RULES", _rules_but(rule))
    with pytest.raises(AssertionError, match="valid hits: model"):
        _agree([s])


@pytest.mark.parametrize("rule", ["(none)", *maximality_chunked.RULES])
def test_valid_hits_over_ints_are_those_over_z3(rule: str) -> None:
    """The encoding's ``valid_hit`` run over ints and bools (``proofs.conformance_ints``,
    what the checks above use) holds for the hits its Z3 formula does, with each rule
    dropped too (on that rule's witness, where the two copies differ)."""
    if rule == "(none)":
        items, mod = GENERATED[:12], encoding_chunked
    else:
        items, mod = [_witness(rule)], _encoding_without(rule)
    for s in items:
        assert valid_hits(s, mod, over="ints") == valid_hits(s, mod, over="z3"), s
    if rule != "(none)":
        assert valid_hits(items[0], mod) != valid_hits(items[0]), rule


# --- the scenario field and the command line ----------------------------------------

EAGLE = {  # the EAGLE group pops its trailing chunk: hit 1 where 2 is valid
    "semantics": V033, "block_size_factor": 1, "prompt_tokens": 2,
    "num_computed_tokens": 0,
    "groups": [{"kind": "full_attention", "gpu_block_size": 1, "stored": "all",
                "eagle": True}]}


def test_lookup_prints_the_larger_valid_hit(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    s = parse_scenario(EAGLE)
    o = evaluate(s)
    assert isinstance(o.layout, ChunkLayout)
    assert maximality_chunked.larger_valid_hit(s, o.layout, o.hit_tokens) == 2
    f = tmp_path / "m.json"
    f.write_text(json.dumps(EAGLE | {"valid_hit": 2}))
    assert model_main(["lookup", str(f)]) == 1
    assert "not maximal: hit 1, a valid hit of 2 exists" in capsys.readouterr().out


def test_a_false_valid_hit_claim_is_bad_input() -> None:
    s = parse_scenario(EAGLE)
    with pytest.raises(ScenarioError, match=r"^valid_hit: 3 is not a valid hit .*keyed"):
        evaluate(replace(s, valid_hit=3))
    assert not evaluate(replace(s, valid_hit=1)).violations  # valid, not above the hit


REAL = Path(__file__).parent / "scenarios" / "vllm-0.33.0-maximality"


@pytest.mark.parametrize("path", sorted(REAL.glob("*.json")), ids=lambda p: p.stem)
def test_real_layout_maximality_files_give_a_chunk_away(path: Path) -> None:
    """Each file: a real-configuration layout (docs/layouts-vllm-0.33.0.md) where the
    lookup answers less than the file's valid hit (the crosscheck suite replays it on the
    real 0.33.0 scheduler, which gives the same smaller hit)."""
    raw = json.loads(path.read_text())
    o = evaluate(parse_scenario(raw))
    assert o.hit_tokens == raw["expect"]["hit_tokens"] < raw["valid_hit"]
    assert [v.message for v in o.violations] == [
        f"not maximal: hit {o.hit_tokens}, a valid hit of {raw['valid_hit']} exists"]


@pytest.mark.conformance
def test_valid_hit_v033_conforms_to_model_many() -> None:
    drawn = scenarios(part(2000), seed=12)  # CONFORMANCE_SHARE (tests/subset.py)
    seen = _agree([x for i, s in enumerate(drawn)
                   for x in ((s, _all_stored(s)) if i % 3 == 0 else (s,))])
    assert (seen["with a valid hit"] >= part(400)
            and seen["valid hit above the lookup's"] >= part(10)), seen
    print(dict(seen))
