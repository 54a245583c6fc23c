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
import copy
import dataclasses
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

from grid.demo import MeshSettings
from grid.demo.builder import GATEWAY_NAME, GATEWAY_NAMESPACE, NETWORK_FILE, PROVIDERS_FILE
from grid.demo.mesh import free_port
from grid.models.resources import load_resources_from_dir
from grid.render.consumer import consumer_config_yaml
from grid.render.overlay import RenderedOverlay, render_overlay
from grid.render.whatif import WhatIf, build_what_if, parse_metrics_report
from grid.scoring.ranking import rank_candidates
from grid.trust import CertificateAuthority
from support.agents import TOKEN_SITES, AgentMesh, AgentMeshes
from support.servers import tls_server_context
from support.token_server import Mode, TokenServer

pytestmark = pytest.mark.praxis

OVERLAY_KEY = "routing-overlay.json"
TOKEN = "sk-test-openai-0123456789"
NOW = datetime(2026, 9, 1, tzinfo=UTC)
NOBODY = 65534


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
        self.port = free_port(socket.SOCK_STREAM)
        self.received: list[dict[str, list[str]]] = []
        """Per request, each header's values by lowercase name, in arrival order."""
        self.arrived: list[float] = []
        """Per request, when it arrived (Unix time)."""
        self.paths: list[str] = []
        """Per request, its path."""

    async def _echo(self, request: web.Request) -> web.Response:
        headers: dict[str, list[str]] = {}
        for name, value in request.headers.items():
            headers.setdefault(name.lower(), []).append(value)
        self.received.append(headers)
        self.arrived.append(time.time())
        self.paths.append(request.path)
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
        self.listener = free_port(socket.SOCK_STREAM)
        self.admin = free_port(socket.SOCK_STREAM)
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

    def render(
        self, metrics: dict[str, Any], at: datetime, *, openai_keys: tuple[str, ...] = ()
    ) -> tuple[str, RenderedOverlay]:
        """The configuration and the overlay for ``metrics`` at ``at``; ``openai_keys``: the
        API provider's credential moved to the first of these keys of its Secret, the
        configuration listing them all (as Grid moves a minted token's reference)."""
        what_if = self.what_if(metrics)
        if openai_keys:
            what_if = _moved_credential(what_if, "openai", openai_keys)
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

    def put_token(self, key: str, token: str) -> None:
        """Put ``token`` in the API provider's mounted Secret under ``key``, replacing the
        file in one step as the kubelet's update of a Secret volume (or a token writer)
        does; readable by the gateway's user."""
        target = self.root / "credentials" / "openai-key" / key
        staging = target.with_name(f".{key}.next")
        staging.write_text(token + "\n")
        if os.geteuid() == 0:
            os.chown(staging, NOBODY, NOBODY)
        staging.rename(target)

    def write_config(self, config: str) -> None:
        """Replace the configuration file the running gateway watches."""
        target = self.root / "praxis.yaml"
        staging = self.root / ".praxis.yaml.next"
        staging.write_text(config)
        if os.geteuid() == 0:
            os.chown(staging, NOBODY, NOBODY)
        staging.rename(target)

    def authorization(self, model: str = "gpt-4o") -> tuple[int, str | None]:
        """The status of a request for ``model`` and the Authorization the backend got."""
        status, echoed = self.ask(model)
        return status, echoed.get("authorization")

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


def _moved_credential(what_if: WhatIf, provider: str, keys: tuple[str, ...]) -> WhatIf:
    candidates = []
    declared = []
    for candidate in what_if.candidates:
        ref = candidate.credential
        if candidate.provider != provider or ref is None:
            candidates.append(candidate)
            continue
        moved = dataclasses.replace(ref, key=keys[0])
        candidates.append(dataclasses.replace(candidate, credential=moved))
        declared = [dataclasses.replace(ref, key=key) for key in keys]
    return dataclasses.replace(
        what_if, candidates=tuple(candidates), declared_credentials=tuple(declared)
    )


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


ROTATED = "sk-test-openai-rotated-9876543210"
NEXT = "sk-test-openai-next-5555555555"


def test_a_token_file_is_read_when_the_pipeline_is_built_and_never_again(
    pod_dir: Path, praxis_binary: str
) -> None:
    """The gateway's credential filter reads each token file when its pipeline is built:
    a token rotated on disk in place (Grid 0.2's way) is not sent, not even after an overlay
    reload, until the configuration file changes and the pipeline is built again; an overlay
    naming a key the pipeline does not hold fails the request closed (503), so Grid lists a
    new key in the configuration before the overlay names it."""
    gateway = Deployment(pod_dir, praxis_binary)
    config, overlay = gateway.render({}, NOW)
    gateway.publish(overlay.text)
    with serving([gateway.east, gateway.central, gateway.openai]):
        gateway.start(config)
        try:
            wait_for(lambda: gateway.backend("llama") is not None, 60, "the gateway serves")
            assert gateway.authorization() == (200, f"Bearer {TOKEN}")

            # Rotated in place, then an overlay reload the gateway has visibly taken.
            gateway.put_token("token", ROTATED)
            _, busy = gateway.render(
                {"llama-east": {"queue_depth": 10_000}}, NOW + timedelta(seconds=1)
            )
            gateway.publish(busy.text)
            wait_for(lambda: gateway.backend("llama") != "llama-east", 30, "the overlay reloaded")
            for _ in range(10):
                assert gateway.authorization() == (200, f"Bearer {TOKEN}")

            # The same configuration written again: the pipeline is rebuilt, the file read.
            gateway.write_config(config)
            wait_for(
                lambda: gateway.authorization() == (200, f"Bearer {ROTATED}"),
                30,
                "the rotated token sent after the pipeline was rebuilt",
            )

            # The overlay names a key the pipeline does not hold: failed closed.
            gateway.put_token("token-next", NEXT)
            moved_config, moved = gateway.render(
                {}, NOW + timedelta(seconds=2), openai_keys=("token-next",)
            )
            gateway.publish(moved.text)
            wait_for(lambda: gateway.authorization()[0] == 503, 30, "the unknown key refused")
            # Listed in the configuration: built again, the new key's token is sent.
            gateway.write_config(moved_config)
            wait_for(
                lambda: gateway.authorization() == (200, f"Bearer {NEXT}"),
                30,
                "the new key's token sent",
            )
            # Any file changing beside the configuration rebuilds the pipeline too (an
            # overlay written in the same directory does).
            gateway.put_token("token-next", ROTATED)
            (pod_dir / "beside-the-configuration").write_text("x")
            wait_for(
                lambda: gateway.authorization() == (200, f"Bearer {ROTATED}"),
                30,
                "rebuilt for a file beside the configuration",
            )
        except BaseException:
            print(gateway.log.read_text()[-8000:])
            raise
        finally:
            gateway.stop()
    log = gateway.log.read_text()
    assert "config reload complete" in log
    for token in (TOKEN, ROTATED, NEXT):
        assert token not in log


ROTATION_LIFE_S = 24
"""Each token's life: refreshed 3.6 to 6 s before it lapses, more than the agent's 2 s
from listing a new token to naming it."""
ROTATIONS = 3
REQUEST_SPACING_S = 0.01
CLIENT_ID = "grid-site-a"


class Kubelet:
    """Copies the agent's outputs into the gateway pod's volumes as the kubelet syncs
    mounted Secrets and ConfigMaps: each file replaced in one step, readable by the
    gateway's user, files gone from the source removed; the Secret first, then the
    configuration, then the overlay, every 50 ms. (The agent writes its token files for its
    own user only; the gateway refuses to run as root.)"""

    def __init__(self, volumes: list[tuple[Path, Path, tuple[str, ...] | None]]) -> None:
        self.volumes = volumes
        """(source directory, volume directory, the file names to copy or None for all)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Kubelet:
        self.sync()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.sync()

    def sync(self) -> None:
        for source, volume, names in self.volumes:
            wanted = {}
            if source.is_dir():
                for path in source.iterdir():
                    hidden = path.name.startswith(".")
                    if path.is_file() and not hidden and (names is None or path.name in names):
                        wanted[path.name] = path.read_bytes()
            for name, data in wanted.items():
                target = volume / name
                if target.exists() and target.read_bytes() == data:
                    continue
                staging = volume / f".{name}.sync"
                staging.write_bytes(data)
                if os.geteuid() == 0:
                    os.chown(staging, NOBODY, NOBODY)
                staging.rename(target)
            for path in volume.iterdir():
                if not path.name.startswith(".") and path.name not in wanted:
                    path.unlink()


def _agent_gateway(mesh: AgentMesh, pod: Path, backend: EchoBackend, token_url: str) -> int:
    """site-a's gateway reads the configuration Grid renders from ``pod``'s volumes, and
    its provider is ``backend``, with tokens minted at ``token_url``; the listener port."""
    resources = mesh.sites["site-a"].resources
    listener = free_port(socket.SOCK_STREAM)
    network_file = resources / NETWORK_FILE
    network = yaml.safe_load(network_file.read_text())
    (gateway,) = network["spec"]["gatewayRefs"]
    gateway.update(
        configMapKey=OVERLAY_KEY,
        routeFilterName="intelligent_route",
        credentialFilterName="credential_inject",
        consumerConfig={
            "enabled": True,
            "listenerPort": listener,
            "adminAddress": f"127.0.0.1:{free_port(socket.SOCK_STREAM)}",
            "overlayMountPath": str(pod / "overlay"),
            "credentialMountBase": str(pod / "credentials"),
            "tlsMountPath": str(pod / "tls"),
            "reloadDebounceMs": 100,
            "allowPrivateEndpoints": True,
        },
    )
    network_file.write_text(yaml.safe_dump(network))
    providers_file = resources / PROVIDERS_FILE
    documents = list(yaml.safe_load_all(providers_file.read_text()))
    for document in documents:
        spec = document["spec"]
        spec["endpoint"] = f"http://127.0.0.1:{backend.port}"
        spec.pop("metricsConfig", None)
        spec["auth"] = {
            "strategy": "Oauth2",
            "secretRef": {"name": "idp-client", "namespace": "grid", "key": "secret"},
            "oauth2": {"grant": "ClientCredentials", "tokenUrl": token_url, "clientId": CLIENT_ID},
        }
    providers_file.write_text(yaml.safe_dump_all(documents))
    for volume in ("config", "overlay", "tls", "credentials/grid-token-llama-a"):
        (pod / volume).mkdir(parents=True)
    if os.geteuid() == 0:
        for path in [pod, *pod.rglob("*")]:
            os.chown(path, NOBODY, NOBODY)
    return listener


async def test_grid_rotates_minted_tokens_and_no_request_carries_a_lapsed_one(
    pod_dir: Path, praxis_binary: str, agent_mesh: AgentMeshes, tmp_path: Path
) -> None:
    """A real ``grid agent`` mints an Oauth2 provider's tokens from a real token endpoint
    (each lives 24 s) and renders the gateway's configuration and overlay; the gateway reads
    them (and the token files) from its volumes; a client sends requests without pause
    through three rotations. Every request reaches the provider with a token that is valid
    when it arrives, none is refused, and each new token is in use shortly after it is
    minted."""
    client_secret = "cs-" + "rotation" * 4
    secrets_dir = tmp_path / "secrets"
    (secrets_dir / "grid" / "idp-client").mkdir(parents=True)
    (secrets_dir / "grid" / "idp-client" / "secret").write_text(client_secret)
    server = TokenServer(client_secrets={CLIENT_ID: client_secret}, expires_in=ROTATION_LIFE_S)
    await server.start()
    backend = EchoBackend("llama-a")
    runner = await backend.start()
    mesh = await agent_mesh(TOKEN_SITES, MeshSettings(secrets_dir=secrets_dir))
    listener = _agent_gateway(mesh, pod_dir, backend, server.url)
    state = mesh.sites["site-a"].state_dir
    outputs = state / "overlays" / mesh.settings.network / GATEWAY_NAMESPACE / GATEWAY_NAME
    tls_dir = mesh.options("site-a").tls_dir
    assert tls_dir is not None
    kubelet = Kubelet(
        [
            (tls_dir, pod_dir / "tls", None),
            (
                state / "credentials/grid/grid-token-llama-a",
                pod_dir / "credentials/grid-token-llama-a",
                None,
            ),
            (outputs, pod_dir / "config", ("praxis.yaml",)),
            (outputs, pod_dir / "overlay", (OVERLAY_KEY,)),
        ]
    )
    agent = mesh.spawn("site-a", log=tmp_path / "agent.log")
    log = pod_dir / "gateway.log"
    gateway: subprocess.Popen[bytes] | None = None
    answers: list[tuple[float, int]] = []
    refusing_from: list[float] = []
    try:
        with kubelet:
            overlay_file = pod_dir / "overlay" / OVERLAY_KEY
            await agent.until(
                "the configuration and an overlay naming a token",
                lambda: (
                    (pod_dir / "config/praxis.yaml").exists()
                    and overlay_file.exists()
                    and "grid-token-llama-a" in overlay_file.read_text()
                ),
            )
            gateway = _start_gateway(praxis_binary, pod_dir / "config/praxis.yaml", log)
            ask = _asker(listener)
            await asyncio.to_thread(wait_for, lambda: ask()[0] == 200, 60, "the gateway serves")

            def until_rotated() -> None:
                deadline = time.monotonic() + ROTATION_LIFE_S * (ROTATIONS + 2)
                while time.monotonic() < deadline:
                    answers.append((time.time(), ask()[0]))
                    time.sleep(REQUEST_SPACING_S)  # pacing, a hundred a second
                    if len(server.issued) > ROTATIONS:
                        newest = server.issued[ROTATIONS].token
                        if f"Bearer {newest}" in _authorizations(backend)[-5:]:
                            return
                raise AssertionError(f"{ROTATIONS} rotations not seen in use")

            await asyncio.to_thread(until_rotated)

            # Refused from now on: the agent withdraws the provider when the token in place
            # lapses. It is the gateway's only candidate, so the agent keeps the previous
            # overlay (an overlay has at least one candidate): requests go on reaching the
            # provider, with the lapsed token. Measured for 3 s past the lapse.
            server.mode = Mode.REFUSE
            refusing_from.append(time.time())

            def past_the_lapse() -> None:
                lapses_at = server.issued[-1].at + ROTATION_LIFE_S
                while time.time() < lapses_at + 3:
                    answers.append((time.time(), ask()[0]))
                    time.sleep(REQUEST_SPACING_S)

            await asyncio.to_thread(past_the_lapse)
    except BaseException:
        print(log.read_text()[-6000:] if log.exists() else "(no gateway log)")
        print(agent.log_tail())
        raise
    finally:
        if gateway is not None:
            _stop(gateway)
        await asyncio.to_thread(agent.stop)
        await mesh.stop()
        await runner.cleanup()
        await server.stop()

    issued = {record.token: record.at for record in server.issued}
    (refusing,) = refusing_from
    lapsed = unknown = after_withdrawal = 0
    first_use: dict[str, float] = {}
    routed = 0
    for headers, arrived, path in zip(
        backend.received, backend.arrived, backend.paths, strict=True
    ):
        if path != "/v1/chat/completions":
            continue  # the agent's health checks
        routed += 1
        (authorization,) = headers.get("authorization", ["(none)"])
        token = authorization.removeprefix("Bearer ")
        if token not in issued:
            unknown += 1
            continue
        first_use.setdefault(token, arrived)
        if arrived >= issued[token] + ROTATION_LIFE_S:
            if token == server.issued[-1].token and arrived >= refusing:
                after_withdrawal += 1
            else:
                lapsed += 1
    refused = sum(1 for at, status in answers if status != 200 and at < refusing)
    delays = [first_use[r.token] - r.at for r in server.issued[1 : ROTATIONS + 1]]
    print(
        f"{routed} requests through {ROTATIONS} rotations: {lapsed} with a "
        f"lapsed token, {unknown} with no minted token, {refused} not answered 200 through "
        f"the rotations; new token in use {', '.join(f'{d:.2f}' for d in delays)} s "
        f"after it was minted; once refused, {after_withdrawal} requests reached the "
        "provider with the last token in the 3 s past its lapse (the previous overlay kept)"
    )
    assert (lapsed, unknown, refused) == (0, 0, 0)
    assert all(0 < delay < ROTATION_LIFE_S * 0.15 for delay in delays), delays
    assert client_secret not in log.read_text()


def _authorizations(backend: EchoBackend) -> list[str]:
    return [value for headers in backend.received for value in headers.get("authorization", [])]


def _asker(listener: int) -> Callable[[], tuple[int, str | None]]:
    def ask() -> tuple[int, str | None]:
        body = json.dumps({"model": "llama", "messages": [{"role": "user", "content": "hi"}]})
        request = urllib.request.Request(
            f"http://127.0.0.1:{listener}/v1/chat/completions",
            data=body.encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:
                return reply.status, json.loads(reply.read()).get("authorization")
        except urllib.error.HTTPError as error:
            return error.code, None
        except OSError:
            return 0, None

    return ask


def _start_gateway(binary: str, config_file: Path, log: Path) -> subprocess.Popen[bytes]:
    user: dict[str, int] = {}
    if os.geteuid() == 0:
        user = {"user": NOBODY, "group": NOBODY}
    checked = subprocess.run(
        [binary, "-t", "-c", str(config_file)], check=False, capture_output=True, timeout=60, **user
    )
    assert checked.returncode == 0, checked.stderr.decode()[-4000:]
    with log.open("wb") as output:
        return subprocess.Popen(
            [binary, "-c", str(config_file)], stdout=output, stderr=subprocess.STDOUT, **user
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


WITHDRAWAL_LIFE_S = 12
"""The token's life: refreshing fails from the first refresh on, so it lapses 12 s after
it was minted."""


@pytest.mark.parametrize("debounce_ms", [100, 500])
async def test_a_withdrawn_provider_stops_being_routed_to_when_the_gateway_has_another(
    pod_dir: Path, praxis_binary: str, agent_mesh: AgentMeshes, tmp_path: Path, debounce_ms: int
) -> None:
    """site-a's gateway has two candidates for its model: the Oauth2 provider (cheaper,
    ranked first) and a second provider at the same site with no credential. The token
    endpoint starts refusing; when the token in place lapses, the agent withdraws the
    provider and the gateway, which reads the new overlay from its volume, routes to the
    other. Prints how long after the lapse the last request reached the withdrawn one, with
    the gateway's overlay reload debounced 100 ms (as the other tests here) and 500 ms (its
    default)."""
    client_secret = "cs-" + "withdrawal" * 3
    secrets_dir = tmp_path / "secrets"
    (secrets_dir / "grid" / "idp-client").mkdir(parents=True)
    (secrets_dir / "grid" / "idp-client" / "secret").write_text(client_secret)
    server = TokenServer(client_secrets={CLIENT_ID: client_secret}, expires_in=WITHDRAWAL_LIFE_S)
    await server.start()
    minted, other = EchoBackend("llama-a"), EchoBackend("llama-a2")
    runners = [await minted.start(), await other.start()]
    mesh = await agent_mesh(TOKEN_SITES, MeshSettings(secrets_dir=secrets_dir))
    listener = _agent_gateway(mesh, pod_dir, minted, server.url)
    network_file = mesh.sites["site-a"].resources / NETWORK_FILE
    network = yaml.safe_load(network_file.read_text())
    network["spec"]["gatewayRefs"][0]["consumerConfig"]["reloadDebounceMs"] = debounce_ms
    network_file.write_text(yaml.safe_dump(network))
    providers_file = mesh.sites["site-a"].resources / PROVIDERS_FILE
    documents = list(yaml.safe_load_all(providers_file.read_text()))
    second = copy.deepcopy(documents[0])
    second["metadata"]["name"] = "llama-a2"
    second["spec"].pop("auth")
    second["spec"]["endpoint"] = f"http://127.0.0.1:{other.port}"
    # Ten times the price: ranked after the Oauth2 provider while that one is offered.
    second["spec"]["cost"] = {"inputPerMillion": "1.00", "outputPerMillion": "2.00"}
    providers_file.write_text(yaml.safe_dump_all([*documents, second]))
    state = mesh.sites["site-a"].state_dir
    outputs = state / "overlays" / mesh.settings.network / GATEWAY_NAMESPACE / GATEWAY_NAME
    tls_dir = mesh.options("site-a").tls_dir
    assert tls_dir is not None
    kubelet = Kubelet(
        [
            (tls_dir, pod_dir / "tls", None),
            (
                state / "credentials/grid/grid-token-llama-a",
                pod_dir / "credentials/grid-token-llama-a",
                None,
            ),
            (outputs, pod_dir / "config", ("praxis.yaml",)),
            (outputs, pod_dir / "overlay", (OVERLAY_KEY,)),
        ]
    )
    agent = mesh.spawn("site-a", log=tmp_path / "agent.log")
    log = pod_dir / "gateway.log"
    gateway: subprocess.Popen[bytes] | None = None
    answers: list[tuple[float, int]] = []
    in_volume: list[float] = []
    """When the gateway's volume first held an overlay without the withdrawn provider."""
    try:
        with kubelet:
            overlay_file = pod_dir / "overlay" / OVERLAY_KEY
            await agent.until(
                "an overlay with both providers",
                lambda: (
                    (pod_dir / "config/praxis.yaml").exists()
                    and overlay_file.exists()
                    and "grid-token-llama-a" in overlay_file.read_text()
                    and '"llama-a2"' in overlay_file.read_text()
                ),
            )
            gateway = _start_gateway(praxis_binary, pod_dir / "config/praxis.yaml", log)
            ask = _asker(listener)
            await asyncio.to_thread(
                wait_for, lambda: ask()[0] == 200 and _routed(minted), 60, "routed to llama-a"
            )
            server.mode = Mode.REFUSE

            def past_the_lapse() -> None:
                lapses_at = server.issued[-1].at + WITHDRAWAL_LIFE_S
                while time.time() < lapses_at + 10:
                    answers.append((time.time(), ask()[0]))
                    if not in_volume and "llama-a" not in _clusters(overlay_file):
                        in_volume.append(time.time())
                    time.sleep(REQUEST_SPACING_S)  # pacing, a hundred a second

            await asyncio.to_thread(past_the_lapse)
    except BaseException:
        print(log.read_text()[-6000:] if log.exists() else "(no gateway log)")
        print(agent.log_tail())
        raise
    finally:
        if gateway is not None:
            _stop(gateway)
        await asyncio.to_thread(agent.stop)
        await mesh.stop()
        for runner in runners:
            await runner.cleanup()
        await server.stop()

    lapsed_at = server.issued[-1].at + WITHDRAWAL_LIFE_S
    to_minted = _arrivals(minted)
    to_other = [at for at in _arrivals(other) if at >= lapsed_at]
    after = [at for at in to_minted if at >= lapsed_at]
    before = len(to_minted) - len(after)
    last = max(after, default=lapsed_at) - lapsed_at
    first_other = min(to_other, default=float("inf")) - lapsed_at
    failed = sum(1 for at, status in answers if status != 200)
    assert in_volume, "the overlay without the withdrawn provider reached the gateway"
    seen = in_volume[0] - lapsed_at
    print(
        f"reload debounced {debounce_ms} ms, withdrawn at the lapse with another candidate: "
        f"{len(after)} requests reached the "
        f"withdrawn provider after its token lapsed, the last {last:.2f} s after; the "
        f"overlay without it was in the gateway's volume {seen:.2f} s after the lapse (the "
        f"gateway's own part: {last - seen:.2f} s); the other candidate's first request "
        f"{first_other:.2f} s after the lapse; {failed} of {len(answers)} requests not "
        f"answered 200 ({before} routed to it before the lapse)"
    )
    assert before > 0 and to_other, "routed to the first provider, then to the other"
    assert last < 10 and failed == 0


def _clusters(overlay_file: Path) -> set[str]:
    """The clusters of the candidates in the overlay the gateway reads."""
    document = json.loads(overlay_file.read_text())
    return {candidate["cluster"] for candidate in document["overlay"]["candidates"]}


def _routed(backend: EchoBackend) -> bool:
    return bool(_arrivals(backend))


def _arrivals(backend: EchoBackend) -> list[float]:
    """When each routed request (not a health check) reached ``backend``."""
    return [
        at
        for at, path in zip(backend.arrived, backend.paths, strict=True)
        if path == "/v1/chat/completions"
    ]
