"""Minting a provider's tokens, the I/O part: obtaining a token (an OAuth 2.0 token
endpoint asked with one bounded POST, :func:`grid.observe._http.fetch`; for a ServiceAccount,
the shell's TokenRequest and an optional RFC 8693 exchange; for Sigv4, a Bedrock API key
signed on the spot from the AWS credentials in the Secret), writing it where the gateway
reads it, and keeping :class:`~grid.oauth.schedule.TokenHealth`. When to ask, what to send
and what an answer means are decided in :mod:`grid.oauth`.

A token, a client secret, a private key or an AWS secret key is never logged, never put in
an exception and never kept beyond the attempt that uses it; a token endpoint's error body
is reduced to its OAuth error code. One network's minters run together in
:mod:`grid.runtime.minters`, beside the renderers of Custom values
(:mod:`grid.runtime.custom_values`), which write through the same :class:`KeyWriter`.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from random import SystemRandom
from typing import Protocol

import aiohttp

from grid.errors import CredentialMaterialError, GridError, TokenEndpointError
from grid.models.common import AuthStrategy
from grid.models.oauth2 import MINTED_TOKEN_KEY, OAuth2Settings, minted_token_secret
from grid.models.phases import CredentialState
from grid.models.provider import InferenceProvider
from grid.models.service_account import ServiceAccountSettings, TokenExchange
from grid.oauth.bedrock import (
    OTHER_ENTRIES,
    BedrockTokenSettings,
    aws_credentials,
    bedrock_token,
    endpoint_region,
    token_lifetime_s,
)
from grid.oauth.custom import CustomValueSettings
from grid.oauth.exchange import exchange_request
from grid.oauth.requests import TokenRequest, token_request
from grid.oauth.responses import MAX_RESPONSE_BYTES, AccessToken, parse_token_response
from grid.oauth.rotation import (
    AGENT_SETTLE,
    IssuedKey,
    Settle,
    TokenKeys,
    found_keys,
    kept_after,
    next_change,
    token_key,
    token_keys,
)
from grid.oauth.schedule import FailureKind, TokenHealth, plan_refresh
from grid.observe._http import fetch
from grid.runtime.metrics import FAMILIES

DEFAULT_TIMEOUT_S = 10.0
"""How long one token request may take, connection and answer included."""

CREDENTIAL_EXPIRY_FAMILY = FAMILIES["grid_provider_credential_expiry_timestamp_seconds"]
"""Filled by each shell from its minters at scrape time."""

SecretSource = Callable[[], Awaitable[bytes]]
"""Reads the provider's Secret entry; raises :class:`CredentialMaterialError` saying what is
wrong (missing, empty) without its content."""
SecretEntries = Callable[[tuple[str, ...]], Awaitable[Mapping[str, bytes]]]
"""Reads those of the named entries the provider's Secret has (the others are left out);
raises :class:`CredentialMaterialError` when the Secret cannot be read, without its content."""
Mint = Callable[[datetime, aiohttp.ClientSession | None], Awaitable[AccessToken]]
"""Obtains a token at the given moment; raises :class:`CredentialMaterialError` (what the
site proves itself with is unusable) or :class:`TokenEndpointError` (the issuer gives none),
both secret-free."""


class TokenSink(Protocol):
    """Where a provider's tokens are written for the gateway: the keys of one Secret (the
    operator), the files of one directory (the agent)."""

    async def keys(self) -> tuple[str, ...]:
        """The keys there now (names only, never a value)."""

    async def write(self, key: str, token: str, keep: frozenset[str]) -> None:
        """Put ``token`` under ``key`` (in one step: a reader sees all of it or none) and
        remove every other minted token's key not in ``keep``. Raises :class:`OSError` or
        a :class:`~grid.errors.GridError` whose message holds no secret."""


_log = logging.getLogger(__name__)
_random = SystemRandom()


@dataclass(frozen=True, slots=True)
class MintingPlan:
    """What a minter is built from; a change of any part starts a new minter."""

    settings: OAuth2Settings | ServiceAccountSettings | BedrockTokenSettings | CustomValueSettings
    secret: tuple[str, str, str] | None
    """(namespace, name, key) of the Secret entry an Oauth2 token or a Bedrock key is
    minted from, or a Custom value's template is rendered from."""
    output: tuple[str, str, str]
    """(namespace, name, key) of the overlay's reference: the Secret (for the agent, the
    directory) the tokens are written to; each token goes under a key of its own
    (:func:`~grid.oauth.rotation.token_key`), which replaces ``key`` in the reference
    (:mod:`grid.oauth.rotation`)."""


def minting_plan(provider: InferenceProvider) -> MintingPlan | None:
    """What minting ``provider``'s tokens (or rendering its Custom value) takes, or None
    when its site writes none for it. The token goes under
    :func:`~grid.models.oauth2.minted_token_secret`, in the namespace the gateway mounts its
    credentials from: beside an Oauth2, Sigv4 or Custom provider's Secret, in a
    ServiceAccount's own namespace."""
    auth = provider.spec.auth
    if auth is None:
        return None
    name = minted_token_secret(provider.metadata.name)
    if auth.strategy is AuthStrategy.SERVICE_ACCOUNT and auth.service_account is not None:
        account = auth.service_account
        return MintingPlan(account, None, (account.namespace, name, MINTED_TOKEN_KEY))
    ref = auth.secret_ref
    if ref is None:
        return None
    secret = (ref.namespace, ref.name, ref.key)
    output = (ref.namespace, name, MINTED_TOKEN_KEY)
    if auth.strategy is AuthStrategy.SIGV4:
        settings = BedrockTokenSettings(endpoint_region(provider.spec.endpoint))
        return MintingPlan(settings, secret, output)
    if auth.strategy is AuthStrategy.CUSTOM and auth.custom is not None:
        header_entry = auth.custom.header_entry(auth.header)
        return MintingPlan(CustomValueSettings(ref.key, auth.header, header_entry), secret, output)
    if auth.strategy is not AuthStrategy.OAUTH2 or auth.oauth2 is None:
        return None
    return MintingPlan(auth.oauth2, secret, output)


async def post_token_request(
    request: TokenRequest, session: aiohttp.ClientSession | None, timeout_s: float
) -> AccessToken:
    """Send ``request`` to its token endpoint and read the answer. Raises
    :class:`TokenEndpointError` (``unreachable`` when no answer came)."""
    reply = await fetch(
        request.url,
        timeout=timeout_s,
        max_body_bytes=MAX_RESPONSE_BYTES,
        headers=request.headers,
        session=session,
        form=request.form,
    )
    if reply.error is not None and reply.status is None:
        raise TokenEndpointError(f"the token endpoint: {reply.error}", unreachable=True)
    if reply.error is not None or reply.status is None:
        raise TokenEndpointError(f"the token endpoint's answer: {reply.error}")
    return parse_token_response(reply.status, reply.body)


def oauth2_mint(
    settings: OAuth2Settings, source: SecretSource, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Mint:
    """Mints an Oauth2 provider's tokens from the Secret entry ``source`` reads."""

    async def mint(now: datetime, session: aiohttp.ClientSession | None) -> AccessToken:
        secret = await source()
        request = token_request(settings, secret, now, secrets.token_urlsafe(24))
        del secret  # kept no longer than it takes to build the request
        return await post_token_request(request, session, timeout_s)

    return mint


def sigv4_mint(settings: BedrockTokenSettings, secret_key_entry: str, read: SecretEntries) -> Mint:
    """Signs a Sigv4 provider's Bedrock API key with the AWS credentials the Secret holds
    (the secret access key under ``secret_key_entry``), read at each attempt. Nothing is
    asked of AWS: the key is a presigned request, so it lives as long as it is signed for."""

    async def mint(now: datetime, session: aiohttp.ClientSession | None) -> AccessToken:
        del session  # signed here, sent nowhere
        entries = await read((secret_key_entry, *OTHER_ENTRIES))
        credentials = aws_credentials(entries, secret_key_entry, settings)
        del entries  # kept no longer than it takes to read the credentials
        # SigV4 dates to the second: the key lapses that much sooner after ``now``.
        signed_at = now.replace(microsecond=0)
        lifetime_s = token_lifetime_s(credentials, signed_at)
        key = bedrock_token(credentials, signed_at, lifetime_s)
        return AccessToken(key, lifetime_s - (now - signed_at).total_seconds())

    return mint


async def exchange_token(
    settings: TokenExchange,
    subject: AccessToken,
    session: aiohttp.ClientSession | None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> AccessToken:
    """The STS's token for ``subject`` (RFC 8693), with the life the STS gives it."""
    return await post_token_request(exchange_request(settings, subject.value), session, timeout_s)


class KeyWriter:
    """Writes one provider's credentials where the gateway reads them, each under a key of
    its own, and says which keys the gateway is told about (:mod:`grid.oauth.rotation`)."""

    def __init__(self, provider: str, plan: MintingPlan, sink: TokenSink, settle: Settle) -> None:
        self.provider = provider
        self.plan = plan
        self._sink = sink
        self.settle = settle
        self.issued: tuple[IssuedKey, ...] = ()
        """The credentials where the gateway reads them, oldest first (by key and life)."""
        self._looked = False

    def keys(self, now: datetime) -> TokenKeys | None:
        """What the gateway is told at ``now``: the key the overlay names and the keys its
        configuration lists (None before a credential is written)."""
        return token_keys(self.issued, now, self.settle)

    def next_key_change(self, now: datetime) -> datetime | None:
        return next_change(self.issued, now, self.settle)

    async def write(
        self, value: str, now: datetime, expires_at: datetime, header: str | None = None
    ) -> None:
        """Put ``value`` under a new key, keeping the keys the gateway may still read."""
        issued = self.issued
        if not self._looked:
            # Credentials written before this writer started (another life of the shell,
            # the plain key ``token``): the gateway may be using one of them.
            issued = found_keys(await self._sink.keys())
        new = IssuedKey(token_key(now), now, expires_at, header)
        kept = kept_after(issued, new, token_keys(issued, now, self.settle))
        await self._sink.write(new.key, value, frozenset(k.key for k in kept))
        self.issued = kept
        self._looked = True


class TokenMinter(KeyWriter):
    """Mints and refreshes one provider's token: :meth:`attempt` when
    :attr:`health` says one is due."""

    def __init__(
        self,
        provider: str,
        plan: MintingPlan,
        mint: Mint,
        sink: TokenSink,
        *,
        draw: Callable[[], float] = _random.random,
        settle: Settle = AGENT_SETTLE,
    ) -> None:
        super().__init__(provider, plan, sink, settle)
        self._mint = mint
        self._draw = draw
        self.health = TokenHealth()

    @property
    def next_attempt_at(self) -> datetime | None:
        return self.health.next_attempt_at

    def due(self, now: datetime) -> bool:
        return self.health.due(now)

    def expires_at(self, now: datetime) -> datetime | None:
        """When the valid token in place lapses (None without one)."""
        token = self.health.valid_token(now)
        return None if token is None else token.expires_at

    def verdict(self, now: datetime) -> tuple[CredentialState, str]:
        return self.health.verdict(now)

    async def attempt(self, now: datetime, session: aiohttp.ClientSession | None = None) -> None:
        """Ask for a token at ``now``; on success write it and plan its refresh, else plan
        the retry. Never raises for the endpoint's or the Secret's trouble."""
        started = time.monotonic()
        try:
            token = await self._mint(now, session)
        except CredentialMaterialError as error:
            self._failed(FailureKind.SECRET, str(error), now)
            return
        except TokenEndpointError as error:
            kind = FailureKind.UNREACHABLE if error.unreachable else FailureKind.REFUSED
            self._failed(kind, str(error), now)
            return
        # The settle times count from the write: the token did not exist before the
        # endpoint answered, which may take a while. Its life counts from the request.
        written = now + timedelta(seconds=time.monotonic() - started)
        expires_at = now + timedelta(seconds=token.expires_in_s)
        try:
            await self.write(token.value, written, expires_at)
        except OSError as error:
            self._failed(
                FailureKind.OUTPUT, f"the token could not be written: {error.strerror}", now
            )
            return
        except GridError as error:
            self._failed(FailureKind.OUTPUT, f"the token could not be written: {error}", now)
            return
        life = plan_refresh(now, token.expires_in_s, spread=self._draw() * 2 - 1)
        self.health = self.health.minted(life)
        _log.info(
            "provider %s: token minted, valid until %s, refreshed from %s",
            self.provider,
            life.expires_at.isoformat(),
            life.refresh_at.isoformat(),
        )

    def fail_unexpectedly(self, error: str, now: datetime) -> None:
        """An attempt ended with an unexpected ``error`` (a bug): counted as a failure, so
        that the next attempt backs off like any other."""
        self._failed(FailureKind.REFUSED, f"the attempt failed unexpectedly ({error})", now)

    def _failed(self, kind: FailureKind, problem: str, now: datetime) -> None:
        self.health = self.health.failed(kind, problem, now, self._draw())
        _log.warning(
            "provider %s: no token: %s; next attempt at %s",
            self.provider,
            problem,
            self.health.next_attempt_at.isoformat() if self.health.next_attempt_at else "now",
        )
