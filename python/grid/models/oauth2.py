"""``spec.auth.oauth2`` of an InferenceProvider: how the site that owns the provider mints
its short-lived access tokens (OAuth 2.0 client credentials, RFC 6749 section 4.4, with a
client secret or a private-key JWT; or the JWT-bearer grant of RFC 7523 with a Google
service-account key). Only settings live here: the secret, the private key or the key file
stays in the Secret ``auth.secretRef`` names."""

from __future__ import annotations

import hashlib
import re
from enum import StrEnum
from typing import Annotated, Self

from pydantic import AfterValidator, ConfigDict, Field, model_validator

from grid.models.common import GridModel
from grid.models.fields import NO_WHITESPACE
from grid.models.urls import ENDPOINT_PATTERN, URL_HOST_AND_PORT, URL_IPV6_HOST, check_http_url
from grid.models.validation_rules import Reason, ValidationRule, cel_string, present, validations

MAX_SCOPES = 32
MAX_SCOPE_LENGTH = 256
SCOPE_PATTERN = r"^[!#-\[\]-~]+$"
"""A scope token: printable ASCII without space, double quote or backslash (RFC 6749,
section 3.3)."""
_SCOPE = re.compile(SCOPE_PATTERN)
CLIENT_ID_PATTERN = r"^[!-~]+$"
"""A client id as it can travel in a form field and a JWT claim: printable ASCII, no space."""
MAX_SECRET_NAME_LENGTH = 253
_LOOPBACK_HTTP = r"^http://(localhost|127\.[0-9.]+|\[::1\])(:[0-9]+)?(/.*)?$"


class OAuth2Grant(StrEnum):
    """How a token is asked for."""

    CLIENT_CREDENTIALS = "ClientCredentials"
    """RFC 6749 section 4.4: the client authenticates as itself."""
    JWT_BEARER = "JwtBearer"
    """RFC 7523 section 2.1 with a Google service-account key: an assertion signed with the
    key is exchanged for a token at the key's ``token_uri``."""


class ClientAuthentication(StrEnum):
    """How a ClientCredentials client proves who it is to the token endpoint."""

    CLIENT_SECRET = "ClientSecret"
    """The Secret holds the client secret, sent with HTTP Basic (RFC 6749 section 2.3.1)."""
    PRIVATE_KEY_JWT = "PrivateKeyJwt"
    """The Secret holds a PEM private key (RSA or EC P-256) that signs a client assertion
    (RFC 7523 section 2.2)."""


def _check_scope(scope: str) -> str:
    if not _SCOPE.fullmatch(scope):
        raise ValueError("a scope is printable ASCII without spaces, double quotes or backslashes")
    return scope


def check_token_url(url: str) -> str:
    """``url`` if a client may send its credentials there: an http(s) URL (see
    :func:`~grid.models.urls.check_http_url`) that is https, or http to loopback."""
    check_http_url(url)
    if not url.startswith("https://") and not re.fullmatch(_LOOPBACK_HTTP, url):
        raise ValueError(TOKEN_URL_HTTPS.message)
    return url


Scope = Annotated[
    str,
    AfterValidator(_check_scope),
    Field(min_length=1, max_length=MAX_SCOPE_LENGTH, pattern=SCOPE_PATTERN),
]

TOKEN_URL_HTTPS = ValidationRule(
    f"self.startsWith('https://') || self.matches({cel_string(_LOOPBACK_HTTP)})",
    "must be an https:// URL (the client's credentials travel to it); http:// only to "
    "localhost or a loopback address",
)
CLIENT_CREDENTIALS_NEEDS_CLIENT = ValidationRule(
    f"self.grant != 'ClientCredentials' || ({present('tokenUrl')} && {present('clientId')})",
    "grant ClientCredentials needs tokenUrl and clientId",
    reason=Reason.REQUIRED,
)
JWT_BEARER_TAKES_NO_CLIENT = ValidationRule(
    f"self.grant != 'JwtBearer' || "
    f"(!({present('clientId')}) && !({present('clientAuthentication')}))",
    "grant JwtBearer takes no clientId nor clientAuthentication: the service-account key "
    "in the Secret names the client and signs for it",
    reason=Reason.FORBIDDEN,
)

TokenUrl = Annotated[
    str,
    AfterValidator(check_token_url),
    Field(
        json_schema_extra={
            "pattern": ENDPOINT_PATTERN,
            "maxLength": 2048,
            **validations(NO_WHITESPACE, URL_HOST_AND_PORT, URL_IPV6_HOST, TOKEN_URL_HTTPS),
        }
    ),
]
"""A provider URL (:data:`grid.models.urls.HttpUrl`) that is https, or http to loopback."""


class OAuth2Settings(GridModel):
    """Where and how the owning site mints the provider's access tokens."""

    model_config = ConfigDict(
        json_schema_extra=validations(CLIENT_CREDENTIALS_NEEDS_CLIENT, JWT_BEARER_TAKES_NO_CLIENT)
    )

    grant: OAuth2Grant = Field(
        description="ClientCredentials (RFC 6749 section 4.4) or JwtBearer (RFC 7523, a Google "
        "service-account key in the Secret)."
    )
    token_url: TokenUrl | None = Field(
        None,
        description="The token endpoint. Required for ClientCredentials; for JwtBearer the "
        "key's token_uri when left out.",
    )
    client_id: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        pattern=CLIENT_ID_PATTERN,
        description="ClientCredentials: the client's id (the Secret holds its secret or key).",
    )
    client_authentication: ClientAuthentication | None = Field(
        None,
        description="ClientCredentials: ClientSecret (default; the Secret holds the client "
        "secret) or PrivateKeyJwt (the Secret holds a PEM private key, RSA or EC P-256).",
    )
    scopes: list[Scope] = Field(
        default_factory=list,
        max_length=MAX_SCOPES,
        description="Scopes asked for, e.g. https://www.googleapis.com/auth/cloud-platform.",
    )
    audience: str | None = Field(
        None,
        min_length=1,
        max_length=1024,
        pattern=CLIENT_ID_PATTERN,
        description="The audience parameter some token endpoints take (the API the token is for).",
    )

    @model_validator(mode="after")
    def _grant_fields(self) -> Self:
        if self.grant is OAuth2Grant.CLIENT_CREDENTIALS:
            if self.token_url is None or self.client_id is None:
                raise ValueError(CLIENT_CREDENTIALS_NEEDS_CLIENT.message)
        elif self.client_id is not None or self.client_authentication is not None:
            raise ValueError(JWT_BEARER_TAKES_NO_CLIENT.message)
        return self

    @property
    def authentication(self) -> ClientAuthentication:
        """How the client authenticates (ClientSecret unless told otherwise)."""
        return self.client_authentication or ClientAuthentication.CLIENT_SECRET


MINTED_TOKEN_KEY = "token"
"""The key a minted token is written under."""
_MINTED_TOKEN_PREFIX = "grid-token-"


def minted_token_secret(provider: str) -> str:
    """The name of the Secret (the agent: the directory) a provider's minted token is
    written to, and the overlay's reference names: ``grid-token-<provider>``, or, for a
    provider name too long for that, ``grid-token-`` and a digest of it."""
    name = _MINTED_TOKEN_PREFIX + provider
    if len(name) <= MAX_SECRET_NAME_LENGTH:
        return name
    return _MINTED_TOKEN_PREFIX + hashlib.sha256(provider.encode()).hexdigest()[:32]
