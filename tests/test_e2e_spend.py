"""Budgets counted from real spend, end to end: three ``grid agent`` processes on 127.0.0.1,
each scraping a Prometheus exporter of its own that this test serves over HTTP (a
LiteLLM-like token counter per team at two sites, a vLLM-like counter with no tenant label
at the third). The counters rise, reset (an exporter restart), vanish and come back, and a
site is killed and restarted while spend goes on; after each step every site's ``/status``
shows the exact sum of what the counters grew, and its ``/metrics`` the same."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from grid.demo import MeshSettings
from grid.demo.builder import GATEWAY_NAME, GATEWAY_NAMESPACE, NETWORK_FILE, SITE_LABEL
from grid.demo.mesh import free_port
from grid.render.budgets import verify_budget_document
from support.agents import THREE_SITES, AgentMesh, AgentMeshes, AgentProcess
from support.servers import ProviderEndpoint

LITELLM = "litellm_total_tokens_metric_total"
VLLM = "vllm:generation_tokens_total"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
TIMEOUT_S = 30
FIGURE_SAMPLES = 8


def spend_source(name: str, site: str, exporter: ProviderEndpoint, **read: Any) -> dict[str, Any]:
    return {
        "name": name,
        "siteSelector": {"matchLabels": {SITE_LABEL: site}},
        "url": exporter.metrics_url,
        "interval": "1s",
        "timeout": "500ms",
        **read,
    }


def configure_spend(mesh: AgentMesh, budgets: list[Any], sources: list[Any]) -> None:
    """Every site's GridNetwork gets ``budgets`` and ``sources`` (before its agent starts)."""
    for runtime in mesh.sites.values():
        path = runtime.resources / NETWORK_FILE
        document = yaml.safe_load(path.read_text())
        document["spec"].update(budgets=budgets, spendSources=sources)
        path.write_text(yaml.safe_dump(document))


class SpendMesh:
    """The three agent processes, their exporters and their ``/status``."""

    def __init__(self, mesh: AgentMesh, exporters: dict[str, ProviderEndpoint]) -> None:
        self.mesh = mesh
        self.exporters = exporters
        self.http = {site: f"127.0.0.1:{free_port(socket.SOCK_STREAM)}" for site in mesh.sites}
        self.processes: dict[str, AgentProcess] = {}

    def spawn(self, site: str) -> None:
        log = self.mesh.root / f"{site}-{len(self.mesh.processes)}.log"
        self.processes[site] = self.mesh.spawn(site, "--http", self.http[site], log=log)

    def check_running(self, what: str) -> None:
        for process in self.processes.values():
            if process.process.returncode is None:
                process.check_running(what)

    async def wait(self, what: str, holds: Callable[[], Awaitable[bool]]) -> float:
        """Seconds until ``holds()``, failing at once if an agent that should run exited."""
        started = time.monotonic()
        while not await holds():
            self.check_running(what)
            if time.monotonic() - started > TIMEOUT_S:
                raise AssertionError(f"{what}: not within {TIMEOUT_S} s")
            await asyncio.sleep(0.05)
        return time.monotonic() - started

    async def network_status(self, http: aiohttp.ClientSession, site: str) -> dict[str, Any]:
        try:
            async with http.get(f"http://{self.http[site]}/status") as response:
                document = await response.json()
        except (aiohttp.ClientError, ValueError):
            return {}  # not serving yet
        network = document["networks"].get(self.mesh.settings.network, {})
        for resource in network.get("resources", []):
            if resource["kind"] == "GridNetwork":
                return dict(resource["status"])
        return {}

    async def spent(self, http: aiohttp.ClientSession, site: str) -> dict[str, int]:
        status = await self.network_status(http, site)
        return {b["tenant"]: b["used"] for b in status.get("budgets", [])}

    def documented(self, site: str) -> dict[str, int]:
        """What ``site``'s budget document for its gateway says each tenant spent, once a
        whole one is written (``grid budget verify``'s rules)."""
        path = (
            self.mesh.sites[site].state_dir
            / "overlays"
            / self.mesh.settings.network
            / GATEWAY_NAMESPACE
            / GATEWAY_NAME
            / "budgets.json"
        )
        if not path.exists():
            return {}
        data = path.read_bytes()
        if not verify_budget_document(data, {"local_site": site}).accepted:
            return {}
        tenants = json.loads(data)["budgets"]["tenants"]
        return {t["tenant"]: t["used"] for t in tenants}

    async def scraped(self, exporter: str, times: int) -> None:
        """Until ``exporter`` has answered ``times`` more scrapes: the first of them read
        what it serves now, and the agent took it in before it asked again."""
        served = self.exporters[exporter].metrics_requests + times

        async def done() -> bool:
            return self.exporters[exporter].metrics_requests >= served

        await self.wait(f"{times} scrapes of {exporter}", done)


@pytest.fixture
async def spend_mesh(agent_mesh: AgentMeshes) -> Any:
    exporters = {name: ProviderEndpoint() for name in ("litellm-a", "litellm-b", "vllm-c")}
    for exporter in exporters.values():
        await exporter.start()
    mesh = await agent_mesh(THREE_SITES, MeshSettings())
    sources = [
        spend_source(
            "litellm-a", "site-a", exporters["litellm-a"], metric=LITELLM, tenantLabel="team"
        ),
        spend_source(
            "litellm-b", "site-b", exporters["litellm-b"], metric=LITELLM, tenantLabel="team"
        ),
        spend_source("vllm-c", "site-c", exporters["vllm-c"], metric=VLLM, tenant="llama-pool"),
    ]
    budgets = [
        {"tenant": tenant, "cap": 10**9, "window": "720h", "unit": "tokens"}
        for tenant in ("acme", "globex", "llama-pool")
    ]
    configure_spend(mesh, budgets, sources)
    try:
        yield SpendMesh(mesh, exporters)
    finally:
        await mesh.stop()
        for exporter in exporters.values():
            await exporter.stop()


async def test_every_site_shows_the_exact_sum_of_what_the_counters_grew(
    spend_mesh: SpendMesh,
) -> None:
    mesh, a, b, c = (spend_mesh, *spend_mesh.exporters.values())
    # History before the sites start is not spend of this mesh.
    a.set_counter(LITELLM, 1000, team="acme", model=MODEL)
    c.set_counter(VLLM, 5000, model_name=MODEL, engine="0")
    for site in ("site-a", "site-b", "site-c"):
        mesh.spawn(site)
    expected = {"acme": 0, "globex": 0, "llama-pool": 0}

    async with aiohttp.ClientSession() as http:

        async def everywhere() -> bool:
            views = [await mesh.spent(http, site) for site in mesh.http]
            return all(view == expected for view in views)

        async def every_source_read() -> bool:
            for site in mesh.http:
                status = await mesh.network_status(http, site)
                scrapes = [s.get("lastScrape") or {} for s in status.get("spendSources", [])]
                if len(scrapes) != 1 or not scrapes[0].get("ok"):
                    return False
            return True

        await mesh.wait("every site read its spend source", every_source_read)
        await mesh.wait("nothing spent yet", everywhere)

        # They rise, and a series is born at site-b: counted from zero.
        started = time.monotonic()
        a.set_counter(LITELLM, 1500, team="acme", model=MODEL)
        b.set_counter(LITELLM, 300, team="acme", model=MODEL)
        b.set_counter(LITELLM, 50, team="globex", model=MODEL)
        c.set_counter(VLLM, 5200, model_name=MODEL, engine="0")
        expected.update(acme=800, globex=50, **{"llama-pool": 200})
        await mesh.wait("the rise everywhere", everywhere)
        print(f"spend at three sites in every site's status: {time.monotonic() - started:.2f} s")

        # How long one increase at one site takes to reach every site's status, from the
        # scrape that read it (the scrape itself comes up to one interval after).
        delays = []
        for step in range(1, FIGURE_SAMPLES + 1):
            served = len(a.metrics_served_at)
            a.set_counter(LITELLM, 1500 + 10 * step, team="acme", model=MODEL)
            expected["acme"] += 10
            await mesh.wait("an increase everywhere", everywhere)
            delays.append(time.monotonic() - a.metrics_served_at[served])
        delays.sort()
        print(
            f"scrape of an increase at site-a to every site's status: median "
            f"{delays[len(delays) // 2]:.2f} s, max {delays[-1]:.2f} s ({len(delays)} increases)"
        )

        # site-a's exporter restarts: its counter starts again from zero.
        a.set_counter(LITELLM, 40, team="acme", model=MODEL)
        expected["acme"] += 40
        await mesh.scraped("litellm-a", 2)
        await mesh.wait("the reset everywhere", everywhere)

        # A series vanishes from site-b's exporter and comes back grown.
        b.remove_counter(LITELLM, team="acme", model=MODEL)
        await mesh.scraped("litellm-b", 2)
        b.set_counter(LITELLM, 325, team="acme", model=MODEL)
        expected["acme"] += 25
        await mesh.wait("the series back everywhere", everywhere)
        await mesh.scraped("litellm-b", 2)
        assert await everywhere()  # and nothing more

        # site-c is killed; spend goes on while it is down, and it starts again.
        victim = mesh.processes["site-c"]
        victim.process.kill()
        victim.process.wait(timeout=10)
        c.set_counter(VLLM, 5230, model_name=MODEL, engine="0")
        c.set_counter(VLLM, 10, model_name=MODEL, engine="1")  # a second engine, born meanwhile
        expected["llama-pool"] += 40
        mesh.spawn("site-c")
        started = time.monotonic()
        await mesh.wait("spend counted across the restart", everywhere)
        print(f"restarted site's spend in every site's status: {time.monotonic() - started:.2f} s")
        await mesh.scraped("vllm-c", 3)
        assert await everywhere()  # counted once, and only once

        # Each site's budget document, beside its gateway's overlay, says the same.
        async def documented_everywhere() -> bool:
            return all(mesh.documented(site) == expected for site in mesh.http)

        await mesh.wait("every site's budget document", documented_everywhere)

        # What /metrics says.
        async with http.get(f"http://{mesh.http['site-b']}/metrics") as response:
            metrics = await response.text()
    network = mesh.mesh.settings.network
    samples = {
        (sample.name, sample.labels["tenant"]): sample.value
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if sample.name.startswith("grid_budget_")
        and sample.labels == {**sample.labels, "network": network, "window": "720h"}
    }
    for tenant, used in expected.items():
        assert samples[("grid_budget_spent", tenant)] == used
        assert samples[("grid_budget_cap", tenant)] == 10**9
        assert samples[("grid_budget_remaining", tenant)] == 10**9 - used
