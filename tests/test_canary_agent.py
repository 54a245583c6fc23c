"""The credential canary: a provider's bearer token Secret holds a unique marker. After a
full run of ``grid agent`` (its own process, debug logging, HTTP endpoints, a peer site,
then SIGTERM), the marker is in no overlay, no status file, no log line, no metric and no
HTTP response, at either site."""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import aiohttp

from grid.demo import LocalMesh, MeshSettings, ProviderPlan, SitePlan
from grid.demo.mesh import free_port
from support.canary import Canaries

SECRET = ("grid", "llama-token", "token")


async def _eventually(
    what: str,
    predicate: Callable[[], bool],
    timeout: float = 30,
    process: subprocess.Popen[bytes] | None = None,
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the agent exited with status {process.returncode}")
        assert loop.time() < deadline, f"{what}: not within {timeout}s"
        await asyncio.sleep(0.1)


def _overlay_candidates(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return list(json.loads(path.read_text())["overlay"]["candidates"])


async def test_the_token_appears_nowhere_after_a_full_run(tmp_path: Path) -> None:
    marker = f"grid-canary-{secrets.token_hex(16)}"
    secrets_dir = tmp_path / "secrets"
    token_file = secrets_dir.joinpath(*SECRET)
    token_file.parent.mkdir(parents=True)
    token_file.write_text(marker)
    sites = (
        SitePlan(
            "site-a",
            "us-east",
            "us-east-1a",
            (ProviderPlan("llama-a", ("llama",), bearer_secret=SECRET),),
        ),
        SitePlan("site-b", "us-east", "us-east-1b", (ProviderPlan("qwen-b", ("qwen",)),)),
    )
    mesh = LocalMesh(tmp_path / "mesh", sites, MeshSettings(secrets_dir=secrets_dir))
    await mesh.prepare()
    options = mesh.options("site-a")
    http = f"127.0.0.1:{free_port(socket.SOCK_STREAM)}"
    command = [
        sys.executable,
        "-m",
        "grid.cli",
        "agent",
        "--resources",
        str(options.resources),
        "--state-dir",
        str(options.state_dir),
        "--site",
        "site-a",
        "--bind",
        str(options.bind.default),
        "--key-file",
        str(options.key_files[None][0]),
        "--tls-dir",
        str(options.tls_dir),
        "--egress-listen",
        str(options.egress_listen),
        "--secrets-dir",
        str(secrets_dir),
        "--http",
        http,
        "--probe-interval",
        "1",
        "--log-level",
        "DEBUG",
    ]
    # Files, not pipes: an unread pipe that fills up would stall the agent.
    stdout_file, stderr_file = tmp_path / "agent.out", tmp_path / "agent.err"
    with stdout_file.open("wb") as out, stderr_file.open("wb") as err:
        agent = subprocess.Popen(command, stdout=out, stderr=err)
    responses: list[str] = []
    try:
        try:
            await mesh.start(["site-b"])
            overlay_a = (
                options.state_dir / "overlays/grid-demo/grid-system/edge-gateway/grid-config.json"
            )
            overlay_b = mesh.sites["site-b"].state_dir / overlay_a.relative_to(options.state_dir)

            def converged() -> bool:
                at_a = {(c["name"], c["site"]) for c in _overlay_candidates(overlay_a)}
                at_b = {(c["name"], c["site"]) for c in _overlay_candidates(overlay_b)}
                both = {("llama", "site-a"), ("qwen", "site-b")}
                return at_a == both and at_b == both

            await _eventually("both sites route both providers", converged, process=agent)
            own = next(c for c in _overlay_candidates(overlay_a) if c["site"] == "site-a")
            assert own["credential"] == {
                "strategy": "bearer_token",
                "secretRef": {"name": "llama-token", "namespace": "grid", "key": "token"},
            }
            remote = next(c for c in _overlay_candidates(overlay_b) if c["site"] == "site-a")
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
        finally:
            agent.send_signal(signal.SIGTERM)
            await asyncio.to_thread(agent.wait, timeout=30)
        stdout, stderr = stdout_file.read_bytes(), stderr_file.read_bytes()
        assert agent.returncode == 0, stderr.decode()[-2000:]
        logs = stderr.decode()
        assert "site-a/grid-demo: overlay for grid-system/edge-gateway" in logs
        assert "stopped (left the mesh)" in logs
        await _eventually(
            "site-b saw site-a leave", lambda: mesh.view_of("site-b", "site-a")[0] == "left", 15
        )
    finally:
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
