"""Tenant budgets as one site sees them: each tenant's known spend in its current window
(grid.engine.windows) against its cap and warn level, whether that spend is the mesh's
whole spend or a lower bound (some site not heard from), the network condition that sums
them up, and the events of a tenant crossing its warn level or its cap. Pure: every
function takes ``now``."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime

from grid.crdt.state import GridState
from grid.engine.escrow import EscrowFigures
from grid.engine.members import MemberInfo
from grid.engine.windows import BudgetWindow, budget_window
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


HEARTBEAT_S = 60.0
"""How often a site publishes its slot of each budget's current window even when it counted
nothing since (grid.crdt.state.GridState.heartbeat_spend): what tells its peers they hold
all it spent there, as of then."""
HEARD_WITHIN_S = 3 * HEARTBEAT_S
"""A peer whose spend state for a window arrived no later than this ago is heard: two of its
heartbeats may be lost or late before its figure stops counting as known."""


def unheard_sites(  # noqa: PLR0917 - the site, who to hear, what was heard, and when
    site: str,
    known: Iterable[str],
    members: Mapping[str, MemberInfo],
    state: GridState,
    windows: Mapping[str, BudgetWindow],
    now: float,
    old_peers: Collection[str] = (),
) -> dict[str, list[UnheardSite]]:
    """Per tenant (``windows``: each budget's current window), the sites of the mesh besides
    ``site`` whose spend in that window this site may not hold. Every site ``known`` (the
    GridSites) or met in SWIM is a member, but one that left on purpose (it spends no more).
    A member is heard when a spend item of it for the window (a rise or a heartbeat) arrived
    within :data:`HEARD_WITHIN_S` and SWIM does not see it down here; a peer of the release
    before escrow (``old_peers``) sends no heartbeat, so being alive in SWIM is what hears it.
    ``since`` is when its spend state for the window last arrived; else the window's start
    for a site heard from before, and never (None) for one never heard from at all."""
    found: dict[str, list[UnheardSite]] = {}
    others = [
        name
        for name in sorted({*known, *members} - {site})
        if (member := members.get(name)) is None or member.state is not MemberState.LEFT
    ]
    down = {
        name
        for name in others
        if (member := members.get(name)) is not None and member.state is not MemberState.ALIVE
    }
    # Peers of the previous release send no heartbeat: alive in SWIM is what hears them.
    # These are the ones it does not.
    old = [
        UnheardSite(site=name, since=members[name].since if name in members else None)
        for name in others
        if name in old_peers and (name in down or name not in members)
    ]
    # Sets, not a loop per site and tenant: 100 sites and 400 tenants are 40,000 pairs.
    for tenant, window in windows.items():
        heard: dict[str, float] = {}
        for label in window.summed:
            for name, at in state.spend_heard_in(tenant, label).items():
                heard[name] = max(at, heard.get(name, at))
        fresh = {name for name, at in heard.items() if now - at <= HEARD_WITHIN_S}
        unheard = [n for n in others if n not in old_peers and (n in down or n not in fresh)]
        found[tenant] = sorted(
            [*old, *(UnheardSite(site=n, since=_since(n, heard, window, state)) for n in unheard)],
            key=lambda entry: entry.site,
        )
    return found


def _since(
    name: str, heard: Mapping[str, float], window: BudgetWindow, state: GridState
) -> datetime | None:
    """When ``name``'s spend state for ``window`` last arrived; else the window's start
    for a site heard from before, never (None) for one never heard from at all."""
    if name in heard:
        return datetime.fromtimestamp(heard[name], UTC)
    return window.start if state.last_received_at(name) is not None else None


def mesh_unheard(by_tenant: Mapping[str, Sequence[UnheardSite]]) -> list[UnheardSite]:
    """The sites unheard for some tenant, each with the earliest moment it is unheard since
    (never, None, first)."""
    earliest: dict[str, datetime | None] = {}
    for unheard in by_tenant.values():
        for entry in unheard:
            if entry.site not in earliest:
                earliest[entry.site] = entry.since
            else:
                held = earliest[entry.site]
                if held is not None and (entry.since is None or entry.since < held):
                    earliest[entry.site] = entry.since
    return [UnheardSite(site=name, since=since) for name, since in sorted(earliest.items())]


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
    unheard: Mapping[str, Sequence[UnheardSite]],
    escrow: Mapping[str, EscrowFigures] | None = None,
) -> list[TenantBudgetStatus]:
    """Each tenant's known spend in its current window: the sum of every site's slot this
    site has heard of, the mesh's whole spend when no site is ``unheard`` for the tenant
    (:func:`unheard_sites`), else a lower bound. A tenant in ``escrow``
    (grid.engine.escrow) also shows this site's allowance, and is exhausted here once that
    is used, whatever the mesh's total."""
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
                complete=not unheard.get(budget.tenant),
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
