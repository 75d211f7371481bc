"""Scenario templates from the KV-cache group layouts real model configurations produce.

``docs/layouts-vllm-0.33.0.json`` is written by ``python -m sim.layouts`` from vLLM 0.33.0's
own start-up code (see ``sim/layouts/README.md``). Each row is a model configuration, an
attention backend and a drafter, and what vLLM made of them: the KV-cache groups (kind,
block size, window, Mamba mode, EAGLE flag), the hash block size, ``blocks_per_chunk``,
``supports_partial_tail``, or the check that refused it. ``load_templates`` reads the rows;
``LayoutTemplate.scenario`` fills in a prompt and a store and returns a scenario in the
project's format, so the generator and the proofs can draw a real layout.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import releases
from model.scenario import KINDS, Scenario, ScenarioError, parse_scenario

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TABLE = ROOT / "docs" / "layouts-vllm-0.33.0.json"
STATUSES = ("accepted", "refused")


class LayoutError(ValueError):
    """A malformed layout table: one line naming the row and field."""


@dataclass(frozen=True)
class LayoutGroup:
    kind: str
    block_size: int
    num_layers: int
    sliding_window: int | None = None
    mamba_cache_mode: str | None = None
    eagle: bool = False


@dataclass(frozen=True)
class LayoutTemplate:
    model: str
    like: str
    architecture: str
    backend: str
    drafter: str
    # kv_connector_extra_config["blocks_per_chunk"] / --prefix-match-unit asked for (None: unset)
    blocks_per_chunk_config: int | None
    prefix_match_unit: int | None
    status: str
    refused_by: str | None = None
    error: str | None = None
    groups: tuple[LayoutGroup, ...] = ()
    hash_block_size: int | None = None
    blocks_per_chunk: int | None = None
    supports_partial_tail: bool | None = None
    mamba_align_size: int | None = None

    @property
    def key(self) -> str:
        parts = [self.model, self.backend, self.drafter]
        if self.blocks_per_chunk_config is not None:
            parts.append(f"bpc{self.blocks_per_chunk_config}")
        if self.prefix_match_unit is not None:
            parts.append(f"pmu{self.prefix_match_unit}")
        return "/".join(parts)

    @property
    def accepted(self) -> bool:
        return self.status == "accepted"

    def scenario_json(
        self,
        *,
        semantics: str,
        prompt_tokens: int,
        num_computed_tokens: int = 0,
        stored: Sequence[Any] | None = None,
    ) -> dict[str, Any]:
        """This layout as a scenario object; ``stored[i]`` is group i's store ("all" or
        offloaded block indices; default "all"). Only for accepted rows."""
        if not self.accepted:
            raise LayoutError(f"{self.key}: refused by vLLM 0.33.0 ({self.refused_by})")
        if stored is not None and len(stored) != len(self.groups):
            raise LayoutError(
                f"{self.key}: stored: expected {len(self.groups)} entries, got {len(stored)}"
            )
        groups = []
        for i, g in enumerate(self.groups):
            d: dict[str, Any] = {"kind": g.kind, "gpu_block_size": g.block_size,
                                 "stored": "all" if stored is None else stored[i]}
            if g.sliding_window is not None:
                d["sliding_window"] = g.sliding_window
            if g.mamba_cache_mode is not None:
                d["mamba_cache_mode"] = g.mamba_cache_mode
            if g.eagle:
                d["eagle"] = True
            groups.append(d)
        bpc = self.blocks_per_chunk or 1
        out: dict[str, Any] = {
            "description": f"vLLM 0.33.0 layout {self.key} (docs/layouts-vllm-0.33.0.md)",
            "semantics": semantics,
            "prompt_tokens": prompt_tokens,
            "num_computed_tokens": num_computed_tokens,
            "groups": groups,
        }
        sem = releases.all_semantics().get(semantics)
        if sem is not None and sem.chunked:
            # the chunked lookup (0.33.0 and its fixes) names the offloaded block in GPU
            # blocks (kv_connector_extra_config)
            out["block_size_factor"] = 1
            if bpc != 1:
                out["blocks_per_chunk"] = bpc
        else:
            # the older releases' extra-config "block_size" = factor * GPU block size
            out["block_size_factor"] = bpc
        if self.prefix_match_unit is not None:
            # cache_config.prefix_match_unit (0.33.0) is the hash block size override
            out["hash_block_size"] = self.prefix_match_unit
        return out

    def scenario(self, **kwargs: Any) -> Scenario:
        return parse_scenario(self.scenario_json(**kwargs))


@dataclass(frozen=True)
class Flags:
    """The layout features under which the invariants may break."""

    mixed_block_sizes: bool  # groups with different block sizes
    mamba_not_multiple: bool  # a Mamba block not a multiple of every attention block
    mamba_partial_tail: bool  # a Mamba block larger than the hash block
    eagle: bool  # an EAGLE group

    def names(self) -> tuple[str, ...]:
        return tuple(
            name for name, on in (
                ("mixed-block-sizes", self.mixed_block_sizes),
                ("mamba-not-multiple", self.mamba_not_multiple),
                ("mamba-partial-tail", self.mamba_partial_tail),
                ("eagle", self.eagle),
            ) if on
        )


def flags(t: LayoutTemplate) -> Flags:
    sizes = {g.block_size for g in t.groups}
    mamba = [g.block_size for g in t.groups if g.kind == "mamba"]
    attention = [g.block_size for g in t.groups if g.kind != "mamba"]
    hash_size = t.hash_block_size
    return Flags(
        mixed_block_sizes=len(sizes) > 1,
        mamba_not_multiple=any(m % a for m in mamba for a in attention),
        mamba_partial_tail=hash_size is not None and any(m > hash_size for m in mamba),
        eagle=any(g.eagle for g in t.groups),
    )


def _get(row: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str,
         optional: bool = False) -> Any:
    if key not in row or (optional and row[key] is None):
        if optional:
            return None
        raise LayoutError(f"{where}{key}: required field is missing")
    value = row[key]
    if isinstance(value, bool) and kind is int:
        raise LayoutError(f"{where}{key}: expected {kind.__name__}, got {value!r}")
    if not isinstance(value, kind):
        raise LayoutError(f"{where}{key}: expected {kind}, got {value!r}")
    return value


def _group(raw: Any, where: str) -> LayoutGroup:
    if not isinstance(raw, dict):
        raise LayoutError(f"{where}: expected an object, got {raw!r}")
    kind = _get(raw, "kind", str, where + ".")
    if kind not in KINDS:
        raise LayoutError(f"{where}.kind: expected one of {', '.join(KINDS)}, got {kind!r}")
    block_size = _get(raw, "block_size", int, where + ".")
    if block_size < 1:
        raise LayoutError(f"{where}.block_size: must be >= 1, got {block_size}")
    return LayoutGroup(
        kind=kind,
        block_size=block_size,
        num_layers=_get(raw, "num_layers", int, where + "."),
        sliding_window=_get(raw, "sliding_window", int, where + ".", optional=True),
        mamba_cache_mode=_get(raw, "mamba_cache_mode", str, where + ".", optional=True),
        eagle=_get(raw, "eagle", bool, where + "."),
    )


def parse_row(raw: Any, i: int) -> LayoutTemplate:
    where = f"rows[{i}]."
    if not isinstance(raw, dict):
        raise LayoutError(f"rows[{i}]: expected an object, got {type(raw).__name__}")
    status = _get(raw, "status", str, where)
    if status not in STATUSES:
        raise LayoutError(f"{where}status: expected one of {', '.join(STATUSES)}, "
                          f"got {status!r}")
    common: dict[str, Any] = dict(
        model=_get(raw, "model", str, where),
        like=_get(raw, "like", str, where),
        architecture=_get(raw, "architecture", str, where),
        backend=_get(raw, "backend", str, where),
        drafter=_get(raw, "drafter", str, where),
        blocks_per_chunk_config=_get(raw, "blocks_per_chunk_config", int, where, True),
        prefix_match_unit=_get(raw, "prefix_match_unit", int, where, True),
        status=status,
    )
    if status == "refused":
        return LayoutTemplate(**common, refused_by=_get(raw, "refused_by", str, where),
                              error=_get(raw, "error", str, where))
    groups_raw = _get(raw, "groups", list, where)
    if not groups_raw:
        raise LayoutError(f"{where}groups: expected a non-empty list")
    return LayoutTemplate(
        **common,
        groups=tuple(_group(g, f"{where}groups[{j}]") for j, g in enumerate(groups_raw)),
        hash_block_size=_get(raw, "hash_block_size", int, where),
        blocks_per_chunk=_get(raw, "blocks_per_chunk", int, where),
        supports_partial_tail=_get(raw, "supports_partial_tail", bool, where),
        mamba_align_size=_get(raw, "mamba_align_size", int, where, True),
    )


def parse_table(raw: Any) -> tuple[LayoutTemplate, ...]:
    if not isinstance(raw, dict) or not isinstance(raw.get("rows"), list):
        raise LayoutError("rows: expected an object with a list of rows")
    return tuple(parse_row(r, i) for i, r in enumerate(raw["rows"]))


def load_templates(path: str | Path = DEFAULT_TABLE) -> tuple[LayoutTemplate, ...]:
    p = Path(path)
    try:
        raw = json.loads(p.read_text())
    except OSError as e:
        raise LayoutError(f"{p}: cannot read ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise LayoutError(f"{p}: not JSON ({e.msg} at line {e.lineno})") from None
    return parse_table(raw)


__all__ = [
    "DEFAULT_TABLE", "Flags", "LayoutError", "LayoutGroup", "LayoutTemplate", "ScenarioError",
    "flags", "load_templates", "parse_table",
]
