"""The live view's certificate table in a real headless Chromium: the view of two engines
that exchanged their items by hand is served on loopback, and the page shows each site's
certificate with what vouches for it and when it expires, the one that expires within the
alert's 14 days marked so.

The browser is driven from a worker thread: Selenium blocks, and this process's event loop
serves the page meanwhile."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from grid.errors import AgentConfigError
from grid.runtime.http import Endpoint
from grid.view import LiveView, NetworkSource, NodeInfo
from support.browser import browser, console_errors, save_screenshot, wait_for
from test_engine import NETWORK, engine, exchange, site
from test_engine_certificates import MESH_CA, network_ca

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

pytestmark = pytest.mark.timeout(120)


def _certificate_rows(driver: WebDriver) -> list[list[str]]:
    rows: list[list[str]] = driver.execute_script(
        "return [...document.querySelectorAll('tr.certificate')].map(r =>"
        " [r.dataset.site, r.dataset.expiry, ...[...r.cells].map(c => c.textContent)]);"
    )
    return rows


def _read_page(url: str) -> list[list[str]]:
    with browser() as driver:
        driver.get(url)
        rows = wait_for(
            lambda: len(_certificate_rows(driver)) == 2 and _certificate_rows(driver),
            what="two certificate rows",
        )
        save_screenshot(driver, "live-view-certificates")
        assert console_errors(driver) == []
        return rows


async def test_the_page_shows_each_certificate_its_anchor_and_expiry() -> None:
    now = datetime.now(UTC)
    own = MESH_CA.issue("site-a", now=now)
    expiring = MESH_CA.issue("site-b", now=now, valid_for=timedelta(days=5))
    sites = [site("site-a", pin=own.fingerprint), site("site-b", pin=expiring.fingerprint)]
    a, b = engine("site-a", [], sites=sites), engine("site-b", [], sites=sites)
    for e, certificate in ((a, own), (b, expiring)):
        e.set_certificate(certificate.certificate_pem, now)
        e.set_network_ca(network_ca())
    exchange([a, b], now)
    node = NodeInfo(True, "127.0.0.1:7946", 1, ("k-1",))
    view = LiveView("agent", lambda: [NetworkSource(NETWORK, a, node)])
    endpoint = Endpoint("127.0.0.1", 0, view.routes(), error=AgentConfigError)
    await endpoint.start()
    await view.start()
    try:
        rows: Any = await asyncio.to_thread(_read_page, f"http://{endpoint.address}/")
    finally:
        await view.stop()
        await endpoint.stop()
    (site_a, site_b) = rows
    assert site_a[:2] == ["site-a", "ok"]
    assert site_a[2:6] == [
        "site-a (this site)",
        own.fingerprint[:12] + "…",
        "network CA",
        own.certificate.not_valid_after_utc.isoformat(),
    ]
    assert site_a[6].startswith("in ") and site_a[6].endswith(" d")
    assert site_b[:2] == ["site-b", "soon"]
    assert site_b[2:5] == ["site-b", expiring.fingerprint[:12] + "…", "network CA"]
    assert site_b[6] in ("in 5 d", "in 4 d")
