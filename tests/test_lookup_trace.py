"""The lookup's trace, exactly, on one request per way ``model.lookup`` answers: what
``python -m model lookup --explain`` prints (each turn's Step, the reason, the passes).
Written from the code's steps by hand (scheduler.py:452-622, 636-680); mutmut showed
that nothing else pinned these fields."""

from __future__ import annotations

from typing import Any

import pytest

from model.evaluate import evaluate
from model.scenario import parse_scenario
from releases import vllm_0_24_0

V024 = vllm_0_24_0.SEMANTICS.name


def _fa(**k: Any) -> dict[str, Any]:
    return {"kind": "full_attention", "gpu_block_size": 16, **k}


# (request fields, hit, reason, passes, steps as (pass, group, max hit before, queried,
# hit blocks, max hit after, note))
CASES: dict[str, tuple[dict[str, Any], int | None, str, int, list[tuple[Any, ...]]]] = {
    # scheduler.py:546: block 0 missing
    "no hit": ({"prompt_tokens": 64, "groups": [_fa(stored=[1, 2])]}, 0,
               "group 0: no hit in blocks [0, 4)", 1,
               [(1, 0, 64, (0, 4), 0, 64, "no hit")]),
    # scheduler.py:550, 582: block 1 answers None
    "deferred": ({"prompt_tokens": 64, "groups": [_fa(stored="all", deferred=[1])]}, None,
                 "the store deferred a lookup", 1,
                 [(1, 0, 64, (0, 4), None, 64, "deferred")]),
    # scheduler.py:562: one 32-token block, 16 tokens of it on the GPU already
    "shrank": ({"prompt_tokens": 100, "num_computed_tokens": 16, "block_size_factor": 2,
                "groups": [_fa(stored=[0])]}, 0,
               "group 0: hit shrank below one offloaded block (32 tokens)", 1,
               [(1, 0, 100, (0, 3), 1, 32, "")]),
    # scheduler.py:507: min(50, 1 key * 32) - 16 < 32
    "too short": ({"prompt_tokens": 50, "num_computed_tokens": 16, "block_size_factor": 2,
                   "groups": [_fa(stored="all")]}, 0,
                  "group 0: less than one offloaded block (32 tokens) left beyond the GPU hit",
                  1, [(1, 0, 50, (0, 0), None, 32, "less than one block left")]),
    # scheduler.py:590: block 0 is being loaded for another request
    "being loaded": ({"prompt_tokens": 64, "groups": [_fa(stored="all", being_loaded=[0])]},
                     None, "group 0: a hit block is being loaded", 1,
                     [(1, 0, 64, (0, 4), 4, 64, "")]),
    "converged": ({"prompt_tokens": 64, "groups": [_fa(stored=[0, 1])]}, 32, "converged", 1,
                  [(1, 0, 64, (0, 4), 2, 32, "")]),
    # scheduler.py:662, 673: answered before any lookup
    "in flight": ({"prompt_tokens": 64, "in_flight_transfers": True,
                   "groups": [_fa(stored="all")]}, None,
                  "the request has in-flight transfers", 0, []),
    "skip reading": ({"prompt_tokens": 64, "skip_reading_prefix_cache": True,
                      "groups": [_fa(stored="all")]}, 0,
                     "the request skips reading the prefix cache", 0, []),
}


@pytest.mark.parametrize("case", CASES)
def test_trace(case: str) -> None:
    fields, hit, reason, passes, steps = CASES[case]
    s = parse_scenario({"semantics": V024, "block_size_factor": 1,
                        "num_computed_tokens": 0, **fields})
    o = evaluate(s)
    assert o.lookup is not None and o.hit_tokens == hit
    assert (o.lookup.reason, o.lookup.passes) == (reason, passes)
    assert isinstance(o.lookup.steps, tuple) and [
        (st.pass_no, st.group, st.max_hit_before, st.queried, st.num_hit_blocks,
         st.max_hit_after, st.note) for st in o.lookup.steps] == steps
