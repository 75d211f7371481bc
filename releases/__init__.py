"""The registry of every semantics the project models: vLLM releases and fixes of them.

Each is one module of this package (``SEMANTICS``, built on its parent with
``releases.base.child``); the registry lists them in the order reports show them. A
semantics name is spelled in its own module and nowhere else: other code asks the registry
(``get``, ``names``, ``newest``, ``fixes``). More modules plug in without an edit here:
``OLC_SEMANTICS=pkg.mod[,pkg.mod2]`` names modules whose ``SEMANTICS`` are registered
after the built-in ones (their parents first).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable

from releases.base import ChunkSteps, Expect, Semantics

__all__ = ["ChunkSteps", "Expect", "Semantics", "get", "names", "newest", "newest_proved",
           "register",
           "all_semantics", "releases", "fixes", "fix_for", "by_version", "versions",
           "reference", "proved"]

# the built-in modules, in report order: the block lookup's family, then the chunked one's
BUILTIN = ("vllm_0_23_0", "vllm_0_24_0", "alt_round_num_hit", "alt_cache_config_block_size",
           "vllm_0_25_0", "vllm_0_26_0", "vllm_0_27_0",
           "vllm_0_33_0", "fix_001_reround", "fix_001_reround_rerun", "fix_003_cap_min",
           "vllm_0_32_0", "vllm_0_31_0", "vllm_0_30_0",
           "vllm_0_29_0", "vllm_0_28_0")
PLUGINS_ENV = "OLC_SEMANTICS"

_REGISTRY: dict[str, Semantics] = {}


def register(sem: Semantics) -> Semantics:
    """Add ``sem``; its parent must be registered, and its name must be new."""
    if sem.name in _REGISTRY and _REGISTRY[sem.name] is not sem:
        raise ValueError(f"semantics: {sem.name!r} is registered twice")
    if sem.parent is not None and sem.parent not in _REGISTRY:
        raise ValueError(f"semantics: {sem.name!r} names parent {sem.parent!r}, "
                         "which is not registered")
    _REGISTRY[sem.name] = sem
    return sem


def _load(modules: Iterable[str]) -> None:
    for mod in modules:
        register(importlib.import_module(mod).SEMANTICS)


_load(f"releases.{m}" for m in BUILTIN)
_plugins = [m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip()]
if _plugins:
    try:
        _load(_plugins)
    except (ImportError, AttributeError) as e:
        raise SystemExit(f"{PLUGINS_ENV}: cannot register {', '.join(_plugins)}: {e}") from None


def all_semantics() -> dict[str, Semantics]:
    return dict(_REGISTRY)


def get(name: str) -> Semantics:
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(_REGISTRY)
        raise ValueError(f"semantics: unknown name {name!r} (known: {known})") from None


def names(*, family: str | None = None, kind: str | None = None) -> tuple[str, ...]:
    """Registered names in report order, optionally of one family or kind."""
    return tuple(n for n, s in _REGISTRY.items()
                 if (family is None or s.family == family) and (kind is None or s.kind == kind))


def releases(family: str | None = None) -> tuple[str, ...]:
    """The vLLM releases modelled (optionally: of one lookup family), oldest first."""
    rel = [s for s in _REGISTRY.values()
           if s.kind == "release" and (family is None or s.family == family)]
    return tuple(s.name for s in sorted(rel, key=lambda s: _version_key(s.base_version)))


def versions(family: str | None = None) -> tuple[str, ...]:
    """The vLLM versions of ``releases(family)`` (e.g. ``0.24.0``), oldest first."""
    return tuple(get(n).base_version for n in releases(family))


def newest(family: str | None = None) -> Semantics:
    """The newest modelled vLLM release (optionally: the newest of one lookup family)."""
    rel = releases(family)
    if not rel:
        raise ValueError(f"semantics: no release of family {family!r}")
    return get(rel[-1])


def newest_proved(family: str | None = None) -> Semantics:
    """The newest modelled release (optionally of one family) the proofs encode."""
    rel = [n for n in releases(family) if get(n).expect]
    if not rel:
        raise ValueError(f"semantics: no release of family {family!r} in the proofs")
    return get(rel[-1])


def proved(family: str | None = None) -> tuple[str, ...]:
    """Registered names (optionally of one family) the proofs encode: those with theorem
    expectations. A semantics whose overridden steps the encodings lack declares none
    (vllm-0.32.0's partial tail) and is left to the model and the cross-check."""
    return tuple(n for n in names(family=family) if get(n).expect)


def reference(family: str) -> Semantics:
    """The release whose code a family's model follows line by line: the family's release
    built on no other release of the family (the chunked family: 0.33.0; its older
    releases are built on it, each as a delta)."""
    def built_on_family(s: Semantics) -> bool:
        return s.parent is not None and get(s.parent).family == family

    roots = [get(n) for n in releases(family) if not built_on_family(get(n))]
    if len(roots) != 1:
        raise ValueError(f"semantics: family {family!r} has {len(roots)} reference releases")
    return roots[0]


def fixes(finding: str | None = None, of: str | None = None) -> tuple[str, ...]:
    """Fixes (optionally of one finding, or built on one release)."""
    return tuple(n for n, s in _REGISTRY.items() if s.kind == "fix"
                 and (finding is None or s.finding == finding)
                 and (of is None or s.base_version == get(of).base_version))


def fix_for(finding: str, *, completed: bool = False) -> Semantics:
    """The fix of ``finding`` as first proposed (the one built on a release), or with
    ``completed`` the last of its chain (the one no other fix of the finding builds on)."""
    chain = [get(n) for n in fixes(finding=finding)]
    if not chain:
        raise ValueError(f"semantics: no fix of finding {finding!r}")
    if completed:
        built_on = {s.parent for s in chain}
        ends = [s for s in chain if s.name not in built_on]
    else:
        ends = [s for s in chain if s.parent not in {c.name for c in chain}]
    if len(ends) != 1:
        raise ValueError(f"semantics: finding {finding!r} has {len(ends)} "
                         f"{'completed' if completed else 'first'} fixes: "
                         f"{', '.join(s.name for s in ends)}")
    return ends[0]


def by_version(version: str) -> Semantics:
    """The release semantics of vLLM ``version`` (e.g. ``0.24.0``)."""
    for s in _REGISTRY.values():
        if s.kind == "release" and s.base_version == version:
            return s
    raise ValueError(f"vllm version: {version!r} is not modelled "
                     f"(modelled: {', '.join(get(n).base_version for n in releases())})")


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))
