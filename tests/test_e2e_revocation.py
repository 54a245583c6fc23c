"""Revocation end to end: three sites run as ``grid agent`` processes (real SWIM over UDP,
real TLS files); the network revokes one site's certificate in the other two sites'
GridNetwork, and within a reload each of them drops the revoked site from its overlay,
refuses what it keeps sending and counts it in ``/metrics``; the site comes back with a new
certificate."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from prometheus_client.parser import text_string_to_metric_families

from grid.demo.builder import NETWORK_FILE, SITES_FILE, write_documents
from grid.demo.mesh import MeshSettings, free_port
from grid.trust import fingerprint
from support.agents import THREE_SITES, AgentMesh, AgentMeshes

REVOKED = "site-c"
NETWORK = MeshSettings().network
OTHERS = ("site-a", "site-b")


def rewrite(path: Path, change: Any) -> None:
    documents = list(yaml.safe_load_all(path.read_text()))
    for document in documents:
        change(document)
    write_documents(path, documents)


def revoke(mesh: AgentMesh, site: str, revoked: str) -> None:
    def add(document: dict[str, Any]) -> None:
        document["spec"]["tls"] = {"revokedCertificates": [revoked]}

    rewrite(mesh.sites[site].resources / NETWORK_FILE, add)


def repin(mesh: AgentMesh, site: str, pinned: str, pin: str) -> None:
    def move(document: dict[str, Any]) -> None:
        if document["metadata"]["name"] == pinned:
            document["spec"]["trust"]["certFingerprint"] = pin

    rewrite(mesh.sites[site].resources / SITES_FILE, move)


def ranked_sites(mesh: AgentMesh, site: str) -> set[str]:
    return {candidate["site"] for candidate in mesh.overlay_candidates(site)}


async def status(http: str) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{http}/status") as response,
    ):
        document: dict[str, Any] = await response.json()
    return document


async def counter(http: str, family: str, **labels: str) -> float:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{http}/metrics") as response,
    ):
        text = await response.text()
    total = 0.0
    for metrics in text_string_to_metric_families(text):
        for sample in metrics.samples:
            if sample.name == family and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


async def test_a_revoked_site_is_refused_everywhere_then_back_with_a_new_certificate(
    agent_mesh: AgentMeshes,
) -> None:
    mesh = await agent_mesh(THREE_SITES)
    names = tuple(plan.name for plan in THREE_SITES)
    http = {site: f"127.0.0.1:{free_port(socket.SOCK_STREAM)}" for site in names}
    processes = {site: mesh.spawn(site, "--http", http[site]) for site in names}
    for site in OTHERS:
        await processes[site].until(
            f"{site} ranks every site", lambda site=site: ranked_sites(mesh, site) == set(names)
        )
    stolen = fingerprint((mesh.sites[REVOKED].tls_dir / "tls.crt").read_text())

    revoked_at = time.monotonic()
    for site in OTHERS:
        revoke(mesh, site, stolen)
    took: dict[str, float] = {}
    for site in OTHERS:
        await processes[site].until(
            f"{site} drops {REVOKED}",
            lambda site=site: ranked_sites(mesh, site) == set(OTHERS),
        )
        took[site] = time.monotonic() - revoked_at
    for site in OTHERS:
        assert await counter(http[site], "grid_swim_members_revoked_total") >= 1
        assert await counter(http[site], "grid_swim_renewal_items_total", what="revoked") >= 1, (
            f"{site} dropped nothing {REVOKED} signed"
        )
    # The revoked site keeps running and talking: what it sends is refused, counted.
    refused = {
        site: await counter(
            http[site], "grid_swim_refused_messages_total", reason="untrusted_certificate"
        )
        for site in OTHERS
    }
    processes[REVOKED].check_running("the revoked site runs on")
    for site in OTHERS:
        deadline = time.monotonic() + 30
        while (
            await counter(
                http[site], "grid_swim_refused_messages_total", reason="untrusted_certificate"
            )
            <= refused[site]
        ):
            processes[site].check_running("refusals counted")
            assert time.monotonic() < deadline, f"{site} counted no refusal of {REVOKED}"
            await asyncio.sleep(0.2)
        assert ranked_sites(mesh, site) == set(OTHERS)

    # Back with a new certificate (its pin moved to it): ranked everywhere again.
    processes[REVOKED].stop()
    assert mesh.credentials is not None
    fresh = mesh.credentials.certify(REVOKED, mesh.sites[REVOKED].tls_dir, dns_names=("localhost",))
    for site in names:
        repin(mesh, site, REVOKED, fresh)
    processes[REVOKED] = mesh.spawn(REVOKED, "--http", http[REVOKED])
    for site in OTHERS:
        await processes[site].until(
            f"{site} ranks {REVOKED} again",
            lambda site=site: ranked_sites(mesh, site) == set(names),
            timeout=45,
        )
    # Each site says its view of the mesh is complete once it has caught up.
    for site in names:
        deadline = time.monotonic() + 30
        while not (await status(http[site]))["networks"][NETWORK]["membership"]["caughtUp"]:
            processes[site].check_running("caught up")
            assert time.monotonic() < deadline, f"{site} never caught up"
            await asyncio.sleep(0.2)
        membership = (await status(http[site]))["networks"][NETWORK]["membership"]
        assert membership["itemsWaiting"] == 0
    print(
        f"\nrevocation written -> {REVOKED} dropped: "
        + ", ".join(f"{site} {seconds:.2f} s" for site, seconds in sorted(took.items()))
    )
