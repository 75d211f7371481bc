"""One call that runs start-up, lookup, load plan and invariants on a scenario."""

from __future__ import annotations

from dataclasses import dataclass, replace

import releases
from model import layout_chunked, load_chunked, lookup_chunked, maximality_chunked
from model.citations import cite
from model.invariants import AnyLayout, Violation, check_all
from model.layout import Layout, Refused, check_request, startup_layout
from model.load_plan import GroupLoad, load_plan
from model.lookup import LookupResult, get_num_new_matched_tokens
from model.maximality import is_valid_hit
from model.scenario import Scenario, ScenarioError
from model.semantics import Semantics, get_semantics


@dataclass(frozen=True)
class Outcome:
    semantics: str
    refused: str | None  # the release refuses the scenario (names the vLLM check)
    hit_tokens: int | None  # None: deferred (or refused)
    loads: tuple[GroupLoad, ...]
    violations: tuple[Violation, ...]
    lookup: LookupResult | None = None
    layout: AnyLayout | None = None
    assertion: str | None = None  # a vLLM assertion the load would trip
    tail_boundary: int | None = None  # 0.33.0: the partial-tail boundary the hit ends at
    # 0.33.0: a fine GPU hit's sub-block tail the engine scheduler keeps instead of the
    # connector's hit (no load; layout_chunked.keeps_local_tail)
    local_tail_kept: bool = False

    @property
    def lookups(self) -> tuple[tuple[int, int], ...]:
        """(group, block) in the order ``OffloadingManager.lookup`` saw them."""
        return self.lookup.lookups if self.lookup is not None else ()


def evaluate(s: Scenario, semantics: str | None = None, *, enforce: bool = True) -> Outcome:
    """Evaluate ``s`` under ``semantics`` (default: the scenario's own).

    With ``enforce`` (the default) a scenario the release would refuse, or a request a
    real engine cannot produce, gives ``refused``; without it the model runs anyway, so
    that a counterexample found with a precondition dropped can still be replayed.
    """
    sem: Semantics = get_semantics(semantics or s.semantics)
    if sem.chunked:
        return _evaluate_chunked(s, sem, enforce)
    if s.blocks_per_chunk is not None and not sem.offloading_config:
        # the option exists from 0.26.0 on; older releases ignore the unknown extra-config
        # key, which this model does not follow
        raise ScenarioError(f"blocks_per_chunk: not modelled for {sem.name} (a "
                            "kv_connector_extra_config option from vLLM 0.26.0 on)")
    if sem.offloading_config:
        _new_requests_only(s, sem)
    try:
        layout = startup_layout(s, sem)  # start-up checks always hold: no layout otherwise
        if enforce:
            check_request(s, sem.base_version)
    except Refused as e:
        return Outcome(sem.name, str(e), None, (), ())
    res = get_num_new_matched_tokens(layout, s, sem)
    plan = load_plan(layout, s, res.num_hit_tokens, sem.load_window_slack)
    violations = check_all(s, layout, res.num_hit_tokens, plan)
    if s.valid_hit is not None and res.num_hit_tokens is not None:
        violations += _maximality_claim(s, layout, sem, res.num_hit_tokens)
    assertion = plan.assertion
    if s.in_flight_transfers and res.num_hit_tokens and not sem.in_flight_check:
        # 0.23.0 looks up a request whose transfers are still in flight, then its load
        # trips update_state_after_alloc's check that no job is pending
        check = cite(sem.base_version, "load_needs_no_jobs")
        assertion = assertion or f"a load is issued while transfers are in flight ({check})"
    return Outcome(sem.name, None, res.num_hit_tokens, plan.loads, tuple(violations),
                   res, layout, assertion)


def _new_requests_only(s: Scenario, sem: Semantics) -> None:
    """The block lookup from 0.26.0 on is modelled for new requests without context
    parallelism (its cross-check adapter, harness_chunked.py, drives no other)."""
    for name, unset in (("output_tokens", 0), ("context_parallel_size", 1)):
        if getattr(s, name) != unset:
            raise ScenarioError(f"{name}: not modelled for {sem.name} (new requests without "
                                "context parallelism from vLLM 0.26.0 on)")


MAX_V033_HASHES = 1_000_000
# the release whose code the chunked lookup's model follows (older ones are deltas of it)
CHUNKED_MODEL = releases.reference("chunked").name


def _evaluate_chunked(s: Scenario, sem: Semantics, enforce: bool) -> Outcome:
    """vLLM 0.33.0: start-up (layout_chunked), lookup (lookup_chunked), load (load_chunked)."""
    for name, unset in (("output_tokens", 0), ("context_parallel_size", 1)):
        if getattr(s, name) != unset:
            raise ScenarioError(f"{name}: not modelled for {sem.name} (the {CHUNKED_MODEL} "
                                "model covers new requests without context parallelism)")
    for name, has in (("max_num_new_tokens", sem.steps.cap_new_tokens),
                      ("max_load_tokens", sem.steps.cap_load_tokens)):
        if getattr(s, name) is not None and not has:
            raise ScenarioError(f"{name}: not a cap of {sem.name} (its scheduler has no "
                                "such request cap)")
    try:
        layout = layout_chunked.startup_layout(s, sem.steps, sem.base_version)
        if s.prompt_tokens // layout.tokens_per_hash > MAX_V033_HASHES:
            # the 0.33.0 model asks the store key by key, as vLLM does: bound the work
            raise ScenarioError(
                f"prompt_tokens: {s.prompt_tokens} tokens are more than {MAX_V033_HASHES:,} "
                f"hash blocks of {layout.tokens_per_hash} (the {CHUNKED_MODEL} model's bound)")
        if enforce:
            layout_chunked.check_request(s, layout, sem.base_version,
                                         sem.steps.fine_gpu_hits)
    except Refused as e:
        return Outcome(sem.name, str(e), None, (), ())
    # a GPU hit the engine produces reaches the connector rounded down to the scheduler
    # block (layout_chunked.connector_tokens); one it cannot produce (enforce=False) is
    # passed as it is, as the cross-check's harness does
    real_hit = s.num_computed_tokens % layout.cache_hit_alignment_tokens == 0
    seen = layout_chunked.connector_tokens(layout, s.num_computed_tokens) if real_hit \
        else s.num_computed_tokens
    sc = s if seen == s.num_computed_tokens else replace(s, num_computed_tokens=seen)
    res, boundary = lookup_chunked.get_num_new_matched_tokens(layout, sc, sem)
    kept = layout_chunked.keeps_local_tail(s.num_computed_tokens, seen, res.num_hit_tokens)
    loaded = 0 if kept else res.num_hit_tokens
    plan = load_chunked.load_plan(layout, sc, loaded, None if kept else boundary)
    violations = check_all(sc, layout, loaded, plan)
    if s.valid_hit is not None and res.num_hit_tokens is not None:
        violations += _maximality_claim_chunked(sc, layout, res.num_hit_tokens)
    return Outcome(sem.name, None, res.num_hit_tokens, plan.loads, tuple(violations),
                   res, layout, plan.assertion, boundary, kept)


def _maximality_claim_chunked(s: Scenario, layout: layout_chunked.ChunkLayout,
                           hit: int) -> list[Violation]:
    """The file's ``valid_hit`` on 0.33.0 (``model.maximality_chunked``, complete chunks)."""
    assert s.valid_hit is not None
    broken = maximality_chunked.broken_rules(s, layout, s.valid_hit)
    if broken:
        raise ScenarioError(f"valid_hit: {s.valid_hit} is not a valid hit for this scenario "
                            f"(breaks {', '.join(broken)}: model/maximality_chunked.py)")
    if s.valid_hit > hit:
        return [Violation("maximality",
                          f"not maximal: hit {hit}, a valid hit of {s.valid_hit} exists")]
    return []


def _maximality_claim(s: Scenario, layout: Layout, sem: Semantics, hit: int) -> list[Violation]:
    """The file's ``valid_hit``: a valid hit above the lookup's is a maximality violation;
    a claimed hit that is not valid is bad input."""
    if not is_valid_hit(s, layout, sem, s.valid_hit or 0):
        raise ScenarioError(f"valid_hit: {s.valid_hit} is not a valid hit for this scenario "
                            f"under {sem.name} (model/maximality.py)")
    if s.valid_hit is not None and s.valid_hit > hit:
        return [Violation("maximality",
                          f"not maximal: hit {hit}, a valid hit of {s.valid_hit} exists")]
    return []
