"""The live view in a real headless Chromium.

A three-site demo mesh runs as three ``grid agent`` processes (real SWIM over UDP, real TLS
probes, real provider endpoints in this process); the browser opens ``/`` of one agent and
sees every member alive and the overlay ranked, then one site's agent is killed with
SIGKILL and the same page, never reloaded, shows it down within the SWIM detection bound.
The operator serves the same page beside its ``/metrics``. Screenshots are written to the
test artifacts directory.

The browser is driven from a worker thread: Selenium blocks, and this process's event loop
must keep serving the provider endpoints (and the emulated API server) meanwhile."""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
import yaml

from grid.demo import LocalMesh
from grid.demo.mesh import free_port
from grid.membership import SwimConfig
from grid.models import GridNetwork, load_resource
from k8s.cluster import Cluster
from k8s.emulator import GRID_NETWORKS, GRID_SITES, INFERENCE_PROVIDERS
from k8s.operator_support import (
    network_body,
    operator_for,
    prepare_namespaces,
    provider_body,
    put_trust,
    site_body,
)
from k8s.waiting import eventually
from support.agents import THREE_SITES, AgentMesh, AgentMeshes, AgentProcess
from support.browser import browser, console_errors, save_screenshot, wait_for
from support.servers import ProviderEndpoint

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

pytestmark = pytest.mark.timeout(240)

VIEWER, VICTIM = "site-a", "site-c"
PAGE_POLL_S = 1.0
"""How often the page asks for /view.json (view.js's POLL_MS)."""
SCHEDULING_ALLOWANCE_S = 6.0
"""Slack for three agents, Chromium and the test sharing two busy cores."""


def _detection_bound(mesh: LocalMesh) -> float:
    """The worst-case SWIM detection time of the mesh, from its GridNetwork's settings."""
    document = yaml.safe_load((mesh.sites[VIEWER].resources / "00-network.yaml").read_text())
    network = load_resource(document)
    assert isinstance(network, GridNetwork)
    swim = network.spec.swim
    config = SwimConfig(
        probe_interval=swim.probe_interval.seconds,
        suspicion_timeout=swim.suspicion_timeout.seconds,
        gossip_nodes=swim.gossip_nodes,
    )
    return config.detection_bound(len(THREE_SITES))


def _members(driver: WebDriver) -> dict[str, str]:
    """The member table as drawn: site -> state."""
    rows = driver.execute_script(
        "return [...document.querySelectorAll('tr.member')]"
        ".map(r => [r.dataset.site, r.dataset.state]);"
    )
    return dict(rows)


def _ranked_sites(driver: WebDriver) -> set[str]:
    return set(
        driver.execute_script(
            "return [...document.querySelectorAll('tr.candidate')].map(r => r.dataset.site);"
        )
    )


class Agents:
    """The three sites' ``grid agent`` processes, each with its HTTP port."""

    def __init__(self, mesh: AgentMesh) -> None:
        self.mesh = mesh
        self.http = {site: f"127.0.0.1:{free_port(socket.SOCK_STREAM)}" for site in mesh.sites}
        self.processes: dict[str, AgentProcess] = {
            site: mesh.spawn(site, "--http", self.http[site]) for site in mesh.sites
        }

    def logs(self) -> str:
        return "\n".join(
            f"--- {site}\n{process.log.read_text()[-2000:]}"
            for site, process in self.processes.items()
        )


@pytest.fixture
async def agents(agent_mesh: AgentMeshes) -> Agents:
    return Agents(await agent_mesh(THREE_SITES))


async def _status(session: aiohttp.ClientSession, http: str) -> dict[str, Any] | None:
    try:
        async with session.get(f"http://{http}/status") as response:
            return dict(await response.json()) if response.status == 200 else None
    except aiohttp.ClientError:
        return None


async def _converged(agents: Agents, timeout: float = 60) -> None:
    """Every agent routes to every site (read from each one's /status)."""
    everyone = set(agents.mesh.sites)
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        while True:
            routed = []
            for site, http in agents.http.items():
                status = await _status(session, http)
                overlays = [] if status is None else status["networks"]["grid-demo"]["overlays"]
                routed.append(
                    bool(overlays) and {c["site"] for c in overlays[0]["candidates"]} == everyone
                )
                assert agents.processes[site].process.poll() is None, agents.logs()
            if all(routed):
                return
            assert time.monotonic() < deadline, f"no convergence\n{agents.logs()}"
            await asyncio.sleep(0.2)


def _catch_up_shown(driver: Any) -> tuple[str, str] | None:
    shown = driver.find_elements("css selector", ".catch-up")
    return (shown[0].get_attribute("data-caught-up"), shown[0].text) if shown else None


def _watch_a_site_go_down(url: str, kill: Callable[[], float], bound: float) -> dict[str, Any]:
    """The browser session (blocking, run in a worker thread)."""
    with browser() as driver:
        driver.get(url)
        everyone = {site.name: "alive" for site in THREE_SITES}
        wait_for(lambda: _members(driver) == everyone, timeout=30, what="every member shown alive")
        wait_for(
            lambda: _ranked_sites(driver) == set(everyone),
            timeout=30,
            what="every site's candidates in the ranking",
        )
        assert driver.execute_script("return document.body.dataset.rendered") == "true"
        # Every site's candidates are ranked, so the page says the view is complete.
        wait_for(
            lambda: _catch_up_shown(driver) == ("true", "items complete"),
            timeout=30,
            what="the items' view shown complete",
        )
        booklet = driver.find_element("link text", "Grid Booklet").get_attribute("href")
        assert booklet == url + "booklet/"
        converged_errors = console_errors(driver)
        save_screenshot(driver, "live-view-converged")
        # Marks this document: a reload would lose it.
        driver.execute_script("window.gridTestMarker = 'same page';")
        killed_at = kill()
        limit = bound + PAGE_POLL_S + SCHEDULING_ALLOWANCE_S
        wait_for(
            lambda: _members(driver).get(VICTIM) == "down",
            timeout=limit,
            interval=0.1,
            what=f"{VICTIM} shown down",
        )
        shown_down = time.monotonic() - killed_at
        wait_for(
            lambda: VICTIM not in _ranked_sites(driver),
            timeout=30,
            what=f"{VICTIM} gone from the ranking",
        )
        save_screenshot(driver, "live-view-site-down")
        return {
            "shown_down_s": shown_down,
            "limit_s": limit,
            "same_page": driver.execute_script("return window.gridTestMarker"),
            "members": _members(driver),
            "history": driver.execute_script(
                "return [...document.querySelectorAll('ol.history li')].map(li => li.textContent);"
            ),
            "errors": converged_errors + console_errors(driver),
        }


async def _page_loads_nothing_from_elsewhere(http: str) -> None:
    async with aiohttp.ClientSession() as session, session.get(f"http://{http}/") as response:
        page = await response.text()
        policy = response.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    assert "src=" not in page  # no script, style, image or frame from anywhere
    assert "https://" not in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    async with aiohttp.ClientSession() as session, session.get(f"http://{http}/booklet/") as got:
        assert got.status == 200  # the page links the booklet, served beside it


async def test_the_live_view_shows_the_mesh_and_a_killed_site_going_down(agents: Agents) -> None:
    await _converged(agents)
    await _page_loads_nothing_from_elsewhere(agents.http[VIEWER])
    bound = _detection_bound(agents.mesh)
    victim = agents.processes[VICTIM].process

    def kill() -> float:
        victim.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        victim.wait(timeout=10)
        return killed

    seen = await asyncio.to_thread(
        _watch_a_site_go_down, f"http://{agents.http[VIEWER]}/", kill, bound
    )
    assert seen["errors"] == []
    assert seen["same_page"] == "same page"
    assert seen["members"] == {"site-a": "alive", "site-b": "alive", "site-c": "down"}
    assert seen["shown_down_s"] < seen["limit_s"]
    assert any("site-c" in line and "down" in line for line in seen["history"]), seen["history"]


async def test_the_operator_serves_the_view_beside_its_metrics(cluster: Cluster) -> None:
    async with ProviderEndpoint() as endpoint:
        await prepare_namespaces(cluster)
        await put_trust(cluster, "site-a")
        async with operator_for(cluster, "site-a") as running:
            await cluster.create(GRID_NETWORKS, network_body("mesh", port=running.swim_port))
            await cluster.create(GRID_SITES, site_body("site-a", "mesh"))
            await cluster.create(
                INFERENCE_PROVIDERS,
                provider_body("llama-a", "mesh", site="site-a", endpoint=endpoint.base_url),
            )
            address = running.operator.metrics_address
            assert address is not None

            async def ranked() -> dict[str, Any] | None:
                async with (
                    aiohttp.ClientSession() as session,
                    session.get(f"http://{address}/view.json") as response,
                ):
                    document = await response.json()
                networks = document["networks"]
                gateways = networks[0]["gateways"] if networks else []
                return document if gateways and gateways[0]["candidates"] else None

            document = await eventually(ranked, what="the operator's view with a candidate")
            assert document["role"] == "operator"
            (network,) = document["networks"]
            assert network["site"] == "site-a" and network["swim"]["running"]
            assert [c["provider"] for c in network["gateways"][0]["candidates"]] == ["llama-a"]

            def look() -> tuple[list[str], list[str], str]:
                with browser() as driver:
                    driver.get(f"http://{address}/")
                    wait_for(
                        lambda: _ranked_sites(driver) == {"site-a"},
                        timeout=30,
                        what="the operator's ranking drawn",
                    )
                    save_screenshot(driver, "live-view-operator")
                    role = driver.find_element("id", "role").text
                    return list(_members(driver)), console_errors(driver), role

            members, errors, role = await asyncio.to_thread(look)
            assert members == ["site-a"]
            assert errors == []
            assert role.startswith("live view (operator")
