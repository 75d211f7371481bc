"""Conformance of the chunked encodings to ``model/`` over the older chunked releases the
proofs encode (``releases.proved("chunked")`` beside vLLM 0.33.0), through the steps they
override (``releases.base.ChunkSteps``).

vLLM 0.32.0 overrides the partial tail (``releases/vllm_0_32_0.py``): ``tail_eagle``
(an EAGLE group turns partial tails off, scheduler.py:313 of 0.32.0), ``tail_search``
(one search block) and ``tail_bridge`` (no bridge chunk). Both encodings read all three
(``proofs.encoding_chunked``: ``partial_tails_on``, ``partial_tail_phase``;
``proofs.tail_chunked``: ``startup``, ``prologue``). Only ``tail_eagle`` can change an
answer of 0.32.0: without an EAGLE group there is no proof margin, and then 0.33.0's
search is one block too and its bridge lies past it (a complete boundary is on a block),
which ``tests/test_release_simple_tail.py`` checks on the model side
(``test_answers_differ_only_with_an_eagle_group_and_tails``). So the start-up's EAGLE
rule is what these tests pin, from either side: the encodings' start-up against the
release's on every scenario of the partial-tail templates' shape, and a copy of either
side without the rule must fail. The whole lookups run over 0.32.0 in the generated
suites of ``tests/test_conformance_chunked.py`` and ``tests/test_proof_tails_chunked.py``
(their generators draw every proved chunked semantics in turn), and on its files here.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import z3

import releases
from model import layout_chunked
from model.evaluate import evaluate
from model.scenario import Scenario, ScenarioError, load_scenario_file, parse_scenario
from proofs import conformance_chunked, encoding_chunked, tail_chunked, turn_chunked
from proofs.conformance_chunked import in_scope, tails_gate, tails_shape
from proofs.conformance_tail_chunked import concrete_config as tail_concrete
from proofs.conformance_tail_chunked import in_scope as tail_in_scope
from proofs.conformance_tail_chunked import startup_on
from proofs.conformance_turn_chunked import concrete_config
from proofs.encoding import Enc
from tests import gen_chunked as gen
from tests import test_conformance_chunked as bounded
from tests import test_proof_layers_chunked as layers
from tests import test_proof_tails_chunked as layered
from tests.sabotage import sabotaged_copy
from tests.subset import part

ROOT = Path(__file__).resolve().parents[1]
V032 = releases.by_version("0.32.0")
V033 = releases.by_version("0.33.0")
FILES = sorted((ROOT / "tests" / "scenarios" / V032.name).glob("*.json"))
EAGLE_OFF = ROOT / "tests" / "scenarios" / V032.name / "eagle-turns-tails-off.json"

# the encodings' start-up without the EAGLE rule (the override dropped on their side)
BOUNDED_NO_RULE = ("    if not steps.tail_eagle:  # an EAGLE group turns partial tails off\n"
                   "        c += [z3.Not(e) for e in cfg.eagle]\n", "")
LAYERED_NO_RULE = ("    if not tc.steps.tail_eagle:\n"
                   "        c += [z3.Not(e) for e in base.eagle] + [z3.Not(tc.margin_on)]\n", "")


def _gates(s: Scenario, bounded_mod: Any = encoding_chunked,
           layered_mod: Any = tail_chunked) -> tuple[bool, bool, bool]:
    """(bounded encoding's start-up, layered tail's start-up, the release's) on ``s``:
    partial tails on."""
    enc_on, model_on = tails_gate(s, bounded_mod)
    return enc_on, startup_on(s, layered_mod), model_on


def _agree(s: Scenario, bounded_mod: Any = encoding_chunked,
           layered_mod: Any = tail_chunked) -> None:
    enc_on, tail_on, model_on = _gates(s, bounded_mod, layered_mod)
    assert enc_on == model_on, f"partial tails: bounded encoding {enc_on} vs model {model_on}"
    assert tail_on == model_on, f"partial tails: layered tail {tail_on} vs model {model_on}"


def test_the_release_is_proved_and_drawn() -> None:
    assert V032.name in releases.proved("chunked") and V032.name in gen.SEMANTICS
    assert V032.expect == V033.expect  # its verdicts are 0.33.0's (the module doc)


def test_the_release_files_are_in_both_encodings_or_gated() -> None:
    """Each 0.32.0 file: in the partial-tail shape, both encodings' start-up agree with
    the release's; a file with partial tails on runs through both encodings' lookup."""
    seen: Counter[str] = Counter()
    for path in FILES:
        s = load_scenario_file(path)
        assert tails_shape(s), path.name
        _agree(s)
        if in_scope(s):
            bounded.conforms(s)
            seen["bounded"] += 1
        if tail_in_scope(s):
            layered.conforms(s)
            seen["layered"] += 1
        seen["tails off by EAGLE"] += not tails_gate(s)[1]
    assert seen == Counter({"bounded": 1, "layered": 1, "tails off by EAGLE": 2}), seen


def _shaped(count: int, seed: int) -> list[Scenario]:
    """Generated scenarios of the partial-tail shape, EAGLE on often, every proved
    chunked semantics in turn."""
    rng = random.Random(seed)
    out: list[Scenario] = []
    names = gen.SEMANTICS
    while len(out) < count:
        s = parse_scenario(gen.tail_pair_dict(rng, names[len(out) % len(names)]))
        if tails_shape(s):
            out.append(s)
    return out


def test_the_tail_gate_conforms() -> None:
    for s in _shaped(12, 0):
        _agree(s)


@pytest.mark.conformance
@pytest.mark.timeout(1200)
def test_the_tail_gate_conforms_many() -> None:
    """The floors count every release with 0.32.0's EAGLE rule (``tail_eagle`` off:
    0.28.0-0.32.0), so that drawing more proved semantics in turn does not thin them."""
    seen: Counter[str] = Counter()
    rule: Counter[str] = Counter()
    for s in _shaped(part(400), 1):  # CONFORMANCE_SHARE (tests/subset.py)
        _agree(s)
        on = tails_gate(s)[1]
        seen[f"{s.semantics}: tails {'on' if on else 'off'}"] += 1
        if not releases.get(s.semantics).steps.tail_eagle:
            rule["on" if on else "off"] += 1
    assert seen[f"{V032.name}: tails off"] and seen[f"{V032.name}: tails on"], seen
    assert rule["off"] >= part(10) and rule["on"] >= part(10), seen
    print(dict(seen))


@pytest.mark.parametrize(("which", "text"), [("bounded", BOUNDED_NO_RULE),
                                             ("layered", LAYERED_NO_RULE)])
def test_the_encodings_without_the_rule_fail(which: str, text: tuple[str, str]) -> None:
    s = load_scenario_file(EAGLE_OFF)
    _agree(s)
    if which == "bounded":
        mods = (sabotaged_copy(encoding_chunked, *text, "v032-tail-eagle"), tail_chunked)
    else:
        mods = (encoding_chunked, sabotaged_copy(tail_chunked, *text, "v032-tail-eagle"))
    with pytest.raises(AssertionError, match=f"partial tails: {which}"):
        _agree(s, *mods)


def test_the_model_without_the_rule_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model's start-up keeping partial tails with an EAGLE group (0.33.0's rule) on
    0.32.0: the encodings' start-up refuses what it builds."""
    s = load_scenario_file(EAGLE_OFF)
    _agree(s)
    real = layout_chunked.resolve_layout

    def eagle_tails(sc: Scenario, steps: Any = None, version: str = layout_chunked.V) -> Any:
        return real(sc, replace(steps or V033.steps, tail_eagle=True), version)

    monkeypatch.setattr(layout_chunked, "_LAYOUTS", {})
    monkeypatch.setattr(layout_chunked, "resolve_layout", eagle_tails)
    with pytest.raises(AssertionError, match="partial tails: bounded"):
        _agree(s)
    with pytest.raises(AssertionError, match="start-up constraints refuse"):
        bounded.conforms(s)


# --- vLLM 0.31.0: Mamba cache mode "all" (``ChunkSteps.mamba_all``) ---------------------
#
# An "all" group joins the Mamba align size (0.31.0's scheduler.py:167-170), backs the
# hash block off to the scheduler block (kv_cache_utils.py:785: with several groups every
# block size is then the lcm, offloading/config.py:91) and is no CoW source (scheduler.py:
# 289-292: partial tails off). The encodings read the mode (``mamba_all`` of their
# configurations) in each of the three rules, and the start-up reads the step (a release
# without mode "all" has none). Each rule is pinned here from either side.

V031 = releases.by_version("0.31.0")
ALL_FILE = ROOT / "tests" / "scenarios" / V031.name / "mamba-all-rounds-attention.json"
# the encodings' Mamba align set without mode "all" (the override dropped on their side)
BOUNDED_NO_JOIN = (
    "    align_on = z3.And(z3.Or(align_mode, cfg.mamba_all), z3.BoolVal(bool(mamba)))\n",
    "    align_on = z3.And(align_mode, z3.BoolVal(bool(mamba)))\n")
LAYERED_NO_JOIN = ("    joins = z3.Or(align_mode, cfg.mamba_all)\n", "    joins = align_mode\n")
# the start-up's hash back-off without mode "all" (the same line in both encodings)
NO_BACKOFF = ("        c.append(z3.Implies(z3.Or(z3.Not(cfg.prefix_caching), cfg.mamba_all),\n",
              "        c.append(z3.Implies(z3.Not(cfg.prefix_caching),\n")
# the bounded start-up without the step: mode "all" in every release
BOUNDED_NO_STEP = ("    if not steps.mamba_all or MAMBA not in cfg.kinds:\n",
                   "    if MAMBA not in cfg.kinds:\n")
# partial tails kept with a Mamba group in mode "all"
BOUNDED_TAILS_ALL = ("    c = [cfg.prefix_caching, z3.Not(cfg.mamba_all), cfg.bpc == 1,",
                     "    c = [cfg.prefix_caching, cfg.bpc == 1,")
LAYERED_TAILS_ALL = ("    c = [turn_chunked.startup(enc, base), z3.Not(base.mamba_all),",
                     "    c = [turn_chunked.startup(enc, base),")


def _mode(s: Scenario, mode: str, **top: Any) -> Scenario:
    groups = tuple(replace(g, mamba_cache_mode=mode) if g.kind == "mamba" else g
                   for g in s.groups)
    return replace(s, groups=groups, **top)


def test_0_31_0_is_proved_and_drawn_with_mode_all() -> None:
    assert V031.name in releases.proved("chunked") and V031.name in gen.SEMANTICS
    assert V031.expect == V032.expect  # its verdicts are 0.32.0's (the module doc)
    drawn = gen.scenarios(partial(gen.chunk_dict, dist=gen.CONFORMANCE),
                          lambda s: conformance_chunked.mode_all(s), 4, 0, (V031.name,))
    assert all(conformance_chunked.mode_all(s) for s in drawn)


def test_mode_all_conforms_in_both_encodings() -> None:
    """The file (the real 0.31.0 scheduler's hit) and generated 0.31.0 requests in mode
    "all": the bounded encoding and the layered turn answer as model/."""
    s = load_scenario_file(ALL_FILE)
    assert conformance_chunked.mode_all(s) and in_scope(s) and layers.in_scope(s)
    bounded.conforms(s)
    layers.conforms(s)
    drawn = gen.scenarios(partial(gen.chunk_dict, dist=gen.CONFORMANCE),
                          lambda s: conformance_chunked.mode_all(s) and in_scope(s),
                          8, 3, (V031.name,))
    for s in drawn:
        bounded.conforms(s)
        if layers.in_scope(s):
            layers.conforms(s)


@pytest.mark.parametrize("which", ["bounded", "layered"])
def test_the_encodings_without_the_join_fail(which: str) -> None:
    s = load_scenario_file(ALL_FILE)
    if which == "bounded":
        mod = sabotaged_copy(encoding_chunked, *BOUNDED_NO_JOIN, "v031-no-join")
        with pytest.raises(AssertionError, match="hit: encoding"):
            bounded.conforms(s, mod)
    else:
        mod = sabotaged_copy(turn_chunked, *LAYERED_NO_JOIN, "v031-no-join")
        with pytest.raises(AssertionError, match="hit: encoding"):
            layers.conforms(s, mod)


def test_the_model_without_the_join_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model's Mamba align set without mode "all" (0.32.0's): both encodings answer
    otherwise on the file."""
    s = load_scenario_file(ALL_FILE)
    real = layout_chunked.resolve_layout

    def no_join(sc: Scenario, steps: Any = None, version: str = layout_chunked.V) -> Any:
        lay = real(sc, steps, version)
        return replace(lay, mamba_align_size=None) if conformance_chunked.mode_all(sc) else lay

    monkeypatch.setattr(layout_chunked, "_LAYOUTS", {})
    monkeypatch.setattr(layout_chunked, "resolve_layout", no_join)
    with pytest.raises(AssertionError, match="hit: encoding"):
        bounded.conforms(s)
    with pytest.raises(AssertionError, match="hit: encoding"):
        layers.conforms(s)


def _startups(s: Scenario, steps: Any, bounded_mod: Any = encoding_chunked,
              turn_mod: Any = turn_chunked) -> tuple[bool, bool]:
    """Whether each encoding's start-up (``steps``: the bounded one's) admits ``s`` in
    mode "all": its config built from ``s`` (which runs mode align) with the mode set."""
    _, cfg, _ = conformance_chunked.concrete(s, bounded_mod)
    cfg = replace(cfg, mamba_all=z3.BoolVal(True))
    enc = bounded_mod.ChunkEnc(bounded_mod.Scope(chunks=cfg_chunks(cfg)))
    on_bounded = bool(z3.is_true(z3.simplify(bounded_mod.startup(enc, cfg, steps))))
    tcfg, bound = concrete_config(s, turn_mod)
    tcfg = replace(tcfg, mamba_all=z3.BoolVal(True))
    tenc = Enc(bound=bound)
    solver = z3.Solver()
    solver.add(turn_mod.startup(tenc, tcfg), *tenc.cons)
    return on_bounded, solver.check() == z3.sat


def cfg_chunks(cfg: Any) -> int:
    return len(cfg.ans[0])


def test_the_startup_backs_the_hash_off_in_mode_all() -> None:
    """Finding 001's layout (Mamba block 32 beside attention block 16) in mode "all": the
    release refuses it (the hash block backs off to 32, which 16 is not a multiple of);
    so do both encodings' start-up, and their copies without the back-off do not. In mode
    align both accept it."""
    align = parse_scenario({
        "semantics": V031.name, "block_size_factor": 1, "prompt_tokens": 64,
        "num_computed_tokens": 0, "groups": [
            {"kind": "full_attention", "gpu_block_size": 16, "stored": "all"},
            {"kind": "mamba", "gpu_block_size": 32, "mamba_cache_mode": "align",
             "stored": "all"}]})
    assert evaluate(align).refused is None
    assert "hash" in str(evaluate(_mode(align, "all")).refused)
    assert _startups(align, V031.steps) == (False, False)
    bounded_mod = sabotaged_copy(encoding_chunked, *NO_BACKOFF, "v031-no-backoff")
    turn_mod = sabotaged_copy(turn_chunked, *NO_BACKOFF, "v031-no-backoff")
    assert _startups(align, V031.steps, bounded_mod, turn_mod) == (True, True)


def test_the_startup_reads_the_step() -> None:
    """Mode "all" on one block size: 0.31.0's start-up admits it, 0.32.0's refuses it in
    both encodings (the bounded one reads ``steps.mamba_all``, the layered one gets no
    mode symbol without it); the bounded copy without the step admits it on 0.32.0."""
    s = _mode(load_scenario_file(ALL_FILE), "align")
    assert _startups(s, V031.steps) == (True, True)
    assert _startups(s, V032.steps)[0] is False
    assert z3.is_false(turn_chunked.symbolic_config(("mamba",), steps=V032.steps).mamba_all)
    assert not z3.is_false(turn_chunked.symbolic_config(("mamba",), steps=V031.steps).mamba_all)
    mod = sabotaged_copy(encoding_chunked, *BOUNDED_NO_STEP, "v031-no-step")
    assert _startups(s, V032.steps, mod)[0] is True


def _tails_on_in_mode_all(s: Scenario, bounded_mod: Any = encoding_chunked,
                          layered_mod: Any = tail_chunked) -> tuple[bool, bool]:
    """Whether each encoding's partial-tail start-up admits ``s`` (a partial-tail layout
    in mode align) with its Mamba group in mode "all" and the same hash block."""
    _, cfg, _ = conformance_chunked.concrete(s, bounded_mod, tails=True)
    cfg = replace(cfg, mamba_all=z3.BoolVal(True))
    enc = bounded_mod.ChunkEnc(bounded_mod.Scope(chunks=cfg_chunks(cfg)))
    on_bounded = bool(z3.is_true(z3.simplify(
        bounded_mod.partial_tails_on(enc, cfg, V031.steps))))
    tc, bound, _ = tail_concrete(s, layered_mod)
    tc = replace(tc, base=replace(tc.base, mamba_all=z3.BoolVal(True)),
                 margin_on=z3.Bool("eagle_proof_margin_on"))
    tenc = Enc(bound=bound)
    solver = z3.Solver()
    solver.add(layered_mod.startup(tenc, tc, True), *tenc.cons)
    return on_bounded, solver.check() == z3.sat


def test_mode_all_turns_partial_tails_off() -> None:
    """A partial-tail layout of 0.31.0 (0.32.0's file, no EAGLE group): in mode align both
    encodings' start-up and the release's turn tails on; in mode "all" the release's turn
    them off (no CoW source, the hash block backed off to the block) and so do both
    encodings', while their copies without the rule keep them on."""
    s = replace(load_scenario_file(FILES[[p.name for p in FILES].index(
        "one-block-tail-hit.json")]), semantics=V031.name)
    assert tails_shape(s) and _gates(s) == (True, True, True)
    assert not layout_chunked.resolve_layout(_mode(s, "all"), V031.steps).supports_partial_tail
    assert _tails_on_in_mode_all(s) == (False, False)
    assert _tails_on_in_mode_all(
        s, sabotaged_copy(encoding_chunked, *BOUNDED_TAILS_ALL, "v031-tails-all"),
        sabotaged_copy(tail_chunked, *LAYERED_TAILS_ALL, "v031-tails-all")) == (True, True)


# --- vLLM 0.30.0 and 0.29.0: the request caps a release lacks ----------------------------
#
# 0.30.0 has no max_load_tokens (``ChunkSteps.cap_load_tokens``), 0.29.0 neither cap
# (``cap_new_tokens`` too). The model refuses the scenario field (``model.evaluate``); the
# bounded start-up reads each step (``startup``: the cap is never set), the layered
# configuration has no cap symbol without it (``turn_chunked.symbolic_config``).

V030 = releases.by_version("0.30.0")
# the bounded start-up without the steps' caps (the override dropped on its side)
NO_LOAD_CAP_STEP = ("    if not steps.cap_load_tokens:\n"
                    "        c.append(z3.Not(cfg.has_load_cap))\n", "")
NO_NEW_CAP_STEP = ("    if not steps.cap_new_tokens:\n"
                   "        c.append(z3.Not(cfg.has_new_cap))\n", "")
LAYERED_NO_LOAD_CAP = ("        has_load_cap=(z3.Bool(f\"has_max_load_tokens{tag}\") if "
                       "steps.cap_load_tokens\n",
                       "        has_load_cap=(z3.Bool(f\"has_max_load_tokens{tag}\") if True\n")
LAYERED_NO_NEW_CAP = ("        has_new_cap=(z3.Bool(f\"has_max_num_new_tokens{tag}\") if "
                      "steps.cap_new_tokens\n",
                      "        has_new_cap=(z3.Bool(f\"has_max_num_new_tokens{tag}\") if True\n")
CAPS = {"max_load_tokens": ("cap_load_tokens", "has_load_cap", NO_LOAD_CAP_STEP,
                            LAYERED_NO_LOAD_CAP),
        "max_num_new_tokens": ("cap_new_tokens", "has_new_cap", NO_NEW_CAP_STEP,
                               LAYERED_NO_NEW_CAP)}


def _without(field: str) -> list[str]:
    """The proved chunked releases without the request cap ``field``."""
    step = CAPS[field][0]
    return [n for n in releases.proved("chunked")
            if releases.get(n).kind == "release" and not getattr(releases.get(n).steps, step)]


def _capped(name: str, field: str) -> Scenario:
    """The file's request (a plain 0.31.0 one) on release ``name`` with the cap ``field``
    at 20 tokens."""
    s = load_scenario_file(ALL_FILE)
    return replace(_mode(s, "align"), semantics=name, **{field: 20})


def _cap_admitted(s: Scenario, field: str, bounded_mod: Any = encoding_chunked,
                  turn_mod: Any = turn_chunked) -> tuple[bool, bool]:
    """Whether each encoding admits ``s``'s cap on ``s``'s release: the bounded start-up
    (with the release's steps) on ``s``'s values, and the layered configuration's cap
    flag (a symbol, or False)."""
    sem = releases.get(s.semantics)
    plain = replace(s, semantics=V031.name, **{field: None})  # values the model resolves
    _, cfg, _ = conformance_chunked.concrete(plain, bounded_mod)
    flag = CAPS[field][1]
    cfg = replace(cfg, **{flag: z3.BoolVal(True)})
    enc = bounded_mod.ChunkEnc(bounded_mod.Scope(chunks=cfg_chunks(cfg)))
    on_bounded = bool(z3.is_true(z3.simplify(bounded_mod.startup(enc, cfg, sem.steps))))
    layered_flag = getattr(turn_mod.symbolic_config(("mamba",), steps=sem.steps), flag)
    return on_bounded, not z3.is_false(layered_flag)


@pytest.mark.parametrize("field", sorted(CAPS))
def test_a_cap_the_release_lacks_is_in_neither_encoding(field: str) -> None:
    """Each proved release without the cap: the model refuses the field and neither
    encoding lets it exist; copies of either encoding without the step's read let it."""
    names = _without(field)
    assert V030.name in names if field == "max_load_tokens" else True
    for name in names:
        s = _capped(name, field)
        with pytest.raises(ScenarioError, match=field):
            evaluate(s)
        assert _cap_admitted(s, field) == (False, False), name
        _, _, bounded_text, layered_text = CAPS[field]
        mods = (sabotaged_copy(encoding_chunked, *bounded_text, f"no-{field}"),
                sabotaged_copy(turn_chunked, *layered_text, f"no-{field}"))
        assert _cap_admitted(s, field, *mods) == (True, True), name
    # a release with the cap admits it in both (the steps are read, not a constant)
    assert _cap_admitted(_capped(V031.name, field), field) == (True, True)


@pytest.mark.parametrize("field", sorted(CAPS))
def test_the_model_with_a_cap_the_release_lacks_fails(field: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The model taking the cap on a release without it (the override dropped on its
    side): the encodings' start-up refuses what it answers."""
    import model.evaluate as ev

    step = CAPS[field][0]
    for name in _without(field):
        sem = releases.get(name)
        real = ev.get_semantics

        def with_cap(n: str, sem: Any = sem, real: Any = real) -> Any:
            got = real(n)
            return replace(got, steps=replace(got.steps, **{step: True})) if n == sem.name else got

        monkeypatch.setattr(ev, "get_semantics", with_cap)
        s = _capped(name, field)
        assert evaluate(s).refused is None
        with pytest.raises(AssertionError, match="start-up constraints refuse"):
            bounded.conforms(s)
        monkeypatch.undo()


# --- vLLM 0.29.0 (and 0.28.0): the EAGLE query and the plain windows ----------------------
#
# 0.29.0 widens an unverified EAGLE group's query by one chunk only for a sliding-window
# group (``ChunkSteps.eagle_query_all``, C4 of docs/releases-overrides.md; its
# scheduler.py:762) and has no load windows (``ChunkSteps.load_windows``, C5): every run
# of ``_sliding_window_lookup`` needs the plain window (:633-664), any HIT_PENDING it scans
# defers (:648-652), and the being-loaded check slices the plain window (:841-849). Both
# encodings read each of the four (``proofs.encoding_chunked.group_step`` and
# ``result_of`` with the release's steps; ``proofs.turn_chunked``'s through its
# configuration). Each read is pinned here from either side on a file of 0.29.0 whose
# answer it changes (the real 0.29.0 and 0.28.0 schedulers' answers:
# ``tests/test_release_load_windows.py``).

V029 = releases.by_version("0.29.0")
V028 = releases.by_version("0.28.0")
HERE_029 = ROOT / "tests" / "scenarios" / V029.name
# read: (its file, the step, the bounded encoding's line without it, the layered turn's)
READS_029 = {
    "eagle-query": (
        "eagle-attention-no-extra-chunk.json", "eagle_query_all",
        ("        sem.steps.eagle_query_all or window is not None)\n", "        True)\n"),
        ("                                cfg.eagle_query_all or window is not None)\n",
         "                                True)\n")),
    "first-run-window": (
        "window-first-run-plain.json", "load_windows",
        ("        if sem.steps.load_windows:  # the first run needs the load window (from "
         "0.30.0)\n", "        if True:\n"),
        ("        if cfg.load_windows:  # the first run needs the load window (from 0.30.0)\n",
         "        if True:\n")),
    "pending-anywhere": (
        "window-pending-above-a-miss.json", "load_windows",
        ("                                    initial, not sem.steps.load_windows)\n",
         "                                    initial, False)\n"),
        ("        scan = partial(window_lookup, pending_anywhere=not cfg.load_windows)\n",
         "        scan = partial(window_lookup, pending_anywhere=False)\n")),
    "being-loaded-window": (
        "window-being-loaded-plain.json", "load_windows",
        ("        window = load_window(enc, cfg, d, g, end) if steps.load_windows else "
         "d.win[g]\n", "        window = load_window(enc, cfg, d, g, end)\n"),
        ("        window = load_window(enc, cfg, d, g, end) if cfg.load_windows else d.win[g]\n",
         "        window = load_window(enc, cfg, d, g, end)\n")),
}


def _file_029(read: str, name: str = V029.name) -> Scenario:
    s = replace(load_scenario_file(HERE_029 / READS_029[read][0]), semantics=name)
    assert in_scope(s) and layers.in_scope(s), read
    return s


def test_0_29_0_and_0_28_0_are_proved_and_drawn() -> None:
    for sem in (V029, V028):
        assert sem.name in releases.proved("chunked") and sem.name in gen.SEMANTICS
    assert V028.steps == V029.steps


@pytest.mark.parametrize("read", sorted(READS_029))
@pytest.mark.parametrize("name", [V029.name, V028.name])
def test_the_0_29_0_files_conform_in_both_encodings(read: str, name: str) -> None:
    s = _file_029(read, name)
    bounded.conforms(s)
    layers.conforms(s)


@pytest.mark.parametrize("which", ["bounded", "layered"])
@pytest.mark.parametrize("read", sorted(READS_029))
def test_the_encodings_without_a_0_29_0_read_fail(read: str, which: str) -> None:
    """A copy of either encoding without the read (0.30.0's step in its place) answers
    the file otherwise than model/."""
    s = _file_029(read)
    _, _, bounded_text, layered_text = READS_029[read]
    if which == "bounded":
        mod = sabotaged_copy(encoding_chunked, *bounded_text, f"v029-{read}")
        with pytest.raises(AssertionError, match="hit: encoding"):
            bounded.conforms(s, mod)
    else:
        mod = sabotaged_copy(turn_chunked, *layered_text, f"v029-{read}")
        with pytest.raises(AssertionError, match="hit: encoding"):
            layers.conforms(s, mod)


@pytest.mark.parametrize("read", sorted(READS_029))
def test_the_model_without_a_0_29_0_step_fails(read: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The model running 0.30.0's step on 0.29.0 (the override dropped on its side):
    both encodings answer the file otherwise."""
    import model.evaluate as ev

    s = _file_029(read)
    step = READS_029[read][1]
    real = ev.get_semantics

    def stock(n: str) -> Any:
        got = real(n)
        return replace(got, steps=replace(got.steps, **{step: True})) if n == V029.name else got

    monkeypatch.setattr(ev, "get_semantics", stock)
    with pytest.raises(AssertionError, match="hit: encoding"):
        bounded.conforms(s)
    with pytest.raises(AssertionError, match="hit: encoding"):
        layers.conforms(s)
