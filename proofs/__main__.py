"""``python -m proofs``: the prover's CLI (``proofs.cli``); the main job, which also writes
the report and the spec, is ``python -m publish --report DIR``."""

from __future__ import annotations

import sys

from proofs.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
