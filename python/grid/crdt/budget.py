"""Per-tenant budgets: spend per tenant and budget window, counted in G-Counters.

A counter's slots are ``(site, epoch)`` pairs. A site takes a new epoch each time it starts
with an empty state, so spend it counted in an earlier life stays in that life's slot (and
in that slot's gossip item) instead of being overwritten by a restarted count from zero.
"""

from __future__ import annotations

from dataclasses import dataclass

from grid.crdt.gcounter import GCounter
from grid.crdt.records import check_site_id, check_tenant, check_window
from grid.errors import CrdtLimitError, CrdtValueError

MAX_COUNTERS = 4096
"""Most (tenant, window) counters one ledger tracks; more are refused until windows are
forgotten."""


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

    __slots__ = ("_counters",)

    def __init__(self) -> None:
        self._counters: dict[tuple[str, str], GCounter] = {}

    def __len__(self) -> int:
        return len(self._counters)

    def spend(self, tenant: str, window: str) -> int:
        """The known spend (a lower bound of the global spend)."""
        counter = self._counters.get((tenant, window))
        return 0 if counter is None else counter.value

    def slot(self, tenant: str, window: str, site: str, epoch: int) -> int:
        """What one site counted in one of its lives."""
        counter = self._counters.get((tenant, window))
        return 0 if counter is None else counter.slot(slot_id(site, epoch))

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
        return key
