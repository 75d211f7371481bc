"""Finding 001's proposed fix (docs/findings/001-fix.diff), applied in process to the real
vLLM 0.33.0 ``OffloadingConnectorScheduler._lookup_complete_chunks``.

Runs INSIDE the vLLM 0.33.0 environment (imported by ``fix_check_v033.py`` and, with
``CROSSCHECK_FIX=001``, by ``harness_v033.py``).  ``patched_source`` inserts, after each of
the two per-group cuts of ``max_hit_size_tokens`` (the clamp to the group's keyed length
and the clamp to its confirmed chunks), a round-down to ``self._mamba_align_size``;
``apply_fix`` compiles the patched method in the scheduler module's own namespace and
replaces the method.  Model side: semantics ``alt-v033-reround-mamba``.
"""

from __future__ import annotations

import inspect
import textwrap
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.offloading import scheduler as sched_mod

NAME = "001"
ROUND = ("{indent}if self._mamba_align_size is not None:\n"
         "{indent}    max_hit_size_tokens = round_down(\n"
         "{indent}        max_hit_size_tokens, self._mamba_align_size\n"
         "{indent}    )\n")
ANCHORS = (
    # the per-group clamp to the keys this group has
    "                max_hit_size_tokens = min(\n"
    "                    max_hit_size_tokens, len(offload_keys) * tokens_per_chunk\n"
    "                )\n",
    # the clamp to the chunks this group confirmed
    "                    max_hit_size_tokens = min(\n"
    "                        max_hit_size_tokens,\n"
    "                        tokens_per_chunk * (start_chunk_idx + num_hit_chunks),\n"
    "                    )\n",
)


def patched_source(source: str) -> str:
    for anchor in ANCHORS:
        if source.count(anchor) != 1:
            raise SystemExit("error: the 0.33.0 anchor was not found once; other vLLM?")
        indent = anchor[: len(anchor) - len(anchor.lstrip())]
        source = source.replace(anchor, anchor + ROUND.format(indent=indent))
    return source


def apply_fix() -> None:
    cls = sched_mod.OffloadingConnectorScheduler
    src = textwrap.dedent(inspect.getsource(cls._lookup_complete_chunks))
    src = patched_source(textwrap.indent(src, "    "))
    ns: dict[str, Any] = {}
    exec(compile(textwrap.dedent(src), inspect.getsourcefile(sched_mod) or "<fix>", "exec"),
         vars(sched_mod), ns)
    cls._lookup_complete_chunks = ns["_lookup_complete_chunks"]
