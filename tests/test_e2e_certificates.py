"""Certificate expiry end to end: two sites run as ``grid agent`` processes (real SWIM, real
TLS probes), and each one's ``/metrics`` and ``/status``, read over HTTP, give its own and
its peer's certificate the notAfter and fingerprint of the ``tls.crt`` that site holds; a
peer that leaves takes its series along."""

from __future__ import annotations

import asyncio
import functools
import socket
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import aiohttp
from cryptography import x509
from prometheus_client.parser import text_string_to_metric_families

from grid.demo.mesh import free_port
from grid.trust import fingerprint
from support.agents import POLL_S, THREE_SITES, AgentMeshes, AgentProcess

EXPIRY = "grid_site_certificate_expiry_timestamp_seconds"
SITES = ("site-a", "site-b")
T = TypeVar("T")


async def until(
    what: str,
    read: Callable[[], Awaitable[T]],
    done: Callable[[T], bool],
    processes: list[AgentProcess],
    timeout: float = 45,
) -> T:
    """``read()`` again until ``done`` holds of what it gives, while every agent runs."""
    deadline = time.monotonic() + timeout
    while True:
        value = await read()
        if done(value):
            return value
        for process in processes:
            process.check_running(what)
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        await asyncio.sleep(POLL_S)


async def test_metrics_and_status_give_each_sites_certificate_expiry(
    agent_mesh: AgentMeshes,
) -> None:
    mesh = await agent_mesh([plan for plan in THREE_SITES if plan.name in SITES])
    network = mesh.settings.network
    http = {site: f"127.0.0.1:{free_port(socket.SOCK_STREAM)}" for site in SITES}
    processes = {site: mesh.spawn(site, "--http", http[site]) for site in SITES}
    held = {
        site: (mesh.sites[site].tls_dir / "tls.crt").read_text(encoding="ascii") for site in SITES
    }
    expected = {
        site: (
            fingerprint(pem),
            x509.load_pem_x509_certificate(pem.encode()).not_valid_after_utc,
        )
        for site, pem in held.items()
    }

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:

        async def status(site: str) -> dict[str, Any]:
            try:
                async with session.get(f"http://{http[site]}/status") as response:
                    document = await response.json() if response.status == 200 else {}
            except aiohttp.ClientError:
                return {}
            return dict(document.get("networks", {}).get(network, {}))

        async def expiries(site: str) -> dict[str, float]:
            try:
                async with session.get(f"http://{http[site]}/metrics") as response:
                    text = await response.text()
            except aiohttp.ClientError:
                return {}
            return {
                sample.labels["site"]: sample.value
                for family in text_string_to_metric_families(text)
                if family.name == EXPIRY
                for sample in family.samples
                if sample.labels["network"] == network
            }

        running = list(processes.values())
        for site in SITES:
            known = await until(
                f"{site} knows both certificates",
                functools.partial(status, site),
                lambda part: {c["site"] for c in part.get("certificates", [])} == set(SITES),
                running,
            )
            for row in known["certificates"]:
                assert row["self"] == (row["site"] == site)
                assert (row["fingerprint"], datetime.fromisoformat(row["notAfter"])) == expected[
                    row["site"]
                ]
                # One CA issued both, and each GridSite pins its site's certificate.
                assert (row["anchor"], row["problem"]) == ("ca", None)
            gridsites = {
                resource["name"]: resource["status"]
                for resource in known["resources"]
                if resource["kind"] == "GridSite"
            }
            for name in SITES:
                not_after = datetime.fromisoformat(gridsites[name]["certificateNotAfter"])
                assert not_after == expected[name][1]
            scraped = await expiries(site)
            assert scraped == {name: expected[name][1].timestamp() for name in SITES}

        # site-b leaves the mesh: site-a forgets it, and its series with it.
        assert await asyncio.to_thread(processes["site-b"].stop) == 0
        await until(
            "site-b's series gone at site-a",
            functools.partial(expiries, "site-a"),
            lambda scraped: set(scraped) == {"site-a"},
            [processes["site-a"]],
        )
