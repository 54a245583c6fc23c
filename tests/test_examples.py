"""The example mesh: every resource valid for its CRD (by an independent JSON Schema
implementation and by Grid's own validator) and for the models, malformed variants refused
by all of them, providers placed where the README says, and no key material anywhere."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from grid.errors import InvalidResourceError
from grid.models import (
    GridNetwork,
    GridSite,
    InferenceProvider,
    load_resource,
    load_resources_from_dir,
    select,
)
from grid.models.common import BackendKind, ProviderKind
from grid.models.selectors import selector_matches
from test_crds import grid_errors, oracle_errors

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MESH = EXAMPLES / "mesh"


def documents(directory: Path) -> list[dict[str, Any]]:
    found = []
    for path in sorted(directory.glob("*.yaml")):
        found.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return found


MESH_DOCUMENTS = documents(MESH)


def test_the_mesh_loads_completely() -> None:
    loaded = load_resources_from_dir(MESH)
    assert loaded.errors == ()
    assert loaded.skipped == ()
    assert [n.metadata.name for n in loaded.networks] == ["glb-demo"]
    sites = {s.metadata.name: s for s in loaded.sites}
    assert {name: (s.spec.region, s.spec.zone) for name, s in sites.items()} == {
        "east-edge": ("us-east", "us-east-1a"),
        "east-core": ("us-east", "us-east-1b"),
        "west-edge": ("us-west", "us-west-2a"),
    }
    kinds = {p.metadata.name: (p.spec.backend_kind, p.spec.provider_kind) for p in loaded.providers}
    assert kinds == {
        "llama-east-edge": (BackendKind.LOCAL, ProviderKind.SELF_HOSTED),
        "qwen-east-core": (BackendKind.LOCAL, ProviderKind.SELF_HOSTED),
        "llama-west-edge": (BackendKind.REMOTE, ProviderKind.SELF_HOSTED),
        "bedrock-claude": (BackendKind.CLOUD_MANAGED, ProviderKind.BEDROCK),
        "openai": (BackendKind.API_PROVIDER, ProviderKind.OPEN_AI),
    }
    assert all(s.spec.grid_network_ref == "glb-demo" for s in loaded.sites)
    assert all(p.spec.grid_network_ref == "glb-demo" for p in loaded.providers)


@pytest.mark.parametrize(
    "document", MESH_DOCUMENTS, ids=lambda d: f"{d['kind']}/{d['metadata']['name']}"
)
def test_each_example_is_valid_for_its_crd_and_the_models(document: dict[str, Any]) -> None:
    assert oracle_errors(document, document["kind"]) == []
    assert grid_errors(document, document["kind"]) == []
    assert isinstance(load_resource(document), GridNetwork | GridSite | InferenceProvider)


def test_providers_sit_where_the_readme_says() -> None:
    loaded = load_resources_from_dir(MESH)
    placement = {}
    for provider in loaded.providers:
        selector = provider.spec.site_selector
        sites = (
            [] if selector is None else select(selector, loaded.sites, lambda s: s.metadata.labels)
        )
        placement[provider.metadata.name] = [s.metadata.name for s in sites]
    assert placement == {
        "llama-east-edge": ["east-edge"],
        "qwen-east-core": ["east-core"],
        "llama-west-edge": ["west-edge"],
        "bedrock-claude": [],
        "openai": [],
    }


def test_access_policies() -> None:
    loaded = load_resources_from_dir(MESH)
    providers = {p.metadata.name: p for p in loaded.providers}
    allowed = {}
    for name in ("bedrock-claude", "openai"):
        policy = providers[name].spec.access_policy
        assert policy is not None
        allowed[name] = [
            s.metadata.name
            for s in loaded.sites
            if selector_matches(policy.site_selector, s.metadata.labels)
        ]
    assert allowed == {
        "bedrock-claude": ["east-edge", "east-core"],
        "openai": ["east-edge", "east-core", "west-edge"],
    }


def test_the_gateway_refs_cover_both_gateway_generations() -> None:
    (network,) = load_resources_from_dir(MESH).networks
    original, renamed = network.spec.gateway_refs
    assert (original.config_map_key, original.route_filter_name) == (
        "grid-config.json",
        "grid_route",
    )
    assert (renamed.config_map_key, renamed.route_filter_name, renamed.credential_filter_name) == (
        "routing-overlay.json",
        "intelligent_route",
        "credential_inject",
    )
    assert renamed.consumer_config is not None and renamed.consumer_config.enabled


def test_the_colon_fingerprint_is_normalised_and_rotation_has_two_pins() -> None:
    sites = {s.metadata.name: s for s in load_resources_from_dir(MESH).sites}
    assert sites["east-core"].spec.trust.cert_fingerprint == (
        "787e55ce7a9ca1ee7da8ef4273c5bba6f60bbd75d9c5423ca9eead9692e613a2"
    )
    assert sites["west-edge"].spec.trust.previous_cert_fingerprint is not None


def example(kind: str, name: str) -> dict[str, Any]:
    return copy.deepcopy(
        next(d for d in MESH_DOCUMENTS if d["kind"] == kind and d["metadata"]["name"] == name)
    )


def set_path(document: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    *parents, last = path.split(".")
    node: Any = document
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is REMOVE:
        del node[last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return document


REMOVE = object()

MALFORMED = [
    ("GridNetwork", "glb-demo", "spec.seeds.0", "east-edge.glb-demo.example"),
    ("GridNetwork", "glb-demo", "spec.seeds.1", "east-edge.glb-demo.example:7946"),
    ("GridNetwork", "glb-demo", "spec.swim.probeInterval", "5"),
    ("GridNetwork", "glb-demo", "spec.swim.gossipNodes", 0),
    ("GridNetwork", "glb-demo", "spec.swim.gossipNodes", "3"),
    ("GridNetwork", "glb-demo", "spec.swim.port", 70000),
    ("GridNetwork", "glb-demo", "spec.swim.probeIntervall", "5s"),
    ("GridNetwork", "glb-demo", "spec.staleCandidateTtlSeconds", 0),
    ("GridNetwork", "glb-demo", "spec.gatewayRefs.0.namespace", REMOVE),
    ("GridNetwork", "glb-demo", "spec.gatewayRefs.1.routeFilterName", "Intelligent-Route"),
    ("GridNetwork", "glb-demo", "spec.gatewayRefs.1.consumerConfig.listenerPort", 0),
    ("GridNetwork", "glb-demo", "spec.tls.swimKeyRef.key", REMOVE),
    ("GridNetwork", "glb-demo", "spec.tls.swimKeyRef.value", "c2VjcmV0"),
    ("GridNetwork", "glb-demo", "spec.budgets.0.cap", -5),
    ("GridNetwork", "glb-demo", "spec.budgets.0.window", "1 day"),
    ("GridNetwork", "glb-demo", "spec.scoring.weights", {"locality": -1}),
    ("GridNetwork", "glb-demo", "spec.scoring.admission", {"queueDepth": 1.5}),
    ("GridSite", "east-edge", "spec.egress.address", "east-edge.glb-demo.example"),
    ("GridSite", "east-edge", "spec.egress.address", "east-edge.glb-demo.example:0"),
    ("GridSite", "east-edge", "spec.egress.tlsMode", "mtls"),
    ("GridSite", "east-edge", "spec.trust.certFingerprint", "d8c4fc4a"),
    ("GridSite", "east-edge", "spec.trust.certFingerprint", "g" * 64),
    ("GridSite", "east-edge", "spec.gridNetworkRef", REMOVE),
    ("GridSite", "east-edge", "spec.sovereigntyZone", ""),
    ("GridSite", "east-edge", "spec.location", "nyc"),
    ("InferenceProvider", "openai", "spec.backendKind", "api"),
    ("InferenceProvider", "openai", "spec.providerKind", "openai"),
    ("InferenceProvider", "openai", "spec.models", []),
    ("InferenceProvider", "openai", "spec.models.0.contextWindow", 0),
    ("InferenceProvider", "openai", "spec.models.0.capabilities", ["chat", "chat"]),
    ("InferenceProvider", "openai", "spec.endpoint", "api.openai.com"),
    ("InferenceProvider", "openai", "spec.endpoint", "https://user:key@api.openai.com/v1"),
    ("InferenceProvider", "openai", "spec.endpoint", "https://api.openai.com/v1?api_key=x"),
    ("InferenceProvider", "openai", "spec.cost.inputPerMillion", 2.5),
    ("InferenceProvider", "openai", "spec.cost.inputPerMillion", "-1"),
    ("InferenceProvider", "openai", "spec.cost.outputPerMillion", REMOVE),
    ("InferenceProvider", "openai", "spec.auth.strategy", "Bearer"),
    ("InferenceProvider", "openai", "spec.auth.token", "sk-test"),
    ("InferenceProvider", "openai", "spec.auth.secretRef.name", REMOVE),
    (
        "InferenceProvider",
        "openai",
        "spec.accessPolicy.siteSelector.matchExpressions.0.operator",
        "Equals",
    ),
    ("InferenceProvider", "llama-east-edge", "spec.healthCheck.expectedStatus", 99),
    ("InferenceProvider", "llama-east-edge", "spec.healthCheck.interval", 10),
    ("InferenceProvider", "llama-east-edge", "spec.metricsConfig.onError", "ignore"),
    ("InferenceProvider", "llama-east-edge", "spec.metricsConfig.maxBodyBytes", 10),
    (
        "InferenceProvider",
        "llama-east-edge",
        "spec.metricsConfig.signals.queueDepth.metric",
        "queue depth",
    ),
    ("InferenceProvider", "llama-east-edge", "spec.metricsConfig.signals.p99LatencyMs.quantile", 1),
    ("InferenceProvider", "llama-east-edge", "spec.siteSelector.matchLabels", {"a": "-bad"}),
]


@pytest.mark.parametrize(("kind", "name", "path", "value"), MALFORMED, ids=lambda v: str(v)[:40])
def test_malformed_examples_are_rejected_by_the_crd_and_the_models(
    kind: str, name: str, path: str, value: Any
) -> None:
    document = set_path(example(kind, name), path, value)
    assert oracle_errors(document, kind), "the CRD schema (jsonschema) accepted it"
    assert grid_errors(document, kind), "the CRD schema (Grid's validator) accepted it"
    with pytest.raises(InvalidResourceError):
        load_resource(document)


# Rules the API server applies beyond JSON Schema (object names, unique keys of list-maps):
# Grid's validator and the models refuse these; plain JSON Schema cannot express them.
SERVER_RULES = [
    ("GridNetwork", "glb-demo", "metadata.name", "GLB Demo"),
    ("GridNetwork", "glb-demo", "spec.gatewayRefs.1.name", "glb-demo-edge-gateway"),
    ("GridNetwork", "glb-demo", "spec.budgets.1.tenant", "acme"),
    ("InferenceProvider", "openai", "spec.models.1.name", "gpt-4o"),
]


@pytest.mark.parametrize(("kind", "name", "path", "value"), SERVER_RULES, ids=lambda v: str(v)[:40])
def test_server_side_rules_are_enforced_by_grid_and_the_models(
    kind: str, name: str, path: str, value: Any
) -> None:
    document = set_path(example(kind, name), path, value)
    assert grid_errors(document, kind), "Grid's validator accepted it"
    with pytest.raises(InvalidResourceError):
        load_resource(document)


# Cross-field rules a structural schema cannot express: the models alone refuse these, and
# the operator reports them through the same condition as schema violations.
MODEL_ONLY = [
    ("GridNetwork", "glb-demo", "spec.swim.suspicionTimeout", "1s"),
    ("GridNetwork", "glb-demo", "spec.swim.probeInterval", "10m"),
    (
        "GridSite",
        "west-edge",
        "spec.trust.previousCertFingerprint",
        "90be4ee91e0f7ada0235879634a78449fae88d3fdc72ce6db36ea0e228a0f60a",
    ),
    ("InferenceProvider", "openai", "spec.auth.secretRef", REMOVE),
    ("InferenceProvider", "llama-east-edge", "spec.healthCheck.timeout", "10s"),
    ("InferenceProvider", "llama-east-edge", "spec.metricsConfig.url", "http://x.example/metrics"),
]


@pytest.mark.parametrize(("kind", "name", "path", "value"), MODEL_ONLY, ids=lambda v: str(v)[:40])
def test_cross_field_rules_are_enforced_by_the_models(
    kind: str, name: str, path: str, value: Any
) -> None:
    document = set_path(example(kind, name), path, value)
    assert grid_errors(document, kind) == []
    with pytest.raises(InvalidResourceError):
        load_resource(document)


SECRETS = documents(EXAMPLES / "secrets")


def test_secret_examples_hold_no_key_material() -> None:
    assert {s["metadata"]["name"] for s in SECRETS} == {
        "glb-demo-swim-key",
        "glb-demo-ca",
        "glb-demo-site-tls",
        "glb-demo-ca-signing",
        "openai-api-key",
    }
    for secret in SECRETS:
        assert (secret["apiVersion"], secret["kind"]) == ("v1", "Secret")
        assert set(secret) <= {"apiVersion", "kind", "metadata", "type", "data"}
        assert all(value == "" for value in secret["data"].values())


def test_secret_examples_say_how_to_make_the_real_ones() -> None:
    for name in ("swim-key.yaml", "ca.yaml", "site-tls.yaml", "ca-signing.yaml"):
        assert "grid secrets" in (EXAMPLES / "secrets" / name).read_text(), name
    swim = (EXAMPLES / "secrets" / "swim-key.yaml").read_text()
    assert (
        "grid secrets --network glb-demo --namespace grid-system --site east-edge "
        "| kubectl apply -f -"
    ) in swim
    openai = (EXAMPLES / "secrets" / "openai-api-key.yaml").read_text()
    assert "kubectl -n grid-system create secret generic openai-api-key" in openai


def mesh_secret_references() -> set[tuple[str, str, str]]:
    """(namespace, name, data key) of every Secret entry the mesh refers to."""
    loaded = load_resources_from_dir(MESH)
    (network,) = loaded.networks
    tls = network.spec.tls
    assert tls is not None
    assert tls.swim_key_ref and tls.ca_secret_ref and tls.site_cert_secret_ref
    site = tls.site_cert_secret_ref
    references = {
        (ref.namespace, ref.name, ref.key) for ref in (tls.swim_key_ref, tls.ca_secret_ref)
    }
    references |= {(site.namespace, site.name, key) for key in ("tls.crt", "tls.key")}
    for provider in loaded.providers:
        auth = provider.spec.auth
        if auth is not None and auth.secret_ref is not None:
            ref = auth.secret_ref
            references.add((ref.namespace, ref.name, ref.key))
    return references


def test_secret_references_in_the_mesh_match_the_secret_examples() -> None:
    examples = {
        (s["metadata"]["namespace"], s["metadata"]["name"], key)
        for s in SECRETS
        for key in s["data"]
    }
    references = mesh_secret_references()
    assert references <= examples
    # The one Secret nothing refers to holds the CA key, in a namespace of its own.
    assert examples - references == {
        ("grid-ca", "glb-demo-ca-signing", key) for key in ("ca.crt", "ca.key", "swim.key")
    }
    types = {s["metadata"]["name"]: s.get("type") for s in SECRETS}
    assert types["glb-demo-site-tls"] == "kubernetes.io/tls"


def test_no_example_contains_something_shaped_like_a_credential() -> None:
    credential = re.compile(r"sk-[A-Za-z0-9]{16,}|AKIA[0-9A-Z]{16}|-----BEGIN [A-Z ]*PRIVATE KEY")
    for path in EXAMPLES.rglob("*"):
        if path.is_file():
            assert not credential.search(path.read_text()), path
