"""The complete gateway configuration rendered next to the overlay (consumerConfig)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from grid.errors import OverlayRenderError
from grid.models.common import BackendKind, ScoringConfig
from grid.models.network import ConsumerConfig
from grid.models.site import EgressTlsMode
from grid.render.consumer import ClusterEndpoint, consumer_config, consumer_config_yaml
from grid.render.overlay import OverlayScope, OverlaySource, RenderedOverlay, render_overlay
from grid.scoring.inputs import CandidateInput, ConsumingSite, Geography, SecretRef
from grid.scoring.ranking import rank_candidates

NOW = datetime(2026, 7, 29, tzinfo=UTC)
CONSUMER = ConsumingSite("east", Geography("us-east", "us-east-1a"), {})
OPENAI_KEY = SecretRef("openai-api-key", "grid-system", "token")
ENDPOINTS = {
    "vllm": ClusterEndpoint("vllm.inference.svc:8000", EgressTlsMode.PLAINTEXT),
    "openai": ClusterEndpoint("api.openai.com:443", EgressTlsMode.TLS),
    "site-west": ClusterEndpoint(
        "west.example:8443", EgressTlsMode.MUTUAL_TLS, server_name="gw.west.example"
    ),
}


def candidate(provider: str, model: str, **overrides: Any) -> CandidateInput:
    fields: dict[str, Any] = {
        "provider": provider,
        "model": model,
        "site": "east",
        "cluster": provider,
        "backend_kind": BackendKind.LOCAL,
    }
    fields.update(overrides)
    return CandidateInput(**fields)


def overlay(*candidates: CandidateInput) -> RenderedOverlay:
    ranking = rank_candidates(candidates, CONSUMER, ScoringConfig(), NOW)
    scope = OverlayScope("mesh", "gw", "grid-system", "east")
    return render_overlay(ranking, scope, OverlaySource("mesh", "uid", 1), NOW)


def mesh_overlay() -> RenderedOverlay:
    return overlay(
        candidate("vllm", "llama"),
        candidate("openai", "gpt-4o", backend_kind=BackendKind.API_PROVIDER, credential=OPENAI_KEY),
        candidate(
            "openai-2",
            "gpt-4o-mini",
            cluster="openai",
            backend_kind=BackendKind.API_PROVIDER,
            credential=OPENAI_KEY,
        ),
        candidate(
            "other-key",
            "o1",
            cluster="openai",
            backend_kind=BackendKind.API_PROVIDER,
            credential=SecretRef("openai-batch-key", "grid-system", "token"),
        ),
        candidate(
            "west", "llama", site="west", cluster="site-west", backend_kind=BackendKind.REMOTE
        ),
    )


def filters(config: dict[str, Any]) -> list[dict[str, Any]]:
    (chain,) = config["filter_chains"]
    return chain["filters"]


def test_the_configuration_has_one_listener_one_chain_and_the_admin_listener() -> None:
    config = consumer_config(mesh_overlay(), ENDPOINTS, ConsumerConfig(listener_port=8081))
    assert config["listeners"] == [
        {"name": "grid", "address": "0.0.0.0:8081", "filter_chains": ["grid"]}
    ]
    assert config["admin"] == {"address": "127.0.0.1:9901"}
    assert [entry["filter"] for entry in filters(config)] == [
        "json_body_field",
        "grid_route",
        "grid_credential_inject",
        "load_balancer",
    ]
    assert filters(config)[0] == {
        "filter": "json_body_field",
        "field": "model",
        "header": "X-Model",
    }


def test_the_routing_filter_carries_the_overlay_candidates_with_the_static_fields_only() -> None:
    rendered = mesh_overlay()
    route = filters(consumer_config(rendered, ENDPOINTS, ConsumerConfig()))[1]
    assert route["local_site"] == "east"
    assert route["model_header"] == "X-Model"
    overlay_candidates = rendered.document["overlay"]["candidates"]
    assert [c["name"] for c in route["candidates"]] == [c["name"] for c in overlay_candidates]
    for entry in route["candidates"]:
        assert set(entry) <= {"kind", "name", "site", "cluster", "fresh", "credential"}
        assert {"kind", "name", "site", "cluster", "fresh"} <= set(entry)


def test_one_credential_entry_per_distinct_secret_with_its_mounted_path() -> None:
    settings = ConsumerConfig(credential_mount_base="/run/secrets/grid-credentials/")
    inject = filters(consumer_config(mesh_overlay(), ENDPOINTS, settings))[2]
    assert inject["credentials"] == [
        {
            "name": "openai-api-key",
            "namespace": "grid-system",
            "key": "token",
            "strategy": "bearer_token",
            "file": "/run/secrets/grid-credentials/openai-api-key/token",
        },
        {
            "name": "openai-batch-key",
            "namespace": "grid-system",
            "key": "token",
            "strategy": "bearer_token",
            "file": "/run/secrets/grid-credentials/openai-batch-key/token",
        },
    ]


def test_no_credential_filter_without_credentials() -> None:
    config = consumer_config(overlay(candidate("vllm", "llama")), ENDPOINTS, ConsumerConfig())
    assert [entry["filter"] for entry in filters(config)] == [
        "json_body_field",
        "grid_route",
        "load_balancer",
    ]


def test_one_cluster_per_distinct_candidate_cluster_with_its_tls() -> None:
    settings = ConsumerConfig(tls_mount_path="/etc/grid/tls")
    balancer = filters(consumer_config(mesh_overlay(), ENDPOINTS, settings))[-1]
    assert balancer["filter"] == "load_balancer"
    assert balancer["clusters"] == [
        {
            "name": "openai",
            "endpoints": ["api.openai.com:443"],
            "tls": {"sni": "api.openai.com", "verify": True},
        },
        {
            "name": "site-west",
            "endpoints": ["west.example:8443"],
            "tls": {
                "sni": "gw.west.example",
                "verify": True,
                "ca": {"ca_path": "/etc/grid/tls/ca.crt"},
                "client_cert": {
                    "cert_path": "/etc/grid/tls/tls.crt",
                    "key_path": "/etc/grid/tls/tls.key",
                },
            },
        },
        {"name": "vllm", "endpoints": ["vllm.inference.svc:8000"]},
    ]


def test_filter_names_and_model_header_are_configurable() -> None:
    config = consumer_config(
        mesh_overlay(),
        ENDPOINTS,
        ConsumerConfig(model_header="X-AI-Model"),
        route_filter="intelligent_route",
        credential_filter="credential_inject",
    )
    names = [entry["filter"] for entry in filters(config)]
    assert names[1:3] == ["intelligent_route", "credential_inject"]
    assert filters(config)[0]["header"] == "X-AI-Model"
    assert filters(config)[1]["model_header"] == "X-AI-Model"


def test_the_yaml_is_the_configuration() -> None:
    rendered = mesh_overlay()
    text = consumer_config_yaml(rendered, ENDPOINTS, ConsumerConfig())
    assert yaml.safe_load(text) == consumer_config(rendered, ENDPOINTS, ConsumerConfig())


def test_a_cluster_without_an_endpoint_is_refused() -> None:
    endpoints = {name: value for name, value in ENDPOINTS.items() if name != "site-west"}
    with pytest.raises(OverlayRenderError, match="'site-west' has no endpoint"):
        consumer_config(mesh_overlay(), endpoints, ConsumerConfig())


@pytest.mark.parametrize(("name", "key"), [("..", "token"), ("a/b", "token"), ("ok", "..")])
def test_secret_references_that_would_leave_the_mount_are_refused(name: str, key: str) -> None:
    rendered = overlay(
        candidate("openai", "gpt-4o", credential=SecretRef(name, "grid-system", key))
    )
    with pytest.raises(OverlayRenderError, match="cannot be a file name"):
        consumer_config(rendered, {"openai": ENDPOINTS["openai"]}, ConsumerConfig())


def test_sni_defaults_to_the_endpoint_host() -> None:
    assert ClusterEndpoint("api.example.com:443", EgressTlsMode.TLS).sni == "api.example.com"
    assert ClusterEndpoint("[fd00::1]:443", EgressTlsMode.TLS).sni == "fd00::1"
