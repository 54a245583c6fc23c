"""Revisions: where every stamp, dot and item version a site issues comes from."""

from __future__ import annotations

import math

from grid.crdt.codec import MAX_SAFE_INT
from grid.errors import CrdtLimitError, CrdtValueError


def wall_millis(now: float) -> int:
    """``now`` (seconds since the epoch, passed in by the caller) in whole milliseconds."""
    if isinstance(now, bool) or not isinstance(now, int | float):
        raise CrdtValueError("now must be a number of seconds")
    if not math.isfinite(now) or now < 0:
        raise CrdtValueError("now must be a finite, non-negative number of seconds")
    millis = int(now * 1000)
    if millis > MAX_SAFE_INT:
        raise CrdtValueError("now is too far in the future")
    return millis


class RevisionClock:
    """A hybrid logical clock.

    A revision is the wall clock in milliseconds, pushed past every revision this clock has
    issued or observed. So revisions keep rising when the wall clock stalls or steps back,
    a site restarted with an empty state issues revisions above the old ones as long as its
    clock is sane, and a site that learns its old revisions from peers (:meth:`observe`)
    continues above them even if its clock is not.
    """

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last = 0

    def tick(self, now: float) -> int:
        """A fresh revision, above every earlier one."""
        revision = max(self._last + 1, wall_millis(now))
        if revision > MAX_SAFE_INT:
            raise CrdtLimitError("the revision clock is exhausted")
        self._last = revision
        return revision

    def observe(self, revision: int) -> None:
        """Remember a revision this site issued in an earlier life, so later ones exceed it."""
        self._last = max(self._last, revision)
