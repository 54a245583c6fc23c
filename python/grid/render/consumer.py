"""The complete gateway configuration (``consumerConfig``): one public listener, one filter
chain (client credential removal, model extractor, routing filter, credential injectors,
load balancer) and the admin listener, as the gateway reads it. It carries paths to mounted
Secret files, never their contents.

Client credentials stop at the gateway: unless ``forwardClientCredentials`` is set, the
chain opens with the gateway's ``headers`` filter removing every header a client's
credential travels in (:data:`CLIENT_CREDENTIAL_HEADERS` and each ApiKey provider's header).
The gateway otherwise forwards them unchanged to every candidate Grid gives no credential
(self-hosted servers, other sites' egress gateways); its credential filter only replaces
``Authorization`` where it injects one. The gateway applies the removals of a request
before any header a filter sets or adds, so Grid's injected credentials still go upstream.

In ``overlay`` mode (the default) the routing filter reads the overlay document Grid
publishes, checks its digest and scope and hot-reloads it; the configuration itself only
changes when the set of clusters or credentials does, so re-rankings never need a pipeline
rebuild. Its ``load_balancer`` therefore declares every cluster any overlay of the gateway
can name (the gateway cannot add clusters on an overlay reload: an unknown one fails
requests with 500). In ``inline`` mode the candidates are embedded; the gateway's static
format has no admission state, so only candidates open to new requests are embedded.

What the gateway cannot express is refused here with the reason, never rendered into a
configuration it would refuse or misroute with:

- it forwards the request path unchanged, so an endpoint whose base path is not ``/`` or
  ``/v1`` (``http://host/prefix/v1``) cannot be reached as written;
- TLS to an IP literal needs a DNS server name (its SNI must be a hostname);
- endpoints on loopback, link-local, ``localhost``, ``*.local``, ``*.internal`` or
  ``metadata.*`` are refused by the gateway unless ``allowPrivateEndpoints`` is set.

The upstream ``Host`` is the endpoint's own authority (what any HTTP client sends to a base
URL), set per cluster with the gateway's per-cluster header injection filter: the gateway
otherwise passes the client's ``Host``, which third-party APIs reject.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from grid.errors import OverlayRenderError
from grid.models.fields import is_ip_address
from grid.models.network import (
    DEFAULT_CREDENTIAL_FILTER,
    DEFAULT_ROUTE_FILTER,
    ConsumerConfig,
    ConsumerMode,
)
from grid.models.site import EgressTlsMode
from grid.render.overlay import OverlayScope, RenderedOverlay

CHAIN_NAME = "grid"
LISTENER_NAME = "grid"
HEADERS_FILTER = "headers"
CLIENT_CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "x-api-key", "x-goog-api-key")
"""Headers clients send their credentials in, removed before routing unless
``forwardClientCredentials`` is set; every ApiKey provider's own header is added to them."""
MODEL_EXTRACTOR_FILTER = "json_body_field"
HOST_HEADER_FILTER = "credential_injection"
"""The gateway's per-cluster header injection: the only filter that sets a header for the
cluster the routing filter chose (its other header filters apply to every request)."""
LOAD_BALANCER_FILTER = "load_balancer"
CA_FILE = "ca.crt"
CLIENT_CERT_FILE = "tls.crt"
CLIENT_KEY_FILE = "tls.key"
ROUTE_FIELDS = ("kind", "name", "site", "cluster", "fresh", "credential")
"""What the routing filter's static configuration accepts of a candidate (it rejects unknown
fields)."""
NEW_REQUESTS = "new_and_existing"
"""The one admission state open to new requests."""
REACHABLE_PATHS = ("", "/v1")
"""Endpoint base paths the gateway reaches as written: clients send ``/v1/...`` and the
gateway forwards that path unchanged."""
_DEFAULT_PORTS = {
    EgressTlsMode.PLAINTEXT: 80,
    EgressTlsMode.TLS: 443,
    EgressTlsMode.MUTUAL_TLS: 443,
}


@dataclass(frozen=True, slots=True)
class ClientCertificate:
    """A client certificate the gateway presents to a provider (``MtlsOnly``): a Secret
    mounted under the credential mount base, its certificate chain under ``key`` and its
    private key under :data:`CLIENT_KEY_FILE` beside it."""

    name: str
    namespace: str
    key: str


@dataclass(frozen=True, slots=True)
class ClusterEndpoint:
    """Where a gateway cluster sends traffic, and how it secures the connection."""

    address: str
    """``host:port``."""
    tls_mode: EgressTlsMode
    server_name: str | None = None
    """TLS server name (SNI) and ``Host``; default the host of ``address``."""
    path: str = ""
    """Base path of the endpoint URL (``/v1`` for ``https://api.openai.com/v1``)."""
    client_certificate: ClientCertificate | None = None
    """What the gateway presents in the TLS handshake to a provider's own endpoint."""

    @property
    def host(self) -> str:
        """The host of ``address``, without brackets."""
        return self.address.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2])

    @property
    def sni(self) -> str:
        return self.server_name or self.host

    @property
    def authority(self) -> str:
        """The ``Host`` the upstream expects: the server name (or host) and the port unless
        it is the scheme's default."""
        name = self.server_name or self.host
        if ":" in name:
            name = f"[{name}]"
        if self.port == _DEFAULT_PORTS[self.tls_mode]:
            return name
        return f"{name}:{self.port}"

    def problem(self) -> str | None:
        """Why the gateway cannot reach this endpoint as written, or None."""
        if self.path.rstrip("/") not in REACHABLE_PATHS:
            return (
                f"endpoint path {self.path!r} cannot be expressed: the gateway forwards the "
                "request path unchanged (clients send /v1/...), so serve the API at / or /v1"
            )
        tls = self.tls_mode is not EgressTlsMode.PLAINTEXT
        if tls and self.server_name is None and is_ip_address(self.host):
            return (
                f"TLS to the IP address {self.host} needs a server name (serverName): "
                "the gateway's SNI must be a DNS hostname"
            )
        return None

    def private(self) -> bool:
        """Whether the gateway treats the address as sensitive (loopback, link-local,
        ``localhost``, ``*.local``, ``*.internal``, ``metadata.*``) and refuses it unless
        private endpoints are allowed."""
        host = self.host.lower()
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            return (
                host == "localhost"
                or host.endswith((".local", ".internal"))
                or host.startswith("metadata.")
            )
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return ip.is_loopback or ip.is_link_local


@dataclass(frozen=True, slots=True)
class GatewayPlan:
    """What a gateway's configuration must declare, whatever the overlay says today."""

    scope: OverlayScope
    clusters: Mapping[str, ClusterEndpoint]
    """Every cluster any overlay of the gateway can name, with its endpoint."""
    credentials: tuple[Mapping[str, Any], ...] = field(default=())
    """Every credential reference (as the contract spells it) any overlay can carry."""


def _path_segment(value: str, what: str) -> str:
    # A Secret name or key becomes a path component: refuse anything that could climb out
    # of the mount base.
    if not value or "/" in value or value in (".", ".."):
        raise OverlayRenderError(f"{what} {value!r} cannot be a file name under the mount")
    return value


def _cluster(name: str, endpoint: ClusterEndpoint, settings: ConsumerConfig) -> dict[str, Any]:
    cluster: dict[str, Any] = {"name": name, "endpoints": [endpoint.address]}
    certificate = endpoint.client_certificate
    if certificate is not None and endpoint.tls_mode is EgressTlsMode.TLS:
        # Verified against the system's roots, as any TLS provider is.
        secret = (
            f"{settings.credential_mount_base.rstrip('/')}/"
            f"{_path_segment(certificate.name, 'Secret name')}"
        )
        cluster["tls"] = {
            "sni": endpoint.sni,
            "verify": True,
            "client_cert": {
                "cert_path": f"{secret}/{_path_segment(certificate.key, 'Secret key')}",
                "key_path": f"{secret}/{CLIENT_KEY_FILE}",
            },
        }
    elif endpoint.tls_mode is EgressTlsMode.MUTUAL_TLS:
        base = settings.tls_mount_path.rstrip("/")
        cluster["tls"] = {
            "sni": endpoint.sni,
            "verify": True,
            "ca": {"ca_path": f"{base}/{CA_FILE}"},
            "client_cert": {
                "cert_path": f"{base}/{CLIENT_CERT_FILE}",
                "key_path": f"{base}/{CLIENT_KEY_FILE}",
            },
        }
    elif endpoint.tls_mode is EgressTlsMode.TLS:
        cluster["tls"] = {"sni": endpoint.sni, "verify": True}
    return cluster


def _checked_clusters(
    plan: GatewayPlan, settings: ConsumerConfig
) -> list[tuple[str, ClusterEndpoint]]:
    clusters = sorted(plan.clusters.items())
    for name, endpoint in clusters:
        problem = endpoint.problem()
        if problem is not None:
            raise OverlayRenderError(f"gateway cluster {name!r}: {problem}")
        if endpoint.private() and not settings.allow_private_endpoints:
            raise OverlayRenderError(
                f"gateway cluster {name!r}: the gateway refuses endpoint {endpoint.address!r} "
                "(loopback, link-local or a *.local/*.internal name) unless "
                "consumerConfig.allowPrivateEndpoints is true"
            )
    return clusters


def _credential_entries(
    credentials: Iterable[Mapping[str, Any]], settings: ConsumerConfig
) -> list[dict[str, Any]]:
    base = settings.credential_mount_base.rstrip("/")
    entries: dict[tuple[str, str, str], dict[str, Any]] = {}
    for credential in credentials:
        ref = credential["secretRef"]
        key = (ref["namespace"], ref["name"], ref["key"])
        entry: dict[str, Any] = {
            "name": ref["name"],
            "namespace": ref["namespace"],
            "key": ref["key"],
            "strategy": credential["strategy"],
        }
        if "header" in credential:
            entry["header"] = credential["header"]
        entry["file"] = (
            f"{base}/{_path_segment(ref['name'], 'Secret name')}/"
            f"{_path_segment(ref['key'], 'Secret key')}"
        )
        known = entries.setdefault(key, entry)
        if known != entry:
            raise OverlayRenderError(
                f"Secret {ref['namespace']}/{ref['name']} key {ref['key']!r} is used with two "
                "different injection strategies"
            )
    return [entries[key] for key in sorted(entries)]


def _client_credential_headers(entries: Iterable[Mapping[str, Any]]) -> list[str]:
    names = list(CLIENT_CREDENTIAL_HEADERS)
    provider_headers = {entry["header"].lower() for entry in entries if "header" in entry}
    names += sorted(provider_headers - set(names))
    return names


def _route_filter(
    plan: GatewayPlan,
    settings: ConsumerConfig,
    route_filter: str,
    overlay: RenderedOverlay | None,
    overlay_key: str,
) -> dict[str, Any]:
    route: dict[str, Any] = {"filter": route_filter}
    if settings.mode is ConsumerMode.OVERLAY:
        scope = plan.scope
        route["overlay_file"] = f"{settings.overlay_mount_path.rstrip('/')}/{overlay_key}"
        route["expected_overlay_scope"] = {
            "network": scope.network,
            "gateway": scope.gateway,
            "namespace": scope.namespace,
            "local_site": scope.local_site,
        }
        route["reload"] = {"enabled": True, "debounce_ms": settings.reload_debounce_ms}
    else:
        if overlay is None:
            raise OverlayRenderError("inline mode needs the overlay whose candidates it embeds")
        payload = overlay.document["overlay"]
        candidates = [
            {name: candidate[name] for name in ROUTE_FIELDS if name in candidate}
            for candidate in payload["candidates"]
            if candidate.get("admission_state", NEW_REQUESTS) == NEW_REQUESTS
        ]
        if not candidates:
            raise OverlayRenderError(
                "no candidate is open to new requests, and the inline configuration cannot "
                "carry the others: keeping the previous configuration"
            )
        unknown = sorted({c["cluster"] for c in candidates} - set(plan.clusters))
        if unknown:
            raise OverlayRenderError(f"gateway cluster {unknown[0]!r} has no endpoint address")
        route["local_site"] = payload["local_site"]
        route["candidates"] = candidates
    route["model_header"] = settings.model_header
    affinity = settings.session_affinity
    if affinity is not None and affinity.enabled and settings.mode is ConsumerMode.OVERLAY:
        block: dict[str, Any] = {"enabled": True, "ttl_secs": affinity.ttl_seconds}
        if affinity.header is not None:
            block["header"] = affinity.header
        if affinity.cookie is not None:
            block["cookie"] = affinity.cookie
        route["session_affinity"] = block
    return route


def consumer_config(
    plan: GatewayPlan,
    settings: ConsumerConfig,
    *,
    overlay_key: str,
    overlay: RenderedOverlay | None = None,
    route_filter: str = DEFAULT_ROUTE_FILTER,
    credential_filter: str = DEFAULT_CREDENTIAL_FILTER,
) -> dict[str, Any]:
    """The gateway configuration for ``plan``'s gateway.

    ``overlay_key`` is the file name the overlay is mounted under (the ConfigMap key);
    ``overlay`` is needed in inline mode only, whose candidates it embeds; ``route_filter``
    and ``credential_filter`` are the gateway's filter names (``intelligent_route`` and
    ``credential_inject`` on gateways after the rename). Raises
    :class:`OverlayRenderError` when an endpoint cannot be expressed (see the module
    docstring) or a Secret reference cannot be a mounted file path.
    """
    clusters = _checked_clusters(plan, settings)
    route = _route_filter(plan, settings, route_filter, overlay, overlay_key)
    credentials = list(plan.credentials)
    credentials += [c["credential"] for c in route.get("candidates", ()) if "credential" in c]
    entries = _credential_entries(credentials, settings)
    filters: list[dict[str, Any]] = []
    if not settings.forward_client_credentials:
        filters.append(
            {"filter": HEADERS_FILTER, "request_remove": _client_credential_headers(entries)}
        )
    filters += [
        {"filter": MODEL_EXTRACTOR_FILTER, "field": "model", "header": settings.model_header},
        route,
    ]
    if entries:
        filters.append({"filter": credential_filter, "credentials": entries})
    filters.append(
        {
            "filter": HOST_HEADER_FILTER,
            "clusters": [
                {"name": name, "header": "host", "value": endpoint.authority}
                for name, endpoint in clusters
            ],
        }
    )
    filters.append(
        {
            "filter": LOAD_BALANCER_FILTER,
            "clusters": [_cluster(name, endpoint, settings) for name, endpoint in clusters],
        }
    )
    config: dict[str, Any] = {
        "listeners": [
            {
                "name": LISTENER_NAME,
                "address": f"0.0.0.0:{settings.listener_port}",
                "filter_chains": [CHAIN_NAME],
            }
        ],
        "filter_chains": [{"name": CHAIN_NAME, "filters": filters}],
        "admin": {"address": settings.admin_address},
    }
    if any(endpoint.private() for _, endpoint in clusters):
        config["insecure_options"] = {"allow_private_endpoints": True}
    return config


def consumer_config_yaml(
    plan: GatewayPlan,
    settings: ConsumerConfig,
    *,
    overlay_key: str,
    overlay: RenderedOverlay | None = None,
    route_filter: str = DEFAULT_ROUTE_FILTER,
    credential_filter: str = DEFAULT_CREDENTIAL_FILTER,
) -> str:
    """:func:`consumer_config` as the YAML the ConfigMap holds."""
    config = consumer_config(
        plan,
        settings,
        overlay=overlay,
        overlay_key=overlay_key,
        route_filter=route_filter,
        credential_filter=credential_filter,
    )
    return yaml.safe_dump(config, sort_keys=False, allow_unicode=True)
