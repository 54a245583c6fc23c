"""The credential canary: a provider's bearer token Secret holds a unique marker. After a
full run of ``grid agent`` (its own process, debug logging, HTTP endpoints, a peer site,
then SIGTERM), the marker is in no overlay, no status file, no log line, no metric and no
HTTP response, at either site."""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
from pathlib import Path

import aiohttp

from grid.demo import MeshSettings
from grid.demo.mesh import free_port
from support.agents import TOKEN_SITES, AgentMeshes, mount_token
from support.canary import Canaries


async def test_the_token_appears_nowhere_after_a_full_run(
    tmp_path: Path, agent_mesh: AgentMeshes
) -> None:
    marker = f"grid-canary-{secrets.token_hex(16)}"
    secrets_dir = mount_token(tmp_path / "secrets", marker)
    mesh = await agent_mesh(TOKEN_SITES, MeshSettings(secrets_dir=secrets_dir))
    http = f"127.0.0.1:{free_port(socket.SOCK_STREAM)}"
    stdout_file, stderr_file = tmp_path / "agent.out", tmp_path / "agent.err"
    agent = mesh.spawn(
        "site-a", "--http", http, "--log-level", "DEBUG", log=stderr_file, stdout=stdout_file
    )
    responses: list[str] = []
    await mesh.start(["site-b"])

    def converged() -> bool:
        at_a = {(c["name"], c["site"]) for c in mesh.overlay_candidates("site-a")}
        at_b = {(c["name"], c["site"]) for c in mesh.overlay_candidates("site-b")}
        both = {("llama", "site-a"), ("qwen", "site-b")}
        return at_a == both and at_b == both

    await agent.until("both sites route both providers", converged)
    own = next(c for c in mesh.overlay_candidates("site-a") if c["site"] == "site-a")
    assert own["credential"] == {
        "strategy": "bearer_token",
        "secretRef": {"name": "llama-token", "namespace": "grid", "key": "token"},
    }
    remote = next(c for c in mesh.overlay_candidates("site-b") if c["site"] == "site-a")
    assert "credential" not in remote  # the egress site injects its own

    async with aiohttp.ClientSession() as session:
        for path in ("/status", "/metrics", "/healthz", "/no-such-page"):
            async with session.get(f"http://{http}{path}") as response:
                responses.append(await response.text())
    status = json.loads(responses[0])
    provider = next(
        r for r in status["networks"]["grid-demo"]["resources"] if r["name"] == "llama-a"
    )
    credentials = next(
        c for c in provider["status"]["conditions"] if c["type"] == "CredentialsValid"
    )
    assert (credentials["status"], credentials["reason"]) == ("True", "Valid")
    assert "grid_overlay_candidates" in responses[1]
    code = await asyncio.to_thread(agent.stop)
    stdout, stderr = stdout_file.read_bytes(), stderr_file.read_bytes()
    assert code == 0, stderr.decode()[-2000:]
    logs = stderr.decode()
    assert "site-a/grid-demo: overlay for grid-system/edge-gateway" in logs
    assert "stopped (left the mesh)" in logs
    await mesh.wait_for(
        "site-b saw site-a leave", lambda: mesh.view_of("site-b", "site-a")[0] == "left", 15
    )
    await mesh.stop()

    canaries = Canaries([marker.encode()])
    canaries.assert_absent(stdout, "stdout")
    canaries.assert_absent(stderr, "stderr")
    for text in responses:
        canaries.assert_absent(text, "an HTTP response")
    scanned = 0
    for path in (tmp_path / "mesh").rglob("*"):
        if path.is_file():
            scanned += 1
            canaries.assert_absent(path.read_bytes(), str(path))
    assert scanned > 10
