"""When a minted token is refreshed, when a failed attempt is retried, and what the
provider's ``CredentialsValid`` condition says meanwhile. Pure: every answer is computed
from the state and ``now``; randomness comes in as numbers the caller draws.

A token is refreshed at 80 % of its life, spread by up to 5 % of its life either way so
that the sites (and the providers of one site) do not all ask at once. A failed attempt is
retried after 1 s, 2 s, 4 s ... up to 5 min, each delay drawn between half and all of that
step; while the token in place is still valid, no wait is longer than a quarter of what is
left of it, so that several attempts are made before it lapses. The provider stays routable
as long as a token is valid, and is withdrawn only when none is.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from grid.models.phases import CredentialState

REFRESH_FRACTION = 0.8
"""Share of a token's life after which it is replaced."""
REFRESH_SPREAD = 0.05
"""Largest shift of the refresh, as a share of the life, either way."""
EXPIRING_FRACTION = 0.1
"""A token whose refresh fails is Expiring in this last share of its life."""
RETRY_FIRST_S = 1.0
RETRY_CAP_S = 300.0
MIN_RETRY_S = 1.0


class FailureKind(StrEnum):
    """Why an attempt gave no token."""

    UNREACHABLE = "unreachable"
    """The token endpoint could not be asked: connection, TLS, timeout."""
    REFUSED = "refused"
    """It answered with an error, or with something that is no token."""
    SECRET = "secret"
    """The Secret does not hold what the grant needs."""
    OUTPUT = "output"
    """A token was obtained but could not be written where the gateway reads it."""


_NO_TOKEN_STATES = {
    FailureKind.UNREACHABLE: CredentialState.ISSUER_UNREACHABLE,
    FailureKind.REFUSED: CredentialState.TOKEN_REFUSED,
    FailureKind.SECRET: CredentialState.SECRET_UNUSABLE,
    FailureKind.OUTPUT: CredentialState.TOKEN_NOT_WRITTEN,
}


@dataclass(frozen=True, slots=True)
class TokenLife:
    """When a token was issued, when it lapses, and when it is to be replaced."""

    issued_at: datetime
    expires_at: datetime
    refresh_at: datetime

    @property
    def lifetime_s(self) -> float:
        return (self.expires_at - self.issued_at).total_seconds()


def plan_refresh(issued_at: datetime, expires_in_s: float, spread: float) -> TokenLife:
    """The life of a token issued at ``issued_at`` for ``expires_in_s`` seconds, refreshed
    at 80 % of it shifted by ``spread`` (from -1 to 1) times 5 % of it."""
    if not -1.0 <= spread <= 1.0:
        raise ValueError("spread must be between -1 and 1")
    if not expires_in_s > 0:
        raise ValueError("a token's life must be positive")
    share = REFRESH_FRACTION + REFRESH_SPREAD * spread
    return TokenLife(
        issued_at=issued_at,
        expires_at=issued_at + timedelta(seconds=expires_in_s),
        refresh_at=issued_at + timedelta(seconds=expires_in_s * share),
    )


def retry_delay(failures: int, draw: float, remaining_s: float | None = None) -> float:
    """Seconds to wait after the ``failures``-th failure in a row: 1 s doubling up to
    5 min, drawn (``draw`` from 0 to 1) between half and all of that step, and, while a
    token is still valid for ``remaining_s``, at most a quarter of that (never under 1 s)."""
    if failures < 1:
        raise ValueError("a retry follows at least one failure")
    if not 0.0 <= draw <= 1.0:
        raise ValueError("draw must be between 0 and 1")
    step: float = min(RETRY_CAP_S, RETRY_FIRST_S * 2.0 ** min(failures - 1, 30))
    delay = step * (0.5 + 0.5 * draw)
    if remaining_s is not None and remaining_s > 0:
        delay = min(delay, max(MIN_RETRY_S, remaining_s / 4))
    return delay


@dataclass(frozen=True, slots=True)
class TokenHealth:
    """Where minting a provider's token stands: the token in place (if any) and the
    failures since the last success."""

    token: TokenLife | None = None
    next_attempt_at: datetime | None = None
    """None: an attempt is due now (nothing was tried yet)."""
    failures: int = 0
    failing_since: datetime | None = None
    failure: FailureKind | None = None
    problem: str = ""
    """The last failure, secret-free (an OAuth error code at most, never a body)."""

    def minted(self, life: TokenLife) -> TokenHealth:
        """A token was obtained: it replaces the one in place; failures are forgotten."""
        return TokenHealth(token=life, next_attempt_at=life.refresh_at)

    def failed(self, kind: FailureKind, problem: str, now: datetime, draw: float) -> TokenHealth:
        """An attempt at ``now`` gave no token; the next one waits :func:`retry_delay`."""
        failures = self.failures + 1
        valid = self.valid_token(now)
        remaining = None if valid is None else (valid.expires_at - now).total_seconds()
        delay = retry_delay(failures, draw, remaining)
        return replace(
            self,
            next_attempt_at=now + timedelta(seconds=delay),
            failures=failures,
            failing_since=self.failing_since or now,
            failure=kind,
            problem=problem,
        )

    def due(self, now: datetime) -> bool:
        """Whether an attempt is due at ``now``."""
        return self.next_attempt_at is None or now >= self.next_attempt_at

    def valid_token(self, now: datetime) -> TokenLife | None:
        """The token in place if it has not lapsed at ``now``."""
        if self.token is not None and now < self.token.expires_at:
            return self.token
        return None

    def verdict(self, now: datetime) -> tuple[CredentialState, str]:
        """The provider's credential state at ``now`` and the sentence its
        ``CredentialsValid`` condition carries (times, never the token)."""
        valid = self.valid_token(now)
        failing = ""
        if self.failing_since is not None:
            failing = f"refreshing fails since {_moment(self.failing_since)}: {self.problem}"
        if valid is not None:
            until = f"the token in place is valid until {_moment(valid.expires_at)}"
            if self.failing_since is None:
                return CredentialState.MINTED, (
                    f"token minted at {_moment(valid.issued_at)}, {until}, refreshed from "
                    f"{_moment(valid.refresh_at)}"
                )
            left = (valid.expires_at - now).total_seconds()
            if left <= EXPIRING_FRACTION * valid.lifetime_s:
                return CredentialState.EXPIRING, f"{until}, then withdrawn; {failing}"
            return CredentialState.REFRESH_FAILING, f"{until}; {failing}"
        if self.failure is None:
            return CredentialState.MINTING, "no token yet: the first one is being asked for"
        lapsed = ""
        if self.token is not None:
            lapsed = f" (the last one lapsed at {_moment(self.token.expires_at)})"
        return _NO_TOKEN_STATES[self.failure], (
            f"no valid token{lapsed}: {failing.replace('refreshing fails', 'minting fails')}"
        )


def _moment(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
