"""A Sigv4 provider end to end: ``grid agent`` (its own process, debug logging) reads the AWS
credentials from the mounted Secret, withdraws the provider while they are too close to
lapsing to sign a Bedrock API key (saying so in ``CredentialsValid``, writing no key), and,
once the Secret holds usable ones, signs a key that botocore verifies, writes it where the
overlay's reference points and routes the provider; the other site's provider stays routed
throughout. The secret access key, the session token and the key are nowhere but in the key
file: not in the overlays, the status files, the logs, the metrics or the HTTP answers."""

from __future__ import annotations

import asyncio
import json
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from grid.demo import MeshSettings
from grid.demo.builder import PROVIDERS_FILE
from grid.demo.mesh import free_port
from k8s.waiting import eventually
from support.agents import TOKEN_SITES, AgentMesh, AgentMeshes, AgentProcess
from support.bedrock_keys import AwsKeys, decode, new_keys, signature_holds
from support.canary import Canaries
from test_agent_oauth2 import credentials_condition, fetch, own_candidate

KEY_DIR = Path("credentials/grid/grid-token-llama-a")


def use_sigv4(mesh: AgentMesh) -> None:
    """site-a's provider authenticates with keys signed from the Secret bedrock-aws."""
    path = mesh.sites["site-a"].resources / PROVIDERS_FILE
    documents = list(yaml.safe_load_all(path.read_text()))
    for document in documents:
        document["spec"]["auth"] = {
            "strategy": "Sigv4",
            "secretRef": {
                "name": "bedrock-aws",
                "namespace": "grid",
                "key": "AWS_SECRET_ACCESS_KEY",
            },
        }
    path.write_text(yaml.safe_dump_all(documents))


def mount_aws_secret(secrets_dir: Path, keys: AwsKeys, expiration: datetime | None) -> None:
    secret = secrets_dir / "grid" / "bedrock-aws"
    secret.mkdir(parents=True, exist_ok=True)
    entries = keys.entries("eu-west-1")
    if expiration is not None:
        entries["AWS_CREDENTIAL_EXPIRATION"] = expiration.isoformat().encode()
    else:
        (secret / "AWS_CREDENTIAL_EXPIRATION").unlink(missing_ok=True)
    for name, value in entries.items():
        (secret / name).write_bytes(value)


async def test_the_agent_signs_a_bedrock_key_once_the_credentials_can(
    tmp_path: Path, agent_mesh: AgentMeshes
) -> None:
    secrets_dir = tmp_path / "secrets"
    lapsing, usable = new_keys(), new_keys()
    mount_aws_secret(secrets_dir, lapsing, datetime.now(UTC) + timedelta(seconds=60))
    mesh = await agent_mesh(TOKEN_SITES, MeshSettings(secrets_dir=secrets_dir))
    use_sigv4(mesh)
    http = f"127.0.0.1:{free_port(socket.SOCK_STREAM)}"
    stderr_file = tmp_path / "agent.err"
    agent: AgentProcess = mesh.spawn(
        "site-a", "--http", http, "--log-level", "DEBUG", log=stderr_file
    )
    await mesh.start(["site-b"])
    responses: list[str] = []
    key_dir = mesh.sites["site-a"].state_dir / KEY_DIR

    async def status() -> dict[str, Any]:
        async with aiohttp.ClientSession() as session:
            text = await fetch(session, f"http://{http}/status")
        responses.append(text)
        return credentials_condition(json.loads(text))

    try:
        await agent.until(
            "site-b's provider routed",
            lambda: {c["site"] for c in mesh.overlay_candidates("site-a")} == {"site-b"},
        )

        async def refused() -> dict[str, Any] | None:
            condition = await status()
            return condition if condition["reason"] == "SecretUnusable" else None

        condition = await eventually(refused, what="the reason in /status")
        assert condition["status"] == "False"
        assert "too soon to sign a key" in condition["message"]
        assert own_candidate(mesh) is None and not key_dir.exists()

        # Renewed credentials in the Secret: the next retry signs with them.
        mount_aws_secret(secrets_dir, usable, None)
        await agent.until(
            "site-a routes its Sigv4 provider", lambda: own_candidate(mesh) is not None
        )
        candidate = own_candidate(mesh)
        assert candidate is not None
        ref = candidate["credential"]["secretRef"]
        assert ref == {"name": "grid-token-llama-a", "namespace": "grid", "key": ref["key"]}
        assert candidate["credential"]["strategy"] == "bearer_token"
        # The first key: named at once, nothing was named before it.
        key_path = key_dir / ref["key"]
        assert [path.name for path in key_dir.iterdir()] == [ref["key"]]
        token = key_path.read_text()
        assert key_path.stat().st_mode & 0o777 == 0o600
        assert signature_holds(token, usable) and not signature_holds(token, lapsing)
        key = decode(token)
        assert (key.scope[2], key.lifetime_s) == ("eu-west-1", 43200)

        async def minted() -> dict[str, Any] | None:
            condition = await status()
            return condition if condition["reason"] == "Minted" else None

        condition = await eventually(minted, what="Minted in /status")
        assert condition["status"] == "True"
        async with aiohttp.ClientSession() as session:
            metrics = await fetch(session, f"http://{http}/metrics")
        responses.append(metrics)
        series = (
            'grid_provider_credential_expiry_timestamp_seconds{network="grid-demo",'
            'provider="llama-a"} '
        )
        value = next(line for line in metrics.splitlines() if line.startswith(series))
        # The key lapses 12 hours after the second it was signed at.
        lapses_at = key.signed_at + timedelta(seconds=key.lifetime_s)
        assert abs(float(value.removeprefix(series)) - lapses_at.timestamp()) < 1
    finally:
        code = await asyncio.to_thread(agent.stop)
        await mesh.stop()
    logs = stderr_file.read_text()
    assert code == 0, logs[-2000:]
    assert "token minted" in logs and "too soon to sign a key" in logs

    canaries = Canaries(
        [
            *(k.secret_access_key.encode() for k in (lapsing, usable)),
            *((k.session_token or "").encode() for k in (lapsing, usable)),
            token.encode(),
        ],
        public=["bedrock-api-key-"],
    )
    canaries.assert_absent(logs, "the agent's log")
    for text in responses:
        canaries.assert_absent(text, "an HTTP response")
    scanned = 0
    for path in (tmp_path / "mesh").rglob("*"):
        if path.is_file() and path.name != "token" and "credentials" not in path.parts:
            scanned += 1
            canaries.assert_absent(path.read_bytes(), str(path))
    assert scanned > 10
