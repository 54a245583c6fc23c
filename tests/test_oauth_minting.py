"""TokenMinter against a real token endpoint (tests/support/token_server.py): every grant
and client authentication minted and verified by the server, refreshes that rotate the
token, and each way an attempt fails (refusal, garbage, a 500, a slow or a vanished
endpoint, an unusable Secret, an unwritable output), with the clock driven by the test.
The client's secrets and the tokens never reach the health messages or the logs, the HTTP
client's debug logs included."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from grid.errors import CredentialMaterialError
from grid.models.oauth2 import OAuth2Settings
from grid.models.phases import CredentialState
from grid.models.resources import load_resource
from grid.runtime.minters import TokenMinters
from grid.runtime.tokens import MintingPlan, TokenMinter, oauth2_mint
from support.canary import Canaries
from support.oauth_keys import SERVICE_ACCOUNT, ec_key, pem, rsa_key, service_account_file
from support.token_server import Mode, TokenServer
from support.token_store import MemoryTokens

T0 = datetime.now(UTC).replace(microsecond=0)
"""The clock of the tests that drive time; a test whose client assertion the server checks
against its own clock signs as of the moment it runs instead (the suite may reach it long
after this module was imported)."""
"""The test's clock starts now: the server checks the assertions' expiry by its own."""
CLIENT = "grid-app"
SECRET = "cs-" + "s3cr3t" * 6
SECRET_REF = ("grid", "idp-client", "secret")
OUTPUT = ("grid", "grid-token-llama", "token")


@pytest.fixture
async def server() -> AsyncIterator[TokenServer]:
    running = TokenServer(client_secrets={CLIENT: SECRET}, expires_in=1000)
    running.client_keys[CLIENT] = ec_key().public_key()
    running.service_accounts[SERVICE_ACCOUNT] = rsa_key().public_key()
    await running.start()
    yield running
    await running.stop()


def minter(
    server: TokenServer, secret: bytes = SECRET.encode(), timeout_s: float = 5.0, **fields: Any
) -> tuple[TokenMinter, MemoryTokens]:
    base = {"grant": "ClientCredentials", "tokenUrl": server.url, "clientId": CLIENT}
    settings = OAuth2Settings.model_validate({**base, **fields})
    output = MemoryTokens()

    async def source() -> bytes:
        if not secret:
            raise CredentialMaterialError("the Secret named by spec.auth.secretRef does not exist")
        return secret

    made = TokenMinter(
        "llama",
        MintingPlan(settings, SECRET_REF, OUTPUT),
        oauth2_mint(settings, source, timeout_s),
        output,
        draw=lambda: 0.5,  # the middle of every jitter: refresh at 80 %, retries at 3/4
    )
    return made, output


def state(made: TokenMinter, now: datetime) -> CredentialState:
    return made.health.verdict(now)[0]


async def test_client_credentials_mint_then_refresh_at_80_percent_with_a_new_token(
    server: TokenServer,
) -> None:
    made, output = minter(server, scopes=["inference"], audience="https://api.example")
    await made.attempt(T0)
    assert output.tokens == server.tokens and len(output.tokens) == 1
    assert (server.issued[0].client, server.issued[0].scope) == (CLIENT, "inference")
    assert server.issued[0].audience == "https://api.example"
    assert state(made, T0) is CredentialState.MINTED
    token = made.health.token
    assert token is not None
    assert token.expires_at == T0 + timedelta(seconds=1000)
    assert token.refresh_at == T0 + timedelta(seconds=800)
    assert not made.health.due(T0 + timedelta(seconds=799))

    refresh = T0 + timedelta(seconds=800)
    assert made.health.due(refresh)
    await made.attempt(refresh)
    assert output.tokens == server.tokens and len(set(output.tokens)) == 2  # rotated
    assert made.health.token is not None
    assert made.health.token.expires_at == refresh + timedelta(seconds=1000)


async def test_a_private_key_jwt_client_is_verified_and_never_replays(
    server: TokenServer,
) -> None:
    made, output = minter(server, pem(ec_key()), clientAuthentication="PrivateKeyJwt")
    # The server checks the assertion's dates against its clock: sign it as of now.
    now = datetime.now(UTC).replace(microsecond=0)
    await made.attempt(now)
    await made.attempt(now)  # the same second: only a fresh jti keeps it from being a replay
    assert server.refusals == []
    assert len(output.tokens) == 2


async def test_the_jwt_bearer_grant_mints_with_a_service_account_key(server: TokenServer) -> None:
    key_file = service_account_file(server.url)
    made, output = minter(
        server,
        key_file,
        grant="JwtBearer",
        tokenUrl=None,
        clientId=None,
        scopes=["https://www.googleapis.com/auth/cloud-platform"],
    )
    await made.attempt(datetime.now(UTC))  # the server checks the assertion's dates
    assert server.refusals == []
    assert server.issued[0].client == SERVICE_ACCOUNT
    assert server.issued[0].scope == "https://www.googleapis.com/auth/cloud-platform"
    assert output.tokens == server.tokens


async def test_a_wrong_secret_is_refused_by_the_server_and_reported_without_it(
    server: TokenServer,
) -> None:
    made, output = minter(server, b"wrong-" + SECRET.encode())
    await made.attempt(T0)
    assert output.tokens == []
    assert server.refusals == ["wrong client secret"]
    reason, message = made.health.verdict(T0)
    assert reason is CredentialState.TOKEN_REFUSED
    assert "HTTP 401 (invalid_client)" in message
    assert SECRET not in message


async def test_refresh_failures_keep_the_token_then_withdraw_it_when_it_lapses(
    server: TokenServer,
) -> None:
    made, output = minter(server)
    await made.attempt(T0)
    server.mode = Mode.REFUSE
    now = T0 + timedelta(seconds=800)
    waits = []
    while now < T0 + timedelta(seconds=1000):
        await made.attempt(now)
        assert made.health.next_attempt_at is not None
        waits.append((made.health.next_attempt_at - now).total_seconds())
        now = made.health.next_attempt_at
        left = (T0 + timedelta(seconds=1000) - now).total_seconds()
        expected = CredentialState.EXPIRING if left <= 100 else CredentialState.REFRESH_FAILING
        if left > 0:
            assert state(made, now) is expected
    # Backing off, but never waiting more than a quarter of what is left of the token.
    assert waits[:4] == [0.75, 1.5, 3.0, 6.0]
    assert all(wait <= 50 for wait in waits)
    assert len(output.tokens) == 1
    reason, message = made.health.verdict(T0 + timedelta(seconds=1000))
    assert reason is CredentialState.TOKEN_REFUSED
    since = (T0 + timedelta(seconds=800)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f"minting fails since {since}: the token endpoint answered HTTP 401" in message

    server.mode = Mode.SERVE
    await made.attempt(now)
    assert state(made, now) is CredentialState.MINTED
    assert output.tokens[-1] == server.tokens[-1]


@pytest.mark.parametrize(
    ("mode", "reason", "problem"),
    [
        (Mode.GARBAGE, CredentialState.TOKEN_REFUSED, "the token endpoint's answer is not JSON"),
        (Mode.NO_TOKEN, CredentialState.TOKEN_REFUSED, "has no access_token"),
        (Mode.FAIL, CredentialState.TOKEN_REFUSED, "the token endpoint answered HTTP 500"),
        (Mode.SLOW, CredentialState.ISSUER_UNREACHABLE, "no complete response within 0.3s"),
    ],
)
async def test_every_bad_answer_is_a_failure_with_its_reason(
    server: TokenServer, mode: Mode, reason: CredentialState, problem: str
) -> None:
    server.mode = mode
    server.slow_s = 3.0
    made, output = minter(server, timeout_s=0.3)
    await made.attempt(T0)
    assert output.tokens == []
    found, message = made.health.verdict(T0)
    assert found is reason
    assert problem in message
    assert SECRET not in message


async def test_a_vanished_endpoint_is_unreachable(server: TokenServer) -> None:
    made, _ = minter(server)
    await server.stop()
    await made.attempt(T0)
    reason, message = made.health.verdict(T0)
    assert reason is CredentialState.ISSUER_UNREACHABLE
    assert "connection refused" in message


@pytest.mark.parametrize("expires_in", [0, -1, "later", True])
async def test_a_nonsensical_lifetime_is_refused(server: TokenServer, expires_in: object) -> None:
    server.expires_in = expires_in  # type: ignore[assignment]
    made, output = minter(server)
    await made.attempt(T0)
    assert output.tokens == []
    assert "expires_in is not a positive number" in made.health.verdict(T0)[1]


async def test_a_missing_or_malformed_secret_and_an_unwritable_output_are_failures(
    server: TokenServer,
) -> None:
    made, _ = minter(server, b"")
    await made.attempt(T0)
    assert made.health.verdict(T0)[0] is CredentialState.SECRET_UNUSABLE
    assert server.requests == 0  # nothing is asked without a usable Secret
    made, _ = minter(server, b"not a key", clientAuthentication="PrivateKeyJwt")
    await made.attempt(T0)
    reason, message = made.health.verdict(T0)
    assert (reason, "is not a PEM private key" in message) == (
        CredentialState.SECRET_UNUSABLE,
        True,
    )
    made, output = minter(server)
    output.broken = True
    await made.attempt(T0)
    reason, message = made.health.verdict(T0)
    assert reason is CredentialState.TOKEN_NOT_WRITTEN
    assert "the token could not be written: Permission denied" in message


async def test_no_secret_or_token_reaches_the_logs_even_at_debug(
    server: TokenServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, aiohttp's client and server included
    made, output = minter(server)
    await made.attempt(T0)
    server.mode = Mode.REFUSE  # its error body echoes the Basic credentials back
    await made.attempt(T0 + timedelta(seconds=800))
    server.mode = Mode.FAIL  # and this one the form
    await made.attempt(T0 + timedelta(seconds=801))
    canaries = Canaries([SECRET.encode(), *(t.encode() for t in output.tokens)])
    assert caplog.records, "the minter logs its attempts"
    canaries.assert_absent(caplog.text, "the logs")
    canaries.assert_absent(made.health.verdict(T0)[1], "the condition")
    canaries.assert_absent(repr(made.health), "the health's repr")


async def test_the_minters_loop_survives_an_attempt_that_breaks(server: TokenServer) -> None:
    def provider(name: str, secret_name: str) -> Any:
        return load_resource(
            {
                "apiVersion": "grid.praxis-proxy.io/v1alpha1",
                "kind": "InferenceProvider",
                "metadata": {"name": name},
                "spec": {
                    "gridNetworkRef": "mesh",
                    "backendKind": "api_provider",
                    "providerKind": "open_ai",
                    "models": [{"name": "m"}],
                    "endpoint": "https://api.example.com",
                    "auth": {
                        "strategy": "Oauth2",
                        "secretRef": {"name": secret_name, "namespace": "grid", "key": "k"},
                        "oauth2": {
                            "grant": "ClientCredentials",
                            "tokenUrl": server.url,
                            "clientId": CLIENT,
                        },
                    },
                },
            }
        )

    sinks: dict[str, MemoryTokens] = {}

    def io(plan: MintingPlan) -> tuple[Any, Any]:
        async def source() -> bytes:
            if plan.secret is not None and plan.secret[1] == "broken":
                raise RuntimeError(SECRET)  # a bug whose message quotes a secret
            return SECRET.encode()

        sink = sinks.setdefault(plan.output[1], MemoryTokens())
        assert isinstance(plan.settings, OAuth2Settings)
        return oauth2_mint(plan.settings, source), sink

    def no_values(plan: MintingPlan) -> tuple[Any, Any]:
        raise AssertionError(f"no Custom provider here, yet {plan} was followed")

    changes = asyncio.Event()
    minters = TokenMinters(
        io, no_values, None, where="test", on_change=changes.set, now=lambda: datetime.now(UTC)
    )
    minters.follow([provider("good", "idp"), provider("bad", "broken")])
    running = asyncio.create_task(minters.loop())
    try:
        async with asyncio.timeout(10):
            while (
                "grid-token-good" not in sinks
                or not sinks["grid-token-good"].tokens
                or minters.verdict("bad", datetime.now(UTC))[0] is CredentialState.MINTING
            ):
                changes.clear()
                await changes.wait()
    finally:
        running.cancel()
    now = datetime.now(UTC)
    assert minters.verdict("good", now)[0] is CredentialState.MINTED
    reason, message = minters.verdict("bad", now)
    assert reason is CredentialState.TOKEN_REFUSED
    assert "the attempt failed unexpectedly (RuntimeError)" in message and SECRET not in message
    assert set(minters.expiries(now)) == {"good"}


async def test_a_slow_endpoint_settles_the_token_from_its_write_not_from_the_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import grid.runtime.tokens as tokens_module
    from grid.oauth.responses import AccessToken
    from grid.oauth.rotation import AGENT_SETTLE

    class Clock:
        """The minter's monotonic clock: the endpoint takes 1.5 s to answer."""

        at = 100.0

        def monotonic(self) -> float:
            return self.at

    clock = Clock()
    monkeypatch.setattr(tokens_module, "time", clock, raising=False)

    async def slow_mint(now: datetime, session: object) -> AccessToken:
        clock.at += 1.5
        return AccessToken("slow-token", 1000.0)

    output = MemoryTokens()
    settings = OAuth2Settings.model_validate(
        {"grant": "ClientCredentials", "tokenUrl": "https://idp.example", "clientId": CLIENT}
    )
    made = TokenMinter("llama", MintingPlan(settings, SECRET_REF, OUTPUT), slow_mint, output)
    await made.attempt(T0)
    assert output.tokens == ["slow-token"]
    settled = AGENT_SETTLE.declare_after + AGENT_SETTLE.reference_after
    written = T0 + timedelta(seconds=1.5)
    # Named once the settle times have passed since the token was written, not since the
    # request began; its life counts from the request.
    not_yet = made.keys(T0 + settled + timedelta(seconds=1))
    assert not_yet is not None and not_yet.reference is None
    named = made.keys(written + settled)
    assert named is not None and named.reference is not None
    assert made.health.token is not None
    assert made.health.token.expires_at == T0 + timedelta(seconds=1000)
