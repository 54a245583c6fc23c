"""Budget windows: fixed, calendar and rolling windows and their bounds (time zones and
daylight-saving changes included), the roll-over to a new window at the same instant by
every site's clock with clocks the tolerated skew apart, and the forgetting of windows
closed everywhere (late items ignored, the transport told, the counter bound kept)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from grid.crdt import MAX_COUNTERS, BudgetHorizon, GridState
from grid.crdt.budget import window_end
from grid.crdt.snapshot import spend_key
from grid.engine.engine import ItemOutcome
from grid.engine.windows import (
    CLOSE_AFTER_S,
    MAX_CLOCK_SKEW_S,
    budget_window,
    calendar_bounds,
    spend_horizon,
)
from grid.models.budgets import CalendarWindow, TenantBudget
from grid.models.network import TenantBudgetStatus
from test_engine import connect, engine, network
from test_engine_spend import scraped

REPO = Path(__file__).resolve().parent.parent


def budget(**window: Any) -> TenantBudget:
    return TenantBudget.model_validate({"tenant": "acme", "cap": 1000, **window})


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


# -- the model -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("window", "complaint"),
    [
        ({}, "set exactly one of window, calendar or rolling"),
        (
            {"window": "24h", "rolling": {"length": "24h", "step": "1h"}},
            "set exactly one of window, calendar or rolling",
        ),
        ({"calendar": {"period": "month", "timeZone": "Mars/Olympus"}}, "unknown time zone"),
        ({"calendar": {"period": "fortnight"}}, "'day', 'week' or 'month'"),
        ({"rolling": {"length": "24h", "step": "7h"}}, "length must be a whole number of steps"),
        ({"rolling": {"length": "33h", "step": "1h"}}, "at most 32"),
    ],
)
def test_a_budget_needs_one_window_it_can_count_in(window: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(complaint)):
        budget(**window)


def test_the_window_is_named_as_written() -> None:
    assert budget(window="24h").window_name == "24h"
    calendar = {"period": "month", "timeZone": "Europe/Paris"}
    assert budget(calendar=calendar).window_name == "month in Europe/Paris"
    assert budget(calendar={"period": "week"}).window_name == "week in UTC"
    rolling = {"length": "24h", "step": "1h"}
    assert budget(rolling=rolling).window_name == "24h rolling by 1h"


# -- bounds --------------------------------------------------------------------------------


def test_a_fixed_window_keeps_the_label_of_the_previous_release() -> None:
    window = budget(window="24h").model_copy()
    found = budget_window(window, utc(2026, 7, 1, 12))
    assert found.counting == "w86400-1782864000" and found.summed == (found.counting,)
    assert (found.start, found.end) == (utc(2026, 7, 1), utc(2026, 7, 2))
    assert window_end(found.counting) == utc(2026, 7, 2).timestamp()


def paris(period: str) -> CalendarWindow:
    return CalendarWindow.model_validate({"period": period, "timeZone": "Europe/Paris"})


@pytest.mark.parametrize(
    ("period", "now", "start", "end"),
    [
        # A summer day in Paris (UTC+2).
        ("day", utc(2026, 7, 1, 21, 59), utc(2026, 6, 30, 22), utc(2026, 7, 1, 22)),
        ("day", utc(2026, 7, 1, 22), utc(2026, 7, 1, 22), utc(2026, 7, 2, 22)),
        # The spring change: a day of 23 hours; the autumn one: 25 hours.
        ("day", utc(2026, 3, 29, 12), utc(2026, 3, 28, 23), utc(2026, 3, 29, 22)),
        ("day", utc(2026, 10, 25, 12), utc(2026, 10, 24, 22), utc(2026, 10, 25, 23)),
        # 2026-07-01 is a Wednesday: its week is Monday 29 June to Monday 6 July.
        ("week", utc(2026, 7, 1, 12), utc(2026, 6, 28, 22), utc(2026, 7, 5, 22)),
        # December runs into January of the next year, from UTC+1.
        ("month", utc(2026, 12, 15), utc(2026, 11, 30, 23), utc(2026, 12, 31, 23)),
        # The last hour of 31 December UTC is 1 January in Paris.
        ("month", utc(2026, 12, 31, 23, 30), utc(2026, 12, 31, 23), utc(2027, 1, 31, 23)),
        ("month", utc(2026, 3, 10), utc(2026, 2, 28, 23), utc(2026, 3, 31, 22)),
    ],
)
def test_calendar_windows_start_at_midnight_in_their_time_zone(
    period: str, now: datetime, start: datetime, end: datetime
) -> None:
    assert calendar_bounds(paris(period), now) == (start, end)


def test_a_day_whose_midnight_is_skipped_starts_at_the_change() -> None:
    # Chile moves its clocks from 00:00 to 01:00 on 6 September 2026 (04:00 UTC).
    santiago = CalendarWindow.model_validate({"period": "day", "timeZone": "America/Santiago"})
    assert calendar_bounds(santiago, utc(2026, 9, 6, 12)) == (
        utc(2026, 9, 6, 4),
        utc(2026, 9, 7, 3),
    )
    assert calendar_bounds(santiago, utc(2026, 9, 6, 3, 59))[1] == utc(2026, 9, 6, 4)


def test_a_calendar_window_is_named_by_its_bounds() -> None:
    found = budget_window(budget(calendar={"period": "month"}), utc(2026, 2, 14))
    start, end = int(utc(2026, 2, 1).timestamp()), int(utc(2026, 3, 1).timestamp())
    assert found.counting == f"c{start}-{end}" and window_end(found.counting) == end


def test_a_rolling_window_sums_the_steps_of_its_length() -> None:
    rolling = budget(rolling={"length": "3h", "step": "1h"})
    found = budget_window(rolling, utc(2026, 7, 1, 12, 30))
    hours = [int(utc(2026, 7, 1, hour).timestamp()) for hour in (10, 11, 12)]
    assert found.summed == tuple(f"w3600-{start}" for start in hours)
    assert found.counting == found.summed[-1]
    assert (found.start, found.end) == (utc(2026, 7, 1, 10), utc(2026, 7, 1, 13))
    moved = budget_window(rolling, utc(2026, 7, 1, 13))
    assert moved.summed == (*found.summed[1:], f"w3600-{int(utc(2026, 7, 1, 13).timestamp())}")


def test_the_tolerated_skew_is_the_transports() -> None:
    session = (REPO / "rust/grid-core/src/wire/session/mod.rs").read_text()
    (seconds,) = re.findall(r"MAX_CLOCK_SKEW: Duration = Duration::from_secs\((\d+)\)", session)
    assert float(seconds) == MAX_CLOCK_SKEW_S
    assert CLOSE_AFTER_S > 2 * MAX_CLOCK_SKEW_S


# -- roll-over across sites --------------------------------------------------------------

SKEW = timedelta(seconds=MAX_CLOCK_SKEW_S)
CLOCKS = {"site-a": -SKEW, "site-b": timedelta(0), "site-c": SKEW}
"""Each site's clock against the true time: a behind, c ahead, by the tolerated skew."""
BOUNDARY = utc(2026, 7, 1, 22)  # midnight in Paris
CALENDAR_DAY = {
    "tenant": "acme",
    "cap": 100,
    "calendar": {"period": "day", "timeZone": "Europe/Paris"},
}


def own_source(site: str) -> dict[str, Any]:
    return {
        "name": f"gateway-{site}",
        "siteSelector": {"matchLabels": {"grid.praxis-proxy.io/site": site}},
        "url": f"http://{site}.test:9090/metrics",
        "metric": "litellm_total_tokens_metric_total",
        "tenantLabel": "team",
    }


class Mesh:
    """Three sites whose clocks are the tolerated skew apart, each scraping its own
    gateway's counter; items travel at once, received at the receiver's clock."""

    def __init__(self, budgets: list[dict[str, Any]]) -> None:
        net = network(budgets=budgets, spendSources=[own_source(site) for site in CLOCKS])
        self.engines = {site: engine(site, [], net=net) for site in CLOCKS}
        self.counters = dict.fromkeys(CLOCKS, 0)
        self.sent: list[tuple[str, Any]] = []
        self.forgotten: dict[str, list[Any]] = {site: [] for site in CLOCKS}
        for site in self.engines:
            connect(list(self.engines.values()), self.clock(site, BOUNDARY - timedelta(hours=1)))
            self.spend(site, BOUNDARY - timedelta(hours=1), 0)  # the baseline

    def clock(self, site: str, true: datetime) -> datetime:
        return true + CLOCKS[site]

    def spend(self, site: str, true: datetime, amount: int) -> None:
        """``site``'s gateway served ``amount`` tokens; its next scrape is at ``true``."""
        self.counters[site] += amount
        e, now = self.engines[site], self.clock(site, true)
        counted = e.count_spend(f"gateway-{site}", scraped(acme=self.counters[site]), now)
        if counted is not None:
            e.commit_spend(counted, now)
        self.deliver(true)

    def deliver(self, true: datetime) -> None:
        for origin, e in self.engines.items():
            result = e.refresh(self.clock(origin, true))
            self.forgotten[origin].extend(result.forgotten)
            for item in result.items:
                self.sent.append((origin, item))
                for receiver, other in self.engines.items():
                    if receiver != origin:
                        now = self.clock(receiver, true)
                        other.receive_item(
                            origin, item.lane, item.key, item.version, item.payload, now
                        )

    def status(self, site: str, local: datetime) -> TenantBudgetStatus:
        """``site``'s status of acme when its own clock reads ``local``."""
        e = self.engines[site]
        e.refresh(local)
        status = e.statuses()[("GridNetwork", "mesh")]
        (found,) = status.budgets  # type: ignore[union-attr]
        return found


def test_a_new_window_starts_from_zero_at_every_site_at_the_same_instant_by_its_clock() -> None:
    mesh = Mesh([CALENDAR_DAY])
    old = budget_window(TenantBudget.model_validate(CALENDAR_DAY), BOUNDARY - SKEW)
    new = budget_window(TenantBudget.model_validate(CALENDAR_DAY), BOUNDARY)
    for site in CLOCKS:
        mesh.spend(site, BOUNDARY - timedelta(seconds=45), 10)  # every clock before midnight
    for site in CLOCKS:
        mesh.spend(site, BOUNDARY - timedelta(seconds=15), 1)  # c's clock past it
    for site in CLOCKS:
        mesh.spend(site, BOUNDARY + timedelta(seconds=15), 2)  # a's clock not yet
    # Spend counts in the window of the clock of the site that scraped it.
    in_old = 30 + 1 + 1 + 2  # all of the first, a's and b's second, a's third
    in_new = 1 + 2 + 2
    for site, e in mesh.engines.items():
        assert e.state.budget_spend("acme", old.counting) == in_old, site
        assert e.state.budget_spend("acme", new.counting) == in_new, site
    # Every site shows the old window to the last instant before midnight by its own clock,
    # and the new one, from zero plus what was counted in it, from midnight by its clock.
    for site in CLOCKS:
        before = mesh.status(site, BOUNDARY - timedelta(milliseconds=1))
        after = mesh.status(site, BOUNDARY)
        assert (before.window_start, before.window_end, before.used) == (
            old.start,
            BOUNDARY,
            in_old,
        )
        assert (after.window_start, after.window_end, after.used) == (new.start, new.end, in_new)


def test_a_window_closed_everywhere_is_forgotten_and_stays_forgotten() -> None:
    mesh = Mesh([CALENDAR_DAY])
    old = budget_window(TenantBudget.model_validate(CALENDAR_DAY), BOUNDARY - SKEW).counting
    for site in CLOCKS:
        mesh.spend(site, BOUNDARY - timedelta(seconds=45), 10)
    # a, whose clock is behind, counts into the old window up to SKEW after midnight; its
    # item reaches c, whose clock is ahead, 2 x SKEW after midnight by c's clock.
    mesh.deliver(BOUNDARY + SKEW - timedelta(seconds=2))  # every site has refreshed since
    mesh.spend("site-a", BOUNDARY + SKEW - timedelta(seconds=1), 5)
    assert mesh.engines["site-c"].state.budget_spend("acme", old) == 35
    old_items = [(o, i) for o, i in mesh.sent if i.key.startswith("budget/") and i.version]
    # Each site keeps the window until CLOSE_AFTER_S after its end by its own clock, then
    # drops it, its own items, and tells the transport to forget the peers' items of it.
    for site, e in mesh.engines.items():
        e.refresh(BOUNDARY + timedelta(seconds=CLOSE_AFTER_S - 1))
        assert ("acme", old) in e.state.budget_counters(), site
        closed = e.refresh(BOUNDARY + timedelta(seconds=CLOSE_AFTER_S))
        assert ("acme", old) not in e.state.budget_counters(), site
        old_key = spend_key("acme", old, e.state.spend_epoch or 0)
        assert not [i for i in e.state.all_items() if i.key == old_key], site
        assert [i for i in e.state.all_items() if i.key.startswith("budget/")], site  # new one
        assert sorted(peer for peer, _ in closed.forgotten) == sorted(set(CLOCKS) - {site})
    # A late copy (a relay, a restarted site, a peer that never forgets) brings nothing back.
    c = mesh.engines["site-c"]
    now = BOUNDARY + timedelta(seconds=CLOSE_AFTER_S)
    for origin, item in old_items:
        if origin != "site-c":
            outcome = c.receive_item(origin, item.lane, item.key, item.version, item.payload, now)
            assert outcome is ItemOutcome.UNCHANGED
    assert c.state.budget_counters() == ()


def test_closing_tells_the_transport_which_peer_items_to_forget() -> None:
    b = engine("site-b", [], net=network(budgets=[CALENDAR_DAY]))
    sender = GridState("site-a")
    window = budget_window(TenantBudget.model_validate(CALENDAR_DAY), BOUNDARY - SKEW).counting
    sender.add_spend("acme", window, 7, BOUNDARY.timestamp() - 60)
    (item,) = sender.items_to_publish()
    b.receive_item("site-a", item.lane, item.key, item.version, item.payload, BOUNDARY)
    assert b.refresh(BOUNDARY).forgotten == ()
    closed = b.refresh(BOUNDARY + timedelta(seconds=CLOSE_AFTER_S))
    assert closed.forgotten == (("site-a", ((item.lane, item.key),)),)


def test_a_rolling_step_is_kept_while_the_window_sums_it() -> None:
    rolling = {"tenant": "acme", "cap": 100, "rolling": {"length": "3h", "step": "1h"}}
    mesh = Mesh([rolling])
    first = BOUNDARY - timedelta(minutes=30)
    mesh.spend("site-b", first, 4)
    step = budget_window(TenantBudget.model_validate(rolling), first).counting
    b = mesh.engines["site-b"]
    # The step ends at BOUNDARY and is summed two more hours.
    assert mesh.status("site-b", BOUNDARY + timedelta(hours=1, minutes=59)).used == 4
    assert mesh.status("site-b", BOUNDARY + timedelta(hours=2)).used == 0
    b.refresh(BOUNDARY + timedelta(hours=2, seconds=CLOSE_AFTER_S - 1))
    assert ("acme", step) in b.state.budget_counters()
    b.refresh(BOUNDARY + timedelta(hours=2, seconds=CLOSE_AFTER_S))
    assert ("acme", step) not in b.state.budget_counters()


def test_old_windows_do_not_use_up_the_counter_bound() -> None:
    # 400 tenants of daily windows for 30 days: 12,000 counters if none were forgotten.
    tenants = [f"tenant-{n}" for n in range(400)]
    budgets = [
        TenantBudget.model_validate({"tenant": t, "cap": 10, "window": "24h"}) for t in tenants
    ]
    state = GridState("site-a")
    held = []
    for day in range(30):
        now = utc(2026, 7, 1, 12) + timedelta(days=day)
        state.close_budget_windows(spend_horizon(budgets, now))
        for b in budgets:
            state.add_spend(b.tenant, budget_window(b, now).counting, 1, now.timestamp())
        held.append(len(state.budget_counters()))
    assert 30 * len(tenants) > MAX_COUNTERS
    assert max(held) == len(tenants)


def test_a_window_whose_end_cannot_be_told_is_never_closed() -> None:
    state = GridState("site-a")
    state.add_spend("acme", "2025-06", 3, 1_750_000_000.0)
    assert state.close_budget_windows(BudgetHorizon(closed_before=4e9)) == ()
    assert state.budget_counters() == (("acme", "2025-06"),)
