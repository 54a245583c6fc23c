"""``apiKeyCredentials`` on a gatewayRefs entry: a gateway that accepts the overlay
contract's ``apikey`` credential strategy is offered ApiKey providers whose key goes in a
header of its own and Custom providers, rendered as the contract's fixtures spell them; a
gateway without it (the default, as the Praxis AI gateway at 9f6e8386) is not, with the
reason and the field to set. The engine ranks each kind of gateway on its own."""

from __future__ import annotations

import copy
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from grid.engine.candidates import LocalView
from grid.engine.inputs import SiteInputs
from grid.engine.rendering import Renderer
from grid.models.common import AuthStrategy
from grid.models.network import GridNetwork
from grid.models.provider import InferenceProvider
from grid.models.resources import load_resource, load_resources_from_dir
from grid.render.consumer import consumer_config
from grid.render.overlay import render_overlay
from grid.render.validate import validate_overlay
from grid.render.whatif import API_KEY_OPT_IN, WhatIf, build_what_if, header_refusal
from grid.scoring.inputs import CredentialStrategy, SecretRef
from grid.scoring.ranking import rank_candidates
from support.gateway_model import GatewayModel
from test_engine import LLAMA, SITES, T0, network
from test_engine import provider as engine_provider
from test_engine_rooms_rendering import EDGE, INNER, render, routes
from test_overlay_contract import sealed
from test_provider_apikey import (
    KEY_REF,
    MESH_PROVIDERS,
    NETWORK,
    SITE,
    api_key_auth,
    problems,
    provider,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "overlay-contract-v1-credentials"
NOW = "2026-09-14T00:00:00Z"
LEGACY_REF = {"name": "legacy-key", "namespace": "grid-system", "key": "token"}
CUSTOM = provider(
    "legacy",
    "self_hosted",
    {"strategy": "Custom", "secretRef": dict(LEGACY_REF), "header": "X-Auth"},
    endpoint="https://legacy.example",
)
HEADER_KEYS = {"claude": "x-api-key", "gemini": "x-goog-api-key", "vllm": "x-api-key"}
HEADER_KEYS |= {"azure": "api-key"}


def opted_in(value: bool | None = True, **gateway: Any) -> dict[str, Any]:
    """The test network with ``apiKeyCredentials`` set to ``value`` (left out for None)."""
    document = copy.deepcopy(NETWORK)
    ref = document["spec"]["gatewayRefs"][0]
    ref.update(gateway)
    if value is not None:
        ref[API_KEY_OPT_IN] = value
    return document


def what_if_of(directory: Path, network: dict[str, Any], providers: list[dict[str, Any]]) -> WhatIf:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "mesh.yaml").write_text(yaml.safe_dump_all([network, SITE, *providers]))
    resources = load_resources_from_dir(directory)
    assert resources.errors == ()
    return build_what_if(resources, site="east", gateway="edge-gateway")


def overlay_of(what_if: WhatIf) -> dict[str, Any]:
    now = datetime.fromisoformat(NOW)
    ranking = rank_candidates(
        what_if.candidates, what_if.consumer, what_if.network.spec.scoring, now
    )
    rendered = render_overlay(ranking, what_if.scope, what_if.source, now)
    assert str(validate_overlay(rendered.text)) == f"accept {rendered.revision}"
    return json.loads(rendered.text)


# --- offered or not ---------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, False])
def test_without_the_opt_in_header_keys_and_custom_are_not_offered_naming_the_field(
    tmp_path: Path, value: bool | None
) -> None:
    plan = what_if_of(tmp_path, opted_in(value), [*MESH_PROVIDERS, CUSTOM])
    refused = dict(plan.not_offered)
    assert refused == {
        **{name: header_refusal(AuthStrategy.API_KEY, h) for name, h in HEADER_KEYS.items()},
        "legacy": header_refusal(AuthStrategy.CUSTOM, "X-Auth"),
    }
    assert refused["legacy"].endswith(
        "for a gateway that accepts apikey credentials, set apiKeyCredentials: true on its "
        "gatewayRefs entry"
    )
    assert {c.provider for c in plan.candidates} == {"openai", "titan", "mistral"}
    assert plan.gateway.api_key_credentials is False


def test_with_the_opt_in_header_keys_and_custom_are_offered_as_apikey_credentials(
    tmp_path: Path,
) -> None:
    plan = what_if_of(tmp_path, opted_in(), [*MESH_PROVIDERS, CUSTOM])
    assert plan.not_offered == ()
    offered = {c.provider: c.credential for c in plan.candidates}

    def apikey(header: str) -> SecretRef:
        return SecretRef(**KEY_REF, strategy=CredentialStrategy.API_KEY, header=header)

    assert offered == {
        **{name: apikey(header) for name, header in HEADER_KEYS.items()},
        "legacy": SecretRef(**LEGACY_REF, strategy=CredentialStrategy.API_KEY, header="X-Auth"),
        # The kinds that take API keys as bearer tokens keep doing so.
        "openai": SecretRef(**KEY_REF),
        "titan": SecretRef(**KEY_REF),
        "mistral": SecretRef(**KEY_REF),
    }
    document = overlay_of(plan)
    credentials = {c["cluster"]: c["credential"] for c in document["overlay"]["candidates"]}
    assert credentials["legacy"] == {
        "strategy": "apikey",
        "secretRef": LEGACY_REF,
        "header": "X-Auth",
    }
    assert credentials["openai"] == {"strategy": "bearer_token", "secretRef": KEY_REF}


def test_the_opt_in_is_a_boolean_off_by_default() -> None:
    loaded = load_resource(opted_in(None))
    assert isinstance(loaded, GridNetwork)
    assert loaded.spec.gateway_refs[0].api_key_credentials is False
    wire = loaded.model_dump(by_alias=True)["spec"]["gatewayRefs"][0]
    assert wire[API_KEY_OPT_IN] is False
    # A bad value is refused with the field's path (and never read as true).
    refused = opted_in(None)
    refused["spec"]["gatewayRefs"][0][API_KEY_OPT_IN] = "sometimes"
    reasons = problems(refused)
    assert list(reasons) == ["spec.gatewayRefs[0].apiKeyCredentials"]


# --- the contract's fixtures ------------------------------------------------------------


def fixture(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return document


def test_the_rendered_credentials_are_the_accepted_fixtures(tmp_path: Path) -> None:
    """The mesh of ``valid-apikey-credential.json`` (claude with its key in x-api-key, gpt
    with a bearer token) renders each candidate's credential as the fixture has it, and the
    document is accepted."""
    expected = {
        c["name"]: c["credential"]
        for c in fixture("valid-apikey-credential.json")["overlay"]["candidates"]
    }
    claude = provider(
        "anthropic-provider",
        "anthropic",
        api_key_auth(),
        models=[{"name": "claude-sonnet"}],
    )
    gpt = provider(
        "openai-provider",
        "open_ai",
        {
            "strategy": "BearerToken",
            "secretRef": {"name": "openai-token", "namespace": "grid-system", "key": "token"},
        },
        endpoint="https://api.openai.com/v1",
        models=[{"name": "gpt-4o"}],
    )
    document = overlay_of(what_if_of(tmp_path, opted_in(), [claude, gpt]))
    rendered = {c["name"]: c["credential"] for c in document["overlay"]["candidates"]}
    assert rendered == expected
    assert [list(c) for c in rendered.values()] == [list(c) for c in expected.values()]


@pytest.mark.parametrize(
    "name", ["credential-bearer-with-header.json", "credential-unknown-strategy.json"]
)
def test_the_rendered_document_edited_as_a_refused_fixture_is_refused_alike(
    tmp_path: Path, name: str
) -> None:
    """Each refused fixture's credential put in a rendered document gives the fixture's
    reason: Grid's validator judges the rendered credentials by the contract's rules."""
    refused = fixture(name)["overlay"]["candidates"][0]["credential"]
    reason = json.loads((FIXTURES / "manifest.json").read_text())["fixtures"][name]["reason"]
    document = overlay_of(what_if_of(tmp_path, opted_in(), [provider(auth=api_key_auth())]))
    document["overlay"]["candidates"][0]["credential"] = refused
    verdict = validate_overlay(json.dumps(sealed(document)))
    assert str(verdict).startswith(f"reject {reason}")


# --- the gateway configuration ----------------------------------------------------------


def test_the_configuration_injects_each_key_in_its_header_and_strips_it_from_clients(
    tmp_path: Path,
) -> None:
    consumer = {"enabled": True}
    plan = what_if_of(
        tmp_path,
        opted_in(credentialFilterName="credential_inject", consumerConfig=consumer),
        [provider(auth=api_key_auth()), CUSTOM],
    )
    settings = plan.gateway.consumer_config
    assert settings is not None
    config = consumer_config(
        plan.plan,
        settings,
        overlay_key="grid-config.json",
        credential_filter=plan.gateway.credential_filter_name,
    )
    filters = {f["filter"]: f for f in config["filter_chains"][0]["filters"]}
    assert filters["credential_inject"]["credentials"] == [
        {
            **KEY_REF,
            "strategy": "apikey",
            "header": "x-api-key",
            "file": "/etc/grid/credentials/anthropic-key/api-key",
        },
        {
            **LEGACY_REF,
            "strategy": "apikey",
            "header": "X-Auth",
            "file": "/etc/grid/credentials/legacy-key/token",
        },
    ]
    # The Custom header joins the client credential headers the gateway removes.
    assert filters["headers"]["request_remove"][-1] == "x-auth"

    document = overlay_of(plan)
    gateway = GatewayModel(config, {"/etc/grid/overlay/grid-config.json": json.dumps(document)})
    sent = {"X-Auth": "client-canary", "X-Api-Key": "client-canary"}
    claude = gateway.request("claude-model", headers=sent)
    assert claude.headers == {
        "x-api-key": "<file:/etc/grid/credentials/anthropic-key/api-key>",
        "host": "api.anthropic.com",
    }
    legacy = gateway.request("legacy-model", headers=sent)
    assert legacy.headers == {
        "x-auth": "<file:/etc/grid/credentials/legacy-key/token>",
        "host": "legacy.example",
    }


# --- the engine: each kind of gateway ranked on its own -----------------------------------


def header_key_provider(name: str) -> InferenceProvider:
    loaded = load_resource(
        provider(
            name,
            "anthropic",
            api_key_auth(),
            gridNetworkRef="mesh",
            models=[{"name": "claude"}],
            siteSelector={"matchLabels": {"grid.praxis-proxy.io/site": "site-a"}},
        )
    )
    assert isinstance(loaded, InferenceProvider)
    return loaded


def test_the_engine_offers_header_keys_to_the_opted_in_gateway_only() -> None:
    refs = [
        {"namespace": EDGE[0], "name": EDGE[1], API_KEY_OPT_IN: True},
        {"namespace": INNER[0], "name": INNER[1]},
    ]
    net = network(gatewayRefs=refs)
    inputs = SiteInputs(net, "site-a")
    inputs.set_resources(net, SITES, (header_key_provider("claude-a"),))
    renderer = Renderer()
    render(renderer, inputs, {"claude-a": LocalView(True, False, None)})
    edge = renderer.overlays[EDGE]
    assert edge.overlay is not None
    (candidate,) = edge.overlay.document["overlay"]["candidates"]
    assert candidate["credential"] == {
        "strategy": "apikey",
        "secretRef": KEY_REF,
        "header": "x-api-key",
    }
    # The other gateway has nothing to route to: its render is refused, saying why.
    inner = renderer.overlays[INNER]
    assert inner.overlay is None
    assert "no candidate" in inner.message
    assert renderer.not_offered == (
        (
            "claude-a",
            f"to gateway {INNER[0]}/{INNER[1]}: "
            + header_refusal(AuthStrategy.API_KEY, "x-api-key"),
        ),
    )
    # Rendered again unchanged: nothing new to publish for either.
    renderer.take_changed()
    render(renderer, inputs, {"claude-a": LocalView(True, False, None)}, now=T0)
    assert renderer.take_changed() == ()


def test_one_ranking_serves_both_kinds_while_no_provider_sends_a_header_of_its_own() -> None:
    refs = [
        {"namespace": EDGE[0], "name": EDGE[1], API_KEY_OPT_IN: True},
        {"namespace": INNER[0], "name": INNER[1]},
    ]
    net = network(gatewayRefs=refs)
    inputs = SiteInputs(net, "site-a")
    inputs.set_resources(net, SITES, (engine_provider("llama-a", "site-a"),))
    renderer = Renderer()
    render(renderer, inputs, {"llama-a": LocalView(True, False, None)})
    assert routes(renderer, EDGE) == routes(renderer, INNER) == [(LLAMA, "site-a", "llama-a")]
    assert len(renderer._passes) == 1
    # A header key provider arrives: each kind gets its ranking, and the bearer-only
    # gateway keeps routing to the rest.
    inputs.set_resources(
        net, SITES, (engine_provider("llama-a", "site-a"), header_key_provider("claude-a"))
    )
    views = {"llama-a": LocalView(True, False, None), "claude-a": LocalView(True, False, None)}
    render(renderer, inputs, views)
    assert len(renderer._passes) == 2
    assert routes(renderer, INNER) == [(LLAMA, "site-a", "llama-a")]
    assert sorted(routes(renderer, EDGE)) == [
        ("claude", "site-a", "claude-a"),
        (LLAMA, "site-a", "llama-a"),
    ]
