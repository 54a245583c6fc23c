"""What a token endpoint's answer means (RFC 6749 sections 5.1 and 5.2).

A success is a JSON object with an ``access_token`` that can go in an ``Authorization``
header as it is (RFC 6750's b64token characters), ``token_type`` Bearer and a positive
``expires_in``. An error answer gives its OAuth ``error`` code at most: the rest of the
body (``error_description`` included) may echo what the client sent, so it is never
quoted. Anything else is refused with a sentence that names the rule, never the value.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from grid.errors import TokenEndpointError

MAX_RESPONSE_BYTES = 64 * 1024
"""Largest answer read; a token endpoint's answers are a few kilobytes."""
MAX_TOKEN_BYTES = 16 * 1024
"""Largest access token accepted: it travels in a request header."""
DEFAULT_LIFETIME_S = 300.0
"""The life taken for a token whose answer gives no ``expires_in`` (it is only
recommended): short, so that a token the endpoint meant to live briefly is replaced in
time."""
MAX_LIFETIME_S = 30 * 86400.0
"""A longer ``expires_in`` is taken as this: the token is refreshed at least monthly."""
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
ERROR_CODES = frozenset(
    {
        "invalid_request",
        "invalid_client",
        "invalid_grant",
        "unauthorized_client",
        "unsupported_grant_type",
        "invalid_scope",
        "invalid_target",
        "access_denied",
        "server_error",
        "temporarily_unavailable",
    }
)
"""The error codes of RFC 6749 section 5.2 (and RFC 8707's invalid_target, the server
errors of section 4.1.2.1): the only part of an error answer that is repeated. Any other
value could be anything the server chose to echo."""


@dataclass(frozen=True, slots=True)
class AccessToken:
    """A token as obtained. ``value`` is never printed (not in ``repr`` either)."""

    value: str = field(repr=False)
    expires_in_s: float


def parse_token_response(status: int, body: bytes) -> AccessToken:
    """The token in an answer with HTTP ``status`` and ``body``. Raises
    :class:`TokenEndpointError` for an error answer or one that holds no usable token."""
    if status != 200:
        code = _error_code(body)
        detail = f" ({code})" if code else ""
        raise TokenEndpointError(f"the token endpoint answered HTTP {status}{detail}")
    document = _json_object(body)
    token = document.get("access_token")
    if not isinstance(token, str) or not token:
        raise TokenEndpointError("the token endpoint's answer has no access_token")
    if not is_bearer_token(token):
        raise TokenEndpointError(
            "the token endpoint's access_token is not a bearer token (RFC 6750 characters, "
            f"at most {MAX_TOKEN_BYTES} bytes)"
        )
    token_type = document.get("token_type")
    if not isinstance(token_type, str) or token_type.lower() != "bearer":
        raise TokenEndpointError("the token endpoint's answer is not a Bearer token_type")
    return AccessToken(token, _lifetime(document.get("expires_in")))


def is_bearer_token(token: str) -> bool:
    """Whether ``token`` can go in an ``Authorization`` header as it is: RFC 6750's
    b64token characters, at most :data:`MAX_TOKEN_BYTES`."""
    return len(token) <= MAX_TOKEN_BYTES and _B64TOKEN.fullmatch(token) is not None


def _json_object(body: bytes) -> dict[str, object]:
    if len(body) > MAX_RESPONSE_BYTES:
        raise TokenEndpointError(f"the token endpoint's answer exceeds {MAX_RESPONSE_BYTES} bytes")
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise TokenEndpointError("the token endpoint's answer is not JSON") from None
    if not isinstance(document, dict):
        raise TokenEndpointError("the token endpoint's answer is not a JSON object")
    return document


def _lifetime(value: object) -> float:
    if value is None:
        return DEFAULT_LIFETIME_S
    seconds: float
    if isinstance(value, bool):
        seconds = math.nan
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 12:
        seconds = float(value)  # some endpoints send the number as a string
    else:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise TokenEndpointError("the token endpoint's expires_in is not a positive number")
    return min(seconds, MAX_LIFETIME_S)


def _error_code(body: bytes) -> str:
    """The ``error`` of an RFC 6749 error answer when it is one of :data:`ERROR_CODES`;
    anything else in the body is left unread."""
    try:
        document = json.loads(body[:MAX_RESPONSE_BYTES])
    except (UnicodeDecodeError, ValueError, RecursionError):
        return ""
    code = document.get("error") if isinstance(document, dict) else None
    return code if isinstance(code, str) and code in ERROR_CODES else ""
