"""A progress bar on stderr (throttled; silent when disabled)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TextIO


@dataclass
class ProgressBar:
    total: int
    label: str = ""
    enabled: bool = True
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    width: int = 30
    _start: float = field(default_factory=time.perf_counter)
    _last: float = 0.0

    def update(self, done: int, force: bool = False) -> None:
        now = time.perf_counter()
        if not self.enabled or (not force and now - self._last < 0.2):
            return
        self._last = now
        frac = min(1.0, done / self.total) if self.total else 1.0
        filled = int(frac * self.width)
        rate = done / max(1e-9, now - self._start)
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (self.width - filled)}] "
                          f"{frac:6.1%} {done}/{self.total} {rate:,.0f}/s")
        self.stream.flush()

    def finish(self, done: int) -> None:
        self.update(done, force=True)
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
