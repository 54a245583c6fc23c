"""Whether the sites configure each tenant's budget alike, as far as what they publish
tells: the window of every spend slot a peer published lately (a slot of a window this
site's budget would never count in: another window), and the share and split of every
escrow claim of the current window (another cap or list of sites, or escrow where this
site counts the budget as lowerBound). A lowerBound budget's cap, and its warn level, are
not published: a difference in them shows only in each site's own status. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from grid.crdt.escrow import holder_site
from grid.crdt.state import GridState
from grid.engine.budgets import HEARD_WITHIN_S
from grid.engine.escrow import even_share
from grid.engine.windows import budget_window, calendar_bounds
from grid.models.budgets import BudgetEnforcement, TenantBudget
from grid.models.conditions import ConditionStatus, ConditionUpdate
from grid.models.phases import Event, EventType, condition_update

AGREEMENT_CONDITION = "BudgetsAgreed"
MAX_NAMED = 20
"""Most differences a condition's message names; the rest are counted."""


@dataclass(frozen=True, slots=True, order=True)
class Disagreement:
    """A peer that publishes a tenant's budget otherwise configured than here."""

    tenant: str
    site: str
    what: str
    """``window``, ``cap or sites`` or ``enforcement``, and what the peer's item says."""

    def describe(self) -> str:
        return f"{self.tenant} at {self.site}: {self.what}"


def disagreements(
    budgets: Sequence[TenantBudget], sites: Sequence[str], state: GridState, now: datetime
) -> list[Disagreement]:
    """Every (tenant, peer) whose published items contradict this site's configuration
    (one entry per kind of difference), sorted."""
    found: set[Disagreement] = set()
    moment = now.timestamp()
    by_tenant = {budget.tenant: budget for budget in budgets}
    for tenant, window, heard in state.spend_heard():
        budget = by_tenant.get(tenant)
        if budget is None or counts_in(budget, window):
            continue  # one reading per counter; its sites only when it does not fit
        for site, at in heard.items():
            if moment - at <= HEARD_WITHIN_S:
                found.add(Disagreement(tenant, site, f"window (counts in {window})"))
    for budget in budgets:
        counting = budget_window(budget, now).counting
        for holder, record in state.escrow.holders(budget.tenant, counting).items():
            site = holder_site(holder)
            if site == state.site or not record.of:
                continue
            if budget.enforcement is not BudgetEnforcement.ESCROW or budget.rolling:
                found.add(Disagreement(budget.tenant, site, "enforcement (escrow)"))
            elif (record.share, record.of) != (even_share(budget.cap, sites, site), len(sites)):
                what = f"cap or sites (a share of {record.share} of a cap split {record.of} ways)"
                found.add(Disagreement(budget.tenant, site, what))
    return sorted(found)


def counts_in(budget: TenantBudget, window: str) -> bool:
    """Whether ``budget`` ever counts in the window a label names: a fixed window or a
    rolling step of its length, aligned to it, or a calendar window of its period and
    time zone."""
    kind, numbers = window[:1], window[1:].split("-")
    if len(numbers) != 2 or not all(n.isdigit() for n in numbers):
        return True  # a label of another form: nothing to compare
    first, second = int(numbers[0]), int(numbers[1])
    if budget.calendar is not None:
        start = datetime.fromtimestamp(first, UTC)
        bounds = calendar_bounds(budget.calendar, start)
        return kind == "c" and tuple(int(b.timestamp()) for b in bounds) == (first, second)
    length = budget.rolling.step if budget.rolling is not None else budget.window
    assert length is not None  # the model holds exactly one kind of window
    return kind == "w" and first == int(length.seconds) and second % first == 0


def agreement_condition(
    budgets: Sequence[TenantBudget], found: Sequence[Disagreement], generation: int | None
) -> ConditionUpdate | None:
    """``BudgetsAgreed``, while the network has budgets: True while no peer publishes
    another configuration of one; False (``ConfigurationDiffers``) naming the tenants, the
    sites and what differs."""
    if not budgets:
        return None
    if not found:
        return condition_update(AGREEMENT_CONDITION, True, "ConfigurationAgreed", "", generation)
    named = "; ".join(d.describe() for d in found[:MAX_NAMED])
    more = len(found) - MAX_NAMED
    message = (
        "peers publish budgets configured otherwise than here (every site must configure a "
        f"budget alike): {named}" + (f"; and {more} more" if more > 0 else "")
    )
    return condition_update(AGREEMENT_CONDITION, False, "ConfigurationDiffers", message, generation)


def agreement_events(before: bool | None, condition: ConditionUpdate | None) -> list[Event]:
    """A Warning event when the condition turns False (``before``: whether it was True,
    None when absent)."""
    if condition is None or condition.status is not ConditionStatus.FALSE or before is False:
        return []
    return [Event(EventType.WARNING, "BudgetConfigurationDiffers", condition.message)]
