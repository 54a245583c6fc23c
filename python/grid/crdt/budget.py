"""Per-tenant budgets: spend per tenant and budget window, counted in G-Counters.

A counter's slots are ``(site, epoch)`` pairs. A site takes a new epoch each time it starts
with an empty state, so spend it counted in an earlier life stays in that life's slot (and
in that slot's gossip item) instead of being overwritten by a restarted count from zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from grid.crdt.gcounter import GCounter
from grid.crdt.records import check_site_id, check_tenant, check_window
from grid.errors import CrdtLimitError, CrdtValueError

MAX_COUNTERS = 4096
"""Most (tenant, window) counters one ledger tracks; more are refused until windows are
forgotten."""


def window_end(window: str) -> int | None:
    """When (Unix seconds) the budget window a label names ends: ``w<length>-<start>`` (a
    fixed window, or one step of a rolling one) or ``c<start>-<end>`` (a calendar window);
    None for a label of another form, whose end this site cannot tell."""
    kind, numbers = window[:1], window[1:].split("-")
    if kind not in ("w", "c") or len(numbers) != 2 or not all(n.isdigit() for n in numbers):
        return None
    first, second = int(numbers[0]), int(numbers[1])
    return first + second if kind == "w" else second


@dataclass(frozen=True, slots=True)
class BudgetHorizon:
    """Which budget windows are closed: those that ended (:func:`window_end`) at or before
    ``closed_before``, or before the earlier moment ``tenants`` gives a tenant whose windows
    are read for longer after they end (the steps of a rolling window). A closed window's
    counters are forgotten and its items no longer merged; a window whose end cannot be
    told is never closed."""

    closed_before: float
    tenants: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    def closes(self, tenant: str, window: str) -> bool:
        end = window_end(window)
        return end is not None and end <= self.tenants.get(tenant, self.closed_before)


def slot_id(site: str, epoch: int) -> str:
    """The counter slot of ``site`` in the life that started at ``epoch``."""
    return f"{check_site_id(site)}#{epoch}"


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """A tenant's spend in one budget window against its cap, in micro-USD.

    ``spend`` is a lower bound of the spend across the grid: it sums every slot this site
    has heard of, and a partition can only hide spend, never invent it. Under partition a
    site reports this bound rather than refusing requests outright.
    """

    tenant: str
    window: str
    spend: int
    cap: int

    @property
    def ratio(self) -> float:
        """Spend as a share of the cap (may exceed 1)."""
        return self.spend / self.cap

    @property
    def exceeded(self) -> bool:
        """Whether the known spend has reached the cap."""
        return self.spend >= self.cap


class BudgetLedger:
    """Every tracked tenant's spend per budget window."""

    __slots__ = ("_counters", "_earliest_end")

    def __init__(self) -> None:
        self._counters: dict[tuple[str, str], GCounter] = {}
        self._earliest_end: int | None = None
        """The earliest end of a window counted here (None: none with an end), so a pass
        that closes nothing reads no counter."""

    def __len__(self) -> int:
        return len(self._counters)

    def counters(self) -> tuple[tuple[str, str], ...]:
        """The (tenant, window) of every counter tracked, sorted."""
        return tuple(sorted(self._counters))

    def spend(self, tenant: str, window: str) -> int:
        """The known spend (a lower bound of the global spend)."""
        counter = self._counters.get((tenant, window))
        return 0 if counter is None else counter.value

    def slot(self, tenant: str, window: str, site: str, epoch: int) -> int:
        """What one site counted in one of its lives."""
        counter = self._counters.get((tenant, window))
        return 0 if counter is None else counter.slot(slot_id(site, epoch))

    def site_spend(self, tenant: str, window: str, site: str) -> int:
        """What every life of ``site`` counted that this ledger holds."""
        counter = self._counters.get((tenant, window))
        if counter is None:
            return 0
        prefix = f"{site}#"
        return sum(value for slot, value in counter.slots.items() if slot.startswith(prefix))

    def slots_of(self, site: str, epoch: int) -> tuple[tuple[str, str, int], ...]:
        """What one site counted in one of its lives: (tenant, window, value) of every
        counter where it counted something, sorted."""
        slot = slot_id(site, epoch)
        return tuple(
            (tenant, window, counter.slot(slot))
            for (tenant, window), counter in sorted(self._counters.items())
            if counter.slot(slot)
        )

    def status(self, tenant: str, window: str, cap: int) -> BudgetStatus:
        """The tenant's spend against ``cap`` (micro-USD, > 0)."""
        if isinstance(cap, bool) or not isinstance(cap, int) or cap <= 0:
            raise CrdtValueError("a budget cap must be a positive integer of micro-USD")
        return BudgetStatus(tenant, window, self.spend(tenant, window), cap)

    def increment(self, tenant: str, window: str, site: str, epoch: int, amount: int) -> int:
        """Count ``amount`` in ``site``'s slot (only ``site`` itself may); returns the slot's
        new value."""
        key = self._key(tenant, window)
        slot = slot_id(site, epoch)
        counter = self._counters.get(key, GCounter()).increment(slot, amount)
        self._counters[key] = counter
        return counter.slot(slot)

    def merge_slot(self, tenant: str, window: str, site: str, epoch: int, value: int) -> bool:
        """Merge what ``site`` says it counted in one of its lives; whether that changed
        anything."""
        key = self._key(tenant, window)
        current = self._counters.get(key, GCounter())
        merged = current.merge(GCounter({slot_id(site, epoch): value}))
        if merged == current:
            return False
        self._counters[key] = merged
        return True

    def close(self, horizon: BudgetHorizon) -> tuple[tuple[str, str], ...]:
        """Forget the counters of the windows ``horizon`` closes; their (tenant, window)."""
        if self._earliest_end is None or self._earliest_end > horizon.closed_before:
            return ()  # every per-tenant moment is at or before closed_before
        closed = tuple(key for key in self._counters if horizon.closes(*key))
        for key in closed:
            del self._counters[key]
        ends = (window_end(window) for _, window in self._counters)
        self._earliest_end = min((end for end in ends if end is not None), default=None)
        return closed

    def forget_window(self, window: str) -> int:
        """Stop tracking every tenant's counter for ``window`` (a window that ended); how
        many counters were dropped."""
        keys = [key for key in self._counters if key[1] == window]
        for key in keys:
            del self._counters[key]
        return len(keys)

    def _key(self, tenant: str, window: str) -> tuple[str, str]:
        key = (check_tenant(tenant), check_window(window))
        if key not in self._counters and len(self._counters) >= MAX_COUNTERS:
            raise CrdtLimitError(
                f"at most {MAX_COUNTERS} budget counters are tracked: forget ended windows"
            )
        end = window_end(window)
        if end is not None and (self._earliest_end is None or end < self._earliest_end):
            self._earliest_end = end
        return key
