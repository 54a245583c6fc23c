"""Spend from counters in the site engine: the sources a site scrapes, a scrape's increases
counted into this site's budget slot and seen in every site's status, units, scale and
carried fractions, windows, and restarts from the checkpoint (with and without the
checkpoint's spend committed), a failed checkpoint write, a new SWIM node, a source that
now reads something else."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from grid.crdt.snapshot import STATE_LANE
from grid.engine import CountedSpend, SiteEngine, SpendCheckpoint
from grid.engine.windows import budget_window
from grid.models.network import TenantBudget, TenantBudgetStatus
from grid.observe.scrape import ScrapeResult
from test_engine import SITES, T0, connect, engine, exchange, network

METRIC = "litellm_total_tokens_metric_total"
SOURCE = "litellm"
DAY = "w86400-1782864000"  # the 24h window T0 falls in


def source(at: str = "site-a", **changes: Any) -> dict[str, Any]:
    spec = {
        "name": SOURCE,
        "siteSelector": {"matchLabels": {"grid.praxis-proxy.io/site": at}},
        "url": "http://litellm.test:4000/metrics",
        "metric": METRIC,
        "tenantLabel": "team",
    }
    return {**spec, **changes}


def budget(tenant: str = "acme", **changes: Any) -> dict[str, Any]:
    return {"tenant": tenant, "cap": 1000, "window": "24h", **changes}


def spending(
    budgets: list[dict[str, Any]] | None = None, sources: list[dict[str, Any]] | None = None
) -> Any:
    return network(
        budgets=budgets if budgets is not None else [budget()],
        spendSources=sources if sources is not None else [source()],
    )


def scraped(**teams: float) -> ScrapeResult:
    lines = [f"# TYPE {METRIC.removesuffix('_total')} counter"]
    lines += [f'{METRIC}{{model="gpt",team="{team}"}} {value}' for team, value in teams.items()]
    return ScrapeResult(200, 0.01, text="\n".join(lines) + "\n")


def scrape(e: SiteEngine, now: datetime, **teams: float) -> CountedSpend | None:
    """One scrape, counted as a shell without a checkpoint counts it."""
    counted = e.count_spend(SOURCE, scraped(**teams), now)
    if counted is not None:
        e.commit_spend(counted, now)
    return counted


def budgets_of(e: SiteEngine, now: datetime) -> dict[str, TenantBudgetStatus]:
    e.refresh(now)
    status = e.statuses()[("GridNetwork", "mesh")]
    return {b.tenant: b for b in status.budgets}  # type: ignore[union-attr]


def spend_items(e: SiteEngine, now: datetime) -> list[Any]:
    return [i for i in e.refresh(now).items if i.lane == STATE_LANE and i.key.startswith("budget/")]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# -- which sites scrape ------------------------------------------------------------------


def test_only_the_sites_a_source_selects_scrape_it() -> None:
    net = spending(sources=[source("site-a"), source("site-b", name="vllm")])
    a, b, c = (engine(name, [], net=net) for name in ("site-a", "site-b", "site-c"))
    assert [t.source for t in a.spend_targets()] == [SOURCE]
    assert [t.source for t in b.spend_targets()] == ["vllm"]
    assert c.spend_targets() == ()
    # A scrape of a source this site does not read counts nothing.
    assert c.count_spend(SOURCE, scraped(acme=5), T0) is None


def test_a_source_tells_its_target_how_to_scrape() -> None:
    net = spending(
        sources=[source(url="https://10.0.0.7/metrics", serverName="litellm.test", interval="30s")]
    )
    (target,) = engine("site-a", [], net=net).spend_targets()
    assert (target.url, target.server_name, target.interval_s, target.timeout_s) == (
        "https://10.0.0.7/metrics",
        "litellm.test",
        30.0,
        5.0,
    )


# -- counting ----------------------------------------------------------------------------


def test_increases_reach_this_sites_slot_and_every_sites_status() -> None:
    a, b = engine("site-a", [], net=spending()), engine("site-b", [], net=spending())
    first = scrape(a, at(0), acme=100, globex=7)
    assert first is not None and dict(first.amounts) == {}  # the first scrape: a baseline
    assert a.state.budget_spend("acme", DAY) == 0
    counted = scrape(a, at(1), acme=250, globex=9)
    assert counted is not None and dict(counted.amounts) == {("acme", DAY): 150}
    scrape(a, at(2), acme=40)  # the exporter restarted: 40 since
    assert a.state.own_spend("acme", DAY) == 190
    connect([a, b], at(3))
    exchange([a, b], at(3))
    for e in (a, b):
        status = budgets_of(e, at(3))["acme"]
        assert (status.used, status.cap, status.remaining, status.exhausted) == (
            190,
            1000,
            810,
            False,
        )
    scrape(a, at(4), acme=1000)
    exchange([a, b], at(4))
    status = budgets_of(b, at(4))["acme"]
    assert (status.used, status.remaining, status.exhausted) == (1150, 0, True)


def test_the_status_says_what_the_last_scrape_read() -> None:
    a = engine("site-a", [], net=spending())
    scrape(a, at(0), acme=1, globex=2)
    a.refresh(at(0))
    (read,) = a.statuses()[("GridNetwork", "mesh")].spend_sources  # type: ignore[union-attr]
    assert read.name == SOURCE and read.series == 2
    assert read.last_scrape is not None and read.last_scrape.ok
    a.count_spend(SOURCE, ScrapeResult(None, 0.5, error="connection refused"), at(1))
    a.refresh(at(1))
    (read,) = a.statuses()[("GridNetwork", "mesh")].spend_sources  # type: ignore[union-attr]
    assert read.last_scrape is not None and not read.last_scrape.ok
    assert "connection refused" in read.last_scrape.message and read.series == 2
    # The failed scrape kept the baseline: the next good one counts the whole gap.
    counted = scrape(a, at(2), acme=11, globex=2)
    assert counted is not None and dict(counted.amounts) == {("acme", DAY): 10}


def test_only_budgets_of_the_sources_unit_count_and_the_baseline_moves_on_anyway() -> None:
    net = spending(budgets=[budget(), budget("globex", unit="microdollars")])
    a = engine("site-a", [], net=net)
    scrape(a, at(0), acme=0, globex=0, initech=0)
    counted = scrape(a, at(1), acme=5, globex=6, initech=7)
    assert counted is not None and dict(counted.amounts) == {("acme", DAY): 5}
    # initech gets a budget now: only what its counter grows from here on counts.
    a.set_resources(spending(budgets=[budget(), budget("initech")]), SITES, [])
    counted = scrape(a, at(2), acme=5, globex=6, initech=10)
    assert counted is not None and dict(counted.amounts) == {("initech", DAY): 3}


def test_a_fixed_tenant_takes_every_series_and_the_scale_converts_units() -> None:
    cost = source(metric="litellm_spend_metric_total", tenant="acme", tenantLabel=None)
    cost.update(unit="microdollars", scale=1_000_000)
    a = engine("site-a", [], net=spending(budgets=[budget(unit="microdollars")], sources=[cost]))

    def spend(now: datetime, **usd: float) -> dict[Any, int]:
        lines = [f'litellm_spend_metric_total{{team="{team}"}} {v}' for team, v in usd.items()]
        counted = a.count_spend(SOURCE, ScrapeResult(200, 0.01, text="\n".join(lines)), now)
        assert counted is not None
        a.commit_spend(counted, now)
        return dict(counted.amounts)

    spend(at(0), x=0.5, y=1.0)
    assert spend(at(1), x=0.75, y=1.5) == {("acme", DAY): 750_000}


def test_fractions_of_a_unit_carry_over_to_the_next_increase() -> None:
    credits = source(unit="credits", scale=0.25)  # four tokens a credit
    a = engine("site-a", [], net=spending(budgets=[budget(unit="credits")], sources=[credits]))
    scrape(a, at(0), acme=0)
    amounts = [scrape(a, at(i), acme=total) for i, total in ((1, 3), (2, 6), (3, 8))]
    assert [dict(c.amounts) if c else None for c in amounts] == [
        {},  # 0.75: carried
        {("acme", DAY): 1},  # 0.75 + 0.75
        {("acme", DAY): 1},  # 0.5 + 0.5
    ]
    assert a.state.own_spend("acme", DAY) == 2


def test_spend_after_the_window_ends_counts_in_the_next_one() -> None:
    net = spending(budgets=[budget(window="1h")])
    a = engine("site-a", [], net=net)
    hour = TenantBudget.model_validate(budget(window="1h"))
    end = budget_window(hour, T0).end
    scrape(a, end - timedelta(seconds=2), acme=0)
    scrape(a, end - timedelta(seconds=1), acme=10)
    scrape(a, end, acme=25)
    first, second = budget_window(hour, T0).counting, budget_window(hour, end).counting
    assert (a.state.own_spend("acme", first), a.state.own_spend("acme", second)) == (10, 15)
    assert budgets_of(a, end)["acme"].used == 15


def test_spend_items_do_not_make_the_receiver_render() -> None:
    a, b = engine("site-a", [], net=spending()), engine("site-b", [], net=spending())
    b.refresh(at(0))
    scrape(a, at(0), acme=0)
    scrape(a, at(1), acme=5)
    (item,) = spend_items(a, at(1))
    b.receive_item("site-a", item.lane, item.key, item.version, item.payload, at(1))
    assert b.render_due_at(at(1)) is None
    assert budgets_of(b, at(1))["acme"].used == 5


# -- restarts ------------------------------------------------------------------------------


def restarted(checkpoint: SpendCheckpoint, name: str = "site-a") -> SiteEngine:
    e = engine(name, [], net=spending())
    e.restore_spend(SpendCheckpoint.from_json(checkpoint.to_json()))
    return e


def test_a_restarted_site_counts_on_from_its_checkpoint_in_the_same_slot() -> None:
    a, b = engine("site-a", [], net=spending()), engine("site-b", [], net=spending())
    connect([a, b], at(0))
    scrape(a, at(0), acme=100)
    counted = scrape(a, at(1), acme=160)
    assert counted is not None
    exchange([a, b], at(1))
    before = {i.key for i in a.state.all_items() if i.key.startswith("budget/")}
    again = restarted(counted.checkpoint)
    # Spend grew while the site was down; the exporter did not restart.
    assert dict(scrape(again, at(5), acme=200).amounts) == {("acme", DAY): 40}  # type: ignore[union-attr]
    items = spend_items(again, at(5))
    assert {i.key for i in items} == before  # the same slot, counting on
    connect([again, b], at(6))
    for item in items:
        b.receive_item("site-a", item.lane, item.key, item.version, item.payload, at(6))
    assert budgets_of(b, at(6))["acme"].used == 100
    assert budgets_of(again, at(6))["acme"].used == 100


def test_a_crash_after_the_checkpoint_and_before_the_count_loses_nothing() -> None:
    a, b = engine("site-a", [], net=spending()), engine("site-b", [], net=spending())
    scrape(a, at(0), acme=0)
    scrape(a, at(1), acme=10)
    exchange([a, b], at(1))
    kept = a.count_spend(SOURCE, scraped(acme=30), at(2))
    assert kept is not None  # written to disk, then the process died: never counted
    again = restarted(kept.checkpoint)
    assert dict(scrape(again, at(5), acme=35).amounts) == {("acme", DAY): 5}  # type: ignore[union-attr]
    exchange([again, b], at(6))
    assert budgets_of(b, at(6))["acme"].used == 35
    assert budgets_of(again, at(6))["acme"].used == 35


def test_a_checkpoint_that_could_not_be_written_is_counted_by_the_next_scrape() -> None:
    a = engine("site-a", [], net=spending())
    scrape(a, at(0), acme=0)
    dropped = a.count_spend(SOURCE, scraped(acme=10), at(1))
    assert dropped is not None  # not kept, so not committed
    counted = scrape(a, at(2), acme=12)
    assert counted is not None and dict(counted.amounts) == {("acme", DAY): 12}
    assert a.state.own_spend("acme", DAY) == 12


def test_a_site_without_a_checkpoint_counts_from_its_first_scrape_in_a_new_slot() -> None:
    a, b = engine("site-a", [], net=spending()), engine("site-b", [], net=spending())
    scrape(a, at(0), acme=0)
    scrape(a, at(1), acme=10)
    exchange([a, b], at(1))
    fresh = engine("site-a", [], net=spending())  # its checkpoint is gone
    scrape(fresh, at(5), acme=30)  # a baseline: 20 spent while down are not counted
    scrape(fresh, at(6), acme=31)
    exchange([fresh, b], at(7))
    assert budgets_of(b, at(7))["acme"].used == 11


def test_a_new_swim_node_keeps_counting_in_the_same_slot() -> None:
    a = engine("site-a", [], net=spending())
    scrape(a, at(0), acme=0)
    scrape(a, at(1), acme=10)
    (item,) = spend_items(a, at(1))
    a.reset_state()
    (again,) = spend_items(a, at(2))  # published again, above the old version
    assert (again.key, again.payload != item.payload, again.version > item.version) == (
        item.key,
        True,
        True,
    )
    scrape(a, at(3), acme=15)
    assert a.state.own_spend("acme", DAY) == 15
    assert {i.key for i in spend_items(a, at(3))} == {item.key}


def test_a_source_that_now_reads_something_else_starts_a_new_baseline() -> None:
    a = engine("site-a", [], net=spending())
    scrape(a, at(0), acme=100)
    moved = spending(sources=[source(url="http://litellm-2.test:4000/metrics")])
    a.set_resources(moved, SITES, [])
    counted = scrape(a, at(1), acme=5000)
    assert counted is not None and dict(counted.amounts) == {}
    # A change of what is counted, not of what is read, keeps the baseline.
    rescaled = source(url="http://litellm-2.test:4000/metrics", scale=2)
    a.set_resources(spending(sources=[rescaled]), SITES, [])
    counted = scrape(a, at(2), acme=5010)
    assert counted is not None and dict(counted.amounts) == {("acme", DAY): 20}


def test_a_checkpoint_of_another_site_or_not_a_checkpoint_is_refused() -> None:
    a = engine("site-a", [], net=spending())
    scrape(a, at(0), acme=0)
    counted = scrape(a, at(1), acme=1)
    assert counted is not None
    with pytest.raises(ValueError, match="site-a"):
        engine("site-b", [], net=spending()).restore_spend(counted.checkpoint)
    data = counted.checkpoint.to_json()
    for broken in (b"{}", data.replace(b'"format":1', b'"format":2'), data[:-5], b"\xff"):
        with pytest.raises(ValueError, match="spend checkpoint"):
            SpendCheckpoint.from_json(broken)
