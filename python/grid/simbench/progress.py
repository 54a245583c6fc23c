"""A one-line progress bar on stderr for long benchmark runs."""

from __future__ import annotations

import sys
import time
from typing import TextIO

_WIDTH = 24
_MIN_INTERVAL = 0.2


class Progress:
    """Redraws one status line; silent when ``stream`` is None. Updates closer together
    than a fifth of a second are skipped so drawing never slows a run."""

    def __init__(self, stream: TextIO | None) -> None:
        self._stream = stream
        self._last = 0.0
        self._drawn = 0

    @classmethod
    def for_stderr(cls, force: bool) -> Progress:
        """A bar on stderr when it is a terminal (or when ``force``), otherwise silent."""
        return cls(sys.stderr if force or sys.stderr.isatty() else None)

    def show(self, label: str, done: float, total: float) -> None:
        if self._stream is None:
            return
        now = time.monotonic()
        if now - self._last < _MIN_INTERVAL and done < total:
            return
        self._last = now
        fraction = 0.0 if total <= 0 else min(1.0, max(0.0, done / total))
        filled = round(fraction * _WIDTH)
        bar = "#" * filled + "-" * (_WIDTH - filled)
        line = f"[{bar}] {fraction * 100:5.1f}% {label}"
        self._stream.write("\r" + line.ljust(self._drawn))
        self._stream.flush()
        self._drawn = len(line)

    def clear(self) -> None:
        if self._stream is None or not self._drawn:
            return
        self._stream.write("\r" + " " * self._drawn + "\r")
        self._stream.flush()
        self._drawn = 0
