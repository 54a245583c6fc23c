"""Tenant budgets as one site sees them: each tenant's known spend in its current window
(grid.engine.windows) against its cap and warn level, whether that spend is the mesh's
whole spend or a lower bound (some site not heard from), the network condition that sums
them up, and the events of a tenant crossing its warn level or its cap. Pure: every
function takes ``now``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

from grid.crdt.state import GridState
from grid.engine.escrow import EscrowFigures
from grid.engine.members import MemberInfo
from grid.engine.windows import budget_window
from grid.models.budgets import (
    BudgetEnforcement,
    BudgetState,
    TenantBudget,
    TenantBudgetStatus,
    UnheardSite,
)
from grid.models.conditions import ConditionUpdate
from grid.models.phases import Event, EventType, MemberState, condition_update

BUDGETS_CONDITION = "BudgetsWithinLimits"
MAX_TENANTS_NAMED = 20
"""Most tenants a condition's message or an event names; the rest are counted."""

_RANK = {BudgetState.OK: 0, BudgetState.WARN: 1, BudgetState.EXHAUSTED: 2}


def unheard_sites(
    site: str, known: Iterable[str], members: Mapping[str, MemberInfo], state: GridState
) -> list[UnheardSite]:
    """The sites of the mesh, besides ``site``, that may have counted spend this site does
    not hold: every site ``known`` (the GridSites) or met in SWIM that is not alive here
    now (a site that left on purpose counts no more). ``since`` is when SWIM last saw it
    go, else when its last item arrived, else never."""
    found = []
    for name in sorted({*known, *members} - {site}):
        member = members.get(name)
        if member is not None and member.state in (MemberState.ALIVE, MemberState.LEFT):
            continue
        since = member.since if member is not None else _received(state.last_received_at(name))
        found.append(UnheardSite(site=name, since=since))
    return found


def budget_state(used: int, budget: TenantBudget) -> BudgetState:
    """ok below ``warnAt`` percent of the cap, warn from there, exhausted at the cap."""
    if used >= budget.cap:
        return BudgetState.EXHAUSTED
    if used * 100 >= budget.cap * budget.warn_at:
        return BudgetState.WARN
    return BudgetState.OK


def budget_statuses(
    budgets: Sequence[TenantBudget],
    state: GridState,
    now: datetime,
    *,
    complete: bool,
    escrow: Mapping[str, EscrowFigures] | None = None,
) -> list[TenantBudgetStatus]:
    """Each tenant's known spend in its current window: the sum of every site's slot this
    site has heard of, the mesh's whole spend when ``complete`` (every site heard from),
    else a lower bound. A tenant in ``escrow`` (grid.engine.escrow) also shows this site's
    allowance, and is exhausted here once that is used, whatever the mesh's total."""
    found = []
    for budget in budgets:
        window = budget_window(budget, now)
        used = sum(state.budget_spend(budget.tenant, label) for label in window.summed)
        standing = budget_state(used, budget)
        figures = (escrow or {}).get(budget.tenant)
        if figures is not None and figures.exhausted_here:
            standing = BudgetState.EXHAUSTED
        found.append(
            TenantBudgetStatus(
                tenant=budget.tenant,
                used=used,
                cap=budget.cap,
                state=standing,
                complete=complete,
                window_start=window.start,
                window_end=window.end,
                exhausted=standing is BudgetState.EXHAUSTED,
                remaining=max(budget.cap - used, 0),
                enforcement=BudgetEnforcement.LOWER_BOUND
                if figures is None
                else BudgetEnforcement.ESCROW,
                allowance=None if figures is None else figures.allowance,
                site_used=None if figures is None else figures.site_used,
            )
        )
    return found


def budget_condition(
    statuses: Sequence[TenantBudgetStatus], generation: int | None
) -> ConditionUpdate:
    """``BudgetsWithinLimits``: True while every tenant is ok; False naming the exhausted
    tenants (reason ``BudgetExhausted``), else those at their warn level
    (``BudgetWarning``)."""
    exhausted = [s.tenant for s in statuses if s.state is BudgetState.EXHAUSTED]
    warned = [s.tenant for s in statuses if s.state is BudgetState.WARN]
    if not exhausted and not warned:
        return condition_update(BUDGETS_CONDITION, True, "WithinLimits", "", generation)
    parts = []
    if exhausted:
        parts.append(f"exhausted: {_named(exhausted)}")
    if warned:
        parts.append(f"past their warn level: {_named(warned)}")
    if any(s.complete is False for s in statuses):
        parts.append("spend is a lower bound while some sites are not heard from")
    reason = "BudgetExhausted" if exhausted else "BudgetWarning"
    return condition_update(BUDGETS_CONDITION, False, reason, "; ".join(parts), generation)


def budget_events(
    previous: Sequence[TenantBudgetStatus], current: Sequence[TenantBudgetStatus]
) -> list[Event]:
    """A Warning event for each tenant whose budget crossed into warn or exhausted since
    ``previous`` (in the same window or a new one); none for a tenant that stays, or goes
    back to ok when a new window starts."""
    before = {s.tenant: s.state or BudgetState.OK for s in previous}
    events = []
    for status in current:
        standing = status.state or BudgetState.OK
        if _RANK[standing] <= _RANK[before.get(status.tenant, BudgetState.OK)]:
            continue
        bound = "" if status.complete is not False else " (at least: some sites are unheard)"
        share = status.used * 100 // status.cap if status.cap else 100
        message = (
            f"tenant {status.tenant} spent {status.used} of {status.cap} ({share} %){bound} "
            f"in the window from {_moment(status.window_start)} to {_moment(status.window_end)}"
        )
        if standing is BudgetState.EXHAUSTED:
            events.append(Event(EventType.WARNING, "BudgetExhausted", message))
        else:
            events.append(Event(EventType.WARNING, "BudgetWarning", message))
    return events


def _named(tenants: list[str]) -> str:
    named = ", ".join(tenants[:MAX_TENANTS_NAMED])
    more = len(tenants) - MAX_TENANTS_NAMED
    return named if more <= 0 else f"{named} and {more} more"


def _moment(moment: datetime | None) -> str:
    return "?" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _received(at: float | None) -> datetime | None:
    return None if at is None else datetime.fromtimestamp(at, UTC)
