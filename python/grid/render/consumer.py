"""The complete gateway configuration (``consumerConfig``): one public listener, one filter
chain (model extractor, routing filter, credential injector, load balancer) and the admin
listener, as the gateway reads it. It carries paths to mounted Secret files, never their
contents."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from grid.errors import OverlayRenderError
from grid.models.network import DEFAULT_CREDENTIAL_FILTER, DEFAULT_ROUTE_FILTER, ConsumerConfig
from grid.models.site import EgressTlsMode
from grid.render.overlay import CREDENTIAL_STRATEGY, RenderedOverlay

CHAIN_NAME = "grid"
LISTENER_NAME = "grid"
MODEL_EXTRACTOR_FILTER = "json_body_field"
LOAD_BALANCER_FILTER = "load_balancer"
CA_FILE = "ca.crt"
CLIENT_CERT_FILE = "tls.crt"
CLIENT_KEY_FILE = "tls.key"
ROUTE_FIELDS = ("kind", "name", "site", "cluster", "fresh", "credential")
"""What the routing filter's static configuration accepts of a candidate (it rejects unknown
fields)."""


@dataclass(frozen=True, slots=True)
class ClusterEndpoint:
    """Where a gateway cluster sends traffic, and how it secures the connection."""

    address: str
    """``host:port``."""
    tls_mode: EgressTlsMode
    server_name: str | None = None
    """TLS server name (SNI); default the host of ``address``."""

    @property
    def sni(self) -> str:
        return self.server_name or self.address.rpartition(":")[0].strip("[]")


def _path_segment(value: str, what: str) -> str:
    # A Secret name or key becomes a path component: refuse anything that could climb out
    # of the mount base.
    if not value or "/" in value or value in (".", ".."):
        raise OverlayRenderError(f"{what} {value!r} cannot be a file name under the mount")
    return value


def _cluster(name: str, endpoint: ClusterEndpoint, tls_mount_path: str) -> dict[str, Any]:
    cluster: dict[str, Any] = {"name": name, "endpoints": [endpoint.address]}
    if endpoint.tls_mode is EgressTlsMode.MUTUAL_TLS:
        base = tls_mount_path.rstrip("/")
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


def consumer_config(
    overlay: RenderedOverlay,
    endpoints: Mapping[str, ClusterEndpoint],
    settings: ConsumerConfig,
    *,
    route_filter: str = DEFAULT_ROUTE_FILTER,
    credential_filter: str = DEFAULT_CREDENTIAL_FILTER,
) -> dict[str, Any]:
    """The gateway configuration routing exactly the overlay's candidates, in its order.

    ``endpoints`` gives every candidate cluster's address and TLS mode; ``route_filter`` and
    ``credential_filter`` are the gateway's filter names (``intelligent_route`` and
    ``credential_inject`` on gateways after the rename). Raises
    :class:`OverlayRenderError` when a cluster has no endpoint or a Secret reference cannot
    be a mounted file path.
    """
    payload = overlay.document["overlay"]
    candidates = [
        {name: candidate[name] for name in ROUTE_FIELDS if name in candidate}
        for candidate in payload["candidates"]
    ]
    model_header = settings.model_header
    filters: list[dict[str, Any]] = [
        {"filter": MODEL_EXTRACTOR_FILTER, "field": "model", "header": model_header},
        {
            "filter": route_filter,
            "local_site": payload["local_site"],
            "model_header": model_header,
            "candidates": candidates,
        },
    ]
    secret_refs = {
        (ref["namespace"], ref["name"], ref["key"])
        for ref in (c["credential"]["secretRef"] for c in candidates if "credential" in c)
    }
    if secret_refs:
        base = settings.credential_mount_base.rstrip("/")
        filters.append(
            {
                "filter": credential_filter,
                "credentials": [
                    {
                        "name": name,
                        "namespace": namespace,
                        "key": key,
                        "strategy": CREDENTIAL_STRATEGY,
                        "file": f"{base}/{_path_segment(name, 'Secret name')}/"
                        f"{_path_segment(key, 'Secret key')}",
                    }
                    for namespace, name, key in sorted(secret_refs)
                ],
            }
        )
    clusters = []
    for name in sorted({candidate["cluster"] for candidate in candidates}):
        endpoint = endpoints.get(name)
        if endpoint is None:
            raise OverlayRenderError(f"gateway cluster {name!r} has no endpoint address")
        clusters.append(_cluster(name, endpoint, settings.tls_mount_path))
    filters.append({"filter": LOAD_BALANCER_FILTER, "clusters": clusters})
    return {
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


def consumer_config_yaml(
    overlay: RenderedOverlay,
    endpoints: Mapping[str, ClusterEndpoint],
    settings: ConsumerConfig,
    *,
    route_filter: str = DEFAULT_ROUTE_FILTER,
    credential_filter: str = DEFAULT_CREDENTIAL_FILTER,
) -> str:
    """:func:`consumer_config` as the YAML the ConfigMap holds."""
    config = consumer_config(
        overlay,
        endpoints,
        settings,
        route_filter=route_filter,
        credential_filter=credential_filter,
    )
    return yaml.safe_dump(config, sort_keys=False, allow_unicode=True)
