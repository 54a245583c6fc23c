"""An escrowed budget across a crash, end to end: three ``grid agent`` processes on
127.0.0.1, each scraping a token counter this test serves. Once the sites hold shares of a
window and site-b has spent and been granted more, site-b is killed (SIGKILL) and started
again: it goes on as the same escrow holder, from the file it wrote before publishing
(``<state>/spend/<network>.escrow.json``), with at least the allowance it had; nothing is
claimed twice, and every site agrees on what site-b was granted."""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any

import aiohttp
import pytest
import yaml

from grid.demo import MeshSettings
from grid.demo.builder import GATEWAY_NAME, GATEWAY_NAMESPACE, NETWORK_FILE
from grid.engine.escrow import CLAIM_SLACK_S
from grid.render.budgets import verify_budget_document
from support.agents import THREE_SITES, AgentMeshes
from support.servers import ProviderEndpoint
from support.windows import soonest_window, window_length
from test_e2e_spend import LITELLM, MODEL, SpendMesh, configure_spend, spend_source

pytestmark = pytest.mark.slow

WINDOW_S = 90
"""The shortest window the run fits in; the mesh takes the length up to
:data:`LONGEST_WINDOW_S` whose window starts soonest after its sites are up."""
LONGEST_WINDOW_S = 150
CAP = 30_000
UP_S = 10
"""What the agents take from the fixture choosing the window length to their first
refresh, where their lives begin: slower ones claim the window after."""


def acme_window_s(mesh: SpendMesh) -> int:
    """The length of acme's window, as the fixture configured it."""
    document = yaml.safe_load((mesh.mesh.sites["site-a"].resources / NETWORK_FILE).read_text())
    return window_length(document["spec"]["budgets"][0]["window"])


def escrow_figures(mesh: SpendMesh, site: str) -> dict[str, Any]:
    """acme's figures in ``site``'s budget document, once a whole one is written."""
    path = (
        mesh.mesh.sites[site].state_dir
        / "overlays"
        / mesh.mesh.settings.network
        / GATEWAY_NAMESPACE
        / GATEWAY_NAME
        / "budgets.json"
    )
    try:
        data = path.read_bytes()
    except OSError:
        return {}
    if not verify_budget_document(data, {"local_site": site}).accepted:
        return {}
    tenants = {t["tenant"]: t for t in json.loads(data)["budgets"]["tenants"]}
    return dict(tenants.get("acme", {}))


def network_status_written(mesh: SpendMesh, site: str) -> bool:
    network = mesh.mesh.settings.network
    return (mesh.mesh.sites[site].state_dir / "status" / "GridNetwork" / f"{network}.json").exists()


def holder_epoch(mesh: SpendMesh, site: str) -> int | None:
    path = mesh.mesh.sites[site].state_dir / "spend" / f"{mesh.mesh.settings.network}.escrow.json"
    try:
        return int(json.loads(path.read_bytes())["epoch"])
    except (OSError, ValueError, KeyError):
        return None


@pytest.fixture
async def escrow_mesh(agent_mesh: AgentMeshes) -> Any:
    exporters = {name: ProviderEndpoint() for name in ("tokens-a", "tokens-b", "tokens-c")}
    for exporter in exporters.values():
        await exporter.start()
    mesh = await agent_mesh(THREE_SITES, MeshSettings())
    sources = [
        spend_source(
            f"tokens-{s[-1]}", s, exporters[f"tokens-{s[-1]}"], metric=LITELLM, tenantLabel="team"
        )
        for s in ("site-a", "site-b", "site-c")
    ]
    # The sites are spawned as soon as this is written, and up within seconds.
    window_s = soonest_window(time.time() + CLAIM_SLACK_S + UP_S, WINDOW_S, LONGEST_WINDOW_S)
    budgets = [{"tenant": "acme", "cap": CAP, "window": f"{window_s}s", "enforcement": "escrow"}]
    configure_spend(mesh, budgets, sources)
    try:
        yield SpendMesh(mesh, exporters)
    finally:
        await mesh.stop()
        for exporter in exporters.values():
            await exporter.stop()


async def test_a_killed_site_goes_on_as_the_same_holder_with_its_allowance(
    escrow_mesh: SpendMesh,
) -> None:
    mesh = escrow_mesh
    b = mesh.exporters["tokens-b"]
    b.set_counter(LITELLM, 0, team="acme", model=MODEL)
    for site in ("site-a", "site-b", "site-c"):
        mesh.spawn(site)

    async def begun() -> bool:
        # A status is written on an agent's first refresh, after its life began.
        return all(network_status_written(mesh, s) for s in ("site-a", "site-b", "site-c"))

    await mesh.wait("every site's first status", begun)
    # The first window the lives begun by now may claim a share of.
    length = acme_window_s(mesh)
    window = math.ceil((time.time() + CLAIM_SLACK_S) / length) * length
    floor = CAP // 3 // 10

    async def claimed() -> bool:
        figures = [escrow_figures(mesh, site) for site in ("site-a", "site-b", "site-c")]
        return time.time() >= window and all(f.get("allowance", 0) >= floor for f in figures)

    while not await claimed():
        mesh.check_running("waiting for a claimed window")
        assert time.time() < window + 30, "the window was not claimed"
        await asyncio.sleep(0.5)
    # site-b spends: its allowance is released ahead of the spend, beyond the floor.
    b.set_counter(LITELLM, 2_500, team="acme", model=MODEL)

    async def granted_more() -> bool:
        return escrow_figures(mesh, "site-b").get("allowance", 0) > 2_500

    await mesh.wait("site-b granted more than it spent", granted_more)
    before = escrow_figures(mesh, "site-b")
    epoch = holder_epoch(mesh, "site-b")
    assert epoch is not None
    victim = mesh.processes["site-b"]
    victim.process.kill()
    victim.process.wait(timeout=10)
    document = mesh.mesh.sites["site-b"].state_dir / "overlays" / mesh.mesh.settings.network
    (
        document / GATEWAY_NAMESPACE / GATEWAY_NAME / "budgets.json"
    ).unlink()  # so what is read next is the new life's
    mesh.spawn("site-b")

    async def back() -> bool:
        figures = escrow_figures(mesh, "site-b")
        return figures.get("site_used") == 2_500 and figures.get("allowance", 0) > 0

    await mesh.wait("site-b back", back)
    after = escrow_figures(mesh, "site-b")
    assert after["window_start"] == before["window_start"], "the window ended meanwhile"
    assert holder_epoch(mesh, "site-b") == epoch  # the same holder goes on
    assert after["allowance"] >= before["allowance"]  # kept, not lost
    async with aiohttp.ClientSession() as http:

        async def agreed() -> bool:
            views = [await mesh.network_status(http, s) for s in ("site-a", "site-c")]
            return all(
                {c["type"]: c["status"] for c in v.get("conditions", [])}.get("BudgetsAgreed")
                == "True"
                for v in views
            )

        await mesh.wait("no site sees another configuration", agreed)
