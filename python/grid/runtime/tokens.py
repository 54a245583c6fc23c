"""Minting a provider's OAuth 2.0 access tokens, the I/O part: reading the Secret, asking
the token endpoint (one bounded POST, :func:`grid.observe._http.fetch`), writing the token
where the gateway reads it, and keeping :class:`~grid.oauth.schedule.TokenHealth`. When to
ask, what to send and what an answer means are decided in :mod:`grid.oauth`.

A token, a client secret or a private key is never logged, never put in an exception and
never kept beyond the attempt that uses it; a token endpoint's error body is reduced to its
OAuth error code.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from random import SystemRandom

import aiohttp

from grid.errors import CredentialMaterialError, TokenEndpointError
from grid.models.oauth2 import OAuth2Settings
from grid.oauth.requests import token_request
from grid.oauth.responses import MAX_RESPONSE_BYTES, parse_token_response
from grid.oauth.schedule import FailureKind, TokenHealth, plan_refresh
from grid.observe._http import fetch
from grid.runtime.metrics import Family, Kind

DEFAULT_TIMEOUT_S = 10.0
"""How long one token request may take, connection and answer included."""

CREDENTIAL_EXPIRY_FAMILY = Family(
    "grid_provider_credential_expiry_timestamp_seconds",
    Kind.GAUGE,
    "When the access token this site minted for a provider lapses (Unix time); none while "
    "no valid token is in place.",
    ("network", "provider"),
)

SecretSource = Callable[[], bytes]
"""Reads the provider's Secret entry; raises :class:`CredentialMaterialError` saying what is
wrong (missing, empty) without its content."""
TokenSink = Callable[[str], None]
"""Puts a token where the gateway reads it (atomically); raises :class:`OSError`."""

_log = logging.getLogger(__name__)
_random = SystemRandom()


@dataclass(frozen=True, slots=True)
class MintingPlan:
    """What a minter is built from; a change of any part starts a new minter."""

    settings: OAuth2Settings
    secret: tuple[str, str, str]
    """(namespace, name, key) of the Secret entry."""
    output: tuple[str, str, str]
    """(namespace, name, key) the token is written under."""


class TokenMinter:
    """Mints and refreshes one provider's token: :meth:`attempt` when
    :attr:`health` says one is due."""

    def __init__(
        self,
        provider: str,
        plan: MintingPlan,
        source: SecretSource,
        sink: TokenSink,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        draw: Callable[[], float] = _random.random,
    ) -> None:
        self.provider = provider
        self.plan = plan
        self._source = source
        self._sink = sink
        self._timeout_s = timeout_s
        self._draw = draw
        self.health = TokenHealth()

    async def attempt(self, now: datetime, session: aiohttp.ClientSession | None = None) -> None:
        """Ask for a token at ``now``; on success write it and plan its refresh, else plan
        the retry. Never raises for the endpoint's or the Secret's trouble."""
        try:
            value, expires_in = await self._mint(now, session)
        except CredentialMaterialError as error:
            self._failed(FailureKind.SECRET, str(error), now)
            return
        except TokenEndpointError as error:
            kind = FailureKind.UNREACHABLE if error.unreachable else FailureKind.REFUSED
            self._failed(kind, str(error), now)
            return
        try:
            self._sink(value)
        except OSError as error:
            self._failed(
                FailureKind.REFUSED, f"the token could not be written: {error.strerror}", now
            )
            return
        life = plan_refresh(now, expires_in, spread=self._draw() * 2 - 1)
        self.health = self.health.minted(life)
        _log.info(
            "provider %s: token minted, valid until %s, refreshed from %s",
            self.provider,
            life.expires_at.isoformat(),
            life.refresh_at.isoformat(),
        )

    async def _mint(
        self, now: datetime, session: aiohttp.ClientSession | None
    ) -> tuple[str, float]:
        request = token_request(self.plan.settings, self._source(), now, secrets.token_urlsafe(24))
        reply = await fetch(
            request.url,
            timeout=self._timeout_s,
            max_body_bytes=MAX_RESPONSE_BYTES,
            headers=request.headers,
            session=session,
            form=request.form,
        )
        if reply.error is not None and reply.status is None:
            raise TokenEndpointError(f"the token endpoint: {reply.error}", unreachable=True)
        if reply.error is not None or reply.status is None:
            raise TokenEndpointError(f"the token endpoint's answer: {reply.error}")
        token = parse_token_response(reply.status, reply.body)
        return token.value, token.expires_in_s

    def _failed(self, kind: FailureKind, problem: str, now: datetime) -> None:
        self.health = self.health.failed(kind, problem, now, self._draw())
        _log.warning(
            "provider %s: no token: %s; next attempt at %s",
            self.provider,
            problem,
            self.health.next_attempt_at.isoformat() if self.health.next_attempt_at else "now",
        )
