"""Budget windows: the window a moment falls in, the counters a budget's status sums, and
which windows are closed everywhere, so that their counters can be forgotten.

Every site computes its windows from its own clock, with no coordination: a window's
bounds are a function of the budget alone (fixed windows and rolling steps are aligned to
the Unix epoch, calendar windows start at midnight in their time zone), so every site
counts into the same counter, and a new window starts from zero at every site at the same
instant by the sites' clocks. A counter is named by its window's bounds
(:func:`grid.crdt.budget.window_end` reads them back), so a site can tell when a window it
receives ends without knowing the budget it belongs to. Pure: every function takes
``now``."""

from __future__ import annotations

import math
import zoneinfo
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from types import MappingProxyType

from grid.crdt.budget import BudgetHorizon
from grid.models.budgets import CalendarPeriod, CalendarWindow, TenantBudget

MAX_CLOCK_SKEW_S = 30.0
"""The furthest apart the sites' clocks may be: the SWIM transport refuses messages sent
further than this from the receiver's clock (``MAX_CLOCK_SKEW``, docs/security.md), so a
site further off is not heard at all."""

DELIVERY_ALLOWANCE_S = 60.0
"""Time allowed for a site's last spend of a window to reach every site."""

CLOSE_AFTER_S = 2 * MAX_CLOCK_SKEW_S + DELIVERY_ALLOWANCE_S
"""How long after a window ended by this site's clock its counters are kept. A site whose
clock is behind by the tolerated skew still counts into the window that much later, and
this site's clock may be ahead by as much: after twice the skew and the delivery
allowance, every site has stopped counting into it and its last items have arrived."""


@dataclass(frozen=True, slots=True)
class BudgetWindow:
    """A budget's window at one moment: spend counts in ``counting``; the status sums
    ``summed`` (the steps of a rolling window, else ``counting`` alone), from ``start``;
    at ``end`` the next window starts (the oldest step of a rolling window drops out)."""

    counting: str
    summed: tuple[str, ...]
    start: datetime
    end: datetime


def budget_window(budget: TenantBudget, now: datetime) -> BudgetWindow:
    """The window of ``budget`` that ``now`` falls in."""
    if budget.calendar is not None:
        start, end = calendar_bounds(budget.calendar, now)
        label = f"c{_seconds(start)}-{_seconds(end)}"
        return BudgetWindow(label, (label,), start, end)
    if budget.rolling is not None:
        step = budget.rolling.step.seconds
        current = _aligned(now, step)
        steps = [current - n * step for n in reversed(range(budget.rolling.steps))]
        labels = tuple(_fixed_label(step, first) for first in steps)
        return BudgetWindow(labels[-1], labels, _at(steps[0]), _at(current + step))
    assert budget.window is not None  # the model holds exactly one kind of window
    length = budget.window.seconds
    began = _aligned(now, length)
    label = _fixed_label(length, began)
    return BudgetWindow(label, (label,), _at(began), _at(began + length))


def calendar_bounds(calendar: CalendarWindow, now: datetime) -> tuple[datetime, datetime]:
    """The day, week (from Monday) or month ``now`` falls in, in the calendar's time zone:
    its first instant and the first instant of the next. A midnight that a daylight-saving
    change skips starts the day at the change."""
    zone = zoneinfo.ZoneInfo(calendar.time_zone)
    today = now.astimezone(zone).date()
    if calendar.period is CalendarPeriod.DAY:
        first, following = today, today + timedelta(days=1)
    elif calendar.period is CalendarPeriod.WEEK:
        first = today - timedelta(days=today.weekday())
        following = first + timedelta(days=7)
    else:
        first = today.replace(day=1)
        following = date(first.year + first.month // 12, first.month % 12 + 1, 1)
    return _midnight(first, zone), _midnight(following, zone)


def spend_horizon(
    budgets: Sequence[TenantBudget], now: datetime, after: float = CLOSE_AFTER_S
) -> BudgetHorizon:
    """Which windows are closed at ``now``: those that ended ``after`` seconds ago or
    earlier, and for a tenant with a rolling budget, the steps its window no longer sums
    (a step stays summed for ``length - step`` after it ends)."""
    closed_before = now.timestamp() - after
    rolling = {
        budget.tenant: closed_before - (budget.rolling.length.seconds - budget.rolling.step.seconds)
        for budget in budgets
        if budget.rolling is not None
    }
    return BudgetHorizon(closed_before, MappingProxyType(rolling))


def _midnight(day: date, zone: zoneinfo.ZoneInfo) -> datetime:
    # fold=0 reads a skipped midnight with the offset before the change: the instant of the
    # change itself, the day's first.
    return datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC)


def _aligned(now: datetime, length: float) -> float:
    return math.floor(now.timestamp() / length) * length


def _fixed_label(length: float, start: float) -> str:
    return f"w{int(length)}-{int(start)}"


def _seconds(moment: datetime) -> int:
    return int(moment.timestamp())


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
