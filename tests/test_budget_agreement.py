"""Sites that configure a tenant's budget differently, told from what they publish: a
window another site's budget never counts in, an escrow claim of another share or split,
escrow where this site counts lowerBound. The BudgetsAgreed condition names them, a Warning
Event (logged by the agent) tells it once, grid_budget_config_agreed drops to 0; once the
peer is configured alike again and its old items are no longer recent, all is agreed."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from grid.engine import SiteEngine
from grid.engine.budget_agreement import counts_in
from grid.engine.budgets import HEARD_WITHIN_S
from grid.models.budgets import TenantBudget
from grid.models.conditions import ConditionUpdate
from grid.models.network import GridNetworkStatus
from grid.operator.status import NetworkReport, network_status
from grid.runtime.metrics import FAMILIES, Exposition, add_budgets
from test_budget_status import samples
from test_engine import SITES, T0, connect, engine, exchange
from test_engine_escrow import Mesh, escrow_network
from test_engine_spend import at, budget, source, spending

NETWORK = ("GridNetwork", "mesh")


def status_of(e: SiteEngine) -> GridNetworkStatus:
    found = e.statuses()[NETWORK]
    assert isinstance(found, GridNetworkStatus)
    return found


def agreed(e: SiteEngine) -> tuple[str, str, str]:
    condition = {c.type: c for c in status_of(e).conditions}["BudgetsAgreed"]
    return condition.status.value, condition.reason, condition.message


def told(e: SiteEngine, seconds: float) -> list[str]:
    result = e.refresh(at(seconds))
    return [r.event.reason for r in result.events if r.event.reason.startswith("BudgetConf")]


def config(e: SiteEngine, **changes: Any) -> None:
    sources = [source("site-a"), source("site-b", name="other")]
    e.set_resources(spending([budget(**changes)], sources), list(SITES), [])


def test_a_peer_counting_in_another_window_is_named_until_it_agrees_again() -> None:
    a, b = engine("site-a", [], net=spending()), engine("site-b", [], net=spending())
    connect([a, b], T0)
    exchange([a, b], T0)
    assert agreed(a) == ("True", "ConfigurationAgreed", "")
    config(b, window="1h")
    exchange([a, b], at(1))
    status, reason, message = agreed(a)
    assert (status, reason) == ("False", "ConfigurationDiffers")
    assert "acme at site-b: window (counts in w3600-1782907200)" in message
    assert "every site must configure a budget alike" in message
    out = Exposition(FAMILIES.values())
    add_budgets(out, "mesh", status_of(a), a.network.spec.budgets)
    assert samples(out, "grid_budget_config_agreed") == {("mesh",): 0}
    config(b)  # alike again: b's 1h slot is no longer recent once HEARD_WITHIN_S passed
    exchange([a, b], at(2 + HEARD_WITHIN_S))
    assert agreed(a)[0] == "True"


def test_the_warning_event_is_posted_once_per_turn() -> None:
    a, b = engine("site-a", [], net=spending()), engine("site-b", [], net=spending())
    connect([a, b], T0)
    exchange([a, b], T0)
    config(b, window="1h")
    for item in b.refresh(at(1)).items:
        a.receive_item("site-b", item.lane, item.key, item.version, item.payload, at(1))
    assert told(a, 1) == ["BudgetConfigurationDiffers"]
    assert told(a, 2) == []  # still differs: nothing new to tell


def test_escrow_claims_of_another_cap_or_enforcement_are_named() -> None:
    mesh = Mesh(escrow_network(cap=3_000))
    bigger = escrow_network(cap=6_000)
    mesh.engines["site-c"].set_resources(bigger, list(SITES), [])
    mesh.run_until(T0 + timedelta(seconds=2))
    status, _, message = agreed(mesh.engines["site-a"])
    assert status == "False"
    assert "acme at site-c: cap or sites (a share of 2000 of a cap split 3 ways)" in message
    assert "site-b" not in message
    # A site that counts the budget as lowerBound sees its peers escrow it.
    lower = escrow_network(cap=3_000, enforcement="lowerBound")
    mesh.engines["site-b"].set_resources(lower, list(SITES), [])
    mesh.tick()
    message = agreed(mesh.engines["site-b"])[2]
    assert "acme at site-a: enforcement (escrow)" in message


def test_which_windows_a_budget_counts_in() -> None:
    day = TenantBudget.model_validate(budget())
    assert counts_in(day, "w86400-1782864000")
    assert not counts_in(day, "w3600-1782907200")  # another length
    assert not counts_in(day, "w86400-1782864001")  # not aligned to it
    assert not counts_in(day, "c1782864000-1782950400")  # a calendar window
    rolling = TenantBudget.model_validate(
        budget(window=None, rolling={"length": "2h", "step": "1h"})
    )
    assert counts_in(rolling, "w3600-1782907200")
    berlin = TenantBudget.model_validate(
        budget(window=None, calendar={"period": "day", "timeZone": "Europe/Berlin"})
    )
    utc = TenantBudget.model_validate(budget(window=None, calendar={"period": "day"}))
    assert counts_in(utc, "c1782864000-1782950400")  # 2026-07-01 in UTC
    assert not counts_in(berlin, "c1782864000-1782950400")  # another zone's day
    assert counts_in(day, "x-a-label-of-a-later-layout")  # nothing to compare


def test_the_operator_carries_the_condition_and_posts_the_turn() -> None:
    net = spending()
    differs = ConditionUpdate(
        type="BudgetsAgreed", status="False", reason="ConfigurationDiffers", message="acme at b"
    )
    report = NetworkReport(membership_running=True, budget_conditions=(differs,))
    status, events = network_status(net, None, report, T0)
    condition = {c.type: c for c in status.conditions}["BudgetsAgreed"]
    assert (condition.status.value, condition.reason) == ("False", "ConfigurationDiffers")
    assert [e.reason for e in events if e.reason == "BudgetConfigurationDiffers"] == [
        "BudgetConfigurationDiffers"
    ]
    _, again = network_status(net, status, report, T0 + timedelta(seconds=1))
    assert not [e for e in again if e.reason == "BudgetConfigurationDiffers"]
