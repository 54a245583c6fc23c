"""What the operator tests share (no tests here): resource and Secret builders, and a
running ``grid operator`` against a test's cluster (kmock or a real API server), with its
own kopf thread, real SWIM on loopback and its HTTP endpoints on free ports. It logs in as
its ServiceAccount: on a real API server, the RBAC ``deploy/`` ships decides what it may do.

Everything the operator writes is read back through the API as ``kubectl`` would.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import logging
import re
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s

from grid.demo.mesh import free_port
from grid.operator import Operator, OperatorOptions, build_registry, post_event
from grid.trust import IssuedCertificate
from support.pki import Pki
from support.servers import TlsServer
from support.swim import site_certificate
from support.swim import test_ca as swim_ca

from .cluster import Cluster
from .emulator import GRID_API_VERSION, GRID_NETWORKS, GRID_SITES, INFERENCE_PROVIDERS
from .grid_install import ACCOUNT, GATEWAY_NAMESPACE, NAMESPACE
from .kopf_runner import RunningOperator, fast_settings, run_operator
from .rbac import Permissions, ServedRequest
from .waiting import eventually

KEY_SECRET = "swim-key"
KEY_ENTRY = "swim.key"
SITE_TLS_SECRET = "site-tls"
CA_SECRET = "grid-ca"
SITE_LABEL = "grid.praxis-proxy.io/site"
WATCHED = (GRID_NETWORKS, GRID_SITES, INFERENCE_PROVIDERS)

JsonObject = dict[str, Any]


free_udp_port = functools.partial(free_port, socket.SOCK_DGRAM)
"""A loopback UDP port for a site's SWIM node (``grid.demo.mesh.free_port``)."""


def b64(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode()


def keyring_text(*keys: bytes) -> bytes:
    """A keyring entry: base64 keys one per line, the first sealing."""
    return "\n".join(base64.b64encode(key).decode() for key in keys).encode() + b"\n"


# --- resources ---------------------------------------------------------------------------------


DEFAULT_TLS: JsonObject = {
    "swimKeyRef": {"name": KEY_SECRET, "namespace": NAMESPACE, "key": KEY_ENTRY},
    "caSecretRef": {"name": CA_SECRET, "namespace": NAMESPACE, "key": "ca.crt"},
    "siteCertSecretRef": {"name": SITE_TLS_SECRET, "namespace": NAMESPACE},
}
"""The Secrets :func:`put_trust` creates."""


def network_body(
    name: str,
    *,
    port: int,
    seeds: list[str] | None = None,
    gateways: list[JsonObject] | None = None,
    tls: JsonObject | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> JsonObject:
    body: JsonObject = {
        "apiVersion": GRID_API_VERSION,
        "kind": "GridNetwork",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "seeds": seeds or [],
            "gatewayRefs": gateways
            if gateways is not None
            else [{"name": "edge", "namespace": GATEWAY_NAMESPACE}],
            "swim": {"probeInterval": "200ms", "suspicionTimeout": "1s", "port": port},
            "tls": tls if tls is not None else DEFAULT_TLS,
            "region": "eu-west",
            **spec,
        },
    }
    return body


def site_body(
    name: str,
    network: str,
    *,
    egress: str | None = None,
    tls_mode: str = "mutual_tls",
    fingerprint: str | None = None,
    region: str = "eu-west",
) -> JsonObject:
    spec: JsonObject = {"gridNetworkRef": network, "region": region, "zone": f"{region}-1a"}
    if egress is not None:
        spec["egress"] = {"address": egress, "tlsMode": tls_mode, "serverName": "localhost"}
    if fingerprint is not None:
        spec["trust"] = {"certFingerprint": fingerprint}
    return {
        "apiVersion": GRID_API_VERSION,
        "kind": "GridSite",
        "metadata": {"name": name, "labels": {SITE_LABEL: name}},
        "spec": spec,
    }


async def create_network_and_site(
    cluster: Cluster,
    network: str,
    site: str,
    *,
    port: int,
    gateways: list[JsonObject],
    tls: JsonObject,
    egress: str,
    fingerprint: str,
) -> None:
    """The GridNetwork (SWIM on ``port``, rendering for ``gateways``, trusting ``tls``) and
    this cluster's GridSite, its egress at ``egress`` pinned by ``fingerprint``."""
    await cluster.create(
        GRID_NETWORKS, network_body(network, port=port, gateways=gateways, tls=tls)
    )
    await cluster.create(
        GRID_SITES, site_body(site, network, egress=egress, fingerprint=fingerprint)
    )


def provider_body(
    name: str,
    network: str,
    *,
    site: str | None,
    endpoint: str,
    model: str = "llama",
    secret: tuple[str, str, str] | None = None,
    backend: str = "local",
) -> JsonObject:
    spec: JsonObject = {
        "gridNetworkRef": network,
        "backendKind": backend,
        "providerKind": "self_hosted",
        "models": [{"name": model}],
        "endpoint": endpoint,
        "healthCheck": {
            "path": "/healthz",
            "interval": "1s",
            "timeout": "500ms",
            "healthyThreshold": 1,
            "unhealthyThreshold": 2,
        },
    }
    if site is not None:
        spec["siteSelector"] = {"matchLabels": {SITE_LABEL: site}}
    if secret is not None:
        namespace, secret_name, key = secret
        spec["auth"] = {
            "strategy": "BearerToken",
            "secretRef": {"name": secret_name, "namespace": namespace, "key": key},
        }
    return {
        "apiVersion": GRID_API_VERSION,
        "kind": "InferenceProvider",
        "metadata": {"name": name},
        "spec": spec,
    }


# --- the cluster side ---------------------------------------------------------------------------


async def prepare_namespaces(cluster: Cluster) -> None:
    """The operator's namespace and the gateways', where a cluster lacks them (a real API
    server has them from the install, kmock starts with none)."""
    for namespace in (NAMESPACE, GATEWAY_NAMESPACE):
        await cluster.create_namespace(namespace)


async def _found(read: Awaitable[object]) -> bool:
    """Whether a read is answered (False for a 404)."""
    try:
        await read
    except k8s.ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


async def put_secret(
    cluster: Cluster, name: str, data: dict[str, bytes], namespace: str = NAMESPACE
) -> None:
    """Create or replace a Secret through the API, as ``kubectl apply`` would."""
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": {key: b64(value) for key, value in data.items()},
    }
    core = cluster.core
    if await _found(cluster.call(core.read_namespaced_secret, name, namespace)):
        await cluster.call(core.replace_namespaced_secret, name, namespace, body)
    else:
        await cluster.call(core.create_namespaced_secret, namespace, body)


async def put_site_tls(
    cluster: Cluster, issued: IssuedCertificate, name: str = SITE_TLS_SECRET
) -> None:
    await put_secret(
        cluster,
        name,
        {"tls.crt": issued.certificate_pem.encode(), "tls.key": issued.private_key_pem()},
    )


async def put_site_credentials(cluster: Cluster, site: str) -> None:
    """The test CA and ``site``'s certificate and key, as :data:`DEFAULT_TLS` names them."""
    await put_secret(cluster, CA_SECRET, {"ca.crt": swim_ca().certificate_pem.encode()})
    await put_site_tls(cluster, site_certificate(site))


async def put_trust(cluster: Cluster, site: str, key: bytes | None = None) -> None:
    """Every Secret :data:`DEFAULT_TLS` names: a SWIM key, the CA, ``site``'s certificate."""
    await put_secret(cluster, KEY_SECRET, {KEY_ENTRY: key or new_key()})
    await put_site_credentials(cluster, site)


async def read_configmap(
    cluster: Cluster, name: str, namespace: str = GATEWAY_NAMESPACE
) -> k8s.V1ConfigMap:
    return await cluster.call(cluster.core.read_namespaced_config_map, name, namespace)


async def configmap_exists(cluster: Cluster, name: str, namespace: str = GATEWAY_NAMESPACE) -> bool:
    return await _found(cluster.call(cluster.core.read_namespaced_config_map, name, namespace))


async def overlay_names(cluster: Cluster, name: str = "edge-grid-config") -> list[str]:
    """The model names in the overlay ConfigMap ``name`` of the gateway namespace."""
    configmap = await read_configmap(cluster, name)
    document = json.loads(configmap.data["grid-config.json"])
    return [candidate["name"] for candidate in document["overlay"]["candidates"]]


@dataclass(frozen=True)
class Refusal:
    """An API server's answer refusing a write: its message, and the warnings it sent."""

    message: str
    warnings: tuple[str, ...]


# One warning of a Warning header: `299 - "text"`, the text a quoted-string (RFC 9110).
_WARNING = re.compile(r'\d{3} \S+ "((?:[^"\\]|\\.)*)"')


async def admission_refusal(write: Awaitable[object]) -> Refusal:
    """The 422 Invalid with which a real API server refuses an object its CRD's schema or
    validation rules do not admit; fails if the write is accepted."""
    try:
        await write
    except k8s.ApiException as error:
        if error.status != 422:
            raise
        header = (error.headers or {}).get("Warning", "")
        warnings = tuple(re.sub(r"\\(.)", r"\1", text) for text in _WARNING.findall(header))
        return Refusal(json.loads(error.body)["message"], warnings)
    raise AssertionError("the API server admitted the write")


async def status_of(cluster: Cluster, resource: Any, name: str) -> JsonObject:
    found = await cluster.get(resource, name)
    status = found.get("status") or {}
    return status if isinstance(status, dict) else {}


async def all_in(found: Awaitable[list[str]], *wanted: str) -> list[str] | None:
    """The names ``found`` gives, once every one of ``wanted`` is among them (else None)."""
    names = await found
    return names if all(name in names for name in wanted) else None


def condition(status: JsonObject, type_: str) -> JsonObject:
    for item in status.get("conditions") or []:
        if item.get("type") == type_:
            return dict(item)
    raise AssertionError(f"no {type_} condition in {status.get('conditions')}")


async def wait_phase(
    cluster: Cluster, resource: Any, name: str, phase: str, timeout: float = 10.0
) -> JsonObject:
    async def reached() -> JsonObject | None:
        status = await status_of(cluster, resource, name)
        return status if status.get("phase") == phase else None

    return await eventually(
        reached, timeout=timeout, what=f"{resource.plural} {name} in phase {phase}"
    )


async def wait_condition(
    cluster: Cluster,
    resource: Any,
    name: str,
    type_: str,
    value: str,
    reason: str | None = None,
    timeout: float = 10.0,
) -> JsonObject:
    async def holds() -> JsonObject | None:
        status = await status_of(cluster, resource, name)
        for item in status.get("conditions") or []:
            same = item.get("type") == type_ and item.get("status") == value
            if same and (reason is None or item.get("reason") == reason):
                return dict(item)
        return None

    return await eventually(
        holds, timeout=timeout, what=f"{resource.plural} {name}: {type_}={value} {reason or ''}"
    )


async def event_reasons(cluster: Cluster, name: str, namespace: str = NAMESPACE) -> list[str]:
    return [event.reason for event in await cluster.events_about(name, namespace)]


# --- RBAC -------------------------------------------------------------------------------------


def operator_requests(cluster: Cluster) -> list[ServedRequest]:
    """The requests the operator made (its own client's and kopf's), not the test's."""
    return [
        request
        for request in cluster.requests()
        if request.user_agent.startswith(("grid-operator", "kopf/"))
    ]


def refused_operator_requests(cluster: Cluster, permissions: Permissions) -> list[str]:
    """The operator's requests the shipped RBAC refuses: by its rules as
    :class:`~k8s.rbac.Permissions` reads them (kmock serves anyone anything), and by the API
    server itself where it enforces them (a real one answers 403)."""
    requests = operator_requests(cluster)
    refused = {f"{request.access} (403)" for request in requests if request.status == 403}
    return sorted(refused.union(permissions.denied(requests)))


# --- the operator ----------------------------------------------------------------------------


@dataclass
class OperatorUnderTest:
    """A running operator and what a test needs of it."""

    operator: Operator
    running: RunningOperator
    swim_port: int

    @property
    def swim_address(self) -> str:
        return f"127.0.0.1:{self.swim_port}"

    def runtime(self, network: str) -> Any:
        return self.operator.runtimes[network]


def test_options(site: str | None, swim_port: int, **overrides: Any) -> OperatorOptions:
    settings: dict[str, Any] = {
        "namespace": NAMESPACE,
        "pod_name": "grid-operator-0",
        "site": site,
        "swim_bind_host": "127.0.0.1",
        "swim_advertise_host": "127.0.0.1",
        "swim_port": swim_port,
        "metrics_address": "127.0.0.1:0",
        "health_address": "127.0.0.1:0",
        "tick_s": 0.1,
        "status_interval_s": 0.5,
        "secret_refresh_s": 0.3,
        "probe_interval_s": 0.3,
        "join_grace_s": 1.0,
    }
    settings.update(overrides)
    return OperatorOptions(**settings)


test_options.__test__ = False  # type: ignore[attr-defined]  # a builder, not a test


class LogCapture(logging.Handler):
    """Every record of every logger, formatted with its arguments (what a log file holds)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        self.lines.append(f"{record.name} {record.levelname} {text}")


@contextlib.contextmanager
def captured_logs() -> Iterator[LogCapture]:
    handler = LogCapture()
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)


@contextlib.asynccontextmanager
async def operator_for(
    cluster: Cluster, site: str | None, *, swim_port: int | None = None, **overrides: Any
) -> AsyncIterator[OperatorUnderTest]:
    """``grid operator`` for ``cluster``: kopf in its own thread, both it and the operator's
    client logging in as the operator's ServiceAccount, with Grid's settings, watching
    Grid's three resources."""
    port = swim_port or free_udp_port()
    options = test_options(site, port, **overrides)
    token = await cluster.service_account_token(NAMESPACE, ACCOUNT)
    operator = Operator(options, cluster.configuration(token), post_event)
    registry = build_registry(operator)
    settings = fast_settings()
    async with run_operator(
        registry,
        cluster,
        watching=WATCHED,
        settings=settings,
        namespace=NAMESPACE,
        token=token,
        name=f"grid-operator@{cluster.name}",
    ) as running:
        yield OperatorUnderTest(operator, running, port)


@contextlib.asynccontextmanager
async def operator_with_site(
    cluster: Cluster,
    network: str,
    site: str,
    pki: Pki,
    *,
    tls: JsonObject,
    gateways: list[JsonObject],
    **overrides: Any,
) -> AsyncIterator[OperatorUnderTest]:
    """An operator (``overrides`` as for :func:`operator_for`) with ``network`` and ``site``
    created, the site's egress a TLS server that presents the site's certificate from
    ``pki`` and asks for a client one: how the operator's credential tests begin."""
    egress = TlsServer(pki[site].files, client_ca_file=pki.ca_file, require_client_cert=True)
    async with egress, operator_for(cluster, None, **overrides) as running:
        await create_network_and_site(
            cluster,
            network,
            site,
            port=running.swim_port,
            gateways=gateways,
            tls=tls,
            egress=egress.address,
            fingerprint=pki[site].fingerprint,
        )
        yield running


def new_key() -> bytes:
    return secrets.token_bytes(32)
