"""End to end: the gateway configuration and the overlays Grid renders for a mesh whose
ranking changes, judged by a model of the gateway's request routing written from its
documentation (tests/support/gateway_model.py).

Every overlay of the sequence must only name clusters the configuration declares (the
gateway cannot add clusters on an overlay reload), the configuration must not change with
the ranking, and no new request may reach an ``existing_only`` or excluded candidate while
a session bound to an ``existing_only`` one keeps it."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from grid.models.network import ConsumerConfig, ConsumerMode
from grid.models.resources import load_resources_from_dir
from grid.render.consumer import consumer_config, consumer_config_yaml
from grid.render.overlay import RenderedOverlay, render_overlay
from grid.render.whatif import MetricsReport, WhatIf, build_what_if, parse_metrics_report
from grid.scoring.ranking import rank_candidates
from support.gateway_model import GatewayModel, Refused

NOW = datetime(2026, 9, 1, tzinfo=UTC)
OVERLAY_PATH = "/etc/grid/overlay/routing-overlay.json"

MESH = """\
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: GridNetwork
metadata: {name: mesh, uid: mesh-uid, generation: 1}
spec:
  gatewayRefs:
    - name: edge
      namespace: grid-system
      configMapKey: routing-overlay.json
      routeFilterName: intelligent_route
      credentialFilterName: credential_inject
      consumerConfig:
        enabled: true
        mode: {mode}
---
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: GridSite
metadata: {name: east, labels: {site: east}}
spec: {gridNetworkRef: mesh, region: us-east, zone: us-east-1a}
---
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: GridSite
metadata: {name: central, labels: {site: central}}
spec:
  gridNetworkRef: mesh
  region: us-east
  zone: us-east-1b
  egress: {address: "central.mesh.example:8443", tlsMode: mutual_tls}
---
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: GridSite
metadata: {name: west, labels: {site: west}}
spec:
  gridNetworkRef: mesh
  region: us-west
  zone: us-west-2a
  egress: {address: "192.0.2.7:8443", tlsMode: mutual_tls, serverName: west.mesh.example}
---
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: InferenceProvider
metadata: {name: llama-east}
spec:
  gridNetworkRef: mesh
  backendKind: local
  providerKind: self_hosted
  models: [{name: llama}]
  endpoint: http://10.0.0.10:8000/v1
  siteSelector: {matchLabels: {site: east}}
---
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: InferenceProvider
metadata: {name: llama-central}
spec:
  gridNetworkRef: mesh
  backendKind: local
  providerKind: self_hosted
  models: [{name: llama}]
  endpoint: http://10.1.0.10:8000
  siteSelector: {matchLabels: {site: central}}
---
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: InferenceProvider
metadata: {name: llama-west}
spec:
  gridNetworkRef: mesh
  backendKind: local
  providerKind: self_hosted
  models: [{name: llama}]
  endpoint: http://10.2.0.10:8000
  siteSelector: {matchLabels: {site: west}}
---
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: InferenceProvider
metadata: {name: openai}
spec:
  gridNetworkRef: mesh
  backendKind: api_provider
  providerKind: open_ai
  models: [{name: llama}, {name: gpt-4o}]
  endpoint: https://api.openai.com/v1
  auth:
    strategy: BearerToken
    secretRef: {name: openai-key, namespace: grid-system, key: token}
---
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: InferenceProvider
metadata: {name: claude}
spec:
  gridNetworkRef: mesh
  backendKind: api_provider
  providerKind: anthropic
  models: [{name: claude-sonnet}]
  endpoint: https://api.anthropic.com
  auth:
    strategy: ApiKey
    secretRef: {name: anthropic-key, namespace: grid-system, key: api-key}
"""

STEPS: list[tuple[str, dict[str, Any]]] = [
    ("all idle", {}),
    # The local server fills up: existing sessions only.
    ("east busy", {"llama-east": {"queue_depth": 10_000}}),
    # Metrics flip: central is loaded, west is idle.
    (
        "central loaded",
        {"llama-east": {"queue_depth": 10_000}, "llama-central": {"queue_depth": 40}},
    ),
    # The local server fails: excluded.
    ("east down", {"llama-east": {"healthy": False}}),
    # Central goes away (its providers are reported unhealthy), east is back.
    ("central gone", {"llama-central": {"healthy": False}}),
]


def _what_if(resources: Path, metrics: dict[str, Any]) -> WhatIf:
    report: MetricsReport = parse_metrics_report({"providers": metrics})
    return build_what_if(
        load_resources_from_dir(resources),
        site="east",
        gateway="edge",
        namespace="grid-system",
        metrics=report,
    )


def _overlay(what_if: WhatIf, now: datetime) -> RenderedOverlay:
    ranking = rank_candidates(
        what_if.candidates, what_if.consumer, what_if.network.spec.scoring, now
    )
    return render_overlay(ranking, what_if.scope, what_if.source, now)


def _mesh(tmp_path: Path, mode: ConsumerMode) -> Path:
    (tmp_path / "mesh.yaml").write_text(MESH.replace("{mode}", mode.value))
    return tmp_path


def _settings(what_if: WhatIf) -> ConsumerConfig:
    settings = what_if.gateway.consumer_config
    assert settings is not None
    return settings


def test_overlay_mode_routes_as_ranked_through_every_change(tmp_path: Path) -> None:
    resources = _mesh(tmp_path, ConsumerMode.OVERLAY)
    first = _what_if(resources, {})
    config_text = consumer_config_yaml(
        first.plan, _settings(first), overlay_key="routing-overlay.json"
    )
    config = yaml.safe_load(config_text)
    declared = {c["name"] for c in config["filter_chains"][0]["filters"][-1]["clusters"]}
    # claude's key goes in x-api-key, which the gateway cannot inject: not offered.
    assert declared == {"llama-east", "openai", "site-central", "site-west"}
    assert [name for name, _ in first.not_offered] == ["claude"]

    overlay = _overlay(first, NOW)
    gateway = GatewayModel(config, {OVERLAY_PATH: overlay.text})
    bound = gateway.request("llama", session="s-1")
    assert bound.cluster == "llama-east"

    for step, (name, metrics) in enumerate(STEPS):
        what_if = _what_if(resources, metrics)
        # Re-rankings never change the configuration.
        assert (
            consumer_config_yaml(
                what_if.plan, _settings(what_if), overlay_key="routing-overlay.json"
            )
            == config_text
        ), name
        overlay = _overlay(what_if, NOW + timedelta(seconds=step + 1))
        assert gateway.reload(overlay.text), name
        named = {c["cluster"] for c in overlay.document["overlay"]["candidates"]}
        assert named <= declared, name
        by_cluster = {
            c["cluster"]: c["admission_state"]
            for c in overlay.document["overlay"]["candidates"]
            if c["name"] == "llama"
        }
        fresh = gateway.request("llama", session=f"new-{step}")
        assert fresh.status == 200, name
        assert by_cluster[fresh.cluster or ""] == "new_and_existing", name
        # The first new-request candidate in the overlay's order is the one taken.
        first_open = next(c for c, state in by_cluster.items() if state == "new_and_existing")
        assert fresh.cluster == first_open, name
        again = gateway.request("llama", session="s-1")
        if by_cluster.get("llama-east") == "existing_only":
            assert again.cluster == "llama-east", f"{name}: the session keeps its backend"
        if by_cluster.get("llama-east", "none") == "none":
            assert again.cluster != "llama-east", f"{name}: an excluded backend loses it"

    states = {name: _states(_what_if(resources, metrics)) for name, metrics in STEPS}
    assert states["east busy"]["llama-east"] == "existing_only"
    # Grid leaves an unhealthy backend out of the overlay altogether.
    assert "llama-east" not in states["east down"]
    assert "site-central" not in states["central gone"]


def _states(what_if: WhatIf) -> dict[str, str]:
    return {
        c["cluster"]: c["admission_state"]
        for c in _overlay(what_if, NOW).document["overlay"]["candidates"]
        if c["name"] == "llama"
    }


def test_upstream_headers_carry_the_credential_and_the_endpoint_host(tmp_path: Path) -> None:
    what_if = _what_if(_mesh(tmp_path, ConsumerMode.OVERLAY), {})
    config = consumer_config(what_if.plan, _settings(what_if), overlay_key="routing-overlay.json")
    gateway = GatewayModel(config, {OVERLAY_PATH: _overlay(what_if, NOW).text})
    assert gateway.request("claude-sonnet").cluster is None  # not offered: x-api-key
    gpt = gateway.request("gpt-4o")
    assert gpt.headers == {
        "authorization": "Bearer <file:/etc/grid/credentials/openai-key/token>",
        "host": "api.openai.com",
    }


CLIENT_CREDENTIALS = {
    "Authorization": "Bearer client-canary",
    "Proxy-Authorization": "Basic client-canary",
    "X-Api-Key": "client-canary",
    "X-Goog-Api-Key": "client-canary",
}


def _gateway(what_if: WhatIf, settings: ConsumerConfig) -> GatewayModel:
    config = consumer_config(what_if.plan, settings, overlay_key="routing-overlay.json")
    return GatewayModel(config, {OVERLAY_PATH: _overlay(what_if, NOW).text})


def test_a_client_credential_never_reaches_a_backend_grid_gives_no_credential(
    tmp_path: Path,
) -> None:
    resources = _mesh(tmp_path, ConsumerMode.OVERLAY)
    sent = {**CLIENT_CREDENTIALS, "X-Request-Note": "kept"}
    idle = _what_if(resources, {})
    gateway = _gateway(idle, _settings(idle))
    local = gateway.request("llama", headers=sent)
    assert local.cluster == "llama-east"
    assert local.headers == {"x-request-note": "kept", "host": "10.0.0.10:8000"}

    east_down = _what_if(resources, {"llama-east": {"healthy": False}})
    gateway = _gateway(east_down, _settings(east_down))
    egress = gateway.request("llama", headers=sent)
    assert egress.cluster == "site-central"
    assert egress.headers == {"x-request-note": "kept", "host": "central.mesh.example:8443"}

    # API providers get Grid's credential, in place of the client's.
    gpt = gateway.request("gpt-4o", headers=sent)
    assert gpt.headers == {
        "x-request-note": "kept",
        "authorization": "Bearer <file:/etc/grid/credentials/openai-key/token>",
        "host": "api.openai.com",
    }


def test_forwarding_client_credentials_sends_them_to_every_backend(tmp_path: Path) -> None:
    what_if = _what_if(_mesh(tmp_path, ConsumerMode.OVERLAY), {})
    settings = _settings(what_if).model_copy(update={"forward_client_credentials": True})
    gateway = _gateway(what_if, settings)
    local = gateway.request("llama", headers=CLIENT_CREDENTIALS)
    assert local.headers["authorization"] == "Bearer client-canary"
    assert local.headers["x-api-key"] == "client-canary"
    gpt = gateway.request("gpt-4o", headers=CLIENT_CREDENTIALS)
    assert gpt.headers["authorization"] == "Bearer <file:/etc/grid/credentials/openai-key/token>"
    assert gpt.headers["x-api-key"] == "client-canary"


def test_the_model_applies_header_removals_before_sets_and_additions() -> None:
    config = {
        "filter_chains": [
            {
                "name": "grid",
                "filters": [
                    {
                        "filter": "headers",
                        "request_remove": ["X-Tag", "X-Gone"],
                        "request_set": [{"name": "X-Tag", "value": "set"}],
                        "request_add": [
                            {"name": "X-Gone", "value": "added"},
                            {"name": "X-New", "value": "new"},
                        ],
                    },
                    {
                        "filter": "intelligent_route",
                        "local_site": "a",
                        "candidates": [
                            {"kind": "inference_model", "name": "m", "site": "a", "cluster": "c"}
                        ],
                    },
                    {"filter": "load_balancer", "clusters": [{"name": "c", "endpoints": ["c:80"]}]},
                ],
            }
        ]
    }
    upstream = GatewayModel(config, {}).request("m", headers={"X-Tag": "client", "X-Gone": "old"})
    # An addition to a header the client sent keeps the client's value beside it.
    assert upstream.headers == {"x-tag": "set", "x-gone": "old,added", "x-new": "new"}
    config["filter_chains"][0]["filters"][0]["request_drop"] = ["x"]
    with pytest.raises(Refused, match="unknown field request_drop"):
        GatewayModel(config, {})


def test_inline_mode_never_embeds_a_candidate_closed_to_new_requests(tmp_path: Path) -> None:
    resources = _mesh(tmp_path, ConsumerMode.INLINE)
    for name, metrics in STEPS:
        what_if = _what_if(resources, metrics)
        overlay = _overlay(what_if, NOW)
        config = consumer_config(
            what_if.plan, _settings(what_if), overlay_key="routing-overlay.json", overlay=overlay
        )
        gateway = GatewayModel(config, {})
        closed = {
            c["cluster"]
            for c in overlay.document["overlay"]["candidates"]
            if c["name"] == "llama" and c["admission_state"] != "new_and_existing"
        }
        for session in (None, "s-1"):
            routed = gateway.request("llama", session=session)
            assert routed.status == 200 and routed.cluster not in closed, name


def test_the_model_refuses_what_the_gateway_refuses() -> None:
    config = {
        "filter_chains": [
            {
                "name": "grid",
                "filters": [
                    {"filter": "intelligent_route", "local_site": "a", "candidates": []},
                    {
                        "filter": "load_balancer",
                        "clusters": [
                            {
                                "name": "c",
                                "endpoints": ["127.0.0.1:8443"],
                                "tls": {"sni": "127.0.0.1", "verify": True},
                            }
                        ],
                    },
                ],
            }
        ]
    }
    with pytest.raises(Refused, match="sensitive"):
        GatewayModel(config, {})
    config["insecure_options"] = {"allow_private_endpoints": True}
    with pytest.raises(Refused, match="sni must be a valid DNS hostname"):
        GatewayModel(config, {})


def test_the_mesh_renders_no_config_the_gateway_would_refuse(tmp_path: Path) -> None:
    resources = _mesh(tmp_path, ConsumerMode.OVERLAY)
    text = textwrap.dedent(MESH).replace("{mode}", "overlay")
    assert "192.0.2.7" in text  # west's egress is an IP address with a server name
    what_if = _what_if(resources, {})
    config = consumer_config(what_if.plan, _settings(what_if), overlay_key="routing-overlay.json")
    GatewayModel(config, {OVERLAY_PATH: _overlay(what_if, NOW).text})
    west = next(
        c for c in config["filter_chains"][0]["filters"][-1]["clusters"] if c["name"] == "site-west"
    )
    assert west["endpoints"] == ["192.0.2.7:8443"]
    assert west["tls"]["sni"] == "west.mesh.example"
