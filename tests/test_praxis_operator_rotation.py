"""The operator's token rotation through the real Praxis AI gateway, with the kubelet's
delay in between.

Selected only with ``-m praxis`` and ``GRID_PRAXIS_AI`` (see tests/test_praxis_gateway.py).
A real operator (on a real API server) mints an Oauth2 provider's tokens from a real token
endpoint into the Secret ``grid-token-<provider>`` and renders the gateway's configuration
and overlay ConfigMaps; a stand-in for the kubelet copies the Secret and both ConfigMaps
into the gateway pod's volumes, each volume as it was some time earlier (the Secret's
``SECRET_LAG_S``, the ConfigMaps' ``CONFIGMAP_LAG_S``: the kubelet syncs each volume on its
own, and a Secret late behind the ConfigMaps is what the settle times must cover; a Secret
volume's keys replaced and removed as the Secret's); the gateway reads them; a client sends
requests without pause through several rotations. With settle times longer than the
kubelet's lag no request fails and none carries a lapsed token; with settle times shorter
than the lag the overlay names keys before the gateway holds their files, and requests
fail with 503.
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from grid.demo.mesh import free_port
from grid.oauth.rotation import Settle
from k8s.cluster import Cluster
from k8s.emulator import INFERENCE_PROVIDERS
from k8s.grid_install import GATEWAY_NAMESPACE
from k8s.operator_support import (
    operator_with_site,
    provider_body,
    put_secret,
)
from k8s.real_cluster import RealServers
from support.token_server import TokenServer
from test_operator_oauth2 import CLIENT, NETWORK, SITE, TOKEN_SECRET, prepare_network
from test_praxis_gateway import (
    NOBODY,
    OVERLAY_KEY,
    EchoBackend,
    _asker,
    _start_gateway,
    _stop,
    pod_dir,
    praxis_binary,
    wait_for,
)

pytestmark = [pytest.mark.praxis, pytest.mark.timeout(300)]
__all__ = ["pod_dir", "praxis_binary"]  # fixtures, used by name

LIFE_S = 50
"""Each token's life: refreshed 7.5 to 12.5 s before it lapses, more than both settle times
and the kubelet's lag take (about 6 s)."""
SECRET_LAG_S = 1.5
"""How old what the kubelet stand-in puts in the Secret volume is (a real kubelet: up to
its sync period plus its cache time, about a minute each)."""
CONFIGMAP_LAG_S = 0.2
"""How old what it puts in the ConfigMap volumes is: these may arrive much sooner."""
ROTATIONS = 2
REQUEST_SPACING_S = 0.01


@dataclass
class Snapshot:
    at: float
    files: dict[str, dict[str, bytes]]
    """Per volume, its files."""


class Kubelet:
    """Polls the API server every 0.1 s and writes each volume as it was its lag before:
    every file replaced in one step, readable by the gateway's user, files gone from the
    source removed."""

    def __init__(self, cluster: Cluster, pod: Path) -> None:
        self.cluster = cluster
        self.pod = pod
        self.history: list[Snapshot] = []

    async def _read(self) -> dict[str, dict[str, bytes]]:
        core = self.cluster.core
        found: dict[str, dict[str, bytes]] = {}
        for volume, name in (("config", "edge-praxis"), ("overlay", "edge-grid-config")):
            try:
                configmap = await self.cluster.call(
                    core.read_namespaced_config_map, name, GATEWAY_NAMESPACE
                )
            except Exception:
                continue
            found[volume] = {k: v.encode() for k, v in (configmap.data or {}).items()}
        try:
            secret = await self.cluster.call(
                core.read_namespaced_secret, TOKEN_SECRET, GATEWAY_NAMESPACE
            )
            data = secret.data or {}
            found[f"credentials/{TOKEN_SECRET}"] = {
                key: base64.b64decode(value) for key, value in data.items()
            }
        except Exception:
            pass
        return found

    async def run(self) -> None:
        while True:
            now = time.monotonic()
            self.history.append(Snapshot(now, await self._read()))
            for volume in ("config", "overlay", f"credentials/{TOKEN_SECRET}"):
                lag = SECRET_LAG_S if volume.startswith("credentials") else CONFIGMAP_LAG_S
                due = [s for s in self.history if s.at <= now - lag and volume in s.files]
                if due:
                    self._apply(volume, due[-1].files[volume])
            self.history = [s for s in self.history if s.at > now - SECRET_LAG_S - 1]
            await asyncio.sleep(0.1)  # the stand-in's sync period

    def _apply(self, volume: str, files: dict[str, bytes]) -> None:
        directory = self.pod / volume
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            target = directory / name
            if target.exists() and target.read_bytes() == data:
                continue
            staging = directory / f".{name}.sync"
            staging.write_bytes(data)
            if os.geteuid() == 0:
                os.chown(staging, NOBODY, NOBODY)
            staging.rename(target)
        for path in directory.iterdir():
            if not path.name.startswith(".") and path.name not in files:
                path.unlink()


@pytest.mark.parametrize(
    ("settle_s", "clean"),
    [(2.0, True), (0.3, False)],
    ids=["settle-longer-than-the-lag", "settle-shorter-than-the-lag"],
)
async def test_the_operators_rotation_through_the_kubelets_delay(
    pod_dir: Path,
    praxis_binary: str,
    real_servers: RealServers,
    tmp_path: Path,
    settle_s: float,
    clean: bool,
) -> None:
    cluster = real_servers.cluster(0, "cluster-a")
    client_secret = "cs-" + "operator-rotation" * 2
    server = TokenServer(client_secrets={CLIENT: client_secret}, expires_in=LIFE_S)
    await server.start()
    backend = EchoBackend("llama-a")
    runner = await backend.start()
    pki, tls = await prepare_network(cluster, tmp_path)
    await put_secret(
        cluster, "idp-client", {"secret": client_secret.encode()}, namespace=GATEWAY_NAMESPACE
    )
    listener = free_port(socket.SOCK_STREAM)
    for volume in ("config", "overlay", "tls", f"credentials/{TOKEN_SECRET}"):
        (pod_dir / volume).mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        for path in [pod_dir, *pod_dir.rglob("*")]:
            os.chown(path, NOBODY, NOBODY)
    gateway_ref = {
        "name": "edge",
        "namespace": GATEWAY_NAMESPACE,
        "configMapKey": OVERLAY_KEY,
        "routeFilterName": "intelligent_route",
        "credentialFilterName": "credential_inject",
        "consumerConfig": {
            "enabled": True,
            "listenerPort": listener,
            "adminAddress": f"127.0.0.1:{free_port(socket.SOCK_STREAM)}",
            "overlayMountPath": str(pod_dir / "overlay"),
            "credentialMountBase": str(pod_dir / "credentials"),
            "tlsMountPath": str(pod_dir / "tls"),
            "reloadDebounceMs": 100,
            "allowPrivateEndpoints": True,
        },
    }
    provider = provider_body(
        "llama-a",
        NETWORK,
        site=SITE,
        endpoint=f"http://127.0.0.1:{backend.port}",
        backend="api_provider",
    )
    provider["spec"]["auth"] = {
        "strategy": "Oauth2",
        "secretRef": {"name": "idp-client", "namespace": GATEWAY_NAMESPACE, "key": "secret"},
        "oauth2": {"grant": "ClientCredentials", "tokenUrl": server.url, "clientId": CLIENT},
    }
    settle = Settle(timedelta(seconds=settle_s), timedelta(seconds=settle_s))
    log = pod_dir / "gateway.log"
    gateway: subprocess.Popen[bytes] | None = None
    answers: list[tuple[float, int]] = []
    kubelet = Kubelet(cluster, pod_dir)
    syncing: asyncio.Task[None] | None = None
    try:
        async with operator_with_site(
            cluster, NETWORK, SITE, pki, tls=tls, gateways=[gateway_ref], token_settle=settle
        ):
            await cluster.create(INFERENCE_PROVIDERS, provider)
            syncing = asyncio.create_task(kubelet.run())
            overlay_file = pod_dir / "overlay" / OVERLAY_KEY
            config_file = pod_dir / "config" / "praxis.yaml"
            await asyncio.to_thread(
                wait_for,
                lambda: (
                    config_file.exists()
                    and overlay_file.exists()
                    and TOKEN_SECRET in overlay_file.read_text()
                    # A pod restarts until its files are there (the short settle times name
                    # the first token before the Secret volume holds it).
                    and any((pod_dir / "credentials" / TOKEN_SECRET).iterdir())
                ),
                60,
                "the configuration, an overlay naming a token and the token",
            )
            gateway = _start_gateway(praxis_binary, config_file, log)
            ask = _asker(listener)
            await asyncio.to_thread(wait_for, lambda: ask()[0] == 200, 60, "the gateway serves")

            def rotated() -> bool:
                """The newest of ROTATIONS refreshes in use."""
                if len(server.issued) <= ROTATIONS:
                    return False
                newest = f"Bearer {server.issued[ROTATIONS].token}"
                recent = backend.received[-5:]
                return any(newest in headers.get("authorization", []) for headers in recent)

            def refused_after_a_refresh() -> bool:
                """Five hundred requests sent since one failed after the first refresh (what
                short settle times do)."""
                if len(server.issued) < 2:
                    return False
                since = server.issued[1].at
                failed = [i for i, (at, code) in enumerate(answers) if at > since and code != 200]
                return bool(failed) and len(answers) - failed[0] >= 500

            def until(done: Callable[[], bool]) -> None:
                deadline = time.monotonic() + LIFE_S * (ROTATIONS + 2)
                while time.monotonic() < deadline:
                    answers.append((time.time(), ask()[0]))
                    time.sleep(REQUEST_SPACING_S)  # pacing, a hundred a second
                    if done():
                        return
                raise AssertionError(f"not seen within {LIFE_S * (ROTATIONS + 2)} s")

            await asyncio.to_thread(until, rotated if clean else refused_after_a_refresh)
    except BaseException:
        print(log.read_text()[-6000:] if log.exists() else "(no gateway log)")
        raise
    finally:
        if syncing is not None:
            syncing.cancel()
        if gateway is not None:
            _stop(gateway)
        await runner.cleanup()
        await server.stop()

    issued = {record.token: record.at for record in server.issued}
    lapsed = unknown = routed = 0
    first_use: dict[str, float] = {}
    for headers, arrived, path in zip(
        backend.received, backend.arrived, backend.paths, strict=True
    ):
        if path != "/v1/chat/completions":
            continue  # the operator's health checks
        routed += 1
        (authorization,) = headers.get("authorization", ["(none)"])
        token = authorization.removeprefix("Bearer ")
        if token not in issued:
            unknown += 1
            continue
        first_use.setdefault(token, arrived)
        if arrived >= issued[token] + LIFE_S:
            lapsed += 1
    refused = sum(1 for _, status in answers if status != 200)
    statuses = sorted({status for _, status in answers if status != 200})
    delays = [first_use[r.token] - r.at for r in server.issued[1:] if r.token in first_use]
    print(
        f"settle {settle_s} s, Secret {SECRET_LAG_S} s late: {len(answers)} requests through "
        f"{len(server.issued) - 1} refreshes: {lapsed} with a lapsed token, {unknown} with no minted token, "
        f"{refused} not answered 200 {statuses}; new token in use "
        f"{', '.join(f'{d:.2f}' for d in delays) or '(never)'} s after it was minted"
    )
    assert (lapsed, unknown) == (0, 0)
    if clean:
        assert refused == 0
        # Both settle times, then the ConfigMap's lag and the gateway's reload.
        least = settle_s * 2 + CONFIGMAP_LAG_S
        assert all(least <= delay < least + 2 for delay in delays), delays
    else:
        assert refused > 0, "settle times shorter than the kubelet's lag fail requests"
    assert client_secret not in log.read_text()
