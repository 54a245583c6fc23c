"""Budget windows for tests that play from a window's start.

A rolling window of N seconds starts at every multiple of N seconds of the epoch, so a test
that must begin with a fresh window waits, on average, half a window for one. Among window
lengths long enough for what the test plays, one starts within seconds of any moment: the
test takes that length, and waits seconds instead.
"""

from __future__ import annotations


def soonest_window(after: float, shortest: int, longest: int) -> int:
    """The window length (whole seconds, ``shortest`` to ``longest``) whose first start at
    or after ``after`` (epoch seconds) comes soonest."""
    return min(range(shortest, longest + 1), key=lambda length: -after % length)


def window_length(setting: str) -> int:
    """The length of a budget window given as whole seconds (``"97s"``)."""
    if not setting.endswith("s") or not setting[:-1].isdigit():
        raise ValueError(f"not a window of whole seconds: {setting!r}")
    return int(setting[:-1])
