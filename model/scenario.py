"""The scenario format: one lookup's configuration, request and store content.

A scenario is a JSON object that people write by hand and that proofs/ and sim/
exchange. ``parse_scenario`` turns it into a frozen ``Scenario`` or raises
``ScenarioError`` with a one-line message that names the offending field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model.semantics import SEMANTICS

KINDS = ("full_attention", "sliding_window", "mamba")
MAMBA_MODES = ("none", "align", "all")

_GROUP_FIELDS = {
    "kind", "gpu_block_size", "stored", "sliding_window", "mamba_cache_mode", "eagle",
    "deferred", "being_loaded",
}
_TOP_FIELDS = {
    "semantics", "block_size_factor", "prompt_tokens", "num_computed_tokens", "groups",
    "enable_prefix_caching", "skip_reading_prefix_cache", "in_flight_transfers",
    "mamba_block_size", "hash_block_size", "description", "expect",
    "output_tokens", "context_parallel_size", "valid_hit",
}


class ScenarioError(ValueError):
    """Bad input: the message is one line and starts with the field's path."""


@dataclass(frozen=True)
class Group:
    """One KV-cache group and what the offload store holds for it.

    ``stored`` is None when the store holds every offloaded block of the group.
    Block indices count offloaded blocks (``gpu_block_size * block_size_factor`` tokens).
    """

    kind: str
    gpu_block_size: int
    stored: frozenset[int] | None = None
    sliding_window: int | None = None
    mamba_cache_mode: str | None = None
    eagle: bool = False
    deferred: frozenset[int] = frozenset()
    being_loaded: frozenset[int] = frozenset()

    def answer(self, block: int) -> bool | None:
        """What the offloading manager's ``lookup`` answers for this group's block."""
        if block in self.deferred:
            return None
        return self.holds(block)

    def holds(self, block: int) -> bool:
        return self.stored is None or block in self.stored

    @property
    def restores_state(self) -> bool:
        """A Mamba group whose hit restores a saved recurrent state (modes align, all)."""
        return self.kind == "mamba" and self.mamba_cache_mode in ("align", "all")


@dataclass(frozen=True)
class Scenario:
    semantics: str
    block_size_factor: int
    prompt_tokens: int
    num_computed_tokens: int
    groups: tuple[Group, ...]
    enable_prefix_caching: bool = True
    skip_reading_prefix_cache: bool = False
    in_flight_transfers: bool = False
    # cache_config.mamba_block_size, read only by alt-cache-config-block-size
    mamba_block_size: int | None = None
    # cache_config.hash_block_size override (kv_cache_utils.py resolve_kv_cache_block_sizes)
    hash_block_size: int | None = None
    # a resumed or preempted request's output tokens: vLLM's lookup reads
    # request.num_tokens, prompt plus output (scheduler.py:462 (397), v1/request.py:247)
    output_tokens: int = 0
    # decode_context_parallel_size * prefill_context_parallel_size: the offloading
    # gpu_block_size is the group's block size times it (v1/kv_offload/base.py:481 (408))
    context_parallel_size: int = 1
    # a hit the file claims is valid and larger than the lookup's (maximality
    # counterexamples); ``python -m model lookup`` checks the claim
    valid_hit: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def num_tokens(self) -> int:
        """``request.num_tokens``: the prompt plus any output tokens (resumed request)."""
        return self.prompt_tokens + self.output_tokens

    def with_semantics(self, name: str) -> Scenario:
        from dataclasses import replace

        return replace(self, semantics=name)


def _int(obj: Mapping[str, Any], key: str, where: str, minimum: int, default: Any = ...) -> Any:
    if key not in obj:
        if default is ...:
            raise ScenarioError(f"{where}{key}: required field is missing")
        return default
    value = obj[key]
    if value is None and default is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScenarioError(f"{where}{key}: expected an integer, got {value!r}")
    if value < minimum:
        raise ScenarioError(f"{where}{key}: must be >= {minimum}, got {value}")
    return value


def _bool(obj: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    value = obj.get(key, default)
    if not isinstance(value, bool):
        raise ScenarioError(f"{where}{key}: expected true or false, got {value!r}")
    return value


def _blocks(obj: Mapping[str, Any], key: str, where: str, allow_all: bool) -> frozenset[int] | None:
    value = obj.get(key, [] if not allow_all else ...)
    if value is ...:
        raise ScenarioError(f"{where}{key}: required field is missing")
    if allow_all and value == "all":
        return None
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        hint = ' or "all"' if allow_all else ""
        raise ScenarioError(
            f"{where}{key}: expected a list of block indices >= 0{hint}, got {value!r}"
        )
    return frozenset(value)


def _group(raw: Any, i: int) -> Group:
    where = f"groups[{i}]."
    if not isinstance(raw, dict):
        raise ScenarioError(f"groups[{i}]: expected an object, got {raw!r}")
    unknown = sorted(set(raw) - _GROUP_FIELDS)
    if unknown:
        raise ScenarioError(f"{where}{unknown[0]}: unknown field")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise ScenarioError(f"{where}kind: expected one of {', '.join(KINDS)}, got {kind!r}")
    window = None
    mode = None
    if kind == "sliding_window":
        # vLLM asserts sliding_window > 0 (scheduler.py:97); a window of 0 is bad input.
        window = _int(raw, "sliding_window", where, 1)
    elif "sliding_window" in raw:
        raise ScenarioError(f"{where}sliding_window: only for kind sliding_window")
    if kind == "mamba":
        mode = raw.get("mamba_cache_mode")
        if mode not in MAMBA_MODES:
            raise ScenarioError(
                f"{where}mamba_cache_mode: expected one of {', '.join(MAMBA_MODES)}, got {mode!r}"
            )
    elif "mamba_cache_mode" in raw:
        raise ScenarioError(f"{where}mamba_cache_mode: only for kind mamba")
    return Group(
        kind=kind,
        gpu_block_size=_int(raw, "gpu_block_size", where, 1),
        stored=_blocks(raw, "stored", where, allow_all=True),
        sliding_window=window,
        mamba_cache_mode=mode,
        eagle=_bool(raw, "eagle", where, False),
        deferred=_blocks(raw, "deferred", where, allow_all=False) or frozenset(),
        being_loaded=_blocks(raw, "being_loaded", where, allow_all=False) or frozenset(),
    )


def parse_scenario(raw: Any) -> Scenario:
    """Validate a decoded JSON object and build a ``Scenario`` (raises ``ScenarioError``)."""
    if not isinstance(raw, dict):
        raise ScenarioError(f"scenario: expected a JSON object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - _TOP_FIELDS)
    if unknown:
        raise ScenarioError(f"{unknown[0]}: unknown field")
    semantics = raw.get("semantics")
    if semantics not in SEMANTICS:
        raise ScenarioError(
            f"semantics: unknown name {semantics!r} (known: {', '.join(SEMANTICS)})"
        )
    groups_raw = raw.get("groups")
    if not isinstance(groups_raw, list) or not groups_raw:
        raise ScenarioError("groups: expected a non-empty list of groups")
    return Scenario(
        semantics=semantics,
        block_size_factor=_int(raw, "block_size_factor", "", 1),
        prompt_tokens=_int(raw, "prompt_tokens", "", 1),
        num_computed_tokens=_int(raw, "num_computed_tokens", "", 0),
        groups=tuple(_group(g, i) for i, g in enumerate(groups_raw)),
        enable_prefix_caching=_bool(raw, "enable_prefix_caching", "", True),
        skip_reading_prefix_cache=_bool(raw, "skip_reading_prefix_cache", "", False),
        in_flight_transfers=_bool(raw, "in_flight_transfers", "", False),
        mamba_block_size=_int(raw, "mamba_block_size", "", 1, default=None),
        hash_block_size=_int(raw, "hash_block_size", "", 1, default=None),
        output_tokens=_int(raw, "output_tokens", "", 0, default=0),
        context_parallel_size=_int(raw, "context_parallel_size", "", 1, default=1),
        valid_hit=_int(raw, "valid_hit", "", 1, default=None),
        extra={k: raw[k] for k in ("description", "expect") if k in raw},
    )


def load_scenario_file(path: str | Path) -> Scenario:
    p = Path(path)
    try:
        raw = json.loads(p.read_text())
    except OSError as e:
        raise ScenarioError(f"{p}: cannot read ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise ScenarioError(f"{p}: not JSON ({e.msg} at line {e.lineno})") from None
    return parse_scenario(raw)


def _block_list(blocks: frozenset[int] | None) -> Any:
    return "all" if blocks is None else sorted(blocks)


def scenario_to_json(s: Scenario) -> dict[str, Any]:
    """The JSON object for ``s`` (round-trips through ``parse_scenario``)."""
    groups = []
    for g in s.groups:
        d: dict[str, Any] = {"kind": g.kind, "gpu_block_size": g.gpu_block_size}
        if g.sliding_window is not None:
            d["sliding_window"] = g.sliding_window
        if g.mamba_cache_mode is not None:
            d["mamba_cache_mode"] = g.mamba_cache_mode
        d["stored"] = _block_list(g.stored)
        if g.eagle:
            d["eagle"] = True
        if g.deferred:
            d["deferred"] = sorted(g.deferred)
        if g.being_loaded:
            d["being_loaded"] = sorted(g.being_loaded)
        groups.append(d)
    out: dict[str, Any] = dict(s.extra)
    out.update(
        semantics=s.semantics,
        block_size_factor=s.block_size_factor,
        prompt_tokens=s.prompt_tokens,
        num_computed_tokens=s.num_computed_tokens,
        groups=groups,
    )
    if not s.enable_prefix_caching:
        out["enable_prefix_caching"] = False
    if s.skip_reading_prefix_cache:
        out["skip_reading_prefix_cache"] = True
    if s.in_flight_transfers:
        out["in_flight_transfers"] = True
    if s.mamba_block_size is not None:
        out["mamba_block_size"] = s.mamba_block_size
    if s.hash_block_size is not None:
        out["hash_block_size"] = s.hash_block_size
    if s.output_tokens:
        out["output_tokens"] = s.output_tokens
    if s.context_parallel_size != 1:
        out["context_parallel_size"] = s.context_parallel_size
    if s.valid_hit is not None:
        out["valid_hit"] = s.valid_hit
    return out


def iter_scenario_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files named, plus every ``*.json`` below each directory named (sorted)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(p.rglob("*.json")))
        else:
            out.append(p)
    return out
