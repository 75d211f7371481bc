"""Finding 001's proposed fix (docs/findings/001-fix.diff), applied in process to the real
vLLM 0.33.0 ``OffloadingConnectorScheduler._lookup_complete_chunks``.

Runs INSIDE the vLLM 0.33.0 environment (imported by ``fix_check_chunked.py`` and, with
``CROSSCHECK_FIX=001``, by ``harness_chunked.py``).  ``patched_source`` inserts, after each of
the two per-group cuts of ``max_hit_size_tokens`` (the clamp to the group's keyed length
and the clamp to its confirmed chunks), a round-down to ``self._mamba_align_size``;
``apply_fix`` compiles the patched method in the scheduler module's own namespace and
replaces the method.  Model side: semantics ``alt-v033-reround-mamba``.

Fix ``001b`` (docs/findings/001-fix-rerun.diff; model side ``alt-v033-reround-mamba-rerun``)
completes it: when the second round-down cuts a sliding-window group's confirmed window,
the sliding-window groups are looked up again (the loop's own re-run list), since that
window was confirmed ending above the lowered bound.

Fix ``003`` (docs/findings/003-fix.diff; model side ``alt-v033-cap-min``) is finding 003's:
the last-prompt-token rule (0.33.0's subtraction of one token after the caps, :876)
becomes a minimum with ``num_tokens - 1``, so a cap that already ends before the prompt's
end is not lowered again (as the partial-tail path bounds its boundary, :1087).
"""

from __future__ import annotations

import inspect
import textwrap
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.offloading import scheduler as sched_mod

FIXES = ("001", "001b", "003")
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


# 001b, after the confirmed-chunk clamp: the same round-down, and a re-run of the
# sliding-window groups when it cut this (sliding-window) group's confirmed window
ROUND_RERUN = ("{indent}if self._mamba_align_size is not None:\n"
               "{indent}    confirmed_tokens = max_hit_size_tokens\n"
               "{indent}    max_hit_size_tokens = round_down(\n"
               "{indent}        max_hit_size_tokens, self._mamba_align_size\n"
               "{indent}    )\n"
               "{indent}    if (\n"
               "{indent}        max_hit_size_tokens < confirmed_tokens\n"
               "{indent}        and sliding_window_size_in_chunks is not None\n"
               "{indent}        and not lookup_groups\n"
               "{indent}    ):\n"
               "{indent}        # this window was confirmed ending above the new bound\n"
               "{indent}        lookup_groups = self._sliding_window_groups\n")


# 003: the subtraction at :876 (and its comment, :873-875), replaced by a minimum with
# the request's last token and a comment that says so
CAP_ANCHOR = ("            # the last prompt token has to be recomputed to get the logprobs\n"
              "            # for sliding window attention, we must reduce by 1 to make sure\n"
              "            # we still have a hit after reduction\n"
              "            max_hit_size_tokens -= 1\n")
CAP_MIN = ("            # the last prompt token has to be recomputed to get the logprobs,\n"
           "            # so the hit ends before it; a cap that already ends there keeps\n"
           "            # its value (subtracting after the caps would lose a whole chunk\n"
           "            # in the round-downs below)\n"
           "            max_hit_size_tokens = min(\n"
           "                max_hit_size_tokens, req_status.req.num_tokens - 1\n"
           "            )\n")


def patched_source(source: str, fix: str = "001") -> str:
    if fix not in FIXES:
        raise SystemExit(f"error: unknown fix {fix!r} (known: {', '.join(FIXES)})")
    if fix == "003":
        if source.count(CAP_ANCHOR) != 1:
            raise SystemExit("error: the 0.33.0 anchor was not found once; other vLLM?")
        return source.replace(CAP_ANCHOR, CAP_MIN)
    for i, anchor in enumerate(ANCHORS):
        if source.count(anchor) != 1:
            raise SystemExit("error: the 0.33.0 anchor was not found once; other vLLM?")
        indent = anchor[: len(anchor) - len(anchor.lstrip())]
        insert = ROUND_RERUN if (fix == "001b" and i == 1) else ROUND
        source = source.replace(anchor, anchor + insert.format(indent=indent))
    return source


def apply_fix(fix: str = "001") -> None:
    cls = sched_mod.OffloadingConnectorScheduler
    src = textwrap.dedent(inspect.getsource(cls._lookup_complete_chunks))
    src = patched_source(textwrap.indent(src, "    "), fix)
    ns: dict[str, Any] = {}
    exec(compile(textwrap.dedent(src), inspect.getsourcefile(sched_mod) or "<fix>", "exec"),
         vars(sched_mod), ns)
    cls._lookup_complete_chunks = ns["_lookup_complete_chunks"]
