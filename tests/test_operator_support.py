"""What the operator tests share (no tests here): resource and Secret builders, and a
running ``grid operator`` against an emulated cluster, with its own kopf thread, real SWIM
on loopback and its HTTP endpoints on free ports.

Everything the operator writes is read back through the API as ``kubectl`` would.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import secrets
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kmock
from kubernetes import client as k8s

from grid.operator import Operator, OperatorOptions, build_registry, post_event
from grid.trust import IssuedCertificate
from k8s.cluster import Cluster
from k8s.emulator import (
    CONFIGMAPS,
    GRID_API_VERSION,
    GRID_NETWORKS,
    GRID_SITES,
    INFERENCE_PROVIDERS,
    NAMESPACES,
    SECRETS,
)
from k8s.kopf_runner import RunningOperator, fast_settings, run_operator
from k8s.kustomize import build, installable_copy
from k8s.rbac import Permissions, served_requests
from k8s.waiting import eventually
from support.swim import site_certificate
from support.swim import test_ca as swim_ca

NAMESPACE = "grid-system"
GATEWAY_NAMESPACE = "gateways"
KEY_SECRET = "swim-key"
KEY_ENTRY = "swim.key"
SITE_TLS_SECRET = "site-tls"
CA_SECRET = "grid-ca"
SITE_LABEL = "grid.praxis-proxy.io/site"
WATCHED = (GRID_NETWORKS, GRID_SITES, INFERENCE_PROVIDERS)
REPO = Path(__file__).resolve().parent.parent
ACCOUNT = "grid-operator"

JsonObject = dict[str, Any]


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


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


def prepare_namespaces(cluster: Cluster) -> None:
    for namespace in (NAMESPACE, GATEWAY_NAMESPACE):
        if cluster.emulator.get_object(NAMESPACES, namespace) is None:
            cluster.emulator.create_object(NAMESPACES, {"metadata": {"name": namespace}})


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
    if cluster.emulator.get_object(SECRETS, name, namespace) is None:
        await cluster.call(cluster.core.create_namespaced_secret, namespace, body)
    else:
        await cluster.call(cluster.core.replace_namespaced_secret, name, namespace, body)


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
    return cluster.emulator.get_object(CONFIGMAPS, name, namespace) is not None


async def status_of(cluster: Cluster, resource: Any, name: str) -> JsonObject:
    found = await cluster.get(resource, name)
    status = found.get("status") or {}
    return status if isinstance(status, dict) else {}


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


def shipped_permissions(scratch: Path) -> Permissions:
    """What ``deploy/base`` lets the operator's ServiceAccount do, with the gateway namespace
    bound as docs/install.md says."""
    base = build(installable_copy(REPO, scratch) / "deploy" / "base")
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "grid-operator", "namespace": GATEWAY_NAMESPACE},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "grid-operator-namespaced",
        },
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}],
    }
    return Permissions.of([*base, binding], NAMESPACE, ACCOUNT)


def operator_requests(cluster: Cluster) -> list[kmock.Request]:
    """The requests the operator made (its own client's and kopf's), not the test's."""
    return [
        request
        for request in served_requests(cluster.emulator)
        if request.headers.get("User-Agent", "").startswith(("grid-operator", "kopf/"))
    ]


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
    """``grid operator`` for ``cluster``: kopf in its own thread, logging in to the
    emulator, with Grid's settings, watching Grid's three resources."""
    port = swim_port or free_udp_port()
    options = test_options(site, port, **overrides)
    operator = Operator(options, k8s.Configuration(host=cluster.url), post_event)
    registry = build_registry(operator)
    settings = fast_settings()
    async with run_operator(
        registry,
        cluster,
        watching=WATCHED,
        settings=settings,
        namespace=NAMESPACE,
        name=f"grid-operator@{cluster.name}",
    ) as running:
        yield OperatorUnderTest(operator, running, port)


def new_key() -> bytes:
    return secrets.token_bytes(32)
