"""``spec.auth.serviceAccount`` of an InferenceProvider: the Kubernetes ServiceAccount whose
tokens the operator of the site that owns the provider asks the API server for (the
TokenRequest API, for the provider's audience), and an optional exchange of that token at a
security token service (RFC 8693), as workload identity federation does. Only names live
here: the token is minted, never stored in the resource."""

from __future__ import annotations

from pydantic import Field

from grid.models.common import GridModel
from grid.models.fields import DnsLabel, DnsSubdomain
from grid.models.oauth2 import CLIENT_ID_PATTERN, MAX_SCOPES, Scope, TokenUrl

MIN_EXPIRATION_S = 600
"""The shortest token the TokenRequest API issues."""
MAX_EXPIRATION_S = 86400
DEFAULT_EXPIRATION_S = 3600
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"


class TokenExchange(GridModel):
    """Where the ServiceAccount token is exchanged for the token the provider takes."""

    token_url: TokenUrl = Field(
        description="The security token service's endpoint (RFC 8693), https:// (http:// only "
        "to localhost or a loopback address), e.g. https://sts.googleapis.com/v1/token."
    )
    audience: str | None = Field(
        None,
        min_length=1,
        max_length=1024,
        pattern=CLIENT_ID_PATTERN,
        description="The audience parameter of the exchange (for Google's STS, the workload "
        "identity provider's resource name).",
    )
    scopes: list[Scope] = Field(
        default_factory=list,
        max_length=MAX_SCOPES,
        description="Scopes asked for, sent as the space-separated scope parameter.",
    )


class ServiceAccountSettings(GridModel):
    """The ServiceAccount the operator mints the provider's tokens for."""

    name: DnsSubdomain = Field(description="The ServiceAccount's name.")
    namespace: DnsLabel = Field(
        description="The ServiceAccount's namespace, where the minted token's Secret "
        "grid-token-<provider> is written too: the namespace the gateway mounts its "
        "credentials from."
    )
    audience: str = Field(
        min_length=1,
        max_length=1024,
        pattern=CLIENT_ID_PATTERN,
        description="The audience the token is issued for (its aud claim): the provider's "
        "API, or the STS's identity provider when the token is exchanged.",
    )
    expiration_seconds: int = Field(
        DEFAULT_EXPIRATION_S,
        ge=MIN_EXPIRATION_S,
        le=MAX_EXPIRATION_S,
        description="The life asked for the token, 600 to 86400 seconds (default 3600).",
    )
    exchange: TokenExchange | None = Field(
        None,
        description="Exchange the ServiceAccount token at a security token service (RFC 8693) "
        "and hand the gateway the token it issues.",
    )
