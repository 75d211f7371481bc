"""Every Hypothesis failure replays: the seed and a scenario file.

Property tests call ``remember(scenario)`` with the scenario they check; Hypothesis runs
the minimal failing example last, so when a test fails ``write_failure`` writes that
scenario to ``FAILURES`` (default ``failures/``, or ``$OLC_FAILURES``) and the report
says how to replay it: ``python -m model lookup FILE`` and the pytest command with
``--hypothesis-seed``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from model.scenario import Scenario, scenario_to_json

ROOT = Path(__file__).resolve().parent.parent
FAILURES = Path(os.environ.get("OLC_FAILURES", ROOT / "failures"))
_last: dict[str, Any] = {}


def remember(s: Scenario | dict[str, Any]) -> None:
    _last["scenario"] = scenario_to_json(s) if isinstance(s, Scenario) else s


def forget() -> None:
    _last.clear()


def write_failure(test_id: str) -> Path | None:
    """Write the last remembered scenario for the failing test; None if there is none."""
    scen = _last.get("scenario")
    if scen is None:
        return None
    try:
        text = json.dumps(scen, indent=1, sort_keys=True) + "\n"
    except (TypeError, ValueError):
        text = json.dumps({"unserialisable": repr(scen)}) + "\n"
    name = test_id.split("::")[-1].split("[")[0]
    path = FAILURES / f"{name}-{hashlib.sha256(text.encode()).hexdigest()[:10]}.json"
    FAILURES.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
