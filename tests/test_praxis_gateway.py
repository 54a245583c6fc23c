"""Grid's output run through the real Praxis AI gateway.

Selected only with ``-m praxis`` and ``GRID_PRAXIS_AI`` naming a ``praxis-ai`` binary (the
gateway is built from its own project; see docs/overlay.md): the default suite never runs
it and never skips it. Backends are real HTTP(S) servers on 127.0.0.1 that echo what
reached them; the gateway reads the configuration and the overlay files Grid renders,
exactly as mounted from the ConfigMaps, and every routing change is a new overlay file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from grid.models.resources import load_resources_from_dir
from grid.render.consumer import consumer_config_yaml
from grid.render.overlay import RenderedOverlay, render_overlay
from grid.render.whatif import WhatIf, build_what_if, parse_metrics_report
from grid.scoring.ranking import rank_candidates
from grid.trust import CertificateAuthority
from support.servers import tls_server_context

pytestmark = pytest.mark.praxis

OVERLAY_KEY = "routing-overlay.json"
TOKEN = "sk-test-openai-0123456789"
NOW = datetime(2026, 9, 1, tzinfo=UTC)
NOBODY = 65534


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f}s")
        time.sleep(0.05)


class EchoBackend:
    """An OpenAI-style backend that answers every request with what reached it and records
    the headers of each."""

    def __init__(self, name: str, tls: ssl.SSLContext | None = None) -> None:
        self.name = name
        self.tls = tls
        self.port = _free_port()
        self.received: list[dict[str, list[str]]] = []
        """Per request, each header's values by lowercase name, in arrival order."""

    async def _echo(self, request: web.Request) -> web.Response:
        headers: dict[str, list[str]] = {}
        for name, value in request.headers.items():
            headers.setdefault(name.lower(), []).append(value)
        self.received.append(headers)
        body = await request.read()
        return web.json_response(
            {
                "backend": self.name,
                "path": request.path,
                "host": request.headers.get("Host"),
                "authorization": request.headers.get("Authorization"),
                "model": json.loads(body or b"{}").get("model"),
                "client_cert": bool(
                    request.transport and request.transport.get_extra_info("peercert")
                ),
            }
        )

    async def start(self) -> web.AppRunner:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._echo)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port, ssl_context=self.tls).start()
        return runner


@contextlib.contextmanager
def serving(backends: list[EchoBackend]) -> Iterator[None]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runners = [
        asyncio.run_coroutine_threadsafe(backend.start(), loop).result(10) for backend in backends
    ]
    try:
        yield
    finally:
        for runner in runners:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


MESH = """\
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: GridNetwork
metadata: {{name: mesh, uid: mesh-uid, generation: 1}}
spec:
  gatewayRefs:
    - name: edge
      namespace: grid-system
      configMapKey: {key}
      routeFilterName: intelligent_route
      credentialFilterName: credential_inject
      consumerConfig:
        enabled: true
        mode: {mode}
        listenerPort: {listener}
        adminAddress: "127.0.0.1:{admin}"
        overlayMountPath: {root}/overlay
        credentialMountBase: {root}/credentials
        tlsMountPath: {root}/tls
        reloadDebounceMs: 100
        allowPrivateEndpoints: true
        forwardClientCredentials: {forward}
---
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: GridSite
metadata: {{name: east, labels: {{site: east}}}}
spec: {{gridNetworkRef: mesh, region: us-east, zone: us-east-1a}}
---
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: GridSite
metadata: {{name: central, labels: {{site: central}}}}
spec:
  gridNetworkRef: mesh
  region: us-east
  zone: us-east-1b
  egress: {{address: "127.0.0.1:{central}", tlsMode: mutual_tls, serverName: central.mesh.test}}
---
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: InferenceProvider
metadata: {{name: llama-east}}
spec:
  gridNetworkRef: mesh
  backendKind: local
  providerKind: self_hosted
  models: [{{name: llama}}]
  endpoint: http://127.0.0.1:{east}/v1
  siteSelector: {{matchLabels: {{site: east}}}}
---
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: InferenceProvider
metadata: {{name: llama-central}}
spec:
  gridNetworkRef: mesh
  backendKind: local
  providerKind: self_hosted
  models: [{{name: llama}}, {{name: mistral}}]
  endpoint: http://10.1.0.10:8000
  siteSelector: {{matchLabels: {{site: central}}}}
---
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: InferenceProvider
metadata: {{name: openai}}
spec:
  gridNetworkRef: mesh
  backendKind: api_provider
  providerKind: open_ai
  models: [{{name: gpt-4o}}, {{name: llama}}]
  endpoint: https://127.0.0.1:{openai}/v1
  serverName: api.openai.test
  auth:
    strategy: BearerToken
    secretRef: {{name: openai-key, namespace: grid-system, key: token}}
"""


class Deployment:
    """The files a gateway pod would see, and the gateway process reading them."""

    def __init__(
        self, root: Path, binary: str, mode: str = "overlay", *, forward_credentials: bool = False
    ) -> None:
        self.root = root
        self.binary = binary
        self.listener = _free_port()
        self.admin = _free_port()
        now = datetime.now(UTC)
        ca = CertificateAuthority.generate("Gateway Test CA", now=now)
        self.ca_file = root / "ca.pem"
        self.ca_file.write_text(ca.certificate_pem)
        tls_dir = root / "tls"
        tls_dir.mkdir()
        (tls_dir / "ca.crt").write_text(ca.certificate_pem)
        client = ca.issue("east", now=now, dns_names=("east.mesh.test",), ip_addresses=())
        (tls_dir / "tls.crt").write_text(client.certificate_pem)
        (tls_dir / "tls.key").write_bytes(client.private_key_pem())
        secret = root / "credentials" / "openai-key"
        secret.mkdir(parents=True)
        (secret / "token").write_text(TOKEN + "\n")
        (root / "overlay").mkdir()
        self.east = EchoBackend("llama-east")
        self.central = EchoBackend(
            "site-central", self._server_tls(ca, "central.mesh.test", mutual=True)
        )
        self.openai = EchoBackend("openai", self._server_tls(ca, "api.openai.test", mutual=False))
        mesh = root / "mesh"
        mesh.mkdir()
        (mesh / "mesh.yaml").write_text(
            MESH.format(
                key=OVERLAY_KEY,
                mode=mode,
                forward=json.dumps(forward_credentials),
                listener=self.listener,
                admin=self.admin,
                root=root,
                central=self.central.port,
                east=self.east.port,
                openai=self.openai.port,
            )
        )
        self.mesh = mesh
        self.process: subprocess.Popen[bytes] | None = None
        self.log = root / "gateway.log"

    def _server_tls(self, ca: CertificateAuthority, name: str, *, mutual: bool) -> ssl.SSLContext:
        issued = ca.issue(name, now=datetime.now(UTC), dns_names=(name,), ip_addresses=())
        files = issued.write(self.root, name)
        client_ca = self.ca_file if mutual else None
        return tls_server_context(files, client_ca_file=client_ca, require_client_cert=mutual)

    def what_if(self, metrics: dict[str, Any]) -> WhatIf:
        return build_what_if(
            load_resources_from_dir(self.mesh),
            site="east",
            gateway="edge",
            namespace="grid-system",
            metrics=parse_metrics_report({"providers": metrics}),
        )

    def render(self, metrics: dict[str, Any], at: datetime) -> tuple[str, RenderedOverlay]:
        what_if = self.what_if(metrics)
        ranking = rank_candidates(
            what_if.candidates, what_if.consumer, what_if.network.spec.scoring, at
        )
        overlay = render_overlay(ranking, what_if.scope, what_if.source, at)
        settings = what_if.gateway.consumer_config
        assert settings is not None
        gateway = what_if.gateway
        config = consumer_config_yaml(
            what_if.plan,
            settings,
            overlay_key=OVERLAY_KEY,
            overlay=overlay,
            route_filter=gateway.route_filter_name,
            credential_filter=gateway.credential_filter_name,
        )
        return config, overlay

    def publish(self, text: str) -> None:
        """Replace the overlay file the way a ConfigMap volume update does: a new file
        renamed into place."""
        target = self.root / "overlay" / OVERLAY_KEY
        staging = target.with_suffix(".next")
        staging.write_text(text)
        staging.rename(target)

    def start(self, config: str) -> None:
        config_file = self.root / "praxis.yaml"
        config_file.write_text(config)
        env = {**os.environ, "SSL_CERT_FILE": str(self.ca_file)}
        user: dict[str, int] = {}
        if os.geteuid() == 0:
            user = {"user": NOBODY, "group": NOBODY}
            for path in [self.root, *self.root.rglob("*")]:
                os.chown(path, NOBODY, NOBODY)
        checked = subprocess.run(
            [self.binary, "-t", "-c", str(config_file)],
            check=False,
            env=env,
            capture_output=True,
            timeout=60,
            **user,
        )
        assert checked.returncode == 0, checked.stderr.decode()[-4000:]
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [self.binary, "-c", str(config_file)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                **user,
            )

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def ask(
        self,
        model: str,
        session: str | None = None,
        credentials: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """POST a chat completion for ``model`` with the client's ``credentials`` headers
        (a bearer token by default); the status and the echoed JSON."""
        headers = {
            **(credentials or {"Authorization": "Bearer client-token"}),
            "Host": "gateway.example",
            "Content-Type": "application/json",
        }
        if session is not None:
            headers["X-Session-Id"] = session
        body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.listener}/v1/chat/completions",
            data=body.encode(),
            headers=headers,
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as error:
            return error.code, {}

    def backend(self, model: str, session: str | None = None) -> str | None:
        try:
            status, echoed = self.ask(model, session)
        except OSError:
            return None
        return echoed.get("backend") if status == 200 else None


@pytest.fixture
def praxis_binary() -> str:
    binary = os.environ.get("GRID_PRAXIS_AI")
    if not binary or not os.access(binary, os.X_OK):
        pytest.fail("GRID_PRAXIS_AI must name an executable praxis-ai binary to run -m praxis")
    return binary


@pytest.fixture
def pod_dir(tmp_path: Path) -> Iterator[Path]:
    """Where the gateway's files live. The gateway refuses to run as root, so under root it
    runs as ``nobody`` from a directory that user can read (pytest's own is root-only)."""
    if os.geteuid() != 0:
        yield tmp_path
        return
    root = Path(tempfile.mkdtemp(prefix="grid-praxis-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_gateway_routes_as_grid_ranked_through_every_change(
    pod_dir: Path, praxis_binary: str
) -> None:
    gateway = Deployment(pod_dir, praxis_binary)
    config, overlay = gateway.render({}, NOW)
    first_order = [
        c["cluster"] for c in overlay.document["overlay"]["candidates"] if c["name"] == "llama"
    ]
    assert first_order[0] == "llama-east"
    gateway.publish(overlay.text)
    with serving([gateway.east, gateway.central, gateway.openai]):
        gateway.start(config)
        try:
            wait_for(lambda: gateway.backend("llama") is not None, 60, "the gateway serves")
            _check_routing(gateway, config)
        except BaseException:
            gateway.stop()
            print(gateway.log.read_text()[-8000:])
            raise
        gateway.stop()
    assert TOKEN not in gateway.log.read_text()


def _check_routing(gateway: Deployment, config: str) -> None:
    # Rank 0 takes a new request, with its own path, Host and no client credential.
    status, local = gateway.ask("llama")
    assert status == 200
    assert local["backend"] == "llama-east"
    assert local["path"] == "/v1/chat/completions"
    assert local["host"] == f"127.0.0.1:{gateway.east.port}"
    assert local["authorization"] is None
    # The API provider gets the mounted token as a bearer token and its own Host, over TLS
    # verified against the server name (the endpoint is an IP address).
    status, api = gateway.ask("gpt-4o")
    assert status == 200
    assert api["backend"] == "openai"
    assert api["authorization"] == f"Bearer {TOKEN}"
    assert api["host"] == f"api.openai.test:{gateway.openai.port}"
    assert api["path"] == "/v1/chat/completions"

    # A session bound to the local server.
    assert gateway.backend("llama", session="s-1") == "llama-east"

    # The local server fills up: existing_only. New requests move to the next candidate
    # once the gateway reloads the overlay; the bound session stays.
    busy_config, busy = gateway.render(
        {"llama-east": {"queue_depth": 10_000}}, NOW + timedelta(seconds=1)
    )
    assert busy_config == config, "a re-ranking must not change the gateway configuration"
    states = {
        c["cluster"]: c["admission_state"]
        for c in busy.document["overlay"]["candidates"]
        if c["name"] == "llama"
    }
    assert states["llama-east"] == "existing_only"
    expected = next(cluster for cluster, state in states.items() if state == "new_and_existing")
    gateway.publish(busy.text)
    wait_for(
        lambda: gateway.backend("llama") != "llama-east", 30, "new requests leave existing_only"
    )
    for attempt in range(20):
        assert gateway.backend("llama", session=f"new-{attempt}") == expected
        assert gateway.backend("llama", session="s-1") == "llama-east"
    if expected == "site-central":
        assert gateway.ask("llama")[1]["client_cert"], "mutual TLS to the egress"

    # A tampered overlay (content changed, digest not) is refused: routing stays.
    document = json.loads(busy.text)
    document["overlay"]["candidates"].reverse()
    gateway.publish(json.dumps(document))
    for _ in range(20):
        assert gateway.backend("llama") == expected
        time.sleep(0.02)

    # The local server fails: Grid leaves it out; the bound session fails over.
    down_config, down = gateway.render(
        {"llama-east": {"healthy": False}}, NOW + timedelta(seconds=2)
    )
    assert down_config == config
    gateway.publish(down.text)
    wait_for(lambda: gateway.backend("llama", session="s-1") != "llama-east", 30, "failover")
    yaml.safe_load(config)


def test_inline_mode_never_sends_a_new_request_to_an_existing_only_backend(
    pod_dir: Path, praxis_binary: str
) -> None:
    gateway = Deployment(pod_dir, praxis_binary, mode="inline")
    config, overlay = gateway.render({"llama-east": {"queue_depth": 10_000}}, NOW)
    states = {
        c["cluster"]: c["admission_state"]
        for c in overlay.document["overlay"]["candidates"]
        if c["name"] == "llama"
    }
    assert states["llama-east"] == "existing_only"
    with serving([gateway.east, gateway.central, gateway.openai]):
        gateway.start(config)
        try:
            wait_for(lambda: gateway.backend("llama") is not None, 60, "the gateway serves")
            for attempt in range(20):
                assert gateway.backend("llama", session=f"s-{attempt}") not in (None, "llama-east")
        finally:
            gateway.stop()


CLIENT_CANARY = {"Authorization": "Bearer client-canary", "X-Api-Key": "client-canary"}


def _received(gateway: Deployment, model: str, backend: EchoBackend) -> dict[str, list[str]]:
    """The headers ``backend`` received for a request for ``model`` carrying the client's
    canary credentials."""
    before = len(backend.received)
    status, echoed = gateway.ask(model, credentials=CLIENT_CANARY)
    assert status == 200, model
    assert echoed["backend"] == backend.name, model
    assert len(backend.received) == before + 1, model
    return backend.received[-1]


@pytest.mark.parametrize("forward", [False, True], ids=["default", "forwardClientCredentials"])
def test_client_credentials_stop_at_the_gateway(
    pod_dir: Path, praxis_binary: str, forward: bool
) -> None:
    gateway = Deployment(pod_dir, praxis_binary, forward_credentials=forward)
    config, overlay = gateway.render({}, NOW)
    removal = yaml.safe_load(config)["filter_chains"][0]["filters"][0]
    assert (removal["filter"] == "headers") is not forward
    gateway.publish(overlay.text)
    with serving([gateway.east, gateway.central, gateway.openai]):
        gateway.start(config)
        try:
            wait_for(lambda: gateway.backend("llama") is not None, 60, "the gateway serves")
            local = _received(gateway, "llama", gateway.east)
            egress = _received(gateway, "mistral", gateway.central)
            api = _received(gateway, "gpt-4o", gateway.openai)
        except BaseException:
            print(gateway.log.read_text()[-8000:])
            raise
        finally:
            gateway.stop()
    # Grid's token replaces the client's at the API provider either way.
    assert api["authorization"] == [f"Bearer {TOKEN}"]
    if forward:
        # The documented opt-out: the client's credentials go to every backend.
        for received in (local, egress):
            assert received["authorization"] == ["Bearer client-canary"]
            assert received["x-api-key"] == ["client-canary"]
        assert api["x-api-key"] == ["client-canary"]
    else:
        for received in (local, egress, api):
            assert "x-api-key" not in received
            values = [value for values in received.values() for value in values]
            assert all("client-canary" not in value for value in values)
        assert "authorization" not in local and "authorization" not in egress
    assert TOKEN not in gateway.log.read_text()
