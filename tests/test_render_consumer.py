"""The complete gateway configuration rendered next to the overlay (consumerConfig)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from grid.errors import OverlayRenderError
from grid.models.common import BackendKind, ScoringConfig
from grid.models.network import ConsumerConfig, ConsumerMode, SessionAffinity
from grid.models.site import EgressTlsMode
from grid.render.consumer import (
    ClusterEndpoint,
    GatewayPlan,
    consumer_config,
    consumer_config_yaml,
)
from grid.render.overlay import (
    OverlayScope,
    OverlaySource,
    RenderedOverlay,
    credential_document,
    render_overlay,
)
from grid.scoring.inputs import (
    CandidateInput,
    ConsumingSite,
    CredentialStrategy,
    Geography,
    Metrics,
    SecretRef,
)
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


SCOPE = OverlayScope("mesh", "gw", "grid-system", "east")
INLINE = ConsumerConfig(mode=ConsumerMode.INLINE)
KEY = "routing-overlay.json"


def plan(endpoints: dict[str, ClusterEndpoint] | None = None, *refs: SecretRef) -> GatewayPlan:
    credentials = refs or (OPENAI_KEY, SecretRef("openai-batch-key", "grid-system", "token"))
    return GatewayPlan(
        SCOPE,
        ENDPOINTS if endpoints is None else endpoints,
        tuple(credential_document(ref) for ref in credentials),
    )


def render(settings: ConsumerConfig, **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("overlay_key", KEY)
    target = kwargs.pop("plan", None) or plan()
    return consumer_config(target, settings, **kwargs)


def filters(config: dict[str, Any]) -> list[dict[str, Any]]:
    (chain,) = config["filter_chains"]
    return chain["filters"]


def by_filter(config: dict[str, Any], name: str) -> dict[str, Any]:
    (entry,) = [entry for entry in filters(config) if entry["filter"] == name]
    return entry


def route_of(config: dict[str, Any]) -> dict[str, Any]:
    return by_filter(config, "grid_route")


def test_the_configuration_has_one_listener_one_chain_and_the_admin_listener() -> None:
    config = render(ConsumerConfig(listener_port=8081))
    assert config["listeners"] == [
        {"name": "grid", "address": "0.0.0.0:8081", "filter_chains": ["grid"]}
    ]
    assert config["admin"] == {"address": "127.0.0.1:9901"}
    assert [entry["filter"] for entry in filters(config)] == [
        "headers",
        "json_body_field",
        "grid_route",
        "grid_credential_inject",
        "credential_injection",
        "load_balancer",
    ]
    assert filters(config)[1] == {
        "filter": "json_body_field",
        "field": "model",
        "header": "X-Model",
    }
    assert "insecure_options" not in config


def test_overlay_mode_reads_the_published_overlay_with_its_scope_and_reloads_it() -> None:
    settings = ConsumerConfig(overlay_mount_path="/mnt/overlay/", reload_debounce_ms=250)
    route = route_of(render(settings))
    assert route == {
        "filter": "grid_route",
        "overlay_file": "/mnt/overlay/routing-overlay.json",
        "expected_overlay_scope": {
            "network": "mesh",
            "gateway": "gw",
            "namespace": "grid-system",
            "local_site": "east",
        },
        "reload": {"enabled": True, "debounce_ms": 250},
        "model_header": "X-Model",
        "session_affinity": {"enabled": True, "ttl_secs": 3600, "header": "X-Session-Id"},
    }


def test_overlay_mode_does_not_depend_on_the_ranking() -> None:
    assert render(ConsumerConfig()) == render(ConsumerConfig(), overlay=mesh_overlay())


def test_session_affinity_follows_the_settings() -> None:
    cookie = SessionAffinity(header=None, cookie="grid_session", ttl_seconds=60)
    route = route_of(render(ConsumerConfig(session_affinity=cookie)))
    assert route["session_affinity"] == {"enabled": True, "ttl_secs": 60, "cookie": "grid_session"}
    off = route_of(render(ConsumerConfig(session_affinity=None)))
    assert "session_affinity" not in off
    with pytest.raises(ValueError, match="needs a header or a cookie"):
        SessionAffinity(header=None)


def test_inline_mode_embeds_the_candidates_with_the_static_fields_only() -> None:
    rendered = mesh_overlay()
    route = route_of(render(INLINE, overlay=rendered))
    assert route["local_site"] == "east"
    assert route["model_header"] == "X-Model"
    assert "overlay_file" not in route and "session_affinity" not in route
    overlay_candidates = rendered.document["overlay"]["candidates"]
    assert [c["name"] for c in route["candidates"]] == [c["name"] for c in overlay_candidates]
    for entry in route["candidates"]:
        assert set(entry) <= {"kind", "name", "site", "cluster", "fresh", "credential"}
        assert {"kind", "name", "site", "cluster", "fresh"} <= set(entry)


def test_inline_mode_leaves_out_candidates_closed_to_new_requests() -> None:
    busy = candidate("vllm", "llama", metrics=Metrics(queue_depth=10_000))
    rendered = overlay(busy, candidate("openai", "llama", backend_kind=BackendKind.API_PROVIDER))
    states = {
        c["cluster"]: c["admission_state"] for c in rendered.document["overlay"]["candidates"]
    }
    assert states == {"vllm": "existing_only", "openai": "new_and_existing"}
    route = route_of(render(INLINE, overlay=rendered))
    assert [c["cluster"] for c in route["candidates"]] == ["openai"]


def test_inline_mode_with_no_candidate_open_to_new_requests_is_refused() -> None:
    rendered = overlay(candidate("vllm", "llama", metrics=Metrics(queue_depth=10_000)))
    with pytest.raises(OverlayRenderError, match="no candidate is open to new requests"):
        render(INLINE, overlay=rendered)


def test_one_credential_entry_per_distinct_secret_with_its_mounted_path() -> None:
    settings = ConsumerConfig(credential_mount_base="/run/secrets/grid-credentials/")
    anthropic = SecretRef(
        "anthropic-key", "grid-system", "api-key", CredentialStrategy.API_KEY, "x-api-key"
    )
    config = render(settings, plan=plan(None, OPENAI_KEY, anthropic, OPENAI_KEY))
    assert by_filter(config, "grid_credential_inject")["credentials"] == [
        {
            "name": "anthropic-key",
            "namespace": "grid-system",
            "key": "api-key",
            "strategy": "apikey",
            "header": "x-api-key",
            "file": "/run/secrets/grid-credentials/anthropic-key/api-key",
        },
        {
            "name": "openai-api-key",
            "namespace": "grid-system",
            "key": "token",
            "strategy": "bearer_token",
            "file": "/run/secrets/grid-credentials/openai-api-key/token",
        },
    ]


def test_one_secret_used_with_two_strategies_is_refused() -> None:
    as_key = SecretRef(
        "openai-api-key", "grid-system", "token", CredentialStrategy.API_KEY, "api-key"
    )
    with pytest.raises(OverlayRenderError, match="two different injection strategies"):
        render(ConsumerConfig(), plan=plan(None, OPENAI_KEY, as_key))


def test_no_credential_filter_without_credentials() -> None:
    config = render(ConsumerConfig(), plan=GatewayPlan(SCOPE, {"vllm": ENDPOINTS["vllm"]}))
    assert [entry["filter"] for entry in filters(config)] == [
        "headers",
        "json_body_field",
        "grid_route",
        "credential_injection",
        "load_balancer",
    ]


def test_every_declared_cluster_with_its_tls() -> None:
    settings = ConsumerConfig(tls_mount_path="/etc/grid/tls")
    balancer = filters(render(settings))[-1]
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


def test_every_cluster_gets_its_endpoint_authority_as_host() -> None:
    hosts = by_filter(render(ConsumerConfig()), "credential_injection")["clusters"]
    assert hosts == [
        {"name": "openai", "header": "host", "value": "api.openai.com"},
        {"name": "site-west", "header": "host", "value": "gw.west.example:8443"},
        {"name": "vllm", "header": "host", "value": "vllm.inference.svc:8000"},
    ]


@pytest.mark.parametrize(
    ("endpoint", "authority"),
    [
        (ClusterEndpoint("api.example.com:443", EgressTlsMode.TLS), "api.example.com"),
        (ClusterEndpoint("api.example.com:8443", EgressTlsMode.TLS), "api.example.com:8443"),
        (ClusterEndpoint("vllm:80", EgressTlsMode.PLAINTEXT), "vllm"),
        (ClusterEndpoint("[fd00::1]:8000", EgressTlsMode.PLAINTEXT), "[fd00::1]:8000"),
        (
            ClusterEndpoint("192.0.2.1:443", EgressTlsMode.MUTUAL_TLS, server_name="gw.example"),
            "gw.example",
        ),
    ],
)
def test_the_authority_is_what_an_http_client_sends(
    endpoint: ClusterEndpoint, authority: str
) -> None:
    assert endpoint.authority == authority


@pytest.mark.parametrize("path", ["", "/", "/v1", "/v1/"])
def test_endpoint_paths_the_gateway_reaches_as_written(path: str) -> None:
    endpoint = ClusterEndpoint("api.example.com:443", EgressTlsMode.TLS, path=path)
    assert endpoint.problem() is None


@pytest.mark.parametrize("path", ["/prefix/v1", "/openai", "/v2"])
def test_an_endpoint_path_the_gateway_cannot_express_is_refused(path: str) -> None:
    endpoint = ClusterEndpoint("api.example.com:443", EgressTlsMode.TLS, path=path)
    with pytest.raises(OverlayRenderError, match=f"cluster 'odd': endpoint path '{path}'"):
        render(ConsumerConfig(), plan=GatewayPlan(SCOPE, {"odd": endpoint}))


@pytest.mark.parametrize("mode", [EgressTlsMode.TLS, EgressTlsMode.MUTUAL_TLS])
def test_tls_to_an_ip_address_without_a_server_name_is_refused(mode: EgressTlsMode) -> None:
    endpoint = ClusterEndpoint("192.0.2.1:8443", mode)
    with pytest.raises(OverlayRenderError, match="needs a server name"):
        render(ConsumerConfig(), plan=GatewayPlan(SCOPE, {"ip": endpoint}))
    named = ClusterEndpoint("192.0.2.1:8443", mode, server_name="gw.example")
    config = render(ConsumerConfig(), plan=GatewayPlan(SCOPE, {"ip": named}))
    assert filters(config)[-1]["clusters"][0]["tls"]["sni"] == "gw.example"


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1:8000",
        "[::1]:8000",
        "169.254.169.254:80",
        "localhost:8000",
        "vllm.inference.svc.cluster.local:8000",
        "metadata.google.internal:80",
    ],
)
def test_endpoints_the_gateway_deems_private_need_the_opt_in(address: str) -> None:
    target = GatewayPlan(SCOPE, {"private": ClusterEndpoint(address, EgressTlsMode.PLAINTEXT)})
    with pytest.raises(OverlayRenderError, match="allowPrivateEndpoints"):
        render(ConsumerConfig(), plan=target)
    config = render(ConsumerConfig(allow_private_endpoints=True), plan=target)
    assert config["insecure_options"] == {"allow_private_endpoints": True}


def test_the_opt_in_is_only_written_when_needed() -> None:
    assert "insecure_options" not in render(ConsumerConfig(allow_private_endpoints=True))


def test_filter_names_and_model_header_are_configurable() -> None:
    config = render(
        ConsumerConfig(model_header="X-AI-Model"),
        route_filter="intelligent_route",
        credential_filter="credential_inject",
    )
    names = [entry["filter"] for entry in filters(config)]
    assert names[2:4] == ["intelligent_route", "credential_inject"]
    assert by_filter(config, "json_body_field")["header"] == "X-AI-Model"
    assert by_filter(config, "intelligent_route")["model_header"] == "X-AI-Model"


def test_the_yaml_is_the_configuration() -> None:
    rendered = mesh_overlay()
    text = consumer_config_yaml(plan(), INLINE, overlay_key=KEY, overlay=rendered)
    assert yaml.safe_load(text) == render(INLINE, overlay=rendered)


def test_an_inline_candidate_cluster_without_an_endpoint_is_refused() -> None:
    endpoints = {name: value for name, value in ENDPOINTS.items() if name != "site-west"}
    with pytest.raises(OverlayRenderError, match="'site-west' has no endpoint"):
        render(INLINE, overlay=mesh_overlay(), plan=plan(endpoints))


@pytest.mark.parametrize(("name", "key"), [("..", "token"), ("a/b", "token"), ("ok", "..")])
def test_secret_references_that_would_leave_the_mount_are_refused(name: str, key: str) -> None:
    with pytest.raises(OverlayRenderError, match="cannot be a file name"):
        render(ConsumerConfig(), plan=plan(None, SecretRef(name, "grid-system", key)))


def test_sni_defaults_to_the_endpoint_host() -> None:
    assert ClusterEndpoint("api.example.com:443", EgressTlsMode.TLS).sni == "api.example.com"
    assert ClusterEndpoint("[fd00::1]:443", EgressTlsMode.TLS).sni == "fd00::1"


def test_client_credentials_are_removed_before_routing_and_injection() -> None:
    config = render(ConsumerConfig())
    names = [entry["filter"] for entry in filters(config)]
    assert names.index("headers") < names.index("grid_route")
    assert names.index("headers") < names.index("grid_credential_inject")
    assert by_filter(config, "headers") == {
        "filter": "headers",
        "request_remove": ["authorization", "proxy-authorization", "x-api-key", "x-goog-api-key"],
    }


def test_every_api_key_header_of_the_plan_is_removed_too() -> None:
    custom = SecretRef("vllm-key", "grid-system", "key", CredentialStrategy.API_KEY, "X-Vllm-Key")
    anthropic = SecretRef(
        "anthropic-key", "grid-system", "api-key", CredentialStrategy.API_KEY, "X-API-Key"
    )
    config = render(ConsumerConfig(), plan=plan(None, OPENAI_KEY, custom, anthropic))
    assert by_filter(config, "headers")["request_remove"] == [
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "x-goog-api-key",
        "x-vllm-key",
    ]


def test_inline_candidates_api_key_headers_are_removed() -> None:
    key = SecretRef("inline-key", "grid-system", "key", CredentialStrategy.API_KEY, "x-inline-key")
    rendered = overlay(
        candidate("vllm", "llama", backend_kind=BackendKind.API_PROVIDER, credential=key)
    )
    config = render(INLINE, overlay=rendered, plan=plan(None, OPENAI_KEY))
    assert by_filter(config, "headers")["request_remove"][-1] == "x-inline-key"


def test_forwarding_client_credentials_is_an_explicit_opt_out() -> None:
    settings = ConsumerConfig.model_validate({"forwardClientCredentials": True})
    assert settings.forward_client_credentials
    names = [entry["filter"] for entry in filters(render(settings))]
    assert names == [
        "json_body_field",
        "grid_route",
        "grid_credential_inject",
        "credential_injection",
        "load_balancer",
    ]
    assert not ConsumerConfig().forward_client_credentials
