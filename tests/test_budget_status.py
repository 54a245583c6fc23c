"""A tenant's budget as a site reports it: ok, warn (from warnAt percent of the cap) or
exhausted; whether the spend is the mesh's whole spend or a lower bound (which sites are
unheard, since when); the BudgetsWithinLimits condition and the Warning events of a tenant
crossing a level, from the agent's engine and the operator's status; the metrics."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from grid.engine import SiteEngine
from grid.engine.budgets import (
    HEARD_WITHIN_S,
    budget_condition,
    budget_events,
    budget_state,
    unheard_sites,
)
from grid.engine.windows import budget_window
from grid.models.budgets import BudgetState, TenantBudget, TenantBudgetStatus, UnheardSite
from grid.models.network import GridNetworkStatus
from grid.models.phases import EventType
from grid.operator.status import NetworkReport, network_status
from grid.runtime.metrics import FAMILIES, Exposition, add_budgets
from test_engine import SITES, T0, connect, engine, exchange, network
from test_engine_spend import at, budget, scrape, source, spending

NETWORK = ("GridNetwork", "mesh")


def tenant_budget(**changes: Any) -> TenantBudget:
    return TenantBudget.model_validate(budget(**changes))


@pytest.mark.parametrize(
    ("used", "state"),
    [
        (0, BudgetState.OK),
        (799, BudgetState.OK),
        (800, BudgetState.WARN),
        (999, BudgetState.WARN),
        (1000, BudgetState.EXHAUSTED),
        (5000, BudgetState.EXHAUSTED),
    ],
)
def test_the_state_turns_at_warn_at_percent_and_at_the_cap(used: int, state: BudgetState) -> None:
    assert budget_state(used, tenant_budget()) is state  # cap 1000, warnAt 80


def test_warn_at_is_a_percent_of_the_cap() -> None:
    assert budget_state(499, tenant_budget(warnAt=50)) is BudgetState.OK
    assert budget_state(500, tenant_budget(warnAt=50)) is BudgetState.WARN
    assert budget_state(999, tenant_budget(warnAt=100)) is BudgetState.OK
    for refused in (0, 101, 80.5):
        with pytest.raises(ValidationError, match="warnAt"):
            tenant_budget(warnAt=refused)


# -- the engine (the agent's status) ---------------------------------------------------


def status_of(e: SiteEngine, seconds: float) -> GridNetworkStatus:
    e.refresh(T0 + timedelta(seconds=seconds))
    found = e.statuses()[NETWORK]
    assert isinstance(found, GridNetworkStatus)
    return found


def budget_events_of(e: SiteEngine, seconds: float) -> list[tuple[str, str]]:
    result = e.refresh(T0 + timedelta(seconds=seconds))
    return [
        (r.event.reason, r.event.message)
        for r in result.events
        if r.kind == "GridNetwork" and r.event.reason.startswith("Budget")
    ]


def alone() -> SiteEngine:
    """site-a, the only site of its mesh: its spend is the whole spend."""
    return engine("site-a", [], net=spending(), sites=SITES[:1])


def test_crossing_warn_and_exhausted_sets_the_condition_and_tells_each_once() -> None:
    a = alone()
    scrape(a, T0, acme=0)
    within = status_of(a, 1)
    condition = {c.type: c for c in within.conditions}["BudgetsWithinLimits"]
    assert (condition.status.value, condition.reason) == ("True", "WithinLimits")
    assert (within.budgets[0].state, within.budgets[0].complete) == (BudgetState.OK, True)

    scrape(a, T0 + timedelta(seconds=2), acme=850)
    (told,) = budget_events_of(a, 2)
    window = budget_window(tenant_budget(), T0)
    assert told == (
        "BudgetWarning",
        "tenant acme spent 850 of 1000 (85 %) in the window from "
        f"{window.start:%Y-%m-%dT%H:%M:%SZ} to {window.end:%Y-%m-%dT%H:%M:%SZ}",
    )
    warned = status_of(a, 3)
    condition = {c.type: c for c in warned.conditions}["BudgetsWithinLimits"]
    assert (condition.status.value, condition.reason) == ("False", "BudgetWarning")
    assert condition.message == "past their warn level: acme"
    assert budget_events_of(a, 4) == []  # still warn: nothing new to tell

    scrape(a, T0 + timedelta(seconds=5), acme=1000)
    assert [reason for reason, _ in budget_events_of(a, 5)] == ["BudgetExhausted"]
    exhausted = status_of(a, 6)
    condition = {c.type: c for c in exhausted.conditions}["BudgetsWithinLimits"]
    assert (condition.reason, condition.message) == ("BudgetExhausted", "exhausted: acme")
    assert (exhausted.budgets[0].state, exhausted.budgets[0].exhausted) == (
        BudgetState.EXHAUSTED,
        True,
    )

    # A new window starts from zero: ok again, and nothing is told.
    next_window = (window.end - T0).total_seconds()
    assert budget_events_of(a, next_window) == []
    fresh = status_of(a, next_window + 1)
    condition = {c.type: c for c in fresh.conditions}["BudgetsWithinLimits"]
    assert (fresh.budgets[0].state, condition.status.value) == (BudgetState.OK, "True")


def test_a_network_without_budgets_has_no_budget_condition() -> None:
    a = alone()
    assert "BudgetsWithinLimits" in {c.type for c in status_of(a, 0).conditions}
    a.set_resources(network(), [], [])
    assert "BudgetsWithinLimits" not in {c.type for c in status_of(a, 1).conditions}


def unheard_of(e: SiteEngine, seconds: float) -> tuple[list[UnheardSite], bool | None]:
    status = status_of(e, seconds)
    return status.unheard_sites, status.budgets[0].complete


def test_the_spend_is_complete_only_once_every_member_is_heard_in_the_window() -> None:
    net = spending(sources=[source("site-a"), source("site-b", name="other")])
    a, b = engine("site-a", [], net=net), engine("site-b", [], net=net)
    connect([a, b], T0)
    # Alive in SWIM is not hearing: nothing of site-b's spend state arrived yet; site-c,
    # a GridSite of the mesh, was never heard from at all.
    assert unheard_of(a, 1) == (
        [UnheardSite(site="site-b", since=None), UnheardSite(site="site-c", since=None)],
        False,
    )
    exchange([a, b], at(2))  # site-b's slot of the window arrives (a heartbeat of 0)
    assert unheard_of(a, 3) == ([UnheardSite(site="site-c", since=None)], False)
    c = engine("site-c", [], net=net)
    connect([a, b, c], at(4))
    exchange([a, b, c], at(4))
    assert unheard_of(a, 5) == ([], True)


def test_a_silent_member_makes_the_spend_a_lower_bound_since_it_was_last_heard() -> None:
    net = spending(sources=[source("site-a"), source("site-b", name="other")])
    a, b, c = (engine(name, [], net=net) for name in ("site-a", "site-b", "site-c"))
    connect([a, b, c], T0)
    exchange([a, b, c], T0)
    assert unheard_of(a, 1) == ([], True)
    # site-c stays alive in SWIM (its probes answer) but none of its items arrive any more;
    # site-b's heartbeats go on arriving every HEARTBEAT_S.
    for seconds in range(60, int(HEARD_WITHIN_S) + 1, 60):
        exchange([a, b], at(seconds))
    assert unheard_of(a, HEARD_WITHIN_S) == ([], True)  # its last heartbeat is just in time
    assert unheard_of(a, HEARD_WITHIN_S + 1) == ([UnheardSite(site="site-c", since=T0)], False)
    # It speaks again: its next heartbeat brings the figure back to complete.
    exchange([a, b, c], at(HEARD_WITHIN_S + 2))
    assert unheard_of(a, HEARD_WITHIN_S + 3) == ([], True)


def test_a_member_heard_only_in_the_previous_window_is_unheard_since_the_new_one_began() -> None:
    net = spending(sources=[source("site-a"), source("site-b", name="other")])
    a, b = (engine(name, [], net=net, sites=SITES[:2]) for name in ("site-a", "site-b"))
    connect([a, b], T0)
    exchange([a, b], T0)
    window = budget_window(tenant_budget(), T0)
    turn = (window.end - T0).total_seconds()
    assert unheard_of(a, turn + 1) == ([UnheardSite(site="site-b", since=window.end)], False)
    exchange([a, b], at(turn + 2))  # each site publishes its slot of the new window at once
    assert unheard_of(a, turn + 3) == ([], True)


def test_members_down_or_gone_and_peers_of_the_previous_release() -> None:
    net = spending(sources=[source("site-a"), source("site-b", name="other")])
    a, b, c = (engine(name, [], net=net) for name in ("site-a", "site-b", "site-c"))
    connect([a, b, c], T0)
    exchange([a, b, c], T0)
    # Heard a second ago, but SWIM sees it down here: it may be spending out of reach.
    a.member_down("site-b", "site-b:7946", 1, at(2))
    assert unheard_of(a, 3) == ([UnheardSite(site="site-b", since=T0)], False)
    # A site that left on purpose spends no more: the figure is complete again.
    a.member_left("site-b", "site-b:7946", 1, at(4))
    assert unheard_of(a, 5) == ([], True)
    # A peer of the release before sends no heartbeat: alive in SWIM is what hears it.
    windows = {"acme": budget_window(tenant_budget(), at(500))}
    members = a.members
    old = unheard_sites("site-a", ["site-c"], members, a.state, windows, at(500).timestamp())
    assert old == {"acme": [UnheardSite(site="site-c", since=T0)]}
    assert unheard_sites(
        "site-a", ["site-c"], members, a.state, windows, at(500).timestamp(), ["site-c"]
    ) == {"acme": []}


def test_the_condition_says_when_its_figures_are_lower_bounds() -> None:
    statuses = [
        TenantBudgetStatus(tenant="acme", used=900, cap=1000, state=BudgetState.WARN),
        TenantBudgetStatus(
            tenant="globex", used=10, cap=10, state=BudgetState.EXHAUSTED, complete=False
        ),
    ]
    condition = budget_condition(statuses, 3)
    assert (condition.reason, condition.observed_generation) == ("BudgetExhausted", 3)
    assert condition.message == (
        "exhausted: globex; past their warn level: acme; spend is a lower bound while "
        "some sites are not heard from"
    )
    (event,) = budget_events([], statuses[1:])
    assert "(at least: some sites are unheard)" in event.message


def test_a_condition_names_twenty_tenants_and_counts_the_rest() -> None:
    statuses = [
        TenantBudgetStatus(tenant=f"t{n:02}", used=9, cap=10, state=BudgetState.WARN)
        for n in range(25)
    ]
    message = budget_condition(statuses, None).message
    assert message.endswith("t19 and 5 more") and "t20" not in message


# -- the operator's status -------------------------------------------------------------


def test_the_operator_sets_the_condition_and_posts_the_crossings() -> None:
    net = spending()
    warned = TenantBudgetStatus(
        tenant="acme", used=900, cap=1000, state=BudgetState.WARN, complete=False
    )
    unheard = (UnheardSite(site="site-b", since=T0),)
    report = NetworkReport(membership_running=True, budgets=(warned,), unheard_sites=unheard)
    status, events = network_status(net, None, report, T0)
    condition = {c.type: c for c in status.conditions}["BudgetsWithinLimits"]
    assert (condition.status.value, condition.reason) == ("False", "BudgetWarning")
    assert status.unheard_sites == list(unheard)
    (told,) = [e for e in events if e.reason.startswith("Budget")]
    assert (told.type, told.reason) == (EventType.WARNING, "BudgetWarning")
    # The next pass, unchanged: nothing more to tell.
    _, again = network_status(net, status, report, T0 + timedelta(seconds=1))
    assert not [e for e in again if e.reason.startswith("Budget")]


# -- metrics ---------------------------------------------------------------------------


def samples(out: Exposition, name: str) -> dict[tuple[str, ...], float]:
    (metric,) = [m for m in out if m.name == name]
    return {tuple(s.labels.values()): s.value for s in metric.samples}


def test_the_state_and_completeness_are_exposed() -> None:
    budgets = [
        tenant_budget(),
        tenant_budget(tenant="globex", window=None, calendar={"period": "month"}),
    ]
    status = GridNetworkStatus(
        budgets=[
            TenantBudgetStatus(tenant="acme", used=900, cap=1000, state=BudgetState.WARN),
            TenantBudgetStatus(
                tenant="globex", used=1, cap=1000, state=BudgetState.OK, allowance=40
            ),
        ],
        unheard_sites=[UnheardSite(site="site-b")],
    )
    out = Exposition(FAMILIES.values())
    add_budgets(out, "mesh", status, budgets)
    assert samples(out, "grid_budget_allowance") == {("mesh", "globex", "month in UTC"): 40}
    assert samples(out, "grid_budget_state") == {
        ("mesh", "acme", "24h", "warn"): 1,
        ("mesh", "globex", "month in UTC", "ok"): 1,
    }
    assert samples(out, "grid_budget_complete") == {("mesh",): 0}
