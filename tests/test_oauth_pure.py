"""The pure part of minting (grid.oauth): when a token is refreshed and a failure retried,
what the provider's CredentialsValid says at every moment of a token's life, what a token
endpoint's answer means, and what is sent for each grant (the JWTs verified with PyJWT).
Every function takes ``now``: the tests move it."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from grid.errors import CredentialMaterialError, TokenEndpointError
from grid.models.oauth2 import OAuth2Settings
from grid.models.phases import CredentialState
from grid.oauth.requests import (
    CLIENT_ASSERTION_TYPE,
    JWT_BEARER,
    read_client_secret,
    token_request,
)
from grid.oauth.responses import DEFAULT_LIFETIME_S, MAX_LIFETIME_S, parse_token_response
from grid.oauth.schedule import (
    RETRY_CAP_S,
    FailureKind,
    TokenHealth,
    plan_refresh,
    retry_delay,
)
from support.oauth_keys import SERVICE_ACCOUNT, ec_key, pem, rsa_key, service_account_file

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
URL = "https://idp.example/oauth2/token"
SECRET = "cs-" + "q" * 30


def settings(**fields: Any) -> OAuth2Settings:
    return OAuth2Settings.model_validate(
        {"grant": "ClientCredentials", "tokenUrl": URL, "clientId": "grid-app", **fields}
    )


# --- when -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("spread", "share"), [(-1.0, 0.75), (0.0, 0.8), (1.0, 0.85)])
def test_a_token_is_refreshed_at_80_percent_of_its_life_give_or_take_5(
    spread: float, share: float
) -> None:
    life = plan_refresh(T0, 3600, spread)
    assert life.expires_at == T0 + timedelta(hours=1)
    assert life.refresh_at == T0 + timedelta(seconds=3600 * share)


@pytest.mark.parametrize(("spread", "life"), [(1.5, 60), (0.0, 0), (0.0, -5)])
def test_refresh_planning_refuses_nonsense(spread: float, life: float) -> None:
    with pytest.raises(ValueError):
        plan_refresh(T0, life, spread)


def test_retries_back_off_exponentially_within_their_jitter_up_to_5_minutes() -> None:
    assert [retry_delay(n, 1.0) for n in (1, 2, 3, 4)] == [1, 2, 4, 8]
    assert [retry_delay(n, 0.0) for n in (1, 2, 3, 4)] == [0.5, 1, 2, 4]
    assert retry_delay(40, 1.0) == RETRY_CAP_S
    assert retry_delay(10_000, 0.5) == RETRY_CAP_S * 0.75


def test_a_retry_never_waits_past_a_quarter_of_the_valid_tokens_remaining_life() -> None:
    assert retry_delay(20, 1.0, remaining_s=400) == 100
    assert retry_delay(20, 1.0, remaining_s=2) == 1.0  # but never under a second
    assert retry_delay(1, 1.0, remaining_s=400) == 1.0


def test_the_condition_follows_a_tokens_life_through_failures_to_withdrawal() -> None:
    health = TokenHealth()
    assert health.due(T0)
    assert health.verdict(T0)[0] is CredentialState.MINTING

    health = health.minted(plan_refresh(T0, 1000, 0.0))
    state, message = health.verdict(T0 + timedelta(seconds=1))
    assert state is CredentialState.MINTED
    assert "valid until 2026-12-01T12:16:40Z" in message
    assert not health.due(T0 + timedelta(seconds=799))
    assert health.due(T0 + timedelta(seconds=800))

    failing_at = T0 + timedelta(seconds=800)
    health = health.failed(FailureKind.REFUSED, "HTTP 401 (invalid_client)", failing_at, 1.0)
    assert health.next_attempt_at == failing_at + timedelta(seconds=1)
    state, message = health.verdict(failing_at)
    assert state is CredentialState.REFRESH_FAILING
    assert "refreshing fails since 2026-12-01T12:13:20Z: HTTP 401 (invalid_client)" in message

    # In the last tenth of its life the token is Expiring: routable still, warned about.
    assert health.verdict(T0 + timedelta(seconds=899))[0] is CredentialState.REFRESH_FAILING
    assert health.verdict(T0 + timedelta(seconds=900))[0] is CredentialState.EXPIRING
    assert health.valid_token(T0 + timedelta(seconds=999)) is not None

    # Once it lapses, no valid token is left: the provider is withdrawn, saying why.
    state, message = health.verdict(T0 + timedelta(seconds=1000))
    assert state is CredentialState.TOKEN_REFUSED
    assert message.startswith("no valid token (the last one lapsed at 2026-12-01T12:16:40Z)")
    assert "minting fails since 2026-12-01T12:13:20Z" in message

    # The failure's kind decides the reason; a success forgets the failures.
    unreachable = health.failed(FailureKind.UNREACHABLE, "connection refused", T0, 0.5)
    assert unreachable.verdict(T0 + timedelta(hours=1))[0] is CredentialState.ISSUER_UNREACHABLE
    assert unreachable.failing_since == failing_at  # since the first failure in a row
    unusable = health.failed(FailureKind.SECRET, "not a PEM private key", T0, 0.5)
    assert unusable.verdict(T0 + timedelta(hours=1))[0] is CredentialState.SECRET_UNUSABLE
    again = unusable.minted(plan_refresh(T0 + timedelta(hours=1), 1000, 0.0))
    assert (again.failures, again.failing_since, again.problem) == (0, None, "")


def test_failures_before_any_token_back_off_from_the_first() -> None:
    health = TokenHealth()
    moments = []
    now = T0
    for _ in range(5):
        health = health.failed(FailureKind.UNREACHABLE, "connection refused", now, 1.0)
        assert health.next_attempt_at is not None
        moments.append((health.next_attempt_at - now).total_seconds())
        now = health.next_attempt_at
    assert moments == [1, 2, 4, 8, 16]
    assert health.verdict(now)[0] is CredentialState.ISSUER_UNREACHABLE


# --- answers --------------------------------------------------------------------------------


def answer(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


def test_a_good_answer_gives_the_token_and_its_life() -> None:
    token = parse_token_response(
        200, answer(access_token="ya29.a0-x_y~z+/==", token_type="bearer", expires_in=3599)
    )
    assert (token.value, token.expires_in_s) == ("ya29.a0-x_y~z+/==", 3599)
    assert "ya29" not in repr(token)
    assert (
        parse_token_response(
            200, answer(access_token="t", token_type="Bearer", expires_in="3599")
        ).expires_in_s
        == 3599
    )
    assert parse_token_response(
        200, answer(access_token="t", token_type="Bearer")
    ).expires_in_s == (DEFAULT_LIFETIME_S)
    assert (
        parse_token_response(
            200, answer(access_token="t", token_type="Bearer", expires_in=10**9)
        ).expires_in_s
        == MAX_LIFETIME_S
    )


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        (b"<html>maintenance</html>", "is not JSON"),
        (b"\xff\xfe", "is not JSON"),
        (b"[1, 2]", "is not a JSON object"),
        (b"[" * 5_000, "is not JSON"),
        (b" " * (70 * 1024), "exceeds"),
        (answer(token_type="Bearer"), "has no access_token"),
        (answer(access_token="", token_type="Bearer"), "has no access_token"),
        (answer(access_token=7, token_type="Bearer"), "has no access_token"),
        (answer(access_token="a b", token_type="Bearer"), "not a bearer token"),
        (answer(access_token="t\r\nX-Evil: 1", token_type="Bearer"), "not a bearer token"),
        (answer(access_token="t" * 17_000, token_type="Bearer"), "not a bearer token"),
        (answer(access_token="t"), "not a Bearer token_type"),
        (answer(access_token="t", token_type="mac"), "not a Bearer token_type"),
        (answer(access_token="t", token_type="Bearer", expires_in=0), "not a positive number"),
        (answer(access_token="t", token_type="Bearer", expires_in=-5), "not a positive number"),
        (answer(access_token="t", token_type="Bearer", expires_in=True), "not a positive"),
        (answer(access_token="t", token_type="Bearer", expires_in="soon"), "not a positive"),
        (b'{"access_token": "t", "token_type": "Bearer", "expires_in": NaN}', "not a positive"),
    ],
)
def test_garbage_answers_are_refused_saying_what_is_wrong(body: bytes, complaint: str) -> None:
    with pytest.raises(TokenEndpointError, match=complaint) as caught:
        parse_token_response(200, body)
    assert not caught.value.unreachable


def test_an_error_answer_gives_its_registered_code_and_nothing_else() -> None:
    body = answer(error="invalid_client", error_description=f"bad secret {SECRET}")
    with pytest.raises(TokenEndpointError) as caught:
        parse_token_response(401, body)
    assert str(caught.value) == "the token endpoint answered HTTP 401 (invalid_client)"
    # An unregistered "code" could be anything the server echoes: it is not repeated.
    with pytest.raises(TokenEndpointError) as caught:
        parse_token_response(400, answer(error=SECRET))
    assert str(caught.value) == "the token endpoint answered HTTP 400"
    with pytest.raises(TokenEndpointError) as caught:
        parse_token_response(500, f"stack trace with {SECRET}".encode())
    assert str(caught.value) == "the token endpoint answered HTTP 500"


# --- requests -------------------------------------------------------------------------------


def test_client_credentials_with_a_secret_use_http_basic() -> None:
    request = token_request(
        settings(scopes=["read", "write"], audience="https://api.example"),
        f"{SECRET}\n".encode(),
        T0,
        "n1",
    )
    assert request.url == URL
    assert dict(request.form) == {
        "grant_type": "client_credentials",
        "scope": "read write",
        "audience": "https://api.example",
    }
    basic = request.headers["Authorization"].removeprefix("Basic ")
    assert base64.b64decode(basic).decode() == f"grid-app:{SECRET}"
    assert SECRET not in repr(request) and basic not in repr(request)


def test_a_client_secret_is_form_encoded_before_basic() -> None:
    request = token_request(settings(clientId="app:1"), b"p@ss:w rd", T0, "n1")
    basic = base64.b64decode(request.headers["Authorization"].removeprefix("Basic ")).decode()
    assert basic == "app%3A1:p%40ss%3Aw%20rd"


@pytest.mark.parametrize("key", [rsa_key, ec_key], ids=["RS256", "ES256"])
def test_a_private_key_jwt_client_assertion_verifies(key: Any) -> None:
    request = token_request(settings(clientAuthentication="PrivateKeyJwt"), pem(key()), T0, "n-1")
    form = dict(request.form)
    assert "Authorization" not in request.headers
    assert form["client_assertion_type"] == CLIENT_ASSERTION_TYPE
    assert form["client_id"] == "grid-app"
    claims = jwt.decode(
        form["client_assertion"],
        key().public_key(),
        algorithms=["RS256", "ES256"],
        audience=URL,
        options={"verify_exp": False},
    )
    assert claims["iss"] == claims["sub"] == "grid-app"
    assert claims["jti"] == "n-1"
    assert claims["exp"] - claims["iat"] == 300
    assert claims["iat"] == int(T0.timestamp())


def test_the_jwt_bearer_grant_signs_with_the_service_account_key() -> None:
    google = "https://oauth2.googleapis.com/token"
    grant = OAuth2Settings.model_validate(
        {"grant": "JwtBearer", "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}
    )
    request = token_request(grant, service_account_file(google), T0, "n-2")
    assert request.url == google  # the key file's token_uri
    assert request.form["grant_type"] == JWT_BEARER
    assertion = request.form["assertion"]
    assert jwt.get_unverified_header(assertion)["kid"] == "0123456789abcdef"
    claims = jwt.decode(
        assertion,
        rsa_key().public_key(),
        algorithms=["RS256"],
        audience=google,
        options={"verify_exp": False},
    )
    assert claims["iss"] == SERVICE_ACCOUNT
    assert claims["scope"] == "https://www.googleapis.com/auth/cloud-platform"
    assert claims["exp"] - claims["iat"] == 3600
    overridden = OAuth2Settings.model_validate({"grant": "JwtBearer", "tokenUrl": URL})
    assert token_request(overridden, service_account_file(google), T0, "n").url == URL


def key_file(**changes: Any) -> bytes:
    document = json.loads(service_account_file("https://oauth2.googleapis.com/token"))
    document.update(changes)
    return json.dumps({k: v for k, v in document.items() if v is not None}).encode()


def _small_rsa() -> bytes:
    return pem(rsa.generate_private_key(public_exponent=65537, key_size=1024))


def _ed25519() -> bytes:
    return pem(ed25519.Ed25519PrivateKey.generate())


def _p384() -> bytes:
    return pem(ec.generate_private_key(ec.SECP384R1()))


PRIVATE_KEY = settings(clientAuthentication="PrivateKeyJwt")
JWT_GRANT = OAuth2Settings.model_validate({"grant": "JwtBearer"})


@pytest.mark.parametrize(
    ("grant", "secret", "complaint"),
    [
        (PRIVATE_KEY, b"not a key " + SECRET.encode(), "is not a PEM private key"),
        (PRIVATE_KEY, _small_rsa(), "shorter than 2048 bits"),
        (PRIVATE_KEY, _ed25519(), "neither an RSA nor an EC P-256"),
        (PRIVATE_KEY, _p384(), "neither an RSA nor an EC P-256"),
        (JWT_GRANT, SECRET.encode(), "not a JSON key file"),
        (JWT_GRANT, b'{"type": "authorized_user"}', "not a service-account key file"),
        (JWT_GRANT, key_file(client_email=None), "has no client_email"),
        (JWT_GRANT, key_file(private_key=f"-----BEGIN {SECRET}"), "not a PEM private key"),
        (JWT_GRANT, key_file(private_key=pem(ec_key()).decode()), "not an RSA key"),
        (JWT_GRANT, key_file(token_uri="http://evil.example/token"), "token_uri must be an https"),
        (settings(), b"line\x01", "control characters"),
        (settings(), b"\xff\xfe", "not UTF-8"),
        (settings(), b"x" * (65 * 1024), "exceeds"),
    ],
)
def test_a_secret_that_cannot_mint_says_why_without_its_content(
    grant: OAuth2Settings, secret: bytes, complaint: str
) -> None:
    with pytest.raises(CredentialMaterialError, match=complaint) as caught:
        token_request(grant, secret, T0, "n")
    for text in (str(caught.value), repr(caught.value)):
        assert SECRET not in text and "BEGIN" not in text


def test_a_client_secret_file_keeps_everything_but_its_final_newline() -> None:
    assert read_client_secret(b"abc\n") == "abc"
    assert read_client_secret(b"abc\r\n") == "abc"
    assert read_client_secret(b" abc ") == " abc "
