"""A Kubernetes ServiceAccount token as a provider's credential, the pure part: what the
TokenRequest API's answer means, and the RFC 8693 token exchange that trades the token for
the one a security token service issues (``grant_type`` token-exchange, the ServiceAccount
token as ``subject_token`` of type ``urn:ietf:params:oauth:token-type:jwt``). The STS's
answer is an RFC 6749 token answer, read by :func:`~grid.oauth.responses.parse_token_response`.

Nothing here prints a token: the request's form stays out of its ``repr``, and a refusal
says which rule the answer broke, never what it held.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from grid.errors import TokenEndpointError
from grid.models.service_account import (
    ACCESS_TOKEN_TYPE,
    JWT_TOKEN_TYPE,
    TOKEN_EXCHANGE,
    TokenExchange,
)
from grid.oauth.requests import TokenRequest
from grid.oauth.responses import MAX_TOKEN_BYTES, AccessToken, is_bearer_token


def exchange_request(settings: TokenExchange, subject_token: str) -> TokenRequest:
    """The RFC 8693 request (section 2.1) that trades ``subject_token`` at the STS."""
    form = {
        "grant_type": TOKEN_EXCHANGE,
        "subject_token": subject_token,
        "subject_token_type": JWT_TOKEN_TYPE,
        "requested_token_type": ACCESS_TOKEN_TYPE,
    }
    if settings.audience:
        form["audience"] = settings.audience
    if settings.scopes:
        form["scope"] = " ".join(settings.scopes)
    return TokenRequest(url=settings.token_url, form=form, headers={"Accept": "application/json"})


def parse_token_request(answer: Mapping[str, object], now: datetime) -> AccessToken:
    """The token in a TokenRequest answer (``status.token``, ``status.expirationTimestamp``)
    received at ``now``, its life counted from then. Raises :class:`TokenEndpointError`
    when the answer holds no token a header can carry or no future expiry."""
    status = answer.get("status")
    if not isinstance(status, Mapping):
        raise TokenEndpointError("the TokenRequest answer has no status")
    token = status.get("token")
    if not isinstance(token, str) or not token:
        raise TokenEndpointError("the TokenRequest answer has no token")
    if not is_bearer_token(token):
        raise TokenEndpointError(
            "the TokenRequest answer's token is not a bearer token (RFC 6750 characters, "
            f"at most {MAX_TOKEN_BYTES} bytes)"
        )
    expires = status.get("expirationTimestamp")
    if isinstance(expires, str):
        try:
            expires = datetime.fromisoformat(expires)
        except ValueError:
            expires = None
    if not isinstance(expires, datetime) or expires.tzinfo is None:
        raise TokenEndpointError("the TokenRequest answer has no expirationTimestamp")
    life = (expires - now).total_seconds()
    if life <= 0:
        raise TokenEndpointError("the TokenRequest answer's token has already expired")
    return AccessToken(token, life)
