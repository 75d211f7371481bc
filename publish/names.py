"""The semantics the report, the spec and the simulator facts name by their role, asked of
the registry (``releases``): no semantics name is spelled here."""

from __future__ import annotations

import releases
from releases.base import AlignAt


def _release_aligning(align_at: AlignAt) -> str:
    return next(n for n in releases.releases() if releases.get(n).align_at == align_at)


# the last release before vLLM PR #44599 (no Mamba alignment) and the first with it
# (max_hit_size_tokens rounded down to the Mamba block before the loop)
BEFORE_PR = _release_aligning("none")
PR_RELEASE = _release_aligning("max_hit")
# the review alternative that rounds num_hit_tokens after the loop instead
ROUND_NUM_HIT = next(n for n in releases.names(kind="alternative")
                     if releases.get(n).align_at == "num_hit")
# the review alternative that aligns to cache_config.mamba_block_size instead
CACHE_CONFIG = next(n for n in releases.names(kind="alternative")
                    if releases.get(n).align_from == "cache_config")
# finding 001's completed fix (the one that also re-runs the sliding-window groups)
FINDING_001_FIX = releases.fix_for("001", completed=True).name
# the simulator's semantics: the block lookup's, those that take the alignment from the
# KV-cache groups (an alternative reading cache_config.mamba_block_size is left out: with
# a correct value it is PR #44599's release, and how stale a real value is, nobody knows);
# of the releases, the one before PR #44599 and the PR's (later block-lookup releases
# change deferral answers and start-up, not the alignment the simulator measures)
SIM_SEMANTICS = tuple(n for n in releases.names(family="block")
                      if releases.get(n).align_from == "groups"
                      and (releases.get(n).kind != "release" or n in (BEFORE_PR, PR_RELEASE)))


# what the templates call them (publish.spec.context: ``names``)
BY_ROLE = {"before_pr": BEFORE_PR, "pr_release": PR_RELEASE, "round_num_hit": ROUND_NUM_HIT,
           "cache_config": CACHE_CONFIG, "finding_001_fix": FINDING_001_FIX}
