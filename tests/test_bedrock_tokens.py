"""Sigv4 providers' Bedrock short-term API keys: each key Grid signs is the one AWS's signer
(botocore) makes from the same credentials at the same second, its signature holds when
botocore recomputes it and fails with a wrong secret; what the Secret must hold and each
way it can be unusable; and the minter over a clock the test drives: refreshed at 80 % of
the key's life (12 hours, or the session credentials' if shorter), rotated credentials
taken at the next attempt, failures retried with backoff while the key in place stays
valid, withdrawn only once it lapses. No secret part reaches a message, a repr or a log,
botocore's and urllib3's debug logs included."""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from random import SystemRandom

import pytest

from grid.errors import CredentialMaterialError
from grid.models.phases import CredentialState
from grid.models.resources import load_resource
from grid.oauth.bedrock import (
    MAX_LIFETIME_S,
    BedrockTokenSettings,
    aws_credentials,
    bedrock_token,
    endpoint_region,
    token_lifetime_s,
)
from grid.runtime.tokens import MintingPlan, TokenMinter, minting_plan, sigv4_mint
from support.bedrock_keys import (
    PREFIX,
    AwsKeys,
    botocore_key,
    decode,
    new_keys,
    signature_holds,
)
from support.canary import Canaries
from support.token_store import MemoryTokens

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
HOURS_12 = timedelta(seconds=MAX_LIFETIME_S)
IN_US_EAST = BedrockTokenSettings("us-east-1")
SECRET_REF = ("gateways", "bedrock-aws", "AWS_SECRET_ACCESS_KEY")
OUTPUT = ("gateways", "grid-token-claude", "token")


def stretched(token: str, lifetime_s: int) -> str:
    """``token`` with another X-Amz-Expires and the same signature."""
    presigned = base64.b64decode(token.removeprefix(PREFIX)).decode()
    expires = f"X-Amz-Expires={decode(token).lifetime_s}&"
    assert expires in presigned
    presigned = presigned.replace(expires, f"X-Amz-Expires={lifetime_s}&")
    return PREFIX + base64.b64encode(presigned.encode()).decode()


@pytest.mark.parametrize("session", [True, False])
def test_the_key_is_the_one_botocore_signs_at_the_same_second(session: bool) -> None:
    keys = new_keys(session=session)
    theirs = botocore_key(keys, "us-west-2", MAX_LIFETIME_S)
    settings = BedrockTokenSettings(None)
    credentials = aws_credentials(keys.entries("us-west-2"), "AWS_SECRET_ACCESS_KEY", settings)
    ours = bedrock_token(credentials, decode(theirs).signed_at, MAX_LIFETIME_S)
    assert ours == theirs


def test_the_key_says_what_it_covers_and_its_signature_holds() -> None:
    keys = new_keys()
    credentials = aws_credentials(keys.entries(), "AWS_SECRET_ACCESS_KEY", IN_US_EAST)
    token = bedrock_token(credentials, T0, MAX_LIFETIME_S)
    key = decode(token)
    assert (key.host, key.path, key.version) == ("bedrock.amazonaws.com", "/", "1")
    assert key.parameters["Action"] == "CallWithBearerToken"
    assert key.scope == [keys.access_key_id, "20260301", "us-east-1", "bedrock", "aws4_request"]
    assert (key.signed_at, key.lifetime_s) == (T0, 43200)
    assert key.parameters["X-Amz-Security-Token"] == keys.session_token
    assert signature_holds(token, keys)


def test_a_wrong_secret_or_an_edited_key_fails_the_check() -> None:
    keys = new_keys()
    credentials = aws_credentials(keys.entries(), "AWS_SECRET_ACCESS_KEY", IN_US_EAST)
    token = bedrock_token(credentials, T0, MAX_LIFETIME_S)
    wrong = AwsKeys(keys.access_key_id, keys.secret_access_key + "x", keys.session_token)
    assert not signature_holds(token, wrong)
    other_session = AwsKeys(keys.access_key_id, keys.secret_access_key, "another-session")
    assert not signature_holds(token, other_session)
    # A key whose life was stretched after signing is not signed any more.
    shorter = bedrock_token(credentials, T0, 3600)
    assert signature_holds(shorter, keys)
    assert not signature_holds(stretched(shorter, MAX_LIFETIME_S), keys)


@pytest.mark.parametrize(
    ("endpoint", "region"),
    [
        ("https://bedrock-runtime.us-east-1.amazonaws.com", "us-east-1"),
        ("https://bedrock-runtime-fips.us-gov-west-1.amazonaws.com/openai/v1", "us-gov-west-1"),
        ("https://bedrock.eu-central-2.amazonaws.com", "eu-central-2"),
        ("https://bedrock-runtime.cn-north-1.amazonaws.com.cn", "cn-north-1"),
        ("https://bedrock-runtime.us-west-2.api.aws", "us-west-2"),
        ("https://vpce-0a1b.bedrock-runtime.us-east-1.vpce.amazonaws.com", None),
        ("https://llm.example.com/v1", None),
    ],
)
def test_the_endpoint_names_the_region_of_a_bedrock_endpoint(
    endpoint: str, region: str | None
) -> None:
    assert endpoint_region(endpoint) == region


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"AWS_ACCESS_KEY_ID": None}, "the Secret has no AWS_ACCESS_KEY_ID entry"),
        ({"AWS_SECRET_ACCESS_KEY": None}, "the Secret has no AWS_SECRET_ACCESS_KEY entry"),
        ({"AWS_SECRET_ACCESS_KEY": b""}, "AWS_SECRET_ACCESS_KEY (the secret access key) is empty"),
        ({"AWS_SECRET_ACCESS_KEY": b"two words"}, "is not a secret access key"),
        ({"AWS_SECRET_ACCESS_KEY": "clé".encode()}, "is not ASCII text"),
        ({"AWS_ACCESS_KEY_ID": b"akia-lower"}, "AWS_ACCESS_KEY_ID is not an access key id"),
        ({"AWS_SESSION_TOKEN": b"a b"}, "AWS_SESSION_TOKEN is not a session token"),
        ({"AWS_REGION": b"moon-1"}, "AWS_REGION is not an AWS region"),
        (
            {"AWS_REGION": b"eu-west-1"},
            "the Secret's AWS_REGION is eu-west-1 but the endpoint is in us-east-1",
        ),
        ({"AWS_CREDENTIAL_EXPIRATION": b"tomorrow"}, "is not an ISO 8601 time"),
        ({"AWS_CREDENTIAL_EXPIRATION": b"2026-03-01T13:00:00"}, "names no time zone"),
    ],
)
def test_an_unusable_secret_says_what_is_wrong_and_quotes_nothing(
    change: Mapping[str, bytes | None], problem: str
) -> None:
    keys = new_keys()
    entries: dict[str, bytes] = {**keys.entries("us-east-1")}
    for name, value in change.items():
        if value is None:
            entries.pop(name)
        else:
            entries[name] = value
    with pytest.raises(CredentialMaterialError) as raised:
        aws_credentials(entries, "AWS_SECRET_ACCESS_KEY", IN_US_EAST)
    assert problem in str(raised.value)
    Canaries([keys.secret_access_key.encode(), b"two words"]).assert_absent(
        str(raised.value), "the error"
    )


def test_the_region_comes_from_the_secret_or_else_the_endpoint() -> None:
    keys = new_keys()
    anywhere = BedrockTokenSettings(None)
    named = aws_credentials(keys.entries("ap-south-1"), "AWS_SECRET_ACCESS_KEY", anywhere)
    assert named.region == "ap-south-1"
    from_endpoint = aws_credentials(keys.entries(), "AWS_SECRET_ACCESS_KEY", IN_US_EAST)
    assert from_endpoint.region == "us-east-1"
    with pytest.raises(CredentialMaterialError, match="no region"):
        aws_credentials(keys.entries(), "AWS_SECRET_ACCESS_KEY", anywhere)
    secret_parts = [keys.secret_access_key.encode(), (keys.session_token or "").encode()]
    Canaries(secret_parts).assert_absent(repr(named), "the credentials' repr")


def test_the_key_outlives_no_session_credentials() -> None:
    keys = new_keys()
    entries = keys.entries("us-east-1")
    entries["AWS_CREDENTIAL_EXPIRATION"] = b"2026-03-01T15:00:00Z"
    credentials = aws_credentials(entries, "AWS_SECRET_ACCESS_KEY", IN_US_EAST)
    assert token_lifetime_s(credentials, T0) == 3 * 3600
    assert token_lifetime_s(credentials, T0 - timedelta(hours=10)) == MAX_LIFETIME_S
    assert token_lifetime_s(credentials, T0 + timedelta(seconds=3 * 3600 - 300)) == 300
    with pytest.raises(CredentialMaterialError, match="lapse at 2026-03-01T15:00:00Z"):
        token_lifetime_s(credentials, T0 + timedelta(seconds=3 * 3600 - 299))


@dataclass
class Secret:
    """The Secret's entries as a minter reads them at each attempt."""

    entries: dict[str, bytes] | None
    reads: int = 0

    async def __call__(self, names: tuple[str, ...]) -> Mapping[str, bytes]:
        self.reads += 1
        if self.entries is None:
            raise CredentialMaterialError("the Secret named by spec.auth.secretRef does not exist")
        return {name: value for name, value in self.entries.items() if name in names}


def minter(
    entries: dict[str, bytes] | None, draw: float = 0.5
) -> tuple[TokenMinter, Secret, MemoryTokens]:
    secret, output = Secret(entries), MemoryTokens()
    made = TokenMinter(
        "claude",
        MintingPlan(IN_US_EAST, SECRET_REF, OUTPUT),
        sigv4_mint(IN_US_EAST, "AWS_SECRET_ACCESS_KEY", secret),
        output,
        draw=lambda: draw,
    )
    return made, secret, output


async def test_signed_then_refreshed_at_80_percent_of_12_hours_with_a_new_key() -> None:
    keys = new_keys()
    made, _, output = minter(keys.entries())
    await made.attempt(T0)
    assert made.health.verdict(T0)[0] is CredentialState.MINTED
    life = made.health.token
    assert life is not None
    assert (life.expires_at, life.refresh_at) == (T0 + HOURS_12, T0 + HOURS_12 * 0.8)
    assert signature_holds(output.tokens[0], keys)
    assert not made.health.due(T0 + HOURS_12 * 0.8 - timedelta(seconds=1))

    refresh = T0 + HOURS_12 * 0.8
    await made.attempt(refresh)
    assert len(set(output.tokens)) == 2
    assert decode(output.tokens[1]).signed_at == refresh
    assert signature_holds(output.tokens[1], keys)
    assert made.health.token is not None
    assert made.health.token.expires_at == refresh + HOURS_12


async def test_a_moment_between_seconds_ends_the_life_at_the_signed_second() -> None:
    made, _, output = minter(new_keys().entries())
    now = T0 + timedelta(microseconds=400_000)
    await made.attempt(now)
    assert decode(output.tokens[0]).signed_at == T0
    assert made.health.token is not None and made.health.token.expires_at == T0 + HOURS_12


async def test_session_credentials_shorten_the_key_and_rotated_ones_are_taken_next() -> None:
    first = new_keys()
    entries = first.entries()
    entries["AWS_CREDENTIAL_EXPIRATION"] = b"2026-03-01T13:00:00+00:00"
    made, secret, output = minter(entries)
    await made.attempt(T0)
    assert decode(output.tokens[0]).lifetime_s == 3600
    assert made.health.token is not None
    assert made.health.token.refresh_at == T0 + timedelta(seconds=2880)

    # The credentials are renewed in the Secret before the refresh: it signs with them.
    second = new_keys()
    secret.entries = {**second.entries(), "AWS_CREDENTIAL_EXPIRATION": b"2026-03-03T00:00:00Z"}
    await made.attempt(T0 + timedelta(seconds=2880))
    assert secret.reads == 2
    assert signature_holds(output.tokens[1], second)
    assert not signature_holds(output.tokens[1], first)
    assert decode(output.tokens[1]).lifetime_s == MAX_LIFETIME_S


async def test_lapsing_credentials_keep_the_key_in_place_until_it_lapses_then_withdraw() -> None:
    keys = new_keys()
    entries = keys.entries()
    entries["AWS_CREDENTIAL_EXPIRATION"] = b"2026-03-01T12:16:40Z"  # 1000 s after T0
    made, secret, output = minter(entries)
    await made.attempt(T0)
    lapses = T0 + timedelta(seconds=1000)
    assert made.health.token is not None and made.health.token.expires_at == lapses
    # At its refresh 200 s are left: too few to sign again. The key in place stays.
    now = T0 + timedelta(seconds=800)
    attempts = 0
    while now < lapses:
        await made.attempt(now)
        attempts += 1
        assert made.health.next_attempt_at is not None
        now = made.health.next_attempt_at
        if now < lapses:
            assert made.health.verdict(now)[0] in (
                CredentialState.REFRESH_FAILING,
                CredentialState.EXPIRING,
            )
    assert len(output.tokens) == 1 and attempts > 4
    reason, message = made.health.verdict(lapses)
    assert reason is CredentialState.SECRET_UNUSABLE
    assert "the session credentials lapse at 2026-03-01T12:16:40Z" in message
    assert "the last one lapsed at 2026-03-01T12:16:40Z" in message

    # New credentials in the Secret: the next retry signs a key, the provider is back.
    renewed = new_keys()
    secret.entries = renewed.entries()
    await made.attempt(now)
    assert made.health.verdict(now)[0] is CredentialState.MINTED
    assert signature_holds(output.tokens[-1], renewed)


async def test_a_secret_gone_at_refresh_backs_off_and_withdraws_only_at_lapse() -> None:
    keys = new_keys()
    made, secret, output = minter(keys.entries())
    await made.attempt(T0)
    secret.entries = None
    now = T0 + HOURS_12 * 0.8
    waits = []
    while now < T0 + HOURS_12:
        await made.attempt(now)
        assert made.health.next_attempt_at is not None
        waits.append((made.health.next_attempt_at - now).total_seconds())
        now = made.health.next_attempt_at
        if now < T0 + HOURS_12:
            left = (T0 + HOURS_12 - now).total_seconds()
            expected = CredentialState.EXPIRING if left <= 4320 else CredentialState.REFRESH_FAILING
            assert made.health.verdict(now)[0] is expected
    assert waits[:4] == [0.75, 1.5, 3.0, 6.0]
    assert max(waits) == 225.0  # the 5-minute cap, drawn at 3/4
    assert len(output.tokens) == 1
    reason, message = made.health.verdict(T0 + HOURS_12)
    assert reason is CredentialState.SECRET_UNUSABLE
    assert "the Secret named by spec.auth.secretRef does not exist" in message


async def test_refresh_lead_and_spread_over_many_keys() -> None:
    """The figures: how long before a 12-hour key lapses its refresh falls, with the
    jitter drawn as the sites draw it."""
    draw = SystemRandom().random
    leads = []
    for _ in range(2000):
        made, _, _ = minter(new_keys().entries(), draw=draw())
        await made.attempt(T0)
        assert made.health.token is not None
        token = made.health.token
        leads.append((token.expires_at - token.refresh_at).total_seconds())
    low, high = min(leads), max(leads)
    mean = sum(leads) / len(leads)
    assert 0.15 * MAX_LIFETIME_S <= low < high <= 0.25 * MAX_LIFETIME_S
    assert high - low > 0.09 * MAX_LIFETIME_S  # spread over nearly the whole band
    print(
        f"12 h key refreshed {mean / 3600:.2f} h before it lapses on average; "
        f"from {low / 3600:.2f} h to {high / 3600:.2f} h before ({len(leads)} keys)"
    )


def test_a_sigv4_provider_plans_its_key_beside_its_secret() -> None:
    provider = load_resource(
        {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "InferenceProvider",
            "metadata": {"name": "claude"},
            "spec": {
                "gridNetworkRef": "mesh",
                "backendKind": "cloud_managed",
                "providerKind": "bedrock",
                "models": [{"name": "anthropic.claude-sonnet"}],
                "endpoint": "https://bedrock-runtime.us-east-1.amazonaws.com",
                "auth": {
                    "strategy": "Sigv4",
                    "secretRef": {
                        "name": "bedrock-aws",
                        "namespace": "gateways",
                        "key": "AWS_SECRET_ACCESS_KEY",
                    },
                },
            },
        }
    )
    assert minting_plan(provider) == MintingPlan(IN_US_EAST, SECRET_REF, OUTPUT)


async def test_no_secret_part_or_key_reaches_the_logs_even_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger: botocore's and urllib3's too
    keys = new_keys()
    made, secret, output = minter(keys.entries())
    await made.attempt(T0)
    await made.attempt(T0 + HOURS_12 * 0.8)
    secret.entries = {**keys.entries(), "AWS_SECRET_ACCESS_KEY": b"not one"}
    await made.attempt(T0 + HOURS_12 * 0.9)
    assert len(output.tokens) == 2 and caplog.records
    canaries = Canaries(
        [
            keys.secret_access_key.encode(),
            (keys.session_token or "").encode(),
            *(token.encode() for token in output.tokens),
        ],
        public=["bedrock-api-key-"],
    )
    canaries.assert_absent(caplog.text, "the logs")
    canaries.assert_absent(made.health.verdict(T0 + HOURS_12 * 0.9)[1], "the condition")
    canaries.assert_absent(repr(made.health), "the health's repr")


def test_botocore_s_signer_would_log_the_session_token_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Why Grid signs the key itself rather than through botocore: its signer logs the
    canonical request (the session token in it) and the signature at DEBUG."""
    caplog.set_level(logging.DEBUG, logger="botocore")
    keys = new_keys()
    signature = decode(botocore_key(keys, "us-east-1", 900)).parameters["X-Amz-Signature"]
    assert signature in caplog.text
    assert Canaries([(keys.session_token or "").encode()]).found_in(caplog.text)
