"""Amazon Bedrock's short-term API key, derived from AWS credentials: the pure part.

The key is a SigV4 presigned request, never sent by Grid: ``POST
https://bedrock.amazonaws.com/?Action=CallWithBearerToken`` signed for the service
``bedrock`` in one region, valid ``X-Amz-Expires`` seconds from ``X-Amz-Date`` (at most
12 hours, and no longer than the session credentials that sign it). The presigned URL
without its scheme, with ``&Version=1`` appended, base64-encoded behind ``bedrock-api-key-``
is the bearer token Bedrock accepts in ``Authorization`` for its own and its runtime's
actions in that region, with the signing principal's permissions.

The signature is computed here (SigV4 query signing, the same canonical request as AWS's
SDKs build for a presigned URL) so that it is signed as of the ``now`` it is given and no
signing library's debug log ever holds the canonical request (which carries the session
token) or the signature. The secret access key and the session token never appear in a
``repr``, a message or an exception.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import quote, urlsplit

from grid.errors import CredentialMaterialError

TOKEN_PREFIX = "bedrock-api-key-"
SIGNED_HOST = "bedrock.amazonaws.com"
SIGNED_SERVICE = "bedrock"
SIGNED_ACTION = "CallWithBearerToken"
TOKEN_VERSION = "Version=1"
MAX_LIFETIME_S = 43200
"""Twelve hours: the longest a short-term Bedrock API key is accepted."""
MIN_LIFETIME_S = 300
"""Session credentials this close to lapsing sign no key. Every key they sign lapses with
them, so re-signing brings no more time; and what they could still sign would lapse about
when the mounted Secret reaches the gateway (the kubelet syncs it within about a minute),
and when the alert ``GridProviderCredentialExpiring`` fires."""
ALGORITHM = "AWS4-HMAC-SHA256"
_TIMESTAMP = "%Y%m%dT%H%M%SZ"
_EMPTY_BODY_SHA256 = hashlib.sha256(b"").hexdigest()

ACCESS_KEY_ID_ENTRY = "AWS_ACCESS_KEY_ID"
SECRET_ACCESS_KEY_ENTRY = "AWS_SECRET_ACCESS_KEY"
"""The usual name of the entry ``secretRef.key`` names."""
SESSION_TOKEN_ENTRY = "AWS_SESSION_TOKEN"
REGION_ENTRY = "AWS_REGION"
EXPIRATION_ENTRY = "AWS_CREDENTIAL_EXPIRATION"
OTHER_ENTRIES = (ACCESS_KEY_ID_ENTRY, SESSION_TOKEN_ENTRY, REGION_ENTRY, EXPIRATION_ENTRY)
"""The entries read beside the secret access key, under the names of AWS's environment
variables (what ``aws configure export-credentials --format env-no-export`` prints)."""

_ACCESS_KEY_ID = re.compile(r"[A-Z0-9]{16,128}")
_SECRET_TEXT = re.compile(r"[!-~]{1,4096}")
"""A secret access key or a session token: printable ASCII without spaces."""
REGION_PATTERN = r"[a-z]{2,4}(-[a-z]+)+-[0-9]{1,2}"
_REGION = re.compile(REGION_PATTERN)
_BEDROCK_HOST = re.compile(
    rf"bedrock(-runtime)?(-fips)?\.(?P<region>{REGION_PATTERN})\.(amazonaws\.com(\.cn)?|api\.aws)"
)


@dataclass(frozen=True, slots=True)
class BedrockTokenSettings:
    """What minting a Sigv4 provider's key takes besides its Secret: the region its
    endpoint names, if it is a Bedrock endpoint (the key works in one region only)."""

    endpoint_region: str | None


@dataclass(frozen=True, slots=True)
class AwsCredentials:
    """AWS credentials read from a Secret; the secret parts are kept out of ``repr``."""

    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(repr=False)
    region: str
    expires_at: datetime | None
    """When session credentials lapse, if the Secret says (``AWS_CREDENTIAL_EXPIRATION``)."""


def endpoint_region(endpoint: str) -> str | None:
    """The region of a Bedrock endpoint (``https://bedrock-runtime.<region>.amazonaws.com``,
    its ``-fips`` and dual-stack ``api.aws`` forms, the control plane's ``bedrock.<region>``),
    else None."""
    host = urlsplit(endpoint).hostname or ""
    found = _BEDROCK_HOST.fullmatch(host)
    return found.group("region") if found else None


def aws_credentials(
    entries: Mapping[str, bytes], secret_key_entry: str, settings: BedrockTokenSettings
) -> AwsCredentials:
    """The credentials in a Secret's ``entries``: the secret access key under
    ``secret_key_entry``, the others under :data:`OTHER_ENTRIES`. The region is the
    Secret's ``AWS_REGION``, else the endpoint's. Raises :class:`CredentialMaterialError`
    naming what is missing or malformed, never a value (a region only once it is one)."""
    secret = _text(entries, secret_key_entry, "the secret access key")
    access_key_id = _text(entries, ACCESS_KEY_ID_ENTRY, "the access key id")
    if secret is None or access_key_id is None:
        missing = secret_key_entry if secret is None else ACCESS_KEY_ID_ENTRY
        raise CredentialMaterialError(f"the Secret has no {missing} entry")
    if not _ACCESS_KEY_ID.fullmatch(access_key_id):
        raise CredentialMaterialError(
            f"{ACCESS_KEY_ID_ENTRY} is not an access key id (16 to 128 capitals and digits)"
        )
    if not _SECRET_TEXT.fullmatch(secret):
        raise CredentialMaterialError(
            f"{secret_key_entry} is not a secret access key (printable ASCII, no spaces)"
        )
    session_token = _text(entries, SESSION_TOKEN_ENTRY, "the session token")
    if session_token is not None and not _SECRET_TEXT.fullmatch(session_token):
        raise CredentialMaterialError(
            f"{SESSION_TOKEN_ENTRY} is not a session token (printable ASCII, no spaces)"
        )
    return AwsCredentials(
        access_key_id=access_key_id,
        secret_access_key=secret,
        session_token=session_token,
        region=_region(entries, settings),
        expires_at=_expiration(entries),
    )


def token_lifetime_s(credentials: AwsCredentials, signed_at: datetime) -> int:
    """How long a key signed at ``signed_at`` lives, in whole seconds: 12 hours, or until
    the session credentials lapse when that is sooner (a key outlives no credentials that
    signed it). Raises :class:`CredentialMaterialError` when they lapse within
    :data:`MIN_LIFETIME_S`."""
    if credentials.expires_at is None:
        return MAX_LIFETIME_S
    left = int((credentials.expires_at - signed_at).total_seconds())
    if left < MIN_LIFETIME_S:
        moment = credentials.expires_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        raise CredentialMaterialError(
            f"the session credentials lapse at {moment} ({EXPIRATION_ENTRY}), too soon to "
            f"sign a key (less than {MIN_LIFETIME_S} s left): the Secret needs new ones"
        )
    return min(left, MAX_LIFETIME_S)


def bedrock_token(credentials: AwsCredentials, signed_at: datetime, lifetime_s: int) -> str:
    """The short-term Bedrock API key signed with ``credentials`` at ``signed_at`` (to the
    second), valid for ``lifetime_s`` seconds (1 to 43200) from then."""
    if not 1 <= lifetime_s <= MAX_LIFETIME_S:
        raise ValueError(f"a Bedrock API key lives 1 to {MAX_LIFETIME_S} seconds")
    timestamp = signed_at.astimezone(UTC).strftime(_TIMESTAMP)
    scope = f"{timestamp[:8]}/{credentials.region}/{SIGNED_SERVICE}/aws4_request"
    # The operation's parameter first, then the signing ones, as AWS's SDKs lay them out.
    parameters = [
        ("Action", SIGNED_ACTION),
        ("X-Amz-Algorithm", ALGORITHM),
        ("X-Amz-Credential", f"{credentials.access_key_id}/{scope}"),
        ("X-Amz-Date", timestamp),
        ("X-Amz-Expires", str(lifetime_s)),
        ("X-Amz-SignedHeaders", "host"),
    ]
    if credentials.session_token is not None:
        parameters.append(("X-Amz-Security-Token", credentials.session_token))
    encoded = [(_uri_encode(name), _uri_encode(value)) for name, value in parameters]
    canonical_request = "\n".join(
        (
            "POST",
            "/",
            "&".join(f"{name}={value}" for name, value in sorted(encoded)),
            f"host:{SIGNED_HOST}\n",
            "host",
            _EMPTY_BODY_SHA256,
        )
    )
    string_to_sign = "\n".join(
        (ALGORITHM, timestamp, scope, hashlib.sha256(canonical_request.encode()).hexdigest())
    )
    signature = hmac.new(
        _signing_key(credentials, timestamp[:8]), string_to_sign.encode(), hashlib.sha256
    ).hexdigest()
    query = "&".join(f"{name}={value}" for name, value in encoded)
    presigned = f"{SIGNED_HOST}/?{query}&X-Amz-Signature={signature}&{TOKEN_VERSION}"
    return TOKEN_PREFIX + base64.b64encode(presigned.encode()).decode()


def _signing_key(credentials: AwsCredentials, date: str) -> bytes:
    key = f"AWS4{credentials.secret_access_key}".encode()
    for part in (date, credentials.region, SIGNED_SERVICE, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def _uri_encode(value: str) -> str:
    """SigV4's encoding: every byte but the unreserved characters of RFC 3986."""
    return quote(value, safe="-_.~")


def _text(entries: Mapping[str, bytes], name: str, what: str) -> str | None:
    raw = entries.get(name)
    if raw is None:
        return None
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise CredentialMaterialError(f"{name} ({what}) is not ASCII text") from None
    # A file written by an editor or `echo` ends with a newline that is no part of it.
    text = text.removesuffix("\n").removesuffix("\r")
    if not text:
        raise CredentialMaterialError(f"{name} ({what}) is empty")
    return text


def _region(entries: Mapping[str, bytes], settings: BedrockTokenSettings) -> str:
    named = _text(entries, REGION_ENTRY, "the region")
    if named is not None and not _REGION.fullmatch(named):
        raise CredentialMaterialError(f"{REGION_ENTRY} is not an AWS region (e.g. us-east-1)")
    if named is None and settings.endpoint_region is None:
        raise CredentialMaterialError(
            f"no region: the Secret has no {REGION_ENTRY} entry and the endpoint is not a "
            "Bedrock endpoint that names one"
        )
    if named is not None and settings.endpoint_region not in (None, named):
        raise CredentialMaterialError(
            f"the Secret's {REGION_ENTRY} is {named} but the endpoint is in "
            f"{settings.endpoint_region}: a key works in its own region only"
        )
    region = named or settings.endpoint_region
    assert region is not None  # one of the two, checked above
    return region


def _expiration(entries: Mapping[str, bytes]) -> datetime | None:
    text = _text(entries, EXPIRATION_ENTRY, "when the session credentials lapse")
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise CredentialMaterialError(
            f"{EXPIRATION_ENTRY} is not an ISO 8601 time (e.g. 2026-01-01T12:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        raise CredentialMaterialError(f"{EXPIRATION_ENTRY} names no time zone (end it with Z)")
    return moment
