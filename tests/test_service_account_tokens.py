"""ServiceAccount providers without a Kubernetes API: the ``auth.serviceAccount`` model and
its twin checks, what a TokenRequest answer means, the RFC 8693 exchange against a real STS
(tests/support/token_server.py) in each way it can fail, the candidate's reference, the
records a 0.2.0 peer reads, and the agent, which mints none. No token reaches a message or
a log. Minting and refreshing against a real API server: tests/test_operator_service_account.py."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jwt
import pytest

from grid.agent.tokens import NO_TOKEN_REQUEST, agent_io
from grid.crdt.records import ProviderMetrics
from grid.engine.records import provider_record
from grid.errors import InvalidResourceError, TokenEndpointError
from grid.models.phases import CredentialState
from grid.models.provider import InferenceProvider, InferenceProviderPhase
from grid.models.resources import load_resource
from grid.models.service_account import ServiceAccountSettings, TokenExchange
from grid.oauth.exchange import exchange_request, parse_token_request
from grid.oauth.responses import AccessToken
from grid.runtime.tokens import TokenMinter, exchange_token, minting_plan
from grid.scoring.inputs import SecretRef
from support.canary import Canaries
from support.token_server import JWT_TOKEN_TYPE, TOKEN_EXCHANGE, Mode, TokenServer
from test_render_whatif import copy_mesh, edit_provider, what_if

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
AUDIENCE = "//iam.example.com/pools/grid"
ACCOUNT = {"name": "vertex-caller", "namespace": "gateways", "audience": AUDIENCE}
# A JWT as the API server's would read (signature aside): the STS decodes its claims.
SUBJECT = jwt.encode(
    {"sub": "system:serviceaccount:gateways:vertex-caller", "aud": [AUDIENCE]},
    "k" * 32,
    algorithm="HS256",
)


def provider(auth: dict[str, Any], name: str = "vertex") -> InferenceProvider:
    loaded = load_resource(
        {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "InferenceProvider",
            "metadata": {"name": name},
            "spec": {
                "gridNetworkRef": "mesh",
                "backendKind": "api_provider",
                "providerKind": "vertex",
                "models": [{"name": "gemini"}],
                "endpoint": "https://vertex.example.com/v1",
                "auth": auth,
            },
        }
    )
    assert isinstance(loaded, InferenceProvider)
    return loaded


def test_the_settings_default_to_an_hour_and_name_the_account() -> None:
    settings = ServiceAccountSettings.model_validate(ACCOUNT)
    assert settings.expiration_seconds == 3600
    assert settings.exchange is None
    found = provider({"strategy": "ServiceAccount", "serviceAccount": ACCOUNT})
    assert found.spec.auth is not None and found.spec.auth.service_account == settings


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"expirationSeconds": 599}, "greater than or equal to 600"),
        ({"expirationSeconds": 86401}, "less than or equal to 86400"),
        ({"audience": "two words"}, "audience"),
        ({"exchange": {"tokenUrl": "http://sts.example/token"}}, "https://"),
    ],
)
def test_settings_out_of_bounds_are_refused(change: dict[str, Any], complaint: str) -> None:
    with pytest.raises(InvalidResourceError, match=complaint):
        provider({"strategy": "ServiceAccount", "serviceAccount": {**ACCOUNT, **change}})


@pytest.mark.parametrize("missing", ["name", "namespace", "audience"])
def test_the_account_and_audience_are_required(missing: str) -> None:
    partial = {key: value for key, value in ACCOUNT.items() if key != missing}
    with pytest.raises(InvalidResourceError, match=missing):
        provider({"strategy": "ServiceAccount", "serviceAccount": partial})


def test_service_account_settings_go_with_that_strategy_only() -> None:
    with pytest.raises(InvalidResourceError, match="serviceAccount goes with strategy"):
        provider({"strategy": "MtlsOnly", "serviceAccount": ACCOUNT})


def test_the_exchange_request_is_rfc_8693s() -> None:
    settings = TokenExchange.model_validate(
        {"tokenUrl": "https://sts.example/v1/token", "audience": "aud", "scopes": ["a", "b"]}
    )
    request = exchange_request(settings, SUBJECT)
    assert request.url == "https://sts.example/v1/token"
    assert dict(request.form) == {
        "grant_type": TOKEN_EXCHANGE,
        "subject_token": SUBJECT,
        "subject_token_type": JWT_TOKEN_TYPE,
        "requested_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "audience": "aud",
        "scope": "a b",
    }
    assert SUBJECT not in repr(request)


def test_a_token_request_answer_lives_until_its_expiration() -> None:
    answer = {"status": {"token": SUBJECT, "expirationTimestamp": "2026-12-01T12:10:00+00:00"}}
    token = parse_token_request(answer, T0)
    assert (token.value, token.expires_in_s) == (SUBJECT, 600.0)
    assert SUBJECT not in repr(token)


@pytest.mark.parametrize(
    ("answer", "complaint"),
    [
        ({}, "has no status"),
        ({"status": {"expirationTimestamp": "2026-12-01T13:00:00Z"}}, "has no token"),
        (
            {"status": {"token": "a b", "expirationTimestamp": "2026-12-01T13:00:00Z"}},
            "not a bearer token",
        ),
        ({"status": {"token": SUBJECT}}, "no expirationTimestamp"),
        ({"status": {"token": SUBJECT, "expirationTimestamp": "soon"}}, "no expirationTimestamp"),
        (
            {"status": {"token": SUBJECT, "expirationTimestamp": "2026-12-01T11:00:00Z"}},
            "already expired",
        ),
    ],
)
def test_a_token_request_answer_without_a_usable_token_is_refused(
    answer: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(TokenEndpointError, match=complaint) as caught:
        parse_token_request(answer, T0)
    assert SUBJECT not in str(caught.value)


def test_the_plan_and_the_candidate_name_the_token_in_the_accounts_namespace(
    tmp_path: Path,
) -> None:
    plan = minting_plan(provider({"strategy": "ServiceAccount", "serviceAccount": ACCOUNT}))
    assert plan is not None
    assert (plan.secret, plan.output) == (None, ("gateways", "grid-token-vertex", "token"))
    assert minting_plan(provider({"strategy": "ServiceAccount"})) is None

    directory = copy_mesh(tmp_path)

    def federate(document: dict[str, Any]) -> None:
        document["spec"]["auth"] = {"strategy": "ServiceAccount", "serviceAccount": ACCOUNT}

    edit_provider(directory, "openai", federate)
    offered = [c for c in what_if(directory=directory).candidates if c.provider == "openai"]
    assert offered and all(
        candidate.credential == SecretRef("grid-token-openai", "gateways", "token")
        for candidate in offered
    )


def test_the_settings_never_travel() -> None:
    account = {**ACCOUNT, "exchange": {"tokenUrl": "https://sts.example/v1/token"}}
    record = provider_record(
        provider({"strategy": "ServiceAccount", "serviceAccount": account}),
        InferenceProviderPhase.AVAILABLE,
        ProviderMetrics(),
    )
    assert record.spec.credential is None
    assert "sts.example" not in repr(record) and "vertex-caller" not in repr(record)


async def test_the_agent_mints_none_and_says_why(tmp_path: Path) -> None:
    plan = minting_plan(provider({"strategy": "ServiceAccount", "serviceAccount": ACCOUNT}))
    assert plan is not None
    mint, sink = agent_io(tmp_path, tmp_path)(plan)
    made = TokenMinter("vertex", plan, mint, sink, draw=lambda: 0.5)
    await made.attempt(T0)
    state, message = made.health.verdict(T0)
    assert state is CredentialState.SECRET_UNUSABLE
    assert NO_TOKEN_REQUEST in message
    assert not any(tmp_path.rglob("token"))


@pytest.fixture
async def sts() -> Any:
    running = TokenServer(expires_in=900)
    await running.start()
    yield running
    await running.stop()


def exchange(server: TokenServer, **fields: Any) -> TokenExchange:
    return TokenExchange.model_validate({"tokenUrl": server.url, **fields})


async def test_the_sts_exchanges_the_subject_token(sts: TokenServer) -> None:
    subject = AccessToken(SUBJECT, 600)
    token = await exchange_token(exchange(sts, audience="pool", scopes=["cloud"]), subject, None)
    assert sts.subjects == [SUBJECT]
    assert (token.value, token.expires_in_s) == (sts.tokens[0], 900)
    issued = sts.issued[0]
    assert (issued.client, issued.audience, issued.scope) == (
        "system:serviceaccount:gateways:vertex-caller",
        "pool",
        "cloud",
    )


@pytest.mark.parametrize(
    ("mode", "complaint", "unreachable"),
    [
        (Mode.REFUSE, "HTTP 401 (invalid_client)", False),
        (Mode.GARBAGE, "not JSON", False),
        (Mode.NO_TOKEN, "no access_token", False),
        (Mode.FAIL, "HTTP 500", False),
        (Mode.SLOW, "the token endpoint: ", True),
    ],
)
async def test_an_sts_that_gives_no_token_says_so_and_never_quotes_it(
    sts: TokenServer,
    mode: Mode,
    complaint: str,
    unreachable: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sts.mode, sts.slow_s = mode, 5.0
    caplog.set_level(logging.DEBUG)
    with pytest.raises(TokenEndpointError, match=re.escape(complaint)) as caught:
        await exchange_token(exchange(sts), AccessToken(SUBJECT, 600), None, timeout_s=0.5)
    assert caught.value.unreachable is unreachable
    canaries = Canaries([SUBJECT.encode()])
    canaries.assert_absent(str(caught.value), "the error")
    canaries.assert_absent(caplog.text, "the logs")


async def test_the_sts_refuses_a_subject_that_is_no_jwt(sts: TokenServer) -> None:
    with pytest.raises(TokenEndpointError, match="HTTP 400 \\(invalid_request\\)"):
        await exchange_token(exchange(sts), AccessToken("not-a-jwt", 600), None)
    assert sts.subjects == []
