"""The credential canary: a provider's bearer token Secret holds a unique marker. After a
full run of ``grid agent`` (its own process, debug logging, HTTP endpoints, a peer site,
then SIGTERM), the marker is in no overlay, no status file, no log line, no metric and no
HTTP response, at either site. The same for a Sigv4 provider's AWS secret access key and
session token, and the Bedrock API key the agent signs from them, and for a Custom
provider's template inputs and the value the agent renders from them."""

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
from support.bedrock_keys import AwsKeys, new_keys, signature_holds
from support.canary import Canaries
from test_agent_custom import VALUE_DIR, mount_entries, use_custom
from test_agent_oauth2 import own_candidate
from test_agent_sigv4 import mount_aws_secret, use_sigv4


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


async def test_aws_credentials_and_the_bedrock_key_appear_nowhere_after_a_full_run(
    tmp_path: Path, agent_mesh: AgentMeshes
) -> None:
    """The same for a Sigv4 provider: its secret access key and session token, in the
    mounted Secret, and the Bedrock API key signed from them, in the key file only. First
    a secret access key the agent cannot use (it holds a space), reported without quoting
    it, then a usable one."""
    keys = new_keys(marker=f"grid-canary-{secrets.token_hex(4)}")
    secrets_dir = tmp_path / "secrets"
    unusable = AwsKeys(keys.access_key_id, keys.secret_access_key + " x", keys.session_token)
    mount_aws_secret(secrets_dir, unusable, None)
    mesh = await agent_mesh(TOKEN_SITES, MeshSettings(secrets_dir=secrets_dir))
    use_sigv4(mesh)
    http = f"127.0.0.1:{free_port(socket.SOCK_STREAM)}"
    stdout_file, stderr_file = tmp_path / "agent.out", tmp_path / "agent.err"
    agent = mesh.spawn(
        "site-a", "--http", http, "--log-level", "DEBUG", log=stderr_file, stdout=stdout_file
    )
    responses: list[str] = []
    await mesh.start(["site-b"])
    await agent.until(
        "the unusable key reported",
        lambda: "is not a secret access key" in stderr_file.read_text(),
    )
    mount_aws_secret(secrets_dir, keys, None)
    await agent.until(
        "both sites route site-a's Sigv4 provider",
        lambda: (
            ("llama", "site-a")
            in {(c["name"], c["site"]) for c in mesh.overlay_candidates("site-b")}
            and own_candidate(mesh) is not None
        ),
    )
    (key_file,) = (mesh.sites["site-a"].state_dir / "credentials/grid/grid-token-llama-a").iterdir()
    token = key_file.read_text()
    assert signature_holds(token, keys)
    async with aiohttp.ClientSession() as session:
        for path in ("/status", "/metrics", "/healthz", "/no-such-page"):
            async with session.get(f"http://{http}{path}") as response:
                responses.append(await response.text())
    assert "grid_provider_credential_expiry_timestamp_seconds" in responses[1]
    code = await asyncio.to_thread(agent.stop)
    stdout, stderr = stdout_file.read_bytes(), stderr_file.read_bytes()
    assert code == 0, stderr.decode()[-2000:]
    await mesh.stop()

    canaries = Canaries(
        [
            keys.secret_access_key.encode(),
            (keys.session_token or "").encode(),
            token.encode(),
        ],
        public=["bedrock-api-key-"],
    )
    canaries.assert_absent(stdout, "stdout")
    canaries.assert_absent(stderr, "stderr")
    for text in responses:
        canaries.assert_absent(text, "an HTTP response")
    scanned = 0
    for path in (tmp_path / "mesh").rglob("*"):
        if path.is_file() and path != key_file:
            scanned += 1
            canaries.assert_absent(path.read_bytes(), str(path))
    assert scanned > 10


async def test_a_custom_templates_inputs_and_rendered_value_appear_nowhere_after_a_full_run(
    tmp_path: Path, agent_mesh: AgentMeshes
) -> None:
    """The same for a Custom provider whose value the agent renders from a template in its
    Secret: the template's inputs and the rendered value are in the value file only. First
    an input the agent cannot put in a header (it holds a line break), reported without
    quoting it, then a usable one."""
    key = f"grid-canary-{secrets.token_hex(16)}"
    literal = f"grid-canary-{secrets.token_hex(8)}"
    secrets_dir = tmp_path / "secrets"
    mount_entries(
        secrets_dir, template=f"{literal} {{{{apiKey}}}}", header="X-Partner", apiKey=f"{key}\nx"
    )
    mesh = await agent_mesh(TOKEN_SITES, MeshSettings(secrets_dir=secrets_dir))
    use_custom(mesh)
    http = f"127.0.0.1:{free_port(socket.SOCK_STREAM)}"
    stdout_file, stderr_file = tmp_path / "agent.out", tmp_path / "agent.err"
    agent = mesh.spawn(
        "site-a", "--http", http, "--log-level", "DEBUG", log=stderr_file, stdout=stdout_file
    )
    responses: list[str] = []
    await mesh.start(["site-b"])
    await agent.until(
        "the unusable input reported",
        lambda: (
            "entry apiKey (named by the template) holds a line break" in stderr_file.read_text()
        ),
    )
    mount_entries(secrets_dir, apiKey=key)
    await agent.until(
        "both sites route site-a's Custom provider",
        lambda: (
            ("llama", "site-a")
            in {(c["name"], c["site"]) for c in mesh.overlay_candidates("site-b")}
            and own_candidate(mesh) is not None
        ),
    )
    (value_file,) = (mesh.sites["site-a"].state_dir / VALUE_DIR).iterdir()
    assert value_file.read_text() == f"{literal} {key}"
    async with aiohttp.ClientSession() as session:
        for path in ("/status", "/metrics", "/healthz", "/no-such-page"):
            async with session.get(f"http://{http}{path}") as response:
                responses.append(await response.text())
    code = await asyncio.to_thread(agent.stop)
    stdout, stderr = stdout_file.read_bytes(), stderr_file.read_bytes()
    assert code == 0, stderr.decode()[-2000:]
    await mesh.stop()

    canaries = Canaries([key.encode(), literal.encode(), f"{literal} {key}".encode()])
    canaries.assert_absent(stdout, "stdout")
    canaries.assert_absent(stderr, "stderr")
    for text in responses:
        canaries.assert_absent(text, "an HTTP response")
    scanned = 0
    for path in (tmp_path / "mesh").rglob("*"):
        if path.is_file() and path != value_file:
            scanned += 1
            canaries.assert_absent(path.read_bytes(), str(path))
    assert scanned > 10
