"""InferenceProvider: inference capacity offered to the grid, where it sits, what it costs,
how to check it, how to authenticate to it (by Secret reference only) and how to read its
load from Prometheus metrics. Its models and prices are in :mod:`grid.models.offers`, its
URLs' type in :mod:`grid.models.urls`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Annotated, Literal, Self
from urllib.parse import urlsplit

from pydantic import AfterValidator, AwareDatetime, ConfigDict, Field, model_validator

from grid.models.common import AuthStrategy, BackendKind, GridModel, ProviderKind
from grid.models.conditions import Conditions
from grid.models.custom import CustomSettings
from grid.models.fields import (
    LIST_SET,
    NO_WHITESPACE,
    TIMEOUT_WITHIN_INTERVAL,
    DnsSubdomain,
    Duration,
    Token,
    is_ip_address,
    list_map,
    unique_by,
    unique_values,
    within,
)
from grid.models.meta import API_VERSION, ObjectMeta, SecretKeyRef
from grid.models.oauth2 import OAuth2Settings
from grid.models.offers import Cost, ModelOffer
from grid.models.selectors import LabelSelector
from grid.models.service_account import ServiceAccountSettings
from grid.models.urls import HttpUrl
from grid.models.validation_rules import Reason, ValidationRule, cel_string, present, validations

PROMETHEUS_METRIC_PATTERN = r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"
_PROMETHEUS_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

SECRET_STRATEGIES = frozenset(
    {
        AuthStrategy.API_KEY,
        AuthStrategy.BEARER_TOKEN,
        AuthStrategy.OAUTH2,
        AuthStrategy.SIGV4,
        AuthStrategy.CUSTOM,
    }
)
"""Strategies that need a credential from a Secret (the others use the mesh's mutual TLS or
the workload's service account)."""

HTTP_HEADER_NAME_PATTERN = r"^[-!#$%&'*+.^_`|~0-9A-Za-z]+$"
"""An HTTP header field name: one or more token characters (RFC 9110, section 5.1)."""
MAX_HEADER_NAME_LENGTH = 256
_HTTP_HEADER_NAME = re.compile(HTTP_HEADER_NAME_PATTERN)
GATEWAY_OWNED_HEADERS: Mapping[str, str] = MappingProxyType(
    {
        name.lower(): name
        for name in (
            "Host",
            "Content-Length",
            "Transfer-Encoding",
            "Connection",
            "Keep-Alive",
            "Proxy-Connection",
            "Proxy-Authenticate",
            "Proxy-Authorization",
            "TE",
            "Trailer",
            "Upgrade",
        )
    }
)
"""Headers the gateway (or the HTTP layer under it) sets itself: framing, the target host
and the hop-by-hop headers (RFC 9110, section 7.6.1). An API key cannot go in one of them.
Keyed by lower case (header names are case-insensitive), valued by the usual spelling."""

DEFAULT_API_KEY_HEADERS: Mapping[ProviderKind, str | None] = MappingProxyType(
    {
        ProviderKind.ANTHROPIC: "x-api-key",
        ProviderKind.VERTEX: "x-goog-api-key",
        ProviderKind.SELF_HOSTED: "x-api-key",
        ProviderKind.OPEN_AI: None,
        ProviderKind.BEDROCK: None,
    }
)
"""The header an ApiKey provider's key goes in when ``auth.header`` is left out, by
``providerKind``. None: the kind takes its API keys as bearer tokens (``Authorization:
Bearer <key>``), so the credential is sent as one."""


class HealthCheck(GridModel):
    """Active HTTP health check against the provider's endpoint."""

    model_config = ConfigDict(json_schema_extra=validations(TIMEOUT_WITHIN_INTERVAL))

    path: str = Field(
        "/health",
        pattern=r"^/[^\s?#]*$",
        max_length=1024,
        json_schema_extra=validations(NO_WHITESPACE),
    )
    interval: Annotated[Duration, within(1, 3600)] = Duration.parse("10s")
    timeout: Annotated[Duration, within(0.1, 300)] = Duration.parse("2s")
    healthy_threshold: int = Field(
        2, ge=1, le=100, description="Consecutive passes before the provider is Available."
    )
    unhealthy_threshold: int = Field(
        3, ge=1, le=100, description="Consecutive failures before it is Unavailable."
    )
    expected_status: int = Field(200, ge=100, le=599)

    @model_validator(mode="after")
    def _timeout_within_interval(self) -> Self:
        if self.timeout.seconds >= self.interval.seconds:
            raise ValueError(TIMEOUT_WITHIN_INTERVAL.message)
        return self


_GATEWAY_OWNED_HELP = (
    "the gateway sets it itself (Host, Content-Length, Transfer-Encoding and the hop-by-hop "
    "headers such as Connection are the gateway's)"
)
HEADER_NOT_AUTHORIZATION = ValidationRule(
    "self.lowerAscii() != 'authorization'",
    "must not be Authorization: a key sent there is a bearer token, use strategy "
    "BearerToken (or leave header out)",
)
_OWNED_BY_LOWER_CASE = ", ".join(
    f"{cel_string(lower)}: {cel_string(usual)}" for lower, usual in GATEWAY_OWNED_HEADERS.items()
)
HEADER_NOT_THE_GATEWAYS = ValidationRule(
    f"!(self.lowerAscii() in [{', '.join(cel_string(lower) for lower in GATEWAY_OWNED_HEADERS)}])",
    "must not be a header the gateway sets itself (Host, Content-Length, Transfer-Encoding "
    "and the hop-by-hop headers such as Connection are the gateway's)",
    message_expression=f"'must not be ' + {{{_OWNED_BY_LOWER_CASE}}}[self.lowerAscii()] + "
    f"{cel_string(': ' + _GATEWAY_OWNED_HELP)}",
)


def check_api_key_header(name: str) -> str:
    """``name`` if an API key may be sent in a request header of that name: a valid header
    field name of at most 256 characters, neither Authorization (a key sent there is a bearer
    token: strategy BearerToken) nor a header the gateway sets itself. Raises
    :class:`ValueError` naming the rule, never the value."""
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_HEADER_NAME_LENGTH:
        raise ValueError(f"must be an HTTP header name of 1 to {MAX_HEADER_NAME_LENGTH} characters")
    if not _HTTP_HEADER_NAME.fullmatch(name):
        raise ValueError(
            "must be an HTTP header name: letters, digits and !#$%&'*+-.^_`|~ (no spaces or colons)"
        )
    lowered = name.lower()
    if lowered == "authorization":
        raise ValueError(HEADER_NOT_AUTHORIZATION.message)
    if lowered in GATEWAY_OWNED_HEADERS:
        raise ValueError(f"must not be {GATEWAY_OWNED_HEADERS[lowered]}: {_GATEWAY_OWNED_HELP}")
    return name


HeaderName = Annotated[
    str,
    AfterValidator(check_api_key_header),
    Field(
        json_schema_extra={
            "pattern": HTTP_HEADER_NAME_PATTERN,
            "minLength": 1,
            "maxLength": MAX_HEADER_NAME_LENGTH,
            **validations(HEADER_NOT_AUTHORIZATION, HEADER_NOT_THE_GATEWAYS),
        }
    ),
]


def api_key_header(
    provider_kind: ProviderKind, strategy: AuthStrategy, header: str | None = None
) -> str | None:
    """The request header the gateway puts a provider's API key in, or None when its
    credential (if any) is sent as a bearer token.

    Strategy ApiKey uses ``header`` when given, else the default of the provider's kind
    (:data:`DEFAULT_API_KEY_HEADERS`: ``x-api-key`` for anthropic and self_hosted,
    ``x-goog-api-key`` for vertex). open_ai and bedrock take API keys as bearer tokens, so
    an ApiKey provider of those kinds without a header gets None. Strategy Custom uses
    ``header`` only (None without one: such a provider is not offered).
    """
    if strategy == AuthStrategy.CUSTOM:
        return header
    if strategy != AuthStrategy.API_KEY:
        return None
    if header is not None:
        return header
    return DEFAULT_API_KEY_HEADERS[provider_kind]


_SECRET_STRATEGY_NAMES = sorted(SECRET_STRATEGIES)
_SECRET_HELP = "(name, namespace, key of the Secret holding the credential)"
_HEADER_HELP = (
    "remove header, or use strategy ApiKey (or Custom) to send the Secret's value in that header"
)
SECRET_REF_NEEDED = ValidationRule(
    f"!(self.strategy in [{', '.join(cel_string(s) for s in _SECRET_STRATEGY_NAMES)}]) || "
    f"({present('secretRef')})",
    f"strategies {', '.join(_SECRET_STRATEGY_NAMES[:-1])} and {_SECRET_STRATEGY_NAMES[-1]} "
    f"need secretRef {_SECRET_HELP}",
    field_path=".secretRef",
    reason=Reason.REQUIRED,
    message_expression="'strategy ' + self.strategy + "
    + cel_string(" needs secretRef " + _SECRET_HELP),
)
HEADER_STRATEGIES = (AuthStrategy.API_KEY, AuthStrategy.CUSTOM)
"""Strategies whose credential the gateway sends in a named request header."""
HEADER_WITH_HEADER_STRATEGIES = ValidationRule(
    f"!({present('header')}) || "
    f"self.strategy in [{', '.join(cel_string(s) for s in HEADER_STRATEGIES)}]",
    f"header goes with strategy ApiKey or Custom only: {_HEADER_HELP}",
    field_path=".header",
    reason=Reason.FORBIDDEN,
    message_expression="'header goes with strategy ApiKey or Custom only, not ' + self.strategy + "
    f"{cel_string(': ' + _HEADER_HELP)}",
)

OAUTH2_WITH_OAUTH2_ONLY = ValidationRule(
    f"!({present('oauth2')}) || self.strategy == 'Oauth2'",
    "oauth2 goes with strategy Oauth2 only",
    field_path=".oauth2",
    reason=Reason.FORBIDDEN,
)
CUSTOM_WITH_CUSTOM_ONLY = ValidationRule(
    f"!({present('custom')}) || self.strategy == 'Custom'",
    "custom goes with strategy Custom only",
    field_path=".custom",
    reason=Reason.FORBIDDEN,
)
ONE_HEADER_SOURCE = ValidationRule(
    f"!({present('header')} && {present('custom')} && {present('custom.headerKey')})",
    "set header or custom.headerKey, not both: the header's name comes from the spec or "
    "from the Secret",
    field_path=".custom",
    reason=Reason.FORBIDDEN,
)
SERVICE_ACCOUNT_WITH_SERVICE_ACCOUNT_ONLY = ValidationRule(
    f"!({present('serviceAccount')}) || self.strategy == 'ServiceAccount'",
    "serviceAccount goes with strategy ServiceAccount only",
    field_path=".serviceAccount",
    reason=Reason.FORBIDDEN,
)


class ProviderAuth(GridModel):
    """How the gateway authenticates to the provider. Only a Secret *reference* is held;
    the gateway reads the mounted file."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            SECRET_REF_NEEDED,
            HEADER_WITH_HEADER_STRATEGIES,
            OAUTH2_WITH_OAUTH2_ONLY,
            SERVICE_ACCOUNT_WITH_SERVICE_ACCOUNT_ONLY,
            CUSTOM_WITH_CUSTOM_ONLY,
            ONE_HEADER_SOURCE,
        )
    )

    strategy: AuthStrategy
    secret_ref: SecretKeyRef | None = None
    header: HeaderName | None = Field(
        None,
        description="ApiKey and Custom: the request header the Secret's value is sent in "
        "(e.g. x-api-key). ApiKey's default is by providerKind: x-api-key for anthropic and "
        "self_hosted, x-goog-api-key for vertex; open_ai and bedrock send the key as a bearer "
        "token. Custom has no default: without header it is not offered. A key in a header "
        "of its own is offered only to gateways with apiKeyCredentials. Never "
        "Authorization, Host, Content-Length or a hop-by-hop header.",
    )
    oauth2: OAuth2Settings | None = Field(
        None,
        description="Oauth2 only: where and how the site that owns the provider mints its "
        "access tokens; without it an Oauth2 provider is not offered.",
    )
    service_account: ServiceAccountSettings | None = Field(
        None,
        description="ServiceAccount only: the ServiceAccount whose tokens the operator of the "
        "site that owns the provider mints for it (TokenRequest), and an optional exchange at "
        "a security token service; without it the gateway sends no credential.",
    )
    custom: CustomSettings | None = Field(
        None,
        description="Custom only: the entry secretRef.key names is a template ({{entry}} "
        "naming other entries of the same Secret, e.g. 'Token {{apiKey}}'), which the site "
        "that owns the provider renders and writes where the gateway reads it; the header's "
        "name is auth.header or the Secret's custom.headerKey entry (default 'header'). "
        "Without it a Custom provider's Secret value is sent as it is.",
    )

    @model_validator(mode="after")
    def _secret_when_needed(self) -> Self:
        if self.strategy in SECRET_STRATEGIES and self.secret_ref is None:
            raise ValueError(f"strategy {self.strategy} needs secretRef {_SECRET_HELP}")
        if self.header is not None and self.strategy not in HEADER_STRATEGIES:
            raise ValueError(
                f"header goes with strategy ApiKey or Custom only, not {self.strategy}: "
                f"{_HEADER_HELP}"
            )
        if self.oauth2 is not None and self.strategy is not AuthStrategy.OAUTH2:
            raise ValueError(OAUTH2_WITH_OAUTH2_ONLY.message)
        if self.service_account is not None and self.strategy is not AuthStrategy.SERVICE_ACCOUNT:
            raise ValueError(SERVICE_ACCOUNT_WITH_SERVICE_ACCOUNT_ONLY.message)
        if self.custom is not None and self.strategy is not AuthStrategy.CUSTOM:
            raise ValueError(CUSTOM_WITH_CUSTOM_ONLY.message)
        if self.custom is not None and self.header is not None and self.custom.header_key:
            raise ValueError(ONE_HEADER_SOURCE.message)
        return self


class AccessPolicy(GridModel):
    """Which sites may consume this provider."""

    site_selector: LabelSelector = Field(description="Labels of the GridSites allowed.")


class Aggregation(StrEnum):
    """How several matching series combine into one value."""

    SUM = "sum"
    MAX = "max"
    MIN = "min"
    AVG = "avg"


PROMETHEUS_LABEL_NAMES = ValidationRule(
    f"self.all(name, name.matches({cel_string('^' + _PROMETHEUS_LABEL.pattern + '$')}))",
    "Prometheus label names are letters, digits and '_', not starting with a digit",
)


def _check_matchers(labels: dict[str, str]) -> dict[str, str]:
    for name in labels:
        if not _PROMETHEUS_LABEL.fullmatch(name):
            raise ValueError(PROMETHEUS_LABEL_NAMES.message)
    return labels


MetricMatchers = Annotated[
    dict[str, str],
    AfterValidator(_check_matchers),
    Field(json_schema_extra=validations(PROMETHEUS_LABEL_NAMES)),
]
"""Label values a series must have to count, by Prometheus label name."""


HISTOGRAMS_SUM = ValidationRule(
    f"!({present('quantile')} && {present('aggregation')})",
    "aggregation does not apply to a histogram (quantile): its buckets always sum across "
    "series; drop aggregation",
    field_path=".aggregation",
    reason=Reason.FORBIDDEN,
)


class MetricSelector(GridModel):
    """A Prometheus metric (and label matchers) read as one signal."""

    model_config = ConfigDict(json_schema_extra=validations(HISTOGRAMS_SUM))

    metric: str = Field(pattern=PROMETHEUS_METRIC_PATTERN, max_length=256)
    labels: Annotated[
        dict[str, str],
        AfterValidator(_check_matchers),
        Field(json_schema_extra=validations(PROMETHEUS_LABEL_NAMES)),
    ] = Field(default_factory=dict, description="Label values a series must have to count.")
    aggregation: Aggregation | None = Field(
        None,
        description="How several matching series combine into one value. Unset, each signal "
        "keeps its own: queueDepth sums, kvCacheUtilization and p99LatencyMs take the "
        "maximum, prefixCacheHitRatio averages, health takes the minimum. Not with quantile "
        "(a histogram's buckets always sum).",
    )
    quantile: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="When set, metric names a histogram (its _bucket series) and this "
        "quantile of it is the value, e.g. 0.99 for p99 latency.",
    )
    scale: float = Field(
        1.0, gt=0, le=1e9, description="Multiplier applied to the value (1000: s to ms)."
    )

    @model_validator(mode="after")
    def _histograms_sum(self) -> Self:
        if self.quantile is not None and self.aggregation is not None:
            raise ValueError(HISTOGRAMS_SUM.message)
        return self


_SIGNALS = ("queueDepth", "kvCacheUtilization", "prefixCacheHitRatio", "p99LatencyMs", "health")
A_SIGNAL_MAPPED = ValidationRule(
    " || ".join(f"({present(signal)})" for signal in _SIGNALS),
    f"map at least one of {', '.join(_SIGNALS)}",
)


class SignalMapping(GridModel):
    """Which metric feeds each scraped signal. ``health`` is healthy when non-zero."""

    model_config = ConfigDict(json_schema_extra=validations(A_SIGNAL_MAPPED))

    queue_depth: MetricSelector | None = None
    kv_cache_utilization: MetricSelector | None = None
    prefix_cache_hit_ratio: MetricSelector | None = None
    p99_latency_ms: MetricSelector | None = None
    health: MetricSelector | None = None

    @model_validator(mode="after")
    def _at_least_one(self) -> Self:
        if not any(
            (
                self.queue_depth,
                self.kv_cache_utilization,
                self.prefix_cache_hit_ratio,
                self.p99_latency_ms,
                self.health,
            )
        ):
            raise ValueError(A_SIGNAL_MAPPED.message)
        return self


class OnMetricsError(StrEnum):
    """What a failed scrape means for scoring."""

    NEUTRAL = "neutral"
    """Missing signals score a neutral 0.5."""
    PESSIMISTIC = "pessimistic"
    """Missing signals score as worst (0)."""


URL_OR_PORT = ValidationRule(
    f"({present('url')}) != ({present('port')})",
    "set either url, or port (with an optional path), not both",
)
PATH_WITH_PORT = ValidationRule(
    f"!({present('url')} && {present('path')})",
    "path goes with port; with url put the path in the url",
    field_path=".path",
    reason=Reason.FORBIDDEN,
)


class MetricsConfig(GridModel):
    """Prometheus scrape of the provider's load. Either ``url``, or ``port`` (and ``path``,
    default /metrics) on the endpoint's host."""

    model_config = ConfigDict(
        json_schema_extra=validations(URL_OR_PORT, PATH_WITH_PORT, TIMEOUT_WITHIN_INTERVAL)
    )

    url: HttpUrl | None = None
    path: str | None = Field(
        None, pattern=r"^/[^\s?#]*$", max_length=1024, json_schema_extra=validations(NO_WHITESPACE)
    )
    port: int | None = Field(None, ge=1, le=65535)
    interval: Annotated[Duration, within(1, 3600)] = Duration.parse("15s")
    timeout: Annotated[Duration, within(0.1, 300)] = Duration.parse("5s")
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    signals: SignalMapping
    on_error: OnMetricsError = OnMetricsError.NEUTRAL

    @model_validator(mode="after")
    def _one_target(self) -> Self:
        if (self.url is None) == (self.port is None):
            raise ValueError(URL_OR_PORT.message)
        if self.url is not None and self.path is not None:
            raise ValueError(PATH_WITH_PORT.message)
        if self.timeout.seconds >= self.interval.seconds:
            raise ValueError(TIMEOUT_WITHIN_INTERVAL.message)
        return self


# The host of an endpoint the pattern accepts: bracketed (IPv6), or before a port's colon.
_ENDPOINT_NETLOC = "self.endpoint.split('/')[2]"
ENDPOINT_IP_NEEDS_SERVER_NAME = ValidationRule(
    f"!self.endpoint.startsWith('https://') || ({present('serverName')}) || "
    f"!({_ENDPOINT_NETLOC}.startsWith('[') || isIP({_ENDPOINT_NETLOC}.split(':')[0]))",
    "endpoint is an https URL with an IP address: set serverName, the DNS name its "
    "certificate carries (gateways send only DNS names as SNI)",
    field_path=".serverName",
    reason=Reason.REQUIRED,
)


class InferenceProviderSpec(GridModel):
    """Desired state of an InferenceProvider."""

    model_config = ConfigDict(json_schema_extra=validations(ENDPOINT_IP_NEEDS_SERVER_NAME))

    grid_network_ref: DnsSubdomain = Field(description="Name of the parent GridNetwork.")
    backend_kind: BackendKind
    provider_kind: ProviderKind
    models: Annotated[list[ModelOffer], unique_by("name"), list_map("name")] = Field(
        min_length=1, max_length=256
    )
    endpoint: HttpUrl
    server_name: DnsSubdomain | None = Field(
        None,
        description="TLS server name (SNI) and Host for the endpoint; default its host. "
        "Required for an https endpoint whose host is an IP address.",
    )
    cluster: Token | None = Field(
        None, description="Upstream cluster name in the gateway; default the provider name."
    )
    site_selector: LabelSelector | None = Field(
        None, description="Labels of the GridSites this provider sits at."
    )
    cost: Cost | None = None
    health_check: HealthCheck | None = None
    auth: ProviderAuth | None = None
    access_policy: AccessPolicy | None = Field(
        None, description="Sites allowed to consume the provider; all sites when unset."
    )
    metrics_config: MetricsConfig | None = None

    @model_validator(mode="after")
    def _server_name_for_ip_tls(self) -> Self:
        parts = urlsplit(self.endpoint)
        https = parts.scheme == "https"
        if https and self.server_name is None and is_ip_address(parts.hostname or ""):
            raise ValueError(ENDPOINT_IP_NEEDS_SERVER_NAME.message)
        return self


class InferenceProviderPhase(StrEnum):
    PENDING = "Pending"
    AVAILABLE = "Available"
    DEGRADED = "Degraded"
    UNAVAILABLE = "Unavailable"


class HealthCheckStatus(GridModel):
    """The last health check and the current run of equal results."""

    at: AwareDatetime
    healthy: bool
    status_code: int | None = Field(None, ge=100, le=599)
    latency_ms: float | None = Field(None, ge=0)
    consecutive_successes: int = Field(0, ge=0)
    consecutive_failures: int = Field(0, ge=0)
    message: str = Field("", max_length=4096)


class ScrapeStatus(GridModel):
    """The last metrics scrape."""

    at: AwareDatetime
    ok: bool
    message: str = Field("", max_length=4096)


class InferenceProviderStatus(GridModel):
    """Observed state of an InferenceProvider, written by Grid."""

    phase: InferenceProviderPhase = InferenceProviderPhase.PENDING
    phase_transition_time: AwareDatetime | None = None
    observed_generation: int | None = Field(None, ge=0)
    conditions: Conditions = Field(default_factory=list)
    matching_sites: Annotated[list[DnsSubdomain], AfterValidator(unique_values), LIST_SET] = Field(
        default_factory=list, description="GridSites the provider sits at."
    )
    last_health_check: HealthCheckStatus | None = None
    last_metrics_scrape: ScrapeStatus | None = None


class InferenceProvider(GridModel):
    """Inference capacity offered to the grid: the models it serves, where it sits, what it
    costs, how to check and authenticate to it, and how to read its load."""

    api_version: Literal["grid.praxis-proxy.io/v1alpha1"] = API_VERSION
    kind: Literal["InferenceProvider"] = "InferenceProvider"
    metadata: ObjectMeta
    spec: InferenceProviderSpec
    status: InferenceProviderStatus | None = None

    @property
    def cluster(self) -> str:
        """Upstream cluster name in the gateway: ``spec.cluster`` or the provider's name."""
        return self.spec.cluster or self.metadata.name
