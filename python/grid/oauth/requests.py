"""What is sent to a token endpoint, built from a provider's ``auth.oauth2`` settings and
the bytes of its Secret entry:

* ClientCredentials with ClientSecret: ``grant_type=client_credentials``, the client
  authenticated with HTTP Basic (RFC 6749 sections 2.3.1 and 4.4.2);
* ClientCredentials with PrivateKeyJwt: the same grant, the client authenticated by a JWT
  it signs with its private key (RFC 7523 sections 2.2 and 3: ``iss`` and ``sub`` the
  client id, ``aud`` the token URL, a unique ``jti``, five minutes of life);
* JwtBearer: a Google service-account key signs an assertion (``iss`` the account's
  e-mail, ``scope``, ``aud`` the token URL, an hour of life) exchanged under
  ``grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`` (RFC 7523 section 2.1).

Signing uses PyJWT over ``cryptography`` keys. Nothing here prints a secret: the request's
form and headers are left out of its ``repr``, and a malformed Secret is reported by what
is wrong with it, never by what it holds.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from urllib.parse import quote

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from grid.errors import CredentialMaterialError
from grid.models.oauth2 import ClientAuthentication, OAuth2Grant, OAuth2Settings, check_token_url

CLIENT_CREDENTIALS = "client_credentials"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
CLIENT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
CLIENT_ASSERTION_LIFE = timedelta(minutes=5)
GRANT_ASSERTION_LIFE = timedelta(hours=1)
"""Google accepts assertions of at most an hour."""
MAX_SECRET_BYTES = 64 * 1024

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


@dataclass(frozen=True, slots=True)
class TokenRequest:
    """One POST to a token endpoint (``application/x-www-form-urlencoded``)."""

    url: str
    form: Mapping[str, str] = field(repr=False)
    headers: Mapping[str, str] = field(repr=False)


@dataclass(frozen=True, slots=True)
class ServiceAccountKey:
    """What the JWT-bearer grant needs from a Google service-account key file."""

    client_email: str
    token_uri: str
    key_id: str | None
    private_key: PrivateKey = field(repr=False)


def read_private_key(data: bytes, what: str = "the Secret's entry") -> tuple[PrivateKey, str]:
    """An unencrypted PEM private key (RSA of at least 2048 bits, or EC P-256) and the JWS
    algorithm it signs with (RS256, ES256). Raises :class:`CredentialMaterialError`."""
    try:
        key = load_pem_private_key(data, password=None)
    except TypeError:
        raise CredentialMaterialError(f"{what} is an encrypted private key") from None
    except (ValueError, binascii.Error):
        raise CredentialMaterialError(f"{what} is not a PEM private key") from None
    if isinstance(key, rsa.RSAPrivateKey):
        if key.key_size < 2048:
            raise CredentialMaterialError(f"{what} is an RSA key shorter than 2048 bits")
        return key, "RS256"
    if isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP256R1):
        return key, "ES256"
    raise CredentialMaterialError(f"{what} is neither an RSA nor an EC P-256 private key")


def read_service_account_key(data: bytes) -> ServiceAccountKey:
    """A Google service-account key file (JSON, ``type`` service_account). Raises
    :class:`CredentialMaterialError` naming the field that is missing or wrong."""
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise CredentialMaterialError("the Secret's entry is not a JSON key file") from None
    if not isinstance(document, dict) or document.get("type") != "service_account":
        raise CredentialMaterialError(
            "the Secret's entry is not a service-account key file (type service_account)"
        )
    fields: dict[str, str] = {}
    for name in ("client_email", "private_key", "token_uri"):
        value = document.get(name)
        if not isinstance(value, str) or not value:
            raise CredentialMaterialError(f"the service-account key file has no {name}")
        fields[name] = value
    try:
        check_token_url(fields["token_uri"])
    except ValueError as error:
        raise CredentialMaterialError(f"the key file's token_uri {error}") from None
    key_id = document.get("private_key_id")
    private_key, algorithm = read_private_key(
        fields["private_key"].encode(), "the key file's private_key"
    )
    if algorithm != "RS256":
        raise CredentialMaterialError("the key file's private_key is not an RSA key")
    return ServiceAccountKey(
        client_email=fields["client_email"],
        token_uri=fields["token_uri"],
        key_id=key_id if isinstance(key_id, str) and key_id else None,
        private_key=private_key,
    )


def read_client_secret(data: bytes) -> str:
    """A client secret as stored (one line ending with a newline, as ``kubectl create
    secret --from-file`` keeps it, is the line)."""
    try:
        secret = data.decode("utf-8").removesuffix("\n").removesuffix("\r")
    except UnicodeDecodeError:
        raise CredentialMaterialError("the client secret is not UTF-8 text") from None
    if not secret or any(ord(char) < 0x20 or ord(char) == 0x7F for char in secret):
        raise CredentialMaterialError("the client secret is empty or holds control characters")
    return secret


def token_request(
    settings: OAuth2Settings, secret: bytes, now: datetime, nonce: str
) -> TokenRequest:
    """The request that asks for a token at ``now`` with the Secret entry ``secret``;
    ``nonce`` (random, unique per request) is the ``jti`` of any JWT signed for it. Raises
    :class:`CredentialMaterialError` when the Secret does not hold what the grant needs."""
    if len(secret) > MAX_SECRET_BYTES:
        raise CredentialMaterialError(f"the Secret's entry exceeds {MAX_SECRET_BYTES} bytes")
    form: dict[str, str] = {}
    headers = {"Accept": "application/json"}
    if settings.grant is OAuth2Grant.JWT_BEARER:
        account = read_service_account_key(secret)
        url = settings.token_url or account.token_uri
        claims: dict[str, object] = {
            "iss": account.client_email,
            "aud": url,
            "iat": _seconds(now),
            "exp": _seconds(now + GRANT_ASSERTION_LIFE),
            "jti": nonce,
        }
        if settings.scopes:
            claims["scope"] = " ".join(settings.scopes)
        key_id = {"kid": account.key_id} if account.key_id else None
        form["grant_type"] = JWT_BEARER
        form["assertion"] = jwt.encode(claims, account.private_key, "RS256", headers=key_id)
    else:
        url, client_id = _client_credentials_target(settings)
        form["grant_type"] = CLIENT_CREDENTIALS
        if settings.scopes:
            form["scope"] = " ".join(settings.scopes)
        if settings.authentication is ClientAuthentication.PRIVATE_KEY_JWT:
            key, algorithm = read_private_key(secret)
            assertion = {
                "iss": client_id,
                "sub": client_id,
                "aud": url,
                "iat": _seconds(now),
                "exp": _seconds(now + CLIENT_ASSERTION_LIFE),
                "jti": nonce,
            }
            form["client_id"] = client_id
            form["client_assertion_type"] = CLIENT_ASSERTION_TYPE
            form["client_assertion"] = jwt.encode(assertion, key, algorithm)
        else:
            # RFC 6749 section 2.3.1: both parts form-encoded before Basic's base64.
            pair = f"{quote(client_id, safe='')}:{quote(read_client_secret(secret), safe='')}"
            basic = base64.b64encode(pair.encode()).decode()
            headers["Authorization"] = f"Basic {basic}"
    if settings.audience:
        form["audience"] = settings.audience
    return TokenRequest(url=url, form=form, headers=headers)


def _client_credentials_target(settings: OAuth2Settings) -> tuple[str, str]:
    if settings.token_url is None or settings.client_id is None:
        # The model refuses such settings; a caller that built them by hand learns why.
        raise CredentialMaterialError("grant ClientCredentials needs tokenUrl and clientId")
    return settings.token_url, settings.client_id


def _seconds(moment: datetime) -> int:
    return int(moment.timestamp())
