"""The ApiKey strategy from the resource to the overlay: the header an API key goes in
(``auth.header`` or its provider kind's default), the model's rules for it, the credential
the what-if renderer derives, the candidate the overlay carries, ``grid render`` then
``grid overlay verify``, and what the replicated provider records carry (never a header
nor token bytes)."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from grid.cli import main
from grid.crdt.records import ProviderMetrics, ProviderSpec
from grid.crdt.site_records import ProviderEntry
from grid.engine.candidates import RemoteSite, SelectorCache, remote_candidates
from grid.engine.records import provider_record
from grid.errors import InvalidResourceError, ResourceError, ScoringInputError
from grid.models.common import AuthStrategy, BackendKind, ProviderKind, ScoringConfig
from grid.models.provider import (
    DEFAULT_API_KEY_HEADERS,
    InferenceProvider,
    InferenceProviderPhase,
    api_key_header,
)
from grid.models.resources import load_resource, load_resources_from_dir
from grid.models.site import EgressTlsMode
from grid.render.consumer import ClusterEndpoint
from grid.render.overlay import (
    API_KEY_STRATEGY,
    BEARER_TOKEN_STRATEGY,
    CREDENTIAL_STRATEGY,
    candidate_document,
    credential_document,
)
from grid.render.validate import validate_overlay
from grid.render.whatif import build_what_if, header_refusal
from grid.scoring.inputs import (
    CandidateInput,
    ConsumingSite,
    CredentialStrategy,
    Geography,
    SecretRef,
)
from grid.scoring.ranking import rank_candidates

GOLDEN_MESH = Path(__file__).resolve().parent / "golden" / "mesh"
KEY_REF = {"name": "anthropic-key", "namespace": "grid-system", "key": "api-key"}
TOKEN = "sk-ant-api03-" + "s" * 40
NOW = datetime(2026, 9, 14, tzinfo=UTC)


# --- the header an API key goes in ---------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (ProviderKind.ANTHROPIC, "x-api-key"),
        (ProviderKind.VERTEX, "x-goog-api-key"),
        (ProviderKind.SELF_HOSTED, "x-api-key"),
        (ProviderKind.OPEN_AI, None),
        (ProviderKind.BEDROCK, None),
    ],
)
def test_an_api_key_goes_in_its_kinds_default_header(
    kind: ProviderKind, expected: str | None
) -> None:
    assert api_key_header(kind, AuthStrategy.API_KEY) == expected
    assert api_key_header(kind, AuthStrategy.API_KEY, None) == expected


def test_every_provider_kind_has_a_default() -> None:
    assert set(DEFAULT_API_KEY_HEADERS) == set(ProviderKind)


@pytest.mark.parametrize("kind", list(ProviderKind))
def test_an_explicit_header_wins_for_every_kind(kind: ProviderKind) -> None:
    assert api_key_header(kind, AuthStrategy.API_KEY, "api-key") == "api-key"


@pytest.mark.parametrize(
    "strategy", [s for s in AuthStrategy if s not in (AuthStrategy.API_KEY, AuthStrategy.CUSTOM)]
)
@pytest.mark.parametrize("kind", list(ProviderKind))
def test_only_api_key_and_custom_use_a_header(kind: ProviderKind, strategy: AuthStrategy) -> None:
    assert api_key_header(kind, strategy) is None
    assert api_key_header(kind, strategy, "x-key") is None


# --- the model --------------------------------------------------------------------------


def provider(
    name: str = "claude",
    kind: str = "anthropic",
    auth: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "InferenceProvider",
        "metadata": {"name": name},
        "spec": {
            "gridNetworkRef": "apikeys",
            "backendKind": "api_provider",
            "providerKind": kind,
            "models": [{"name": f"{name}-model"}],
            "endpoint": "https://api.anthropic.com/v1",
            **({"auth": auth} if auth is not None else {}),
            **spec,
        },
    }


def api_key_auth(**extra: Any) -> dict[str, Any]:
    return {"strategy": "ApiKey", "secretRef": dict(KEY_REF), **extra}


def problems(document: object) -> dict[str, str]:
    with pytest.raises(InvalidResourceError) as caught:
        load_resource(document)
    errors: list[ResourceError] = list(caught.value.errors)
    return {error.path: error.reason for error in errors}


def test_the_header_round_trips() -> None:
    loaded = load_resource(provider(auth=api_key_auth(header="X-Api-Key")))
    assert isinstance(loaded, InferenceProvider)
    assert loaded.spec.auth is not None and loaded.spec.auth.header == "X-Api-Key"
    wire = loaded.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert wire["spec"]["auth"] == api_key_auth(header="X-Api-Key")
    left_out = load_resource(provider(auth=api_key_auth()))
    assert isinstance(left_out, InferenceProvider)
    assert left_out.spec.auth is not None and left_out.spec.auth.header is None


@pytest.mark.parametrize(
    "auth",
    [
        {"strategy": "BearerToken", "secretRef": KEY_REF, "header": "x-api-key"},
        {"strategy": "Oauth2", "secretRef": KEY_REF, "header": "x-api-key"},
        {"strategy": "MtlsOnly", "header": "x-api-key"},
        {"strategy": "ServiceAccount", "header": "x-api-key"},
    ],
)
def test_a_header_goes_with_api_key_or_custom_only(auth: dict[str, Any]) -> None:
    reason = problems(provider(auth=auth))["spec.auth"]
    assert "header goes with strategy ApiKey or Custom only" in reason
    assert auth["strategy"] in reason


@pytest.mark.parametrize(
    ("header", "complaint"),
    [
        ("", "1 to 256 characters"),
        ("h" * 257, "1 to 256 characters"),
        ("x api key", "HTTP header name"),
        ("x-api-key:", "HTTP header name"),
        (":authority", "HTTP header name"),
        ("x-api-key\r\nInjected", "HTTP header name"),
        ("clé", "HTTP header name"),
        ("Authorization", "use strategy BearerToken"),
        ("authorization", "use strategy BearerToken"),
        ("Host", "the gateway sets it itself"),
        ("content-length", "must not be Content-Length"),
        ("Transfer-Encoding", "the gateway sets it itself"),
        ("CONNECTION", "must not be Connection"),
        ("Keep-Alive", "the gateway sets it itself"),
        ("Proxy-Authorization", "the gateway sets it itself"),
        ("TE", "the gateway sets it itself"),
        ("Trailer", "the gateway sets it itself"),
        ("Upgrade", "the gateway sets it itself"),
    ],
)
def test_a_header_the_key_cannot_go_in_is_refused(header: str, complaint: str) -> None:
    reason = problems(provider(auth=api_key_auth(header=header)))["spec.auth.header"]
    assert complaint in reason


def test_a_header_that_is_not_a_string_is_refused() -> None:
    assert "spec.auth.header" in problems(provider(auth=api_key_auth(header=7)))


@pytest.mark.parametrize("header", ["x-api-key", "X-Goog-Api-Key", "api-key", "h" * 256, "a.b_c~"])
def test_header_names_a_key_can_go_in(header: str) -> None:
    assert isinstance(load_resource(provider(auth=api_key_auth(header=header))), InferenceProvider)


def test_a_header_error_never_quotes_the_value() -> None:
    # Someone pasting the key itself into header (with a stray space) sees the rule only.
    for header in (TOKEN + " ", "Bearer " + TOKEN):
        document = provider(auth=api_key_auth(header=header))
        with pytest.raises(InvalidResourceError) as caught:
            load_resource(document)
        for text in (str(caught.value), repr(caught.value)):
            assert TOKEN not in text


# --- the scoring input ---------------------------------------------------------------------


def test_a_secret_ref_is_a_bearer_token_unless_told_otherwise() -> None:
    ref = SecretRef("openai-api-key", "grid-system", "token")
    assert ref.strategy is CredentialStrategy.BEARER_TOKEN and ref.header is None
    assert CREDENTIAL_STRATEGY == BEARER_TOKEN_STRATEGY == "bearer_token"
    assert API_KEY_STRATEGY == "apikey"


@pytest.mark.parametrize(
    ("strategy", "header", "complaint"),
    [
        (CredentialStrategy.BEARER_TOKEN, "x-api-key", "takes no header"),
        (CredentialStrategy.API_KEY, None, "needs the header"),
        (CredentialStrategy.API_KEY, "x api key", "HTTP header name"),
        (CredentialStrategy.API_KEY, "Authorization", "must not be Authorization"),
        ("apikey", "x-api-key", "must be a CredentialStrategy"),
    ],
)
def test_a_secret_ref_checks_its_strategy_and_header(
    strategy: Any, header: str | None, complaint: str
) -> None:
    with pytest.raises(ScoringInputError, match=complaint):
        SecretRef("anthropic-key", "grid-system", "api-key", strategy, header)


# --- what-if and the overlay -------------------------------------------------------------

MESH_PROVIDERS = [
    provider("claude", "anthropic", api_key_auth()),
    provider("gemini", "vertex", api_key_auth(), endpoint="https://aiplatform.googleapis.com"),
    provider("vllm", "self_hosted", api_key_auth(), endpoint="http://vllm.apikeys.svc:8000"),
    provider("openai", "open_ai", api_key_auth(), endpoint="https://api.openai.com/v1"),
    provider(
        "azure",
        "open_ai",
        api_key_auth(header="api-key"),
        endpoint="https://azure.openai.example/openai",
    ),
    provider("titan", "bedrock", api_key_auth(), endpoint="https://bedrock.example"),
    provider(
        "mistral",
        "self_hosted",
        {"strategy": "BearerToken", "secretRef": dict(KEY_REF)},
        endpoint="https://mistral.example",
    ),
]
NETWORK = {
    "apiVersion": "grid.praxis-proxy.io/v1alpha1",
    "kind": "GridNetwork",
    "metadata": {"name": "apikeys", "uid": "apikeys-uid", "generation": 1},
    "spec": {"gatewayRefs": [{"name": "edge-gateway", "namespace": "grid-system"}]},
}
SITE = {
    "apiVersion": "grid.praxis-proxy.io/v1alpha1",
    "kind": "GridSite",
    "metadata": {"name": "east", "labels": {"region": "us-east"}},
    "spec": {"gridNetworkRef": "apikeys", "region": "us-east", "zone": "us-east-1a"},
}


def write_mesh(directory: Path, providers: list[dict[str, Any]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "mesh.yaml").write_text(yaml.safe_dump_all([NETWORK, SITE, *providers]))
    return directory


def offers(directory: Path) -> tuple[dict[str, SecretRef | None], dict[str, str]]:
    """Each offered provider's credential, and why each other is not offered."""
    resources = load_resources_from_dir(directory)
    assert resources.errors == ()
    plan = build_what_if(resources, site="east", gateway="edge-gateway")
    credentials = {candidate.provider: candidate.credential for candidate in plan.candidates}
    return credentials, dict(plan.not_offered)


def test_a_key_the_gateway_would_send_in_a_header_of_its_own_is_not_offered(
    tmp_path: Path,
) -> None:
    """The Praxis AI gateway injects credentials as ``Authorization: Bearer`` only: an API
    key bound for another header is not offered to a gateway without ``apiKeyCredentials``
    (test_gateway_apikey_opt_in.py has it), with the reason, and the kinds that take API
    keys as bearer tokens stay routed."""
    offered, refused = offers(write_mesh(tmp_path, MESH_PROVIDERS))
    assert offered == {
        "openai": SecretRef(**KEY_REF),
        "titan": SecretRef(**KEY_REF),
        "mistral": SecretRef(**KEY_REF),
    }
    assert refused == {
        name: header_refusal(AuthStrategy.API_KEY, header)
        for name, header in [
            ("claude", "x-api-key"),
            ("gemini", "x-goog-api-key"),
            ("vllm", "x-api-key"),
            ("azure", "api-key"),
        ]
    }
    assert refused["claude"] == (
        "auth strategy ApiKey sends the key in header 'x-api-key', and the gateway injects "
        "credentials as 'Authorization: Bearer' only (its credential_inject filter has no "
        "header strategy, and an overlay naming one would be refused whole); for a gateway "
        "that accepts apikey credentials, set apiKeyCredentials: true on its gatewayRefs entry"
    )


def test_the_candidate_of_an_api_key_anthropic_provider() -> None:
    credential = SecretRef(**KEY_REF, strategy=CredentialStrategy.API_KEY, header="x-api-key")
    candidate = CandidateInput(
        provider="claude",
        model="claude-sonnet",
        site="east",
        cluster="claude",
        backend_kind=BackendKind.API_PROVIDER,
        site_bound=False,
        credential=credential,
    )
    ranking = rank_candidates(
        [candidate], ConsumingSite("east", Geography("us-east", "us-east-1a")), ScoringConfig(), NOW
    )
    document = candidate_document(ranking.candidates[0], 0)
    assert document["credential"] == {
        "strategy": "apikey",
        "secretRef": {"name": "anthropic-key", "namespace": "grid-system", "key": "api-key"},
        "header": "x-api-key",
    }
    assert list(document["credential"]) == ["strategy", "secretRef", "header"]
    assert type(document["credential"]["strategy"]) is str
    assert credential_document(SecretRef(**KEY_REF)) == {
        "strategy": "bearer_token",
        "secretRef": dict(KEY_REF),
    }


def test_grid_render_leaves_header_keys_out_and_overlay_verify_accepts_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mesh = write_mesh(tmp_path / "mesh", MESH_PROVIDERS)
    args = ["render", "--resources", str(mesh), "--site", "east", "--gateway", "edge-gateway"]
    assert main([*args, "--now", "2026-09-14T00:00:00Z"]) == 0
    text = capsys.readouterr().out
    document = json.loads(text)
    credentials = {
        candidate["cluster"]: candidate["credential"]
        for candidate in document["overlay"]["candidates"]
    }
    assert credentials == {
        name: {"strategy": "bearer_token", "secretRef": KEY_REF}
        for name in ("openai", "titan", "mistral")
    }
    overlay = tmp_path / "overlay.json"
    overlay.write_text(text)
    assert main(["overlay", "verify", str(overlay), "--local-site", "east"]) == 0
    assert capsys.readouterr().out == f"accept {document['revision']['value']}\n"
    assert str(validate_overlay(text)) == f"accept {document['revision']['value']}"


def test_the_golden_mesh_has_no_api_key_provider_so_its_overlays_do_not_move(
    tmp_path: Path,
) -> None:
    # The golden overlays (tests/golden) stay byte-identical: only bearer tokens there.
    mesh = tmp_path / "mesh"
    shutil.copytree(GOLDEN_MESH, mesh)
    resources = load_resources_from_dir(mesh)
    assert all(
        entry.spec.auth is None or entry.spec.auth.strategy is not AuthStrategy.API_KEY
        for entry in resources.providers
    )


# --- replicated records ----------------------------------------------------------------------


def test_a_replicated_record_carries_the_strategy_but_neither_header_nor_token() -> None:
    loaded = load_resource(provider(auth=api_key_auth(header="x-api-key")))
    assert isinstance(loaded, InferenceProvider)
    record = provider_record(loaded, InferenceProviderPhase.AVAILABLE, ProviderMetrics())
    wire = record.spec.to_wire()
    assert isinstance(wire, dict)
    assert wire["cred"] == {
        "strategy": "ApiKey",
        "name": "anthropic-key",
        "namespace": "grid-system",
        "key": "api-key",
    }
    assert ProviderSpec.from_wire(json.loads(json.dumps(wire)), "spec") == record.spec
    text = json.dumps(wire)
    assert "x-api-key" not in text and "header" not in text and TOKEN not in text


def test_remote_candidates_carry_no_credential() -> None:
    loaded = load_resource(provider(auth=api_key_auth()))
    assert isinstance(loaded, InferenceProvider)
    record = provider_record(loaded, InferenceProviderPhase.AVAILABLE, ProviderMetrics())
    site = RemoteSite(
        "west",
        Geography("us-west", "us-west-1a"),
        ClusterEndpoint(address="west.example:8443", tls_mode=EgressTlsMode.MUTUAL_TLS),
    )
    entry = ProviderEntry(site="west", record=record, updated_at=1.0, received_at=1.0)
    candidates, refused = remote_candidates(site, [entry], SelectorCache())
    assert refused == []
    assert [candidate.credential for candidate in candidates] == [None]
    assert candidates[0].cluster == "site-west"
