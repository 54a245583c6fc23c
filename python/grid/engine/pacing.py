"""The pacing of renders: whether a change waits to be rendered, and when it may be.

A change is rendered at once while the renders so far keep within one per render spacing
(with room for :data:`RENDER_BURST` in a row); when changes come faster, they are rendered
together, one render per spacing. The spacing is the network's ``renderInterval``,
stretched while a pass costs more than :data:`RENDER_SHARE` of it. Pure: time comes in as
``now``, and the cost of a pass as the shell measured it.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

RENDER_BURST = 16
"""Renders that may follow one another at once before ``renderInterval`` paces them: a site
whose inputs change less often than once per interval on average renders every change at
once, and one under a steady stream of changes renders once per interval."""
RENDER_SHARE = 0.04
"""Under a steady stream of changes, renders are spaced so that they take at most this
share of one core: a pass that costs more than this share of ``renderInterval`` (a large
mesh) stretches the spacing, up to :data:`MAX_RENDER_SPACING`."""
MAX_RENDER_SPACING = timedelta(seconds=1)
"""The most the spacing of renders is stretched to, so a change still reaches the overlay
within about a second whatever a pass costs."""
_RENDER_COST_WEIGHT = 0.3
"""Weight of the latest pass in the running render cost (one slow pass does not stretch
the spacing on its own)."""


class RenderPacing:
    """Whether a change waits to be rendered, and the token bucket that paces renders."""

    def __init__(self) -> None:
        self.pending = True
        """A change was taken in that the overlays do not show yet."""
        self._tokens = float(RENDER_BURST)
        """Renders the pacing allowed at the last render, that one spent (a token bucket of
        :data:`RENDER_BURST`, refilled at one token per render spacing)."""
        self._tokens_at: datetime | None = None
        """When the last render counted against the pacing was made."""
        self._cost_s: float | None = None
        """Running cost (CPU seconds) of a render pass, as the shell measured it."""

    def note_cost(self, seconds: float) -> None:
        """What the last render pass cost (CPU seconds)."""
        if not (seconds >= 0 and math.isfinite(seconds)):
            raise ValueError("a render cost is a finite number of seconds >= 0")
        previous = self._cost_s
        self._cost_s = (
            seconds if previous is None else previous + _RENDER_COST_WEIGHT * (seconds - previous)
        )

    def spacing(self, interval: timedelta) -> timedelta:
        """The average time between renders under a steady stream of changes: ``interval``
        (the network's ``renderInterval``), stretched while a pass costs more than
        :data:`RENDER_SHARE` of it (up to :data:`MAX_RENDER_SPACING`; an interval of 0s or
        above that is never stretched)."""
        cost = self._cost_s
        if cost is None or not interval or interval >= MAX_RENDER_SPACING:
            return interval
        # Clamped as seconds: a cost of days would not fit a timedelta once divided.
        stretched = min(MAX_RENDER_SPACING.total_seconds(), cost / RENDER_SHARE)
        return max(interval, timedelta(seconds=stretched))

    def due_at(self, now: datetime, interval: timedelta) -> datetime | None:
        """When the pending change should be rendered: at once while the renders so far
        keep within one per spacing (with room for a burst), else when the pacing allows
        the next one; None when nothing waits."""
        if not self.pending:
            return None
        tokens = self._tokens_now(now, interval)
        if tokens is None or tokens >= 1:
            return now
        return now + self.spacing(interval) * (1 - tokens)

    def rendered(self, now: datetime, interval: timedelta) -> None:
        """A render made at ``now``: nothing waits any more, and it counts against the
        pacing (a flushed render may leave the bucket below empty: the renders after it
        wait for it too)."""
        tokens = self._tokens_now(now, interval)
        self._tokens = (float(RENDER_BURST) if tokens is None else tokens) - 1
        self._tokens_at = now
        self.pending = False

    def _tokens_now(self, now: datetime, interval: timedelta) -> float | None:
        """Renders the pacing allows at ``now``, or None when it holds nothing back: never
        rendered, a spacing of 0s, or a clock that went back (before the last render). The
        bucket refills at the spacing of the moment, so a spacing that changes with the
        cost of passes changes the rate from then on and never moves a render already due
        (worked out from a pacing time instead, a spacing a little shorter than the last
        put the next render off by the burst's length times the difference: seconds under
        a steady stream)."""
        at = self._tokens_at
        spacing = self.spacing(interval)
        if at is None or now < at or not spacing:
            return None
        return min(float(RENDER_BURST), self._tokens + (now - at) / spacing)
