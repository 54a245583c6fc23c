"""The three resources: what they accept, their defaults, and the messages for what they
refuse."""

from __future__ import annotations

import copy
import random
import secrets
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from grid.errors import InvalidResourceError, ResourceError
from grid.models import (
    AUTO_DISCOVER_LABEL,
    GridNetwork,
    GridSite,
    InferenceProvider,
    dump_resource,
    generate_grid_id,
    load_resource,
    resolve_grid_id,
)
from grid.models.common import AuthStrategy, BackendKind, ProviderKind
from grid.models.network import GridNetworkStatus
from grid.models.site import EgressTlsMode, TrustPin

FINGERPRINT = "d8c4fc4a8252de2c918fe9da3b3de03777c25f59d4657a8f1059c15282129162"
OLD_FINGERPRINT = "c749ff786e47337149a553f0b6afe341bd3c271b66a9c69e2b4be96fa612f1f0"
TOKEN = "sk-live-DO-NOT-LEAK-0123456789abcdef"


def network(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "GridNetwork",
        "metadata": {"name": "glb-demo"},
        "spec": spec,
    }


def site(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "GridSite",
        "metadata": {"name": "east-edge"},
        "spec": {"gridNetworkRef": "glb-demo", **spec},
    }


def provider(**spec: Any) -> dict[str, Any]:
    base = {
        "gridNetworkRef": "glb-demo",
        "backendKind": "local",
        "providerKind": "self_hosted",
        "models": [{"name": "meta-llama/Llama-3.1-8B-Instruct"}],
        "endpoint": "http://vllm.inference.svc:8000",
    }
    return {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "InferenceProvider",
        "metadata": {"name": "llama"},
        "spec": {**base, **spec},
    }


def problems(document: object) -> list[ResourceError]:
    with pytest.raises(InvalidResourceError) as caught:
        load_resource(document)
    return list(caught.value.errors)


def problem_at(document: object, path: str) -> str:
    found = {error.path: error.reason for error in problems(document)}
    assert path in found, f"no problem at {path}: {found}"
    return found[path]


# --- GridNetwork ---------------------------------------------------------------------------


def test_a_minimal_network_gets_the_spec_defaults() -> None:
    loaded = load_resource(network())
    assert isinstance(loaded, GridNetwork)
    spec = loaded.spec
    assert spec.grid_id is None
    assert spec.swim.gossip_nodes == 3
    assert spec.swim.probe_interval.seconds == 5
    assert spec.swim.suspicion_timeout.seconds == 10
    assert spec.swim.port == 7946
    assert spec.scoring.weights.locality == 3.0
    assert spec.stale_candidate_ttl_seconds == 300
    assert spec.seeds == [] and spec.gateway_refs == [] and spec.budgets == []


def test_network_fields_round_trip() -> None:
    document = network(
        gridId="2f1e4c1a-0d4e-4b7a-9d52-6c1f2b3a4d5e",
        seeds=["east-edge.glb-demo.example:7946", "[fd00::7]:7946"],
        region="us-east",
        zone="us-east-1a",
        swim={"gossipNodes": 4, "probeInterval": "500ms", "suspicionTimeout": "2s", "port": 17946},
        tls={
            "caSecretRef": {"name": "ca", "namespace": "grid-system", "key": "ca.crt"},
            "siteCertSecretRef": {"name": "site-tls", "namespace": "grid-system"},
            "swimKeyRef": {"name": "swim", "namespace": "grid-system", "key": "swim.key"},
        },
        staleCandidateTtlSeconds=60,
        scoring={"weights": {"locality": 5}, "admission": {"queueDepth": 0.7}},
        budgets=[{"tenant": "acme", "cap": 1000, "window": "24h", "unit": "tokens"}],
    )
    loaded = load_resource(document)
    assert isinstance(loaded, GridNetwork)
    assert loaded.spec.swim.probe_interval.seconds == 0.5
    assert loaded.spec.budgets[0].window.seconds == 86400
    again = load_resource(dump_resource(loaded))
    assert again == loaded
    assert dump_resource(again)["spec"]["swim"]["probeInterval"] == "500ms"


def test_gateway_refs_default_to_the_original_names_and_accept_the_renamed_ones() -> None:
    loaded = load_resource(
        network(
            gatewayRefs=[
                {"name": "edge", "namespace": "grid-system"},
                {
                    "name": "next",
                    "namespace": "grid-system",
                    "configMapKey": "routing-overlay.json",
                    "routeFilterName": "intelligent_route",
                    "credentialFilterName": "credential_inject",
                    "consumerConfig": {"enabled": True},
                },
            ]
        )
    )
    assert isinstance(loaded, GridNetwork)
    edge, renamed = loaded.spec.gateway_refs
    assert (edge.config_map_key, edge.route_filter_name, edge.credential_filter_name) == (
        "grid-config.json",
        "grid_route",
        "grid_credential_inject",
    )
    assert edge.overlay_config_map == "edge-grid-config"
    assert edge.consumer_config is None
    assert (renamed.config_map_key, renamed.route_filter_name) == (
        "routing-overlay.json",
        "intelligent_route",
    )
    consumer = renamed.consumer_config
    assert consumer is not None
    assert (consumer.enabled, consumer.listener_port, consumer.admin_address) == (
        True,
        8080,
        "127.0.0.1:9901",
    )
    assert renamed.consumer_config_map == "next-praxis"


@pytest.mark.parametrize(
    ("spec", "path", "complaint"),
    [
        ({"seeds": ["east-edge"]}, "spec.seeds[0]", "host:port"),
        ({"seeds": ["a:1", "a:1"]}, "spec.seeds", "repeats an earlier item"),
        ({"swim": {"gossipNodes": 0}}, "spec.swim.gossipNodes", "greater than or equal to 1"),
        ({"swim": {"probeInterval": "5"}}, "spec.swim.probeInterval", "unit ms, s, m or h"),
        ({"swim": {"probeInterval": "10m"}}, "spec.swim.probeInterval", "between 100ms and 5m"),
        (
            {"swim": {"probeInterval": "20s", "suspicionTimeout": "10s"}},
            "spec.swim",
            "suspicionTimeout must be at least probeInterval",
        ),
        ({"swim": {"port": 70000}}, "spec.swim.port", "less than or equal to 65535"),
        ({"staleCandidateTtlSeconds": 0}, "spec.staleCandidateTtlSeconds", "greater than"),
        ({"gridId": "Not A Label"}, "spec.gridId", "DNS label"),
        ({"region": ""}, "spec.region", "label value"),
        (
            {"gatewayRefs": [{"name": "a", "namespace": "x"}, {"name": "a", "namespace": "x"}]},
            "spec.gatewayRefs",
            "same namespace/name",
        ),
        ({"gatewayRefs": [{"name": "a"}]}, "spec.gatewayRefs[0].namespace", "required field"),
        (
            {"gatewayRefs": [{"name": "a", "namespace": "x", "routeFilterName": "Route-Me"}]},
            "spec.gatewayRefs[0].routeFilterName",
            "should match pattern",
        ),
        (
            {"budgets": [{"tenant": "acme", "cap": -1, "window": "24h"}]},
            "spec.budgets[0].cap",
            "greater than or equal to 0",
        ),
        (
            {"budgets": [{"tenant": "acme", "cap": 1, "window": "5s"}]},
            "spec.budgets[0].window",
            "between 1m and",
        ),
        (
            {"scoring": {"weights": {"locality": -1}}},
            "spec.scoring.weights.locality",
            "greater than or equal to 0",
        ),
        (
            {"tls": {"swimKeyRef": {"name": "swim", "namespace": "grid-system"}}},
            "spec.tls.swimKeyRef.key",
            "required field",
        ),
    ],
)
def test_network_problems_name_the_field_and_the_fix(
    spec: dict[str, Any], path: str, complaint: str
) -> None:
    reason = problem_at(network(**spec), path)
    assert complaint.lower() in reason.lower()


def test_grid_ids_come_from_the_injected_rng_and_are_kept() -> None:
    first = generate_grid_id(random.Random(7))
    assert first == generate_grid_id(random.Random(7))
    assert first != generate_grid_id(random.Random(8))
    assert uuid.UUID(first).version == 4
    # A system RNG works too and yields a valid id for the spec field.
    fresh = generate_grid_id(secrets.SystemRandom())
    assert isinstance(load_resource(network(gridId=fresh)), GridNetwork)

    unset = load_resource(network())
    assert isinstance(unset, GridNetwork)
    assert resolve_grid_id(unset, random.Random(7)) == first
    recorded = unset.model_copy(update={"status": GridNetworkStatus(grid_id="kept-id")})
    assert resolve_grid_id(recorded, random.Random(7)) == "kept-id"
    pinned = load_resource(network(gridId="from-spec"))
    assert isinstance(pinned, GridNetwork)
    assert resolve_grid_id(pinned, random.Random(7)) == "from-spec"


# --- GridSite ------------------------------------------------------------------------------


def test_a_site_with_egress_and_two_pins() -> None:
    colon = ":".join(FINGERPRINT[i : i + 2] for i in range(0, 64, 2)).upper()
    loaded = load_resource(
        site(
            egress={"address": "east-edge.example:8443"},
            region="us-east",
            zone="us-east-1a",
            sovereigntyZone="us",
            trust={"certFingerprint": colon, "previousCertFingerprint": OLD_FINGERPRINT},
        )
    )
    assert isinstance(loaded, GridSite)
    assert loaded.spec.egress is not None
    assert loaded.spec.egress.tls_mode is EgressTlsMode.MUTUAL_TLS
    trust = loaded.spec.trust
    assert trust.cert_fingerprint == FINGERPRINT  # normalised from the colon form
    assert trust.match(FINGERPRINT.upper()) is TrustPin.CURRENT
    assert trust.match(OLD_FINGERPRINT) is TrustPin.PREVIOUS
    assert trust.match("00" * 32) is None
    assert trust.match(None) is None
    assert trust.match("not a fingerprint") is None
    assert not loaded.auto_discover


def test_the_auto_discover_label() -> None:
    document = site()
    document["metadata"]["labels"] = {AUTO_DISCOVER_LABEL: "true"}
    loaded = load_resource(document)
    assert isinstance(loaded, GridSite)
    assert loaded.auto_discover
    assert AUTO_DISCOVER_LABEL == "grid.praxis-proxy.io/auto-discover"


@pytest.mark.parametrize(
    ("spec", "path", "complaint"),
    [
        ({"trust": {"certFingerprint": "abc"}}, "spec.trust.certFingerprint", "64 hex digits"),
        (
            {"trust": {"previousCertFingerprint": OLD_FINGERPRINT}},
            "spec.trust",
            "needs certFingerprint",
        ),
        (
            {"trust": {"certFingerprint": FINGERPRINT, "previousCertFingerprint": FINGERPRINT}},
            "spec.trust",
            "equals certFingerprint",
        ),
        ({"egress": {"address": "east-edge"}}, "spec.egress.address", "host:port"),
        (
            {"egress": {"address": "a:1", "tlsMode": "mtls"}},
            "spec.egress.tlsMode",
            "'mutual_tls', 'tls' or 'plaintext'",
        ),
        ({"gridNetworkRef": "Glb_Demo"}, "spec.gridNetworkRef", "DNS subdomain"),
    ],
)
def test_site_problems(spec: dict[str, Any], path: str, complaint: str) -> None:
    assert complaint in problem_at(site(**spec), path)


def test_a_site_needs_its_network() -> None:
    document = site()
    del document["spec"]["gridNetworkRef"]
    assert problem_at(document, "spec.gridNetworkRef") == "required field is missing"


# --- InferenceProvider ---------------------------------------------------------------------


def test_a_full_provider() -> None:
    loaded = load_resource(
        provider(
            backendKind="api_provider",
            providerKind="open_ai",
            models=[{"name": "gpt-4o", "capabilities": ["chat", "tools"], "contextWindow": 128000}],
            endpoint="https://api.openai.com/v1",
            cluster="openai-upstream",
            cost={"inputPerMillion": "2.50", "outputPerMillion": 10},
            healthCheck={"path": "/health", "interval": "30s", "timeout": "5s"},
            auth={
                "strategy": "BearerToken",
                "secretRef": {"name": "openai", "namespace": "grid-system", "key": "token"},
            },
            accessPolicy={"siteSelector": {"matchLabels": {"tier": "edge"}}},
            metricsConfig={
                "url": "https://metrics.example/metrics",
                "signals": {"queueDepth": {"metric": "queue_depth"}},
                "onError": "pessimistic",
            },
        )
    )
    assert isinstance(loaded, InferenceProvider)
    spec = loaded.spec
    assert spec.backend_kind is BackendKind.API_PROVIDER
    assert spec.provider_kind is ProviderKind.OPEN_AI
    assert spec.auth is not None and spec.auth.strategy is AuthStrategy.BEARER_TOKEN
    assert spec.cost is not None and str(spec.cost.input_per_million) == "2.50"
    assert spec.health_check is not None and spec.health_check.healthy_threshold == 2
    assert loaded.cluster == "openai-upstream"
    assert load_resource(dump_resource(loaded)) == loaded


def test_the_cluster_defaults_to_the_provider_name() -> None:
    loaded = load_resource(provider())
    assert isinstance(loaded, InferenceProvider)
    assert loaded.cluster == "llama"


@pytest.mark.parametrize(
    ("spec", "path", "complaint"),
    [
        ({"backendKind": "onprem"}, "spec.backendKind", "'local', 'remote', 'cloud_managed'"),
        ({"providerKind": "openai"}, "spec.providerKind", "'open_ai'"),
        ({"models": []}, "spec.models", "at least 1 item"),
        ({"models": [{"name": "a"}, {"name": "a"}]}, "spec.models", "same name"),
        ({"models": [{"name": "has space"}]}, "spec.models[0].name", "should match pattern"),
        ({"models": [{"name": "é" * 200}]}, "spec.models[0].name", "256 bytes"),
        (
            {"models": [{"name": "m", "capabilities": ["chat", "chat"]}]},
            "spec.models[0].capabilities",
            "repeats",
        ),
        (
            {"models": [{"name": "m", "contextWindow": 0}]},
            "spec.models[0].contextWindow",
            "greater than or equal to 1",
        ),
        ({"endpoint": "ftp://x.example"}, "spec.endpoint", "http:// or https://"),
        ({"endpoint": "https://user:pw@x.example"}, "spec.endpoint", "auth.secretRef"),
        ({"endpoint": "https://x.example/v1?key=abc"}, "spec.endpoint", "query string"),
        ({"endpoint": "https://x.example:99999"}, "spec.endpoint", "port must be"),
        (
            {"cost": {"inputPerMillion": 0.5, "outputPerMillion": 1}},
            "spec.cost.inputPerMillion",
            "quoted decimal string",
        ),
        ({"cost": {"inputPerMillion": 1}}, "spec.cost.outputPerMillion", "required field"),
        ({"auth": {"strategy": "BearerToken"}}, "spec.auth", "needs secretRef"),
        ({"auth": {"strategy": "Token"}}, "spec.auth.strategy", "'ApiKey', 'BearerToken'"),
        (
            {"healthCheck": {"interval": "2s", "timeout": "2s"}},
            "spec.healthCheck",
            "timeout must be shorter than interval",
        ),
        (
            {"healthCheck": {"expectedStatus": 700}},
            "spec.healthCheck.expectedStatus",
            "less than or equal to 599",
        ),
        (
            {"metricsConfig": {"signals": {"health": {"metric": "up"}}}},
            "spec.metricsConfig",
            "either url, or port",
        ),
        (
            {"metricsConfig": {"port": 8000, "signals": {}}},
            "spec.metricsConfig.signals",
            "map at least one of",
        ),
        (
            {"metricsConfig": {"port": 8000, "signals": {"queueDepth": {"metric": "9bad"}}}},
            "spec.metricsConfig.signals.queueDepth.metric",
            "should match pattern",
        ),
        (
            {
                "metricsConfig": {
                    "port": 8000,
                    "signals": {"health": {"metric": "up", "labels": {"bad-label": "x"}}},
                }
            },
            "spec.metricsConfig.signals.health.labels",
            "Prometheus label names",
        ),
        (
            {
                "metricsConfig": {
                    "port": 8000,
                    "onError": "ignore",
                    "signals": {"health": {"metric": "up"}},
                }
            },
            "spec.metricsConfig.onError",
            "'neutral' or 'pessimistic'",
        ),
        (
            {
                "accessPolicy": {
                    "siteSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}
                }
            },
            "spec.accessPolicy.siteSelector.matchExpressions[0]",
            "needs at least one value",
        ),
    ],
)
def test_provider_problems(spec: dict[str, Any], path: str, complaint: str) -> None:
    assert complaint in problem_at(provider(**spec), path)


@pytest.mark.parametrize("strategy", ["MtlsOnly", "ServiceAccount"])
def test_strategies_without_a_secret(strategy: str) -> None:
    loaded = load_resource(provider(auth={"strategy": strategy}))
    assert isinstance(loaded, InferenceProvider)


def test_no_field_can_hold_a_token_and_errors_never_echo_one() -> None:
    document = provider(
        auth={
            "strategy": "BearerToken",
            "token": TOKEN,
            "secretRef": {"name": "s", "namespace": "n", "key": "k", "value": TOKEN},
        },
        apiKey=TOKEN,
    )
    found = problems(document)
    paths = {error.path for error in found}
    assert paths == {"spec.auth.token", "spec.auth.secretRef.value", "spec.apiKey"}
    with pytest.raises(InvalidResourceError) as caught:
        load_resource(document)
    for text in [str(caught.value), repr(caught.value), *map(str, found), *map(repr, found)]:
        assert TOKEN not in text


def test_rejected_values_are_never_quoted() -> None:
    secretish = "sk-" + "x" * 40
    document = provider(endpoint=f"https://{secretish}@api.example", cluster=secretish + "!")
    for error in problems(document):
        assert secretish not in str(error)


# --- what every document gets --------------------------------------------------------------


@pytest.mark.parametrize(
    ("document", "path", "complaint"),
    [
        ([], "", "expected a mapping"),
        ({"apiVersion": "grid.praxis-proxy.io/v1alpha1"}, "kind", "required field is missing"),
        ({"kind": "Gateway", "apiVersion": "grid.praxis-proxy.io/v1alpha1"}, "kind", "one of"),
        ({"kind": "GridSite"}, "apiVersion", "required field is missing"),
        (
            {"kind": "GridSite", "apiVersion": "grid.praxis-proxy.io/v1"},
            "apiVersion",
            "must be grid.praxis-proxy.io/v1alpha1",
        ),
    ],
)
def test_kind_and_version_are_checked_first(document: object, path: str, complaint: str) -> None:
    (error,) = problems(document)
    assert error.path == path
    assert complaint in error.reason


def test_metadata_is_lenient_but_the_name_and_labels_are_checked() -> None:
    document = site()
    document["metadata"].update(
        {
            "uid": "1234",
            "generation": 3,
            "resourceVersion": "99",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": ["grid.praxis-proxy.io/cleanup"],
            "labels": {"topology.kubernetes.io/region": "us-east"},
        }
    )
    loaded = load_resource(document)
    assert isinstance(loaded, GridSite)
    assert loaded.metadata.generation == 3
    assert dump_resource(loaded)["metadata"]["finalizers"] == ["grid.praxis-proxy.io/cleanup"]

    bad = copy.deepcopy(document)
    bad["metadata"]["name"] = "East_Edge"
    assert "DNS subdomain" in problem_at(bad, "metadata.name")
    bad = copy.deepcopy(document)
    bad["metadata"]["labels"] = {"bad key!": "x"}
    assert "label key name" in problem_at(bad, "metadata.labels")
    bad = copy.deepcopy(document)
    bad["metadata"]["labels"] = {"ok": "-bad"}
    assert "label value" in problem_at(bad, "metadata.labels")
    missing = site()
    del missing["metadata"]["name"]
    assert problem_at(missing, "metadata.name") == "required field is missing"


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"swim": {"gossipNodes": "3"}}, "spec.swim.gossipNodes"),
        ({"swim": {"port": 7946.0}}, "spec.swim.port"),
        ({"gridId": 12}, "spec.gridId"),
        (
            {
                "gatewayRefs": [
                    {"name": "a", "namespace": "b", "consumerConfig": {"enabled": "yes"}}
                ]
            },
            "spec.gatewayRefs[0].consumerConfig.enabled",
        ),
    ],
)
def test_validation_is_as_strict_as_the_api_server(spec: dict[str, Any], path: str) -> None:
    problem_at(network(**spec), path)


def test_unknown_fields_suggest_the_right_name() -> None:
    reason = problem_at(network(swim={"probeIntervall": "5s"}), "spec.swim.probeIntervall")
    assert reason == "unknown field (did you mean probeInterval?)"
    reason = problem_at(network(zzz=1), "spec.zzz")
    assert reason.startswith("unknown field; expected one of: gridId, seeds, gatewayRefs")
    reason = problem_at(
        network(gatewayRefs=[{"name": "a", "namespace": "b", "filter": "x"}]),
        "spec.gatewayRefs[0].filter",
    )
    assert reason.startswith("unknown field")


def test_every_problem_of_a_document_is_reported_at_once() -> None:
    found = problems(site(egress={"address": "nope"}, trust={"certFingerprint": "x"}, extra=1))
    assert {error.path for error in found} == {
        "spec.egress.address",
        "spec.trust.certFingerprint",
        "spec.extra",
    }
    assert all(error.kind == "GridSite" and error.name == "east-edge" for error in found)
    assert str(found[0]).startswith("GridSite east-edge: spec.")


def test_non_json_values_are_refused_clearly() -> None:
    document = network()
    document["spec"]["region"] = object()
    (error,) = problems(document)
    assert "not JSON" in error.reason


class _ClientBody(Mapping[str, Any]):
    """A read-only mapping such as Kubernetes clients hand to handlers."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        value = self._data[key]
        return _ClientBody(value) if isinstance(value, dict) else value

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


def test_documents_from_client_mapping_types_load() -> None:
    body = _ClientBody(site(egress={"address": "a.example:1"}))
    loaded = load_resource(body)
    assert isinstance(loaded, GridSite)
    assert loaded.spec.egress is not None and loaded.spec.egress.address == "a.example:1"


@pytest.mark.parametrize("kind", [["GridSite"], {"a": 1}, 7])
def test_a_kind_that_is_not_a_string_is_an_error_not_a_crash(kind: object) -> None:
    document = site()
    document["kind"] = kind
    (error,) = problems(document)
    assert error.path == "kind" and "must be one of" in error.reason


def test_metric_aggregation_defaults_per_signal_and_the_schema_says_so() -> None:
    """Unset, a selector's aggregation is each signal's own (a queue sums, a utilization
    takes the maximum): the model holds None and the CRD schema advertises no default."""
    from grid.engine.targets import signal_mapping
    from grid.models.crd import crd_for_kind
    from grid.models.provider import SignalMapping
    from grid.observe.signals import Aggregate

    mapping = SignalMapping.model_validate(
        {
            "queueDepth": {"metric": "q"},
            "kvCacheUtilization": {"metric": "kv", "aggregation": "min"},
        }
    )
    assert mapping.queue_depth is not None and mapping.queue_depth.aggregation is None
    extracted = signal_mapping(mapping)
    assert extracted.queue_depth is not None and extracted.queue_depth.aggregate is None
    assert extracted.kv_cache_utilization is not None
    assert extracted.kv_cache_utilization.aggregate is Aggregate.MIN

    schema = crd_for_kind("InferenceProvider")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    signals = schema["properties"]["spec"]["properties"]["metricsConfig"]["properties"]["signals"]
    for selector in signals["properties"].values():
        assert "default" not in selector["properties"]["aggregation"]


def test_metric_aggregation_with_a_histogram_quantile_is_refused() -> None:
    from pydantic import ValidationError

    from grid.models.provider import MetricSelector

    with pytest.raises(ValidationError, match="buckets always sum"):
        MetricSelector.model_validate({"metric": "lat", "quantile": 0.99, "aggregation": "max"})
    assert MetricSelector.model_validate({"metric": "lat", "quantile": 0.99}).aggregation is None


def test_revoked_certificates_are_fingerprints_stored_normalised_and_each_once() -> None:
    colons = ":".join(FINGERPRINT[i : i + 2] for i in range(0, 64, 2)).upper()
    loaded = load_resource(network(tls={"revokedCertificates": [colons, OLD_FINGERPRINT]}))
    assert isinstance(loaded, GridNetwork)
    assert loaded.spec.tls is not None
    assert loaded.spec.tls.revoked_certificates == [FINGERPRINT, OLD_FINGERPRINT]
    with pytest.raises(InvalidResourceError, match="SHA-256 certificate fingerprint"):
        load_resource(network(tls={"revokedCertificates": ["site-c"]}))
    with pytest.raises(InvalidResourceError, match="repeats an earlier item"):
        load_resource(network(tls={"revokedCertificates": [colons, FINGERPRINT]}))
