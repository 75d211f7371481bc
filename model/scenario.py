"""The scenario format: one lookup's configuration, request and store content.

A scenario is a JSON object that people write by hand and that proofs/ and sim/
exchange. ``parse_scenario`` turns it into a frozen ``Scenario`` or raises
``ScenarioError`` with a one-line message that names the offending field.

Validation is declarative: ``TOP_FIELDS`` and ``GROUP_FIELDS`` list every field with its
type, bounds and default (add a field by adding a row). Sizes a real engine cannot
reach are refused with the limit named:

- token counts and sizes at most ``MAX_TOKENS`` = 2**24 (16,777,216): above the longest
  context of any model vLLM serves (Llama 4 Scout, 10M tokens; vLLM refuses a prompt
  longer than ``max_model_len``, v1/engine/input_processor.py), so no request reaches it;
- at most ``MAX_GROUPS`` = 512 groups: a KV-cache group holds at least one attention or
  Mamba layer, and no model vLLM serves has that many layers (Llama 3.1 405B has 126);
- a block index at most ``prompt_tokens`` (a block holds at least one token): the store's
  keys come from the prompt's block hashes, so a block past the prompt is never looked up;
- a file at most ``MAX_FILE_BYTES`` (16 MiB) and JSON nested at most ``MAX_DEPTH`` deep.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model.semantics import MODEL_SEMANTICS as SEMANTICS

KINDS = ("full_attention", "sliding_window", "mamba")
MAMBA_MODES = ("none", "align", "all")
MAX_TOKENS = 2**24
MAX_GROUPS = 512
MAX_FILE_BYTES = 16 * 2**20
MAX_DEPTH = 32
_TOKENS_WHY = "longer than any model vLLM serves (max_model_len)"


class ScenarioError(ValueError):
    """Bad input: the message is one line and starts with the field's path."""


@dataclass(frozen=True)
class Expect:
    """What a scenario file says its lookup gives; ``python -m model`` checks it."""

    hit_tokens: int | None | str = "any"  # an int, None (deferred) or "any"
    violations: tuple[str, ...] | None = None  # None: not checked


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
    # vllm-0.33.0 only (older releases have no such answer or key): blocks whose lookup
    # answers HIT_PENDING, and partial-tail keys named by the token position they end at
    pending: frozenset[int] = frozenset()
    stored_tails: frozenset[int] = frozenset()
    pending_tails: frozenset[int] = frozenset()
    deferred_tails: frozenset[int] = frozenset()

    def answer(self, block: int) -> bool | None:
        """What the offloading manager's ``lookup`` answers for this group's block
        (releases before 0.33.0: a pending block is not ready, as a deferred one)."""
        if block in self.deferred or block in self.pending:
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
    # vllm-0.33.0 only: kv_connector_extra_config["blocks_per_chunk"] (offloaded block =
    # blocks_per_chunk GPU blocks of each group), and the per-request caps: the scheduler's
    # max_num_new_tokens argument and kv_transfer_params["max_load_tokens"]
    blocks_per_chunk: int | None = None
    max_num_new_tokens: int | None = None
    max_load_tokens: int | None = None
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
    expect: Expect | None = field(default=None, compare=False)

    @property
    def num_tokens(self) -> int:
        """``request.num_tokens``: the prompt plus any output tokens (resumed request)."""
        return self.prompt_tokens + self.output_tokens

    def with_semantics(self, name: str) -> Scenario:
        from dataclasses import replace

        return replace(self, semantics=name)


# ---- the field tables -----------------------------------------------------------------

REQUIRED = object()  # a Field default: the field must be present


@dataclass(frozen=True)
class Field:
    """One JSON field: its type, bounds and default (``REQUIRED``: must be present)."""

    name: str
    type: str  # int | bool | str | blocks | blocks_or_all | tokens | choice | any
    default: Any = REQUIRED
    minimum: int = 0
    maximum: int = MAX_TOKENS
    why: str = _TOKENS_WHY  # why the maximum
    choices: tuple[str, ...] = ()
    only_for: str | None = None  # a group field that only this kind has


TOP_FIELDS: tuple[Field, ...] = (
    Field("semantics", "choice", choices=tuple(SEMANTICS)),
    Field("block_size_factor", "int", minimum=1),
    Field("prompt_tokens", "int", minimum=1),
    Field("num_computed_tokens", "int", minimum=0),
    Field("groups", "any"),
    Field("enable_prefix_caching", "bool", True),
    Field("skip_reading_prefix_cache", "bool", False),
    Field("in_flight_transfers", "bool", False),
    Field("mamba_block_size", "int", None, minimum=1),
    Field("hash_block_size", "int", None, minimum=1),
    Field("blocks_per_chunk", "int", None, minimum=1),
    Field("max_num_new_tokens", "int", None, minimum=0),
    Field("max_load_tokens", "int", None, minimum=0),
    # a resumed request's output tokens (its lookup reads request.num_tokens)
    Field("output_tokens", "int", 0, minimum=0),
    # decode_context_parallel_size * prefill_context_parallel_size: each a share of the
    # deployment's GPUs
    Field("context_parallel_size", "int", 1, minimum=1, maximum=4096,
          why="more GPUs than one vLLM deployment spans"),
    # a maximality counterexample's claimed valid hit (checked by the model)
    Field("valid_hit", "int", None, minimum=1),
    Field("description", "str", None),
    Field("expect", "any", None),
)
GROUP_FIELDS: tuple[Field, ...] = (
    Field("kind", "choice", choices=KINDS),
    Field("gpu_block_size", "int", minimum=1),
    Field("stored", "blocks_or_all"),
    # vLLM asserts sliding_window > 0 (scheduler.py:97)
    Field("sliding_window", "int", minimum=1, only_for="sliding_window"),
    Field("mamba_cache_mode", "choice", choices=MAMBA_MODES, only_for="mamba"),
    Field("eagle", "bool", False),
    Field("deferred", "blocks", frozenset()),
    Field("being_loaded", "blocks", frozenset()),
    Field("pending", "blocks", frozenset()),
    # token positions a partial-tail key ends at (vllm-0.33.0): at most prompt_tokens
    Field("stored_tails", "tokens", frozenset()),
    Field("pending_tails", "tokens", frozenset()),
    Field("deferred_tails", "tokens", frozenset()),
)
EXPECT_FIELDS: tuple[Field, ...] = (
    Field("hit_tokens", "any", "any"),
    Field("violations", "any", None),
)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _blocks(value: Any, where: str, allow_all: bool, limit: int) -> frozenset[int] | None:
    if allow_all and value == "all":
        return None
    hint = ' or "all"' if allow_all else ""
    if not isinstance(value, list):
        raise ScenarioError(f"{where}: expected a list of block indices{hint}, "
                            f"got {_show(value)}")
    for v in value:
        if not _is_int(v) or v < 0:
            raise ScenarioError(f"{where}: expected block indices >= 0{hint}, got {_show(v)}")
        if v > limit:
            raise ScenarioError(
                f"{where}: block {v} lies past the prompt (at most prompt_tokens = {limit}: "
                "the store's keys come from the prompt)")
    out = frozenset(value)
    if len(out) != len(value):
        raise ScenarioError(f"{where}: a block index is listed twice")
    return out


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _value(f: Field, obj: Mapping[str, Any], where: str, block_limit: int = 0,
           token_limit: int = MAX_TOKENS) -> Any:
    """The field's value from ``obj``, checked against its row (or its default)."""
    path = f"{where}{f.name}"
    if f.name not in obj or (obj[f.name] is None and f.default is None):
        if f.default is REQUIRED:
            raise ScenarioError(f"{path}: required field is missing")
        return f.default
    v = obj[f.name]
    if f.type == "int":
        if not _is_int(v):
            raise ScenarioError(f"{path}: expected an integer, got {_show(v)}")
        if v < f.minimum:
            raise ScenarioError(f"{path}: must be >= {f.minimum}, got {v}")
        if v > f.maximum:
            raise ScenarioError(f"{path}: at most {f.maximum:,} ({f.why}), got "
                                f"{_show(v)}")
        return v
    if f.type == "bool":
        if not isinstance(v, bool):
            raise ScenarioError(f"{path}: expected true or false, got {_show(v)}")
        return v
    if f.type == "str":
        if not isinstance(v, str):
            raise ScenarioError(f"{path}: expected a string, got {_show(v)}")
        return v
    if f.type == "choice":
        if not isinstance(v, str) or v not in f.choices:
            raise ScenarioError(f"{path}: expected one of {', '.join(f.choices)}, "
                                f"got {_show(v)}")
        return v
    if f.type in ("blocks", "blocks_or_all"):
        return _blocks(v, path, f.type == "blocks_or_all", block_limit)
    if f.type == "tokens":
        return _blocks(v, path, False, token_limit)
    return v


def _check_fields(obj: Any, table: tuple[Field, ...], where: str, what: str) -> None:
    if not isinstance(obj, dict):
        raise ScenarioError(f"{where.rstrip('.') or 'scenario'}: expected {what}, "
                            f"got {type(obj).__name__}")
    known = {f.name for f in table}
    unknown = sorted(k for k in obj if k not in known)
    if unknown:
        name = unknown[0] if unknown[0].isidentifier() else json.dumps(unknown[0])[:40]
        raise ScenarioError(f"{where}{name}: unknown field (known: "
                            f"{', '.join(sorted(known))})")


def _group(raw: Any, i: int, factor: int, prompt_tokens: int) -> Group:
    where = f"groups[{i}]."
    _check_fields(raw, GROUP_FIELDS, where, "an object")
    rows = {f.name: f for f in GROUP_FIELDS}
    kind = _value(rows["kind"], raw, where)
    values: dict[str, Any] = {"kind": kind}
    limit = prompt_tokens  # a block holds at least one token (0.33.0 counts chunks)
    for f in GROUP_FIELDS[1:]:
        if f.only_for is not None and f.only_for != kind:
            if f.name in raw:
                raise ScenarioError(f"{where}{f.name}: only for kind {f.only_for}")
            values[f.name] = None
            continue
        values[f.name] = _value(f, raw, where, limit, prompt_tokens)
    return Group(**values)


def _expect(raw: Any) -> Expect | None:
    if raw is None:
        return None
    _check_fields(raw, EXPECT_FIELDS, "expect.", "an object")
    hit = raw.get("hit_tokens", "any")
    if not (hit is None or hit == "any" or (_is_int(hit) and 0 <= hit <= MAX_TOKENS)):
        raise ScenarioError(f"expect.hit_tokens: expected a token count, null (deferred) "
                            f"or \"any\", got {_show(hit)}")
    from model.invariants import INVARIANTS

    names = raw.get("violations")
    if names is not None and not (isinstance(names, list) and all(
            isinstance(n, str) and n in INVARIANTS for n in names)):
        raise ScenarioError(f"expect.violations: expected a list of invariant names "
                            f"({', '.join(INVARIANTS)}), got {_show(names)}")
    return Expect(hit, None if names is None else tuple(sorted(set(names))))


def parse_scenario(raw: Any, semantics: str | None = None) -> Scenario:
    """Validate a decoded JSON object and build a ``Scenario`` (raises ``ScenarioError``).

    ``semantics`` (a known name) stands in for a missing ``semantics`` field.
    """
    _check_fields(raw, TOP_FIELDS, "", "a JSON object")
    if semantics is not None and "semantics" not in raw:
        raw = {**raw, "semantics": semantics}
    top = {f.name: _value(f, raw, "") for f in TOP_FIELDS if f.name != "groups"}
    groups_raw = raw.get("groups")
    if not isinstance(groups_raw, list) or not groups_raw:
        raise ScenarioError("groups: expected a non-empty list of groups")
    if len(groups_raw) > MAX_GROUPS:
        raise ScenarioError(f"groups: at most {MAX_GROUPS} groups (a group holds at least one "
                            f"layer; no model vLLM serves has more), got {len(groups_raw):,}")
    factor, prompt = top["block_size_factor"], top["prompt_tokens"]
    tokens = prompt + top["output_tokens"]  # request.num_tokens: what the lookup reads
    return Scenario(
        semantics=top["semantics"],
        block_size_factor=factor,
        prompt_tokens=prompt,
        num_computed_tokens=top["num_computed_tokens"],
        groups=tuple(_group(g, i, factor, tokens) for i, g in enumerate(groups_raw)),
        enable_prefix_caching=top["enable_prefix_caching"],
        skip_reading_prefix_cache=top["skip_reading_prefix_cache"],
        in_flight_transfers=top["in_flight_transfers"],
        mamba_block_size=top["mamba_block_size"],
        hash_block_size=top["hash_block_size"],
        blocks_per_chunk=top["blocks_per_chunk"],
        max_num_new_tokens=top["max_num_new_tokens"],
        max_load_tokens=top["max_load_tokens"],
        output_tokens=top["output_tokens"],
        context_parallel_size=top["context_parallel_size"],
        valid_hit=top["valid_hit"],
        extra={k: raw[k] for k in ("description", "expect") if k in raw},
        expect=_expect(top["expect"]),
    )


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ScenarioError(f"{k}: duplicate key")
        out[k] = v
    return out


def _no_constant(name: str) -> Any:
    raise ScenarioError(f"not JSON ({name} is not a JSON number)")


def _depth_ok(text: str) -> bool:
    """Nesting at most ``MAX_DEPTH`` deep, counted without recursion (json.loads would
    recurse and end in a RecursionError)."""
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def decode_json(data: bytes, name: str, hook: Callable[[list[tuple[str, Any]]], Any]
                = _no_duplicates) -> Any:
    """Bytes -> JSON, refusing bad UTF-8, duplicate keys, NaN, huge and deep input."""
    if len(data) > MAX_FILE_BYTES:
        raise ScenarioError(f"{name}: larger than {MAX_FILE_BYTES // 2**20} MiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ScenarioError(f"{name}: not UTF-8 (byte {e.start})") from None
    if not _depth_ok(text):
        raise ScenarioError(f"{name}: nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(text, object_pairs_hook=hook, parse_constant=_no_constant)
    except ScenarioError as e:
        raise ScenarioError(f"{name}: {e}") from None
    except json.JSONDecodeError as e:
        raise ScenarioError(f"{name}: not JSON ({e.msg} at line {e.lineno})") from None
    except (ValueError, RecursionError) as e:  # e.g. an integer of over 4,300 digits
        raise ScenarioError(f"{name}: not JSON ({str(e).splitlines()[0][:80]})") from None


def read_bytes(path: Path) -> bytes:
    """A file's bytes, reading no more than the size limit (+1 to detect it).  Only a
    regular file is read: opening a FIFO (or reading a device) would wait forever."""
    try:
        mode = path.stat().st_mode
    except OSError as e:
        raise ScenarioError(f"{path}: cannot read ({e.strerror or e})") from None
    if not stat.S_ISREG(mode):
        raise ScenarioError(f"{path}: not a regular file (a FIFO, socket or device); "
                            "name a scenario file")
    try:
        with path.open("rb") as fh:
            return fh.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise ScenarioError(f"{path}: cannot read ({e.strerror or e})") from None


def load_scenario_file(path: str | Path, semantics: str | None = None) -> Scenario:
    p = Path(path)
    if str(path) == "":
        raise ScenarioError("path: empty")
    if p.is_dir():
        raise ScenarioError(f"{p}: is a directory")
    return parse_scenario(decode_json(read_bytes(p), str(p)), semantics)


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
        for name in ("pending", "stored_tails", "pending_tails", "deferred_tails"):
            if getattr(g, name):
                d[name] = sorted(getattr(g, name))
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
    for name in ("blocks_per_chunk", "max_num_new_tokens", "max_load_tokens"):
        if getattr(s, name) is not None:
            out[name] = getattr(s, name)
    if s.output_tokens:
        out["output_tokens"] = s.output_tokens
    if s.context_parallel_size != 1:
        out["context_parallel_size"] = s.context_parallel_size
    if s.valid_hit is not None:
        out["valid_hit"] = s.valid_hit
    return out


def iter_scenario_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files named, plus every ``*.json`` below each directory named (sorted).

    Raises ``ScenarioError`` for an empty path and for a directory without a scenario.
    """
    out: list[Path] = []
    for raw in paths:
        if str(raw) == "":
            raise ScenarioError("path: empty (name a scenario file or a directory)")
        p = Path(raw)
        if p.is_dir():
            found = sorted(p.rglob("*.json"))
            if not found:
                raise ScenarioError(f"{p}: no scenario file (*.json) in this directory")
            out.extend(found)
        else:
            out.append(p)
    return out
