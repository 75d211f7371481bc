"""Finding 001's completed fix (docs/findings/001-fix-rerun.diff): the proposed fix, and the
sliding-window groups looked up again when its round-down cuts a confirmed window."""

from releases import fix_001_reround
from releases.base import Expect, child

SEMANTICS = child(
    fix_001_reround.SEMANTICS, name="alt-v033-reround-mamba-rerun", kind="fix",
    reround_rerun=True, fix_diff="docs/findings/001-fix-rerun.diff",
    summary="alt-v033-reround-mamba, completed: when the round-down cuts a sliding-window "
    "group's confirmed window, the sliding-window groups are looked up again at the "
    "lowered bound (otherwise the load can read a window chunk the store lacks).",
    expect={"loads-stored-only": Expect(holds=True, accepted=True, pre=())},
)
