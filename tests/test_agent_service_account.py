"""A ServiceAccount provider at an agent's site: ``grid agent`` (its own process) mints no
token for it, since the TokenRequest API is the operator's and the agent has no Kubernetes
API. The provider is withdrawn, its ``CredentialsValid`` condition says why, no token file
is written, and the other site's provider stays routed."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import aiohttp
import yaml

from grid.agent.tokens import NO_TOKEN_REQUEST
from grid.demo import MeshSettings
from grid.demo.builder import PROVIDERS_FILE
from grid.demo.mesh import free_port
from k8s.waiting import eventually
from support.agents import TOKEN_SITES, AgentMesh, AgentMeshes, AgentProcess
from test_agent_oauth2 import credentials_condition, fetch, own_candidate


def use_service_account(mesh: AgentMesh) -> None:
    path = mesh.sites["site-a"].resources / PROVIDERS_FILE
    documents = list(yaml.safe_load_all(path.read_text()))
    for document in documents:
        document["spec"]["auth"] = {
            "strategy": "ServiceAccount",
            "serviceAccount": {
                "name": "llama-caller",
                "namespace": "grid",
                "audience": "https://llama.example.com",
            },
        }
    path.write_text(yaml.safe_dump_all(documents))


async def test_the_agent_withdraws_a_service_account_provider_saying_why(
    tmp_path: Path, agent_mesh: AgentMeshes
) -> None:
    mesh = await agent_mesh(TOKEN_SITES, MeshSettings())
    use_service_account(mesh)
    http = f"127.0.0.1:{free_port(socket.SOCK_STREAM)}"
    agent: AgentProcess = mesh.spawn("site-a", "--http", http, log=tmp_path / "agent.err")
    await mesh.start(["site-b"])
    try:
        await agent.until(
            "site-b's provider routed",
            lambda: {c["site"] for c in mesh.overlay_candidates("site-a")} == {"site-b"},
        )

        async def said() -> dict[str, object] | None:
            async with aiohttp.ClientSession() as session:
                status = json.loads(await fetch(session, f"http://{http}/status"))
            condition = credentials_condition(status)
            return condition if condition["reason"] == "SecretUnusable" else None

        condition = await eventually(said, what="the reason in /status")
        assert condition["status"] == "False"
        assert NO_TOKEN_REQUEST in str(condition["message"])
        assert own_candidate(mesh) is None
    finally:
        code = await asyncio.to_thread(agent.stop)
        await mesh.stop()
    assert code == 0
    assert not list((mesh.sites["site-a"].state_dir / "credentials").rglob("token"))
