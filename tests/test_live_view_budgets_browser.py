"""The live view's budget table in a real headless Chromium: one site whose tenants are
ok, at their warn level and exhausted, while a GridSite of its mesh is not heard from, so
each figure is marked as a lower bound and the line under the table names that site.

The browser is driven from a worker thread: Selenium blocks, and this process's event loop
serves the page meanwhile."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from grid.errors import AgentConfigError
from grid.runtime.http import Endpoint
from grid.view import LiveView, NetworkSource, NodeInfo
from support.browser import browser, console_errors, save_screenshot, wait_for
from test_engine import NETWORK, SITES, engine
from test_engine_spend import budget, scrape, spending

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

pytestmark = pytest.mark.timeout(120)


def _budget_rows(driver: WebDriver) -> list[list[str]]:
    rows: list[list[str]] = driver.execute_script(
        "return [...document.querySelectorAll('tr.budget')].map(r =>"
        " [r.dataset.state, ...[...r.cells].map(c => c.textContent)]);"
    )
    return rows


def _read_page(url: str) -> tuple[list[list[str]], str]:
    with browser() as driver:
        driver.get(url)
        rows = wait_for(
            lambda: len(_budget_rows(driver)) == 3 and _budget_rows(driver),
            what="three budget rows",
        )
        unheard = driver.execute_script("return document.querySelector('p.unheard').textContent")
        save_screenshot(driver, "live-view-budgets")
        assert console_errors(driver) == []
        return rows, unheard


async def test_the_page_shows_each_tenant_its_state_and_the_lower_bound() -> None:
    now = datetime.now(UTC)
    budgets = [budget("acme"), budget("globex"), budget("initech")]
    a = engine("site-a", [], net=spending(budgets=budgets), sites=SITES[:2])
    scrape(a, now - timedelta(seconds=2), acme=0, globex=0, initech=0)
    scrape(a, now - timedelta(seconds=1), acme=10, globex=850, initech=1200)
    a.refresh(now)
    node = NodeInfo(True, "127.0.0.1:7946", 1, ("k-1",))
    view = LiveView("agent", lambda: [NetworkSource(NETWORK, a, node)])
    endpoint = Endpoint("127.0.0.1", 0, view.routes(), error=AgentConfigError)
    await endpoint.start()
    await view.start()
    try:
        rows, unheard = await asyncio.to_thread(_read_page, f"http://{endpoint.address}/")
    finally:
        await view.stop()
        await endpoint.stop()
    assert [row[:5] for row in rows] == [
        ["ok", "acme", "ok", "10 at least", "1000"],
        ["warn", "globex", "warn", "850 at least", "1000"],
        ["exhausted", "initech", "exhausted", "1200 at least", "1000"],
    ]
    assert unheard == "Lower bounds: not heard from site-b (never heard)"
