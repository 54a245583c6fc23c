"""The agent keeps its escrow holder on disk before anything of it goes out, as a process:
while ``<state>/spend/<network>.escrow.json`` cannot be written (a directory stands in its
place), the agent's budget document stays as it was although its status moves on, and the
log says why; once it can, the holder is on disk and the document catches up."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import yaml

from grid.demo import MeshSettings
from grid.demo.builder import NETWORK_FILE
from support.agents import THREE_SITES, AgentMeshes
from support.servers import ProviderEndpoint
from test_e2e_escrow_restart import escrow_figures
from test_e2e_spend import LITELLM, MODEL, SpendMesh, spend_source


async def test_nothing_of_the_holder_goes_out_before_it_is_on_disk(
    agent_mesh: AgentMeshes,
) -> None:
    async with ProviderEndpoint() as exporter:
        mesh = await agent_mesh(THREE_SITES[:1], MeshSettings())
        source = spend_source("tokens", "site-a", exporter, metric=LITELLM, tenantLabel="team")
        budget = {"tenant": "acme", "cap": 10_000, "window": "720h", "enforcement": "escrow"}
        path = mesh.sites["site-a"].resources / NETWORK_FILE
        document = yaml.safe_load(path.read_text())
        document["spec"].update(budgets=[budget], spendSources=[source])
        path.write_text(yaml.safe_dump(document))
        spend = SpendMesh(mesh, {"tokens": exporter})
        exporter.set_counter(LITELLM, 0, team="acme", model=MODEL)
        holder = mesh.sites["site-a"].state_dir / "spend" / f"{mesh.settings.network}.escrow.json"
        holder.mkdir(parents=True)  # where the file should go: it cannot be written
        spend.spawn("site-a")
        try:

            async def documented() -> bool:
                return escrow_figures(spend, "site-a").get("enforcement") == "escrow"

            await spend.wait("the first budget document", documented)
            exporter.set_counter(LITELLM, 300, team="acme", model=MODEL)
            async with aiohttp.ClientSession() as http:

                async def counted() -> bool:
                    return (await spend.spent(http, "site-a")).get("acme") == 300

                await spend.wait("the spend in the status", counted)
                await spend.scraped("tokens", 2)
                await spend.scraped("tokens", 1)  # more refreshes: still held back
                assert escrow_figures(spend, "site-a").get("site_used") == 0
                assert holder.is_dir()
                holder.rmdir()

                async def caught_up() -> bool:
                    return escrow_figures(spend, "site-a").get("site_used") == 300

                await spend.wait("the document once the holder is on disk", caught_up)
            kept: dict[str, Any] = json.loads(holder.read_bytes())
            assert kept["site"] == "site-a" and kept["records"]
        finally:
            await mesh.stop()
    log = "".join(p.read_text() for p in mesh.root.glob("site-a-*.log"))
    assert f"cannot write {holder}" in log
