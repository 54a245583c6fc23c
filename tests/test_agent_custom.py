"""A Custom provider with a value template end to end: ``grid agent`` (its own process,
debug logging) reads the template, the header's name and the values from the mounted
Secret, withdraws the provider while the header's entry is unusable (saying so in
``CredentialsValid``, writing nothing), then renders the value into a file where the
overlay's ``apikey`` reference points, renders it again when the Secret changes, and keeps
the value in place when an entry the template names goes missing. The values and the
rendered value are nowhere but in that file: not in the overlays, the status, the logs or
the HTTP answers."""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from grid.demo import MeshSettings
from grid.demo.builder import NETWORK_FILE, PROVIDERS_FILE
from grid.demo.mesh import free_port
from k8s.waiting import eventually
from support.agents import TOKEN_SITES, AgentMesh, AgentMeshes, AgentProcess
from support.canary import Canaries
from test_agent_oauth2 import credentials_condition, fetch, own_candidate, token_files

VALUE_DIR = Path("credentials/grid/grid-token-llama-a")
SECRET = ("grid", "partner-auth")


def use_custom(mesh: AgentMesh) -> None:
    """site-a's provider sends the value its Secret's template renders, in the header its
    Secret names, to a gateway that takes apikey credentials."""
    resources = mesh.sites["site-a"].resources
    providers = resources / PROVIDERS_FILE
    documents = list(yaml.safe_load_all(providers.read_text()))
    for document in documents:
        document["spec"]["auth"] = {
            "strategy": "Custom",
            "secretRef": {"name": SECRET[1], "namespace": SECRET[0], "key": "template"},
            "custom": {},
        }
    providers.write_text(yaml.safe_dump_all(documents))
    network_file = resources / NETWORK_FILE
    network = yaml.safe_load(network_file.read_text())
    for gateway in network["spec"]["gatewayRefs"]:
        gateway["apiKeyCredentials"] = True
    network_file.write_text(yaml.safe_dump(network))


def mount_entries(secrets_dir: Path, **entries: str | None) -> None:
    """Writes the Secret's entries (None removes one), each in one step."""
    secret = secrets_dir.joinpath(*SECRET)
    secret.mkdir(parents=True, exist_ok=True)
    for name, value in entries.items():
        if value is None:
            (secret / name).unlink(missing_ok=True)
            continue
        staging = secret / f".{name}.tmp"
        staging.write_text(value)
        staging.rename(secret / name)


async def test_the_agent_renders_the_value_and_renders_it_again_when_the_secret_changes(
    tmp_path: Path, agent_mesh: AgentMeshes
) -> None:
    api_key = f"grid-canary-{secrets.token_hex(16)}"
    rotated = f"grid-canary-{secrets.token_hex(16)}"
    secrets_dir = tmp_path / "secrets"
    mount_entries(secrets_dir, template="Token {{ apiKey }}\n", apiKey=api_key, header="Host")
    mesh = await agent_mesh(TOKEN_SITES, MeshSettings(secrets_dir=secrets_dir))
    use_custom(mesh)
    http = f"127.0.0.1:{free_port(socket.SOCK_STREAM)}"
    stderr_file = tmp_path / "agent.err"
    agent: AgentProcess = mesh.spawn(
        "site-a", "--http", http, "--log-level", "DEBUG", log=stderr_file
    )
    await mesh.start(["site-b"])
    responses: list[str] = []
    value_dir = mesh.sites["site-a"].state_dir / VALUE_DIR

    async def condition(reason: str) -> dict[str, Any] | None:
        async with aiohttp.ClientSession() as session:
            text = await fetch(session, f"http://{http}/status")
        responses.append(text)
        found = credentials_condition(json.loads(text))
        return found if found["reason"] == reason else None

    try:
        refused = await eventually(
            lambda: condition("SecretUnusable"), what="the unusable header entry reported"
        )
        assert refused["status"] == "False"
        assert (
            "entry header (custom.headerKey) is not a header Grid may send" in (refused["message"])
        )
        assert own_candidate(mesh) is None and not value_dir.exists()

        mount_entries(secrets_dir, header="X-Partner-Token")
        await agent.until("site-a routes its provider", lambda: own_candidate(mesh) is not None)
        candidate = own_candidate(mesh)
        assert candidate is not None
        first = candidate["credential"]["secretRef"]["key"]
        assert candidate["credential"] == {
            "strategy": "apikey",
            "secretRef": {"name": "grid-token-llama-a", "namespace": "grid", "key": first},
            "header": "X-Partner-Token",
        }
        assert token_files(value_dir) == {first: f"Token {api_key}"}
        assert (value_dir / first).stat().st_mode & 0o777 == 0o600
        rendered = await eventually(lambda: condition("Rendered"), what="Rendered")
        assert rendered["status"] == "True"
        assert "for header X-Partner-Token is in place" in rendered["message"]

        # A new key in the Secret: rendered again, written under a key of its own, named.
        mount_entries(secrets_dir, apiKey=rotated)

        def renamed() -> bool:
            now = own_candidate(mesh)
            return now is not None and now["credential"]["secretRef"]["key"] != first

        await agent.until("the new value named", renamed)
        candidate = own_candidate(mesh)
        assert candidate is not None
        second = candidate["credential"]["secretRef"]["key"]
        assert token_files(value_dir)[second] == f"Token {rotated}"

        # The entry the template names is gone: the value in place stays in use.
        mount_entries(secrets_dir, apiKey=None)
        failing = await eventually(
            lambda: condition("RefreshFailing"), what="RefreshFailing reported"
        )
        assert failing["status"] == "True"
        assert (
            "the template names entry apiKey, which the Secret does not have"
            in (failing["message"])
        )
        candidate = own_candidate(mesh)
        assert candidate is not None and candidate["credential"]["secretRef"]["key"] == second
        assert token_files(value_dir)[second] == f"Token {rotated}"
    finally:
        code = await asyncio.to_thread(agent.stop)
        await mesh.stop()
    logs = stderr_file.read_text()
    assert code == 0, logs[-2000:]
    assert "value rendered for header X-Partner-Token" in logs

    canaries = Canaries([api_key.encode(), rotated.encode()])
    canaries.assert_absent(logs, "the agent's log")
    for text in responses:
        canaries.assert_absent(text, "an HTTP response")
    scanned = 0
    for path in (tmp_path / "mesh").rglob("*"):
        if path.is_file() and "credentials" not in path.parts:
            scanned += 1
            canaries.assert_absent(path.read_bytes(), str(path))
    assert scanned > 10
