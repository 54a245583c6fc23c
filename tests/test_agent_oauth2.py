"""An Oauth2 provider end to end: ``grid agent`` (its own process, debug logging) mints the
provider's token from a real token endpoint, writes it where the overlay's reference
points, refreshes it before it lapses, withdraws the provider when refreshing fails until
no valid token is left (the other site's provider stays routed), and offers it again once
the endpoint answers. The client secret and every token are nowhere but in the token file:
not in the overlays, the status files, the logs, the metrics or the HTTP answers."""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from grid.demo import MeshSettings
from grid.demo.builder import PROVIDERS_FILE
from grid.demo.mesh import free_port
from grid.oauth.rotation import key_issued_at
from support.agents import TOKEN_SITES, AgentMesh, AgentMeshes, AgentProcess
from support.canary import Canaries
from support.token_server import Mode, TokenServer

CLIENT = "grid-site-a"
LIFETIME_S = 6
TOKEN_DIR = Path("credentials/grid/grid-token-llama-a")


def reference(key: str) -> dict[str, Any]:
    return {
        "strategy": "bearer_token",
        "secretRef": {"name": "grid-token-llama-a", "namespace": "grid", "key": key},
    }


def token_files(directory: Path) -> dict[str, str]:
    """The token files the agent wrote for the provider: key (file name) to token."""
    return {
        path.name: path.read_text()
        for path in directory.iterdir()
        if key_issued_at(path.name) is not None
    }


def named_token(mesh: AgentMesh, directory: Path) -> str | None:
    """The token in the file site-a's own candidate names (None without one)."""
    candidate = own_candidate(mesh)
    if candidate is None:
        return None
    return token_files(directory).get(candidate["credential"]["secretRef"]["key"])


def use_oauth2(mesh: AgentMesh, token_url: str) -> None:
    """site-a's provider authenticates with tokens minted from ``token_url``."""
    path = mesh.sites["site-a"].resources / PROVIDERS_FILE
    documents = list(yaml.safe_load_all(path.read_text()))
    for document in documents:
        document["spec"]["auth"] = {
            "strategy": "Oauth2",
            "secretRef": {"name": "idp-client", "namespace": "grid", "key": "secret"},
            "oauth2": {
                "grant": "ClientCredentials",
                "tokenUrl": token_url,
                "clientId": CLIENT,
                "scopes": ["inference"],
            },
        }
    path.write_text(yaml.safe_dump_all(documents))


def own_candidate(mesh: AgentMesh) -> dict[str, Any] | None:
    return next((c for c in mesh.overlay_candidates("site-a") if c["site"] == "site-a"), None)


async def fetch(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url) as response:
        return await response.text()


def credentials_condition(status: dict[str, Any]) -> dict[str, Any]:
    provider = next(
        r for r in status["networks"]["grid-demo"]["resources"] if r["name"] == "llama-a"
    )
    return next(c for c in provider["status"]["conditions"] if c["type"] == "CredentialsValid")


async def test_the_agent_mints_refreshes_withdraws_and_recovers(
    tmp_path: Path, agent_mesh: AgentMeshes
) -> None:
    client_secret = f"grid-canary-{secrets.token_hex(16)}"
    secrets_dir = tmp_path / "secrets"
    (secrets_dir / "grid" / "idp-client").mkdir(parents=True)
    (secrets_dir / "grid" / "idp-client" / "secret").write_text(client_secret + "\n")
    server = TokenServer(client_secrets={CLIENT: client_secret}, expires_in=LIFETIME_S)
    await server.start()
    mesh = await agent_mesh(TOKEN_SITES, MeshSettings(secrets_dir=secrets_dir))
    use_oauth2(mesh, server.url)
    http = f"127.0.0.1:{free_port(socket.SOCK_STREAM)}"
    stderr_file = tmp_path / "agent.err"
    agent: AgentProcess = mesh.spawn(
        "site-a", "--http", http, "--log-level", "DEBUG", log=stderr_file
    )
    await mesh.start(["site-b"])
    responses: list[str] = []
    token_dir = mesh.sites["site-a"].state_dir / TOKEN_DIR
    try:
        await agent.until(
            "site-a routes its Oauth2 provider", lambda: own_candidate(mesh) is not None
        )
        candidate = own_candidate(mesh)
        assert candidate is not None
        first_key = candidate["credential"]["secretRef"]["key"]
        assert candidate["credential"] == reference(first_key)
        assert first_key.startswith("token-")
        assert token_files(token_dir) == {first_key: server.tokens[0]}
        assert (token_dir / first_key).stat().st_mode & 0o777 == 0o600
        assert server.issued[0].scope == "inference"

        # Refreshed before it lapses: a new token is on disk while the first is still valid.
        await agent.until("a refresh", lambda: len(server.tokens) >= 2, timeout=LIFETIME_S * 2)
        first, second = server.issued[0], server.issued[1]
        lead = first.at + LIFETIME_S - second.at
        assert 0.1 * LIFETIME_S <= lead <= 0.3 * LIFETIME_S, lead
        print(f"refresh lead: {lead:.2f} s before a {LIFETIME_S} s token lapsed")
        # Written under a key of its own beside the first, and named in the overlay before
        # the first lapses (a token this short leaves less than the settle time).
        await agent.until(
            "the new token named", lambda: named_token(mesh, token_dir) == second.token
        )
        assert time.time() < first.at + LIFETIME_S
        assert second.token in token_files(token_dir).values()

        async with aiohttp.ClientSession() as session:
            status = json.loads(await fetch(session, f"http://{http}/status"))
            responses.append(json.dumps(status))
            condition = credentials_condition(status)
            assert (condition["status"], condition["reason"]) == ("True", "Minted")
            metrics = await fetch(session, f"http://{http}/metrics")
            responses.append(metrics)
        assert (
            'grid_provider_credential_expiry_timestamp_seconds{network="grid-demo",'
            'provider="llama-a"}' in metrics
        )

        # The endpoint refuses from now on: the provider stays routed on the token in
        # place, and goes when it lapses; site-b's provider stays.
        server.mode = Mode.REFUSE
        last = server.issued[-1]
        lapses_at = last.at + LIFETIME_S
        await agent.until(
            "the provider withdrawn", lambda: own_candidate(mesh) is None, timeout=LIFETIME_S * 3
        )
        withdrawn_after = time.time() - lapses_at
        assert len(server.tokens) == len(set(server.tokens))
        assert {c["site"] for c in mesh.overlay_candidates("site-a")} == {"site-b"}
        assert withdrawn_after < 5, withdrawn_after
        print(f"provider withdrawn {withdrawn_after:.2f} s after its last token lapsed")
        assert len(server.refusals) >= 2  # retried, backing off

        async with aiohttp.ClientSession() as session:
            status = json.loads(await fetch(session, f"http://{http}/status"))
            responses.append(json.dumps(status))
        condition = credentials_condition(status)
        # Withdrawn because the token lapsed, and the condition says what fails since when.
        assert (condition["status"], condition["reason"]) == ("False", "TokenRefused")
        assert "the token endpoint answered HTTP 401 (invalid_client)" in condition["message"]

        # The endpoint answers again: the next retry mints, the provider is back.
        server.mode = Mode.SERVE
        await agent.until("the provider back", lambda: own_candidate(mesh) is not None, timeout=30)
    finally:
        code = await asyncio.to_thread(agent.stop)
        await mesh.stop()
        await server.stop()
    logs = stderr_file.read_text()
    assert code == 0, logs[-2000:]
    assert "token minted" in logs and "no token: the token endpoint answered HTTP 401" in logs

    canaries = Canaries([client_secret.encode(), *(t.encode() for t in server.tokens)])
    canaries.assert_absent(logs, "the agent's log")
    for text in responses:
        canaries.assert_absent(text, "an HTTP response")
    scanned = 0
    for path in (tmp_path / "mesh").rglob("*"):
        if path.is_file() and "credentials" not in path.parts:
            scanned += 1
            canaries.assert_absent(path.read_bytes(), str(path))
    assert scanned > 10
