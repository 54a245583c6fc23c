"""The peers' CPU while the measured site restarts (``grid bench mesh --joins``): their
process's CPU time read from /proc as each restart begins and ends, so that what a joining
site costs the sites it takes the state from is a figure beside the join time."""

from __future__ import annotations

import os
import time
from pathlib import Path


class RestartLoad:
    """The peers' CPU while the measured site restarts and takes the mesh's state from
    them: their process's CPU time, read from /proc as each restart begins and ends."""

    def __init__(self, pid: int) -> None:
        self._stat = Path(f"/proc/{pid}/stat")
        self._began: tuple[float, float] | None = None
        self._cpu_s = self._span_s = 0.0

    def _cpu(self) -> float:
        # utime and stime, in clock ticks: the 14th and 15th fields, after the command's ")".
        fields = self._stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def began(self) -> None:
        self._began = (time.monotonic(), self._cpu())

    def ended(self) -> None:
        if self._began is None:
            return
        at, cpu = self._began
        self._span_s += time.monotonic() - at
        self._cpu_s += self._cpu() - cpu
        self._began = None

    def cpu_share(self) -> float | None:
        """CPU seconds per second over the restarts (None: none was timed)."""
        return self._cpu_s / self._span_s if self._span_s else None
