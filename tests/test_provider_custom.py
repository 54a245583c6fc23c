"""The Custom strategy: the Secret's value meant as the whole value of ``auth.header``, with
ApiKey's header rules; not offered, with the reason (the Praxis AI gateway injects bearer
tokens only) unless the gateway accepts apikey credentials (test_gateway_apikey_opt_in.py),
and never without a header; replicated as the strategy and the
reference only, in the form release 0.2.0 reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grid.crdt.records import ProviderMetrics, ProviderSpec
from grid.engine.records import provider_record
from grid.models.common import AuthStrategy, ProviderKind
from grid.models.provider import InferenceProvider, InferenceProviderPhase, api_key_header
from grid.models.resources import load_resource, load_resources_from_dir
from grid.render.whatif import build_what_if, header_refusal
from test_provider_apikey import KEY_REF, problems, provider, write_mesh

VALUE = "Token tok-" + "c" * 40


def custom_auth(**extra: Any) -> dict[str, Any]:
    return {"strategy": "Custom", "secretRef": dict(KEY_REF), **extra}


@pytest.mark.parametrize("kind", list(ProviderKind))
def test_custom_sends_in_its_own_header_whatever_the_kind(kind: ProviderKind) -> None:
    assert api_key_header(kind, AuthStrategy.CUSTOM, "X-Auth-Token") == "X-Auth-Token"
    # No default: a Custom credential's header is never guessed.
    assert api_key_header(kind, AuthStrategy.CUSTOM) is None


@pytest.mark.parametrize(
    ("header", "complaint"),
    [
        ("Authorization", "use strategy BearerToken"),
        ("proxy-authorization", "the gateway sets it itself"),
        ("Host", "the gateway sets it itself"),
        ("x auth", "HTTP header name"),
    ],
)
def test_custom_follows_the_api_key_header_rules(header: str, complaint: str) -> None:
    reason = problems(provider(auth=custom_auth(header=header)))["spec.auth.header"]
    assert complaint in reason


def test_custom_needs_a_secret_ref() -> None:
    reason = problems(provider(auth={"strategy": "Custom", "header": "X-Auth-Token"}))
    assert "strategy Custom needs secretRef" in reason["spec.auth"]


def test_a_custom_provider_is_not_offered_the_gateway_sends_no_header_of_its_own(
    tmp_path: Path,
) -> None:
    mesh = write_mesh(tmp_path, [provider("legacy", "self_hosted", custom_auth(header="X-Auth"))])
    plan = build_what_if(load_resources_from_dir(mesh), site="east", gateway="edge-gateway")
    assert plan.candidates == ()
    assert plan.not_offered == (("legacy", header_refusal(AuthStrategy.CUSTOM, "X-Auth")),)


def test_a_custom_provider_without_a_header_is_not_offered_and_says_why(tmp_path: Path) -> None:
    mesh = write_mesh(tmp_path, [provider("legacy", "self_hosted", custom_auth())])
    resources = load_resources_from_dir(mesh)
    assert resources.errors == ()  # valid as stored (0.2.0 accepted it): only not routable
    plan = build_what_if(resources, site="east", gateway="edge-gateway")
    assert plan.candidates == ()
    assert plan.not_offered == (
        (
            "legacy",
            "auth strategy Custom names no header: set auth.header to the request header the "
            "Secret's value is sent in",
        ),
    )


def test_a_custom_record_carries_the_strategy_and_reference_only() -> None:
    loaded = load_resource(provider(auth=custom_auth(header="X-Auth")))
    assert isinstance(loaded, InferenceProvider)
    record = provider_record(loaded, InferenceProviderPhase.AVAILABLE, ProviderMetrics())
    wire = record.spec.to_wire()
    assert isinstance(wire, dict)
    # The same four fields as every other strategy's: 0.2.0 reads them (it knows "Custom").
    assert wire["cred"] == {"strategy": "Custom", **KEY_REF}
    assert ProviderSpec.from_wire(json.loads(json.dumps(wire)), "spec") == record.spec
    assert "X-Auth" not in json.dumps(wire)
