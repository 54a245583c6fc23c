"""A Custom provider with ``auth.custom``: its header value rendered from a template in its
Secret (``{{entry}}`` naming other entries), the header's name from ``auth.header`` or the
Secret, written where the gateway reads credentials, re-rendered when the Secret changes,
and every way the Secret can be wrong reported without losing the value in place and
without quoting a value. The clock is driven by the tests; the Secret and the place
written to are in memory."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from grid.engine.candidates import LocalView
from grid.engine.inputs import SiteInputs
from grid.engine.rendering import Renderer
from grid.errors import CredentialMaterialError
from grid.models.common import AuthStrategy
from grid.models.phases import CredentialState
from grid.models.provider import InferenceProvider
from grid.models.resources import load_resource, load_resources_from_dir
from grid.oauth.custom import (
    MAX_PLACEHOLDERS,
    MAX_VALUE_BYTES,
    CustomValueSettings,
    fill,
    header_from_entry,
    placeholders,
)
from grid.oauth.rotation import AGENT_SETTLE, TokenKeys
from grid.render.whatif import (
    CUSTOM_HEADER_UNREAD,
    FIRST_TOKEN_SETTLING,
    build_what_if,
    header_refusal,
    needs_api_key_credentials,
    with_token_keys,
)
from grid.runtime.custom_values import ValueRenderer, custom_render
from grid.runtime.minters import TokenMinters
from grid.runtime.tokens import MintingPlan, minting_plan
from grid.scoring.inputs import CredentialStrategy, SecretRef
from support.canary import Canaries
from support.token_store import MemoryTokens
from test_engine import SITES, network
from test_engine_rooms_rendering import EDGE, render
from test_gateway_apikey_opt_in import opted_in
from test_provider_apikey import KEY_REF, SITE, problems, provider

T0 = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)
API_KEY = "ak-" + "canary7" * 6
PASSWORD = "pw-" + "hunter9" * 5
TOKEN_SECRET = "grid-token-partner"


def custom_auth(**extra: Any) -> dict[str, Any]:
    return {"strategy": "Custom", "secretRef": dict(KEY_REF), **extra}


def partner(**auth: Any) -> InferenceProvider:
    loaded = load_resource(provider("partner", "self_hosted", custom_auth(**auth)))
    assert isinstance(loaded, InferenceProvider)
    return loaded


class MemorySecret:
    """A Secret's entries, read as the shells read them: the named entries it has."""

    def __init__(self, entries: Mapping[str, str]) -> None:
        self.entries = {name: value.encode() for name, value in entries.items()}
        self.reads = 0
        self.unreadable = False

    async def read(self, keys: tuple[str, ...]) -> dict[str, bytes]:
        self.reads += 1
        if self.unreadable:
            raise CredentialMaterialError("the Secret named by spec.auth.secretRef does not exist")
        return {key: self.entries[key] for key in keys if key in self.entries}


def renderer(
    secret: MemorySecret, sink: MemoryTokens, **auth: Any
) -> tuple[ValueRenderer, CustomValueSettings]:
    plan = minting_plan(partner(**auth))
    assert plan is not None and isinstance(plan.settings, CustomValueSettings)
    render = custom_render(plan.settings, secret.read)
    return (
        ValueRenderer("partner", plan, render, sink, recheck_s=5, draw=lambda: 1.0),
        plan.settings,
    )


# --- the spec -----------------------------------------------------------------------------


def test_custom_settings_go_with_strategy_custom_only() -> None:
    auth = {"strategy": "ApiKey", "secretRef": dict(KEY_REF), "custom": {}}
    reasons = problems(provider(auth=auth))
    assert "custom goes with strategy Custom only" in reasons["spec.auth"]


def test_the_header_comes_from_the_spec_or_the_secret_not_both() -> None:
    reasons = problems(provider(auth=custom_auth(header="X-Auth", custom={"headerKey": "h"})))
    assert "set header or custom.headerKey, not both" in reasons["spec.auth"]
    assert partner(header="X-Auth", custom={}).spec.auth is not None
    assert partner(custom={"headerKey": "name"}).spec.auth is not None
    reasons = problems(provider(auth=custom_auth(custom={"headerKey": "bad key"})))
    assert "a Secret data key" in reasons["spec.auth.custom.headerKey"]


def test_the_plan_names_the_template_entry_and_where_the_header_comes_from() -> None:
    for auth, settings in [
        ({"custom": {}}, CustomValueSettings(KEY_REF["key"], None, "header")),
        ({"custom": {"headerKey": "name"}}, CustomValueSettings(KEY_REF["key"], None, "name")),
        (
            {"custom": {}, "header": "X-Auth"},
            CustomValueSettings(KEY_REF["key"], "X-Auth", None),
        ),
    ]:
        plan = minting_plan(partner(**auth))
        assert plan is not None
        assert plan.settings == settings
        assert plan.secret == (KEY_REF["namespace"], KEY_REF["name"], KEY_REF["key"])
        assert plan.output == (KEY_REF["namespace"], TOKEN_SECRET, "token")
    # Without custom, a Custom provider's value is sent as it is: nothing to render.
    assert minting_plan(partner(header="X-Auth")) is None


# --- the template -------------------------------------------------------------------------


def test_placeholders_name_entries_once_each_in_order() -> None:
    assert placeholders("Token {{apiKey}}") == ("apiKey",)
    assert placeholders("{{ user }}:{{password}} {{user}}") == ("user", "password")
    assert placeholders("no placeholder } {} }}") == ()


@pytest.mark.parametrize("template", ["Token {{apiKey", "{{}}", "{{two words}}", "{{a/b}}"])
def test_a_brace_pair_that_opens_no_placeholder_is_refused(template: str) -> None:
    with pytest.raises(CredentialMaterialError, match="opens no placeholder"):
        placeholders(template)


def test_fill_puts_each_entry_in_without_its_final_newline() -> None:
    inputs = {"user": b"grid\n", "password": PASSWORD.encode()}
    assert fill("{{user}}:{{ password }}", inputs) == f"grid:{PASSWORD}"
    # What an entry holds is not read as a template again.
    assert fill("x {{a}}", {"a": b"{{b}}"}) == "x {{b}}"


@pytest.mark.parametrize(
    ("template", "inputs", "complaint"),
    [
        ("Token {{apiKey}}", {}, "names entry apiKey, which the Secret does not have"),
        ("{{a}}{{b}}", {"a": b"x"}, "names entry b, which the Secret does not have"),
        ("{{a}}{{b}}", {}, "names entries a, b, which the Secret does not have"),
        ("Token {{k}}", {"k": b"line\nbreak"}, "entry k (named by the template) holds a line"),
        ("Token {{k}}", {"k": b"\x00"}, "holds a line break or a control character"),
        ("Token {{k}}", {"k": "caf\u00e9".encode()}, "entry k (named by the template) is not"),
        ("Token {{k}}", {"k": b""}, "entry k (named by the template) is empty"),
        ("{{k}} ", {"k": b"v"}, "begins or ends with a space or a tab"),
        ("{{k}}", {"k": b"x" * (MAX_VALUE_BYTES + 1)}, f"longer than {MAX_VALUE_BYTES} bytes"),
    ],
)
def test_what_cannot_be_rendered_is_refused_naming_entries_never_values(
    template: str, inputs: dict[str, bytes], complaint: str
) -> None:
    with pytest.raises(CredentialMaterialError, match=re.escape(complaint)) as refused:
        fill(template, inputs)
    for value in inputs.values():
        if len(value) >= 3:
            assert value.decode(errors="replace") not in str(refused.value)


@pytest.mark.parametrize(
    ("entry", "complaint"),
    [
        (b"Authorization", "use strategy BearerToken"),
        (b"Host", "the gateway sets it itself"),
        (b"x auth", "must be an HTTP header name"),
        (b"sk-" + API_KEY.encode() + b" extra", "must be an HTTP header name"),
        (b"X-Auth\nX-Other", "holds a line break"),
        (b"", "is empty"),
    ],
)
def test_a_header_name_from_the_secret_follows_the_api_key_rules(
    entry: bytes, complaint: str
) -> None:
    with pytest.raises(CredentialMaterialError, match=re.escape(complaint)) as refused:
        header_from_entry({"header": entry}, "header")
    assert API_KEY not in str(refused.value)
    assert header_from_entry({"header": b"X-Partner-Token\n"}, "header") == "X-Partner-Token"


# --- rendering over time ------------------------------------------------------------------


async def test_rendered_once_written_again_only_when_the_secret_changes() -> None:
    secret = MemorySecret({KEY_REF["key"]: "Token {{apiKey}}", "apiKey": API_KEY})
    sink = MemoryTokens()
    values, _ = renderer(secret, sink, header="X-Partner-Token", custom={})
    assert values.verdict(T0)[0] is CredentialState.RENDERING
    assert values.due(T0)
    await values.attempt(T0)
    assert sink.tokens == [f"Token {API_KEY}"]
    state, message = values.verdict(T0)
    assert state is CredentialState.RENDERED
    assert message == (
        "the value rendered at 2026-09-01T12:00:00Z for header X-Partner-Token is in place"
    )
    assert values.expires_at(T0) is None
    # Read again every recheck; the same value is not written again (no gateway rebuild).
    assert not values.due(T0 + 4 * SECOND) and values.due(T0 + 5 * SECOND)
    await values.attempt(T0 + 5 * SECOND)
    assert sink.tokens == [f"Token {API_KEY}"] and secret.reads == 4
    # A new key in the Secret: a new value, under a key of its own.
    secret.entries["apiKey"] = b"ak-rotated-" + b"r" * 20
    await values.attempt(T0 + 10 * SECOND)
    assert sink.tokens[-1] == "Token ak-rotated-" + "r" * 20
    assert len(sink.held) == 2  # the previous one stays until the next
    assert "2026-09-01T12:00:10Z" in values.verdict(T0)[1]


async def test_a_failure_keeps_the_value_in_place_and_says_why() -> None:
    secret = MemorySecret({KEY_REF["key"]: "Token {{apiKey}}", "apiKey": API_KEY})
    sink = MemoryTokens()
    values, _ = renderer(secret, sink, header="X-Partner-Token", custom={})
    await values.attempt(T0)
    keys_before = values.keys(T0 + 10 * SECOND)
    del secret.entries["apiKey"]
    await values.attempt(T0 + 5 * SECOND)
    state, message = values.verdict(T0 + 5 * SECOND)
    assert state is CredentialState.REFRESH_FAILING
    assert message == (
        "the value rendered at 2026-09-01T12:00:00Z for header X-Partner-Token stays in use; "
        "rendering fails since 2026-09-01T12:00:05Z: the template names entry apiKey, which "
        "the Secret does not have"
    )
    assert sink.tokens == [f"Token {API_KEY}"]
    assert values.keys(T0 + 10 * SECOND) == keys_before  # still named
    # Retried with backoff (1 s at first), not at the recheck interval.
    assert values.next_attempt_at == T0 + 6 * SECOND
    secret.unreadable = True
    await values.attempt(T0 + 6 * SECOND)
    assert "does not exist" in values.verdict(T0)[1]
    assert values.next_attempt_at == T0 + 8 * SECOND
    secret.unreadable = False
    secret.entries["apiKey"] = API_KEY.encode()
    await values.attempt(T0 + 8 * SECOND)
    # The same value as before: nothing new written, and the failure is over.
    assert sink.tokens == [f"Token {API_KEY}"]
    assert values.verdict(T0)[0] is CredentialState.RENDERED


@pytest.mark.parametrize(
    ("entries", "auth", "complaint"),
    [
        ({}, {"custom": {}}, f"has no entry {KEY_REF['key']} (spec.auth.secretRef.key"),
        ({KEY_REF["key"]: "{{k}}", "k": "v"}, {"custom": {}}, "has no entry header (custom"),
        (
            {KEY_REF["key"]: "{{k}}", "k": "v", "name": "Proxy-Authorization"},
            {"custom": {"headerKey": "name"}},
            "entry name (custom.headerKey) is not a header Grid may send a credential in",
        ),
        ({KEY_REF["key"]: "Token {{k"}, {"custom": {}, "header": "X-A"}, "opens no"),
    ],
)
async def test_with_no_value_in_place_the_provider_is_withdrawn_saying_why(
    entries: dict[str, str], auth: dict[str, Any], complaint: str
) -> None:
    values, _ = renderer(MemorySecret(entries), MemoryTokens(), **auth)
    await values.attempt(T0)
    state, message = values.verdict(T0)
    assert state is CredentialState.SECRET_UNUSABLE
    assert message.startswith("no value in place: rendering fails since 2026-09-01T12:00:00Z")
    assert complaint in message
    assert values.keys(T0) is None


async def test_a_value_that_cannot_be_written_is_token_not_written() -> None:
    sink = MemoryTokens()
    sink.broken = True
    secret = MemorySecret({KEY_REF["key"]: "Token {{apiKey}}", "apiKey": API_KEY})
    values, _ = renderer(secret, sink, header="X-A", custom={})
    await values.attempt(T0)
    state, message = values.verdict(T0)
    assert state is CredentialState.TOKEN_NOT_WRITTEN
    assert "the value could not be written: Permission denied" in message


async def test_the_header_from_the_secret_moves_with_its_value(
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = MemorySecret(
        {KEY_REF["key"]: "{{user}}:{{password}}", "user": "grid", "password": PASSWORD}
    )
    sink = MemoryTokens()
    values, _ = renderer(secret, sink, custom={})
    secret.entries["header"] = b"X-Partner-Auth"
    with caplog.at_level(logging.DEBUG):
        await values.attempt(T0)
        first = values.keys(T0 + 4 * SECOND)
        assert first == TokenKeys(
            "token-20260901T120000Z",
            ("token-20260901T120000Z",),
            (("token-20260901T120000Z", "X-Partner-Auth"),),
        )
        secret.entries["header"] = b"X-Partner-Auth-2"
        later = T0 + 10 * SECOND
        await values.attempt(later)
    # Listed first with its own header; the reference keeps the old value and header.
    listed = values.keys(later + AGENT_SETTLE.declare_after)
    assert listed is not None
    assert listed.reference == "token-20260901T120000Z"
    assert listed.header_of(listed.reference) == "X-Partner-Auth"
    assert listed.header_of("token-20260901T120010Z") == "X-Partner-Auth-2"
    named = values.keys(later + AGENT_SETTLE.declare_after + AGENT_SETTLE.reference_after)
    assert named is not None and named.reference == "token-20260901T120010Z"
    assert named.header_of(named.reference) == "X-Partner-Auth-2"
    canaries = Canaries([PASSWORD.encode(), b"grid:" + PASSWORD.encode()])
    canaries.assert_absent(caplog.text, "the log")
    for line in (values.verdict(later)[1], repr(values.health), repr(sink.held.keys())):
        canaries.assert_absent(line, "what the renderer says")


# --- what the gateway is offered ---------------------------------------------------------


def write_mesh(directory: Path, network: dict[str, Any], auth: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    documents = [network, SITE, provider("partner", "self_hosted", custom_auth(**auth))]
    (directory / "mesh.yaml").write_text(yaml.safe_dump_all(documents))
    return directory


def test_a_rendered_value_is_offered_as_an_apikey_credential_to_opted_in_gateways(
    tmp_path: Path,
) -> None:
    resources = load_resources_from_dir(write_mesh(tmp_path, opted_in(), {"custom": {}}))
    assert resources.errors == ()
    # Nobody but the owning site reads the Secret: grid render cannot tell the header.
    plan = build_what_if(resources, site="east", gateway="edge-gateway")
    assert plan.not_offered == (("partner", CUSTOM_HEADER_UNREAD),)
    keys = TokenKeys(
        "token-20260901T120000Z",
        ("token-20260901T120000Z", "token-20260901T120100Z"),
        (("token-20260901T120000Z", "X-Old"), ("token-20260901T120100Z", "X-New")),
    )
    plan = build_what_if(
        resources, site="east", gateway="edge-gateway", rendered_headers={"partner": "X-Old"}
    )
    plan = with_token_keys(plan, {"partner": keys})
    (candidate,) = plan.candidates
    ref = {"name": TOKEN_SECRET, "namespace": KEY_REF["namespace"]}
    assert candidate.credential == SecretRef(
        **ref, key="token-20260901T120000Z", strategy=CredentialStrategy.API_KEY, header="X-Old"
    )
    assert set(plan.declared_credentials) == {
        SecretRef(**ref, key=key, strategy=CredentialStrategy.API_KEY, header=header)
        for key, header in keys.headers
    }
    # The first value on its way: not offered yet.
    settling = TokenKeys(None, ("token-20260901T120000Z",), (("token-20260901T120000Z", "X"),))
    plan = build_what_if(
        resources, site="east", gateway="edge-gateway", rendered_headers={"partner": "X"}
    )
    assert with_token_keys(plan, {"partner": settling}).not_offered == (
        ("partner", FIRST_TOKEN_SETTLING),
    )


def test_a_header_named_in_the_spec_is_offered_with_the_rendered_value(tmp_path: Path) -> None:
    resources = load_resources_from_dir(
        write_mesh(tmp_path, opted_in(), {"custom": {}, "header": "X-Auth"})
    )
    plan = build_what_if(resources, site="east", gateway="edge-gateway")
    (candidate,) = plan.candidates
    assert candidate.credential == SecretRef(
        TOKEN_SECRET, KEY_REF["namespace"], "token", CredentialStrategy.API_KEY, "X-Auth"
    )


@pytest.mark.parametrize(
    ("auth", "rendered", "header"),
    [
        ({"custom": {}}, {}, None),
        ({"custom": {}}, {"partner": "X-Read"}, "X-Read"),
        ({"custom": {}, "header": "X-Auth"}, {}, "X-Auth"),
    ],
)
def test_a_rendered_value_is_not_offered_to_bearer_only_gateways(
    tmp_path: Path, auth: dict[str, Any], rendered: dict[str, str], header: str | None
) -> None:
    resources = load_resources_from_dir(write_mesh(tmp_path, opted_in(None), auth))
    plan = build_what_if(resources, site="east", gateway="edge-gateway", rendered_headers=rendered)
    assert plan.candidates == ()
    assert plan.not_offered == (("partner", header_refusal(AuthStrategy.CUSTOM, header)),)
    assert needs_api_key_credentials(partner(**auth))
    if header is None:
        assert "sends the key in the header its Secret names" in plan.not_offered[0][1]


def test_the_engine_names_the_header_the_site_rendered() -> None:
    """Through the engine: before the site rendered a value whose Secret names its header,
    the provider is not offered; once the rotation's keys carry the header, the overlay
    names the rendered value in that header."""
    loaded = load_resource(
        provider(
            "partner-a",
            "self_hosted",
            custom_auth(custom={}),
            gridNetworkRef="mesh",
            models=[{"name": "partner"}],
            siteSelector={"matchLabels": {"grid.praxis-proxy.io/site": "site-a"}},
        )
    )
    assert isinstance(loaded, InferenceProvider)
    net = network(gatewayRefs=[{"namespace": EDGE[0], "name": EDGE[1], "apiKeyCredentials": True}])
    inputs = SiteInputs(net, "site-a")
    inputs.set_resources(net, SITES, (loaded,))
    renderer = Renderer()
    views = {"partner-a": LocalView(True, False, None)}
    render(renderer, inputs, views)
    assert renderer.not_offered == (("partner-a", CUSTOM_HEADER_UNREAD),)
    key = "token-20260901T120000Z"
    inputs.token_keys = {"partner-a": TokenKeys(key, (key,), ((key, "X-Partner"),))}
    render(renderer, inputs, views)
    overlay = renderer.overlays[EDGE].overlay
    assert overlay is not None
    (candidate,) = overlay.document["overlay"]["candidates"]
    assert candidate["credential"] == {
        "strategy": "apikey",
        "secretRef": {
            "name": "grid-token-partner-a",
            "namespace": KEY_REF["namespace"],
            "key": key,
        },
        "header": "X-Partner",
    }


def test_a_template_names_at_most_32_entries() -> None:
    names = [f"e{n}" for n in range(MAX_PLACEHOLDERS)]
    assert placeholders("".join(f"{{{{{name}}}}}" for name in names)) == tuple(names)
    with pytest.raises(CredentialMaterialError, match="names 33 entries: at most 32"):
        placeholders("".join(f"{{{{{name}}}}}" for name in [*names, "one-more"]))


async def test_an_unexpected_error_while_rendering_is_a_failure_that_quotes_nothing() -> None:
    """A bug in reading the Secret (an exception whose message quotes a value) stops no
    other provider's minting, and the provider's condition names the exception's type."""

    async def broken(keys: tuple[str, ...]) -> dict[str, bytes]:
        raise RuntimeError(API_KEY)

    def values_io(plan: MintingPlan) -> tuple[Any, Any]:
        return broken, MemoryTokens()

    def no_tokens(plan: MintingPlan) -> tuple[Any, Any]:
        raise AssertionError(f"no token is minted here, yet {plan} was followed")

    changes = asyncio.Event()
    minters = TokenMinters(
        no_tokens, values_io, None, where="test", on_change=changes.set, now=lambda: T0
    )
    minters.follow([partner(header="X-A", custom={})])
    running = asyncio.create_task(minters.loop())
    try:
        async with asyncio.timeout(10):
            while minters.verdict("partner", T0)[0] is CredentialState.RENDERING:
                changes.clear()
                await changes.wait()
    finally:
        running.cancel()
    state, message = minters.verdict("partner", T0)
    assert state is CredentialState.SECRET_UNUSABLE
    assert "the attempt failed unexpectedly (RuntimeError)" in message
    assert API_KEY not in message
    assert minters.expiries(T0) == {}
