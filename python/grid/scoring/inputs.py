"""What scoring needs to know about each candidate and about the consuming site.

Plain immutable values, checked when built: the site engine makes them from replicated
state, the what-if renderer from resource YAML; scoring never asks where they came from.
A candidate is one model of one provider at one site.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from types import MappingProxyType

from grid.errors import ScoringInputError
from grid.models.common import BackendKind
from grid.models.provider import check_api_key_header
from grid.models.selectors import LabelSelector

MAX_NAME_BYTES = 256


def check_name(value: object, what: str) -> None:
    """Refuse a name the overlay contract would refuse: not a non-blank string of at most
    256 UTF-8 bytes."""
    if not isinstance(value, str) or not value.strip():
        raise ScoringInputError(f"{what} must be a non-blank string")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ScoringInputError(f"{what} is not valid Unicode text") from None
    if size > MAX_NAME_BYTES:
        raise ScoringInputError(f"{what} is longer than {MAX_NAME_BYTES} bytes")


@dataclass(frozen=True, slots=True)
class Geography:
    """Where a site is; either part may be unknown."""

    region: str | None = None
    zone: str | None = None


UNKNOWN_GEOGRAPHY = Geography()


class CredentialStrategy(StrEnum):
    """How the gateway sends a provider's credential; the values are the overlay
    contract's ``credential.strategy``."""

    BEARER_TOKEN = "bearer_token"
    """``Authorization: Bearer <secret>``."""
    API_KEY = "apikey"
    """The secret as the value of the request header ``header`` names."""


@dataclass(frozen=True, slots=True)
class SecretRef:
    """Where a provider's credential lives (a key of a Kubernetes Secret) and how the
    gateway sends it: as a bearer token, or (``apikey``) in the request header ``header``,
    which only ``apikey`` has. Only the reference travels; the token bytes stay in the
    Secret."""

    name: str
    namespace: str
    key: str
    strategy: CredentialStrategy = CredentialStrategy.BEARER_TOKEN
    header: str | None = None

    def __post_init__(self) -> None:
        check_name(self.name, "secret reference name")
        check_name(self.namespace, "secret reference namespace")
        check_name(self.key, "secret reference key")
        if not isinstance(self.strategy, CredentialStrategy):
            raise ScoringInputError("credential strategy must be a CredentialStrategy")
        if self.strategy is CredentialStrategy.BEARER_TOKEN:
            if self.header is not None:
                raise ScoringInputError("a bearer_token credential takes no header")
            return
        if self.header is None:
            raise ScoringInputError("an apikey credential needs the header its key goes in")
        try:
            check_api_key_header(self.header)
        except ValueError as error:
            raise ScoringInputError(f"credential header {error}") from None


@dataclass(frozen=True, slots=True)
class ConsumingSite:
    """The site whose gateway will read the overlay.

    ``labels`` is None when the site is unknown (no GridSite describes it yet): such a site
    sees no provider that has an access policy.
    """

    name: str
    geography: Geography = UNKNOWN_GEOGRAPHY
    labels: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        check_name(self.name, "consuming site name")
        if self.labels is not None:
            object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))


@dataclass(frozen=True, slots=True)
class Metrics:
    """A provider's raw load signals; None means not reported (scored neutral)."""

    queue_depth: float | None = None
    """Requests waiting; compared with the network's queue capacity."""
    kv_cache_utilization: float | None = None
    """Share of the KV cache in use, 0..1."""
    prefix_cache_hit_ratio: float | None = None
    """Share of prompt tokens served from the prefix cache, 0..1."""
    p99_latency_ms: float | None = None
    """99th percentile request latency in milliseconds."""


NO_METRICS = Metrics()


@dataclass(frozen=True, slots=True)
class TokenCost:
    """List price in USD per million input and output tokens."""

    input_per_million: Decimal
    output_per_million: Decimal
    input_float: float = field(init=False, repr=False, compare=False)
    output_float: float = field(init=False, repr=False, compare=False)
    """The prices as floats, converted once because every scoring pass reads them."""

    def __post_init__(self) -> None:
        _check_price(self.input_per_million, "input cost")
        _check_price(self.output_per_million, "output cost")
        object.__setattr__(self, "input_float", float(self.input_per_million))
        object.__setattr__(self, "output_float", float(self.output_per_million))


@dataclass(frozen=True, slots=True)
class CandidateInput:
    """One model of one provider at one site, as scoring sees it."""

    provider: str
    model: str
    site: str
    cluster: str
    """The gateway cluster (upstream) that reaches this candidate."""
    backend_kind: BackendKind
    geography: Geography = UNKNOWN_GEOGRAPHY
    """Geography of the candidate's site."""
    site_bound: bool = True
    """False for capacity tied to no site (a managed cloud or a third-party API that every
    gateway reaches directly): ``site`` is then the consuming site, but nearness is unknown."""
    metrics: Metrics = NO_METRICS
    cost: TokenCost | None = None
    healthy: bool | None = None
    """False excludes the candidate; None (no health check yet) does not."""
    degraded: bool = False
    """The provider reports itself degraded: still routable, published as not fresh."""
    updated_at: datetime | None = None
    """When the provider's state was last written at its origin; None for state that comes
    from configuration rather than from reports (never stale)."""
    credential: SecretRef | None = None
    access_policy: LabelSelector | None = None
    """Which consuming sites may see this candidate; None means every site."""
    key: tuple[str, str, str] = field(init=False, repr=False, compare=False)
    """What identifies a candidate among its peers: (provider, model, site)."""
    updated_seconds: float | None = field(init=False, repr=False, compare=False)
    """``updated_at`` as a POSIX timestamp, kept because ranking compares it often."""
    route: tuple[str, str, str] = field(init=False, repr=False, compare=False)
    """(model, site, cluster): what the gateway can tell apart."""
    tie_break: tuple[str, str, str, str] = field(init=False, repr=False, compare=False)
    """(model, site, cluster, provider): the last word of the order."""

    def __post_init__(self) -> None:
        check_name(self.provider, "provider name")
        who = f"provider {self.provider!r}"
        check_name(self.model, f"{who}: model name")
        check_name(self.site, f"{who}: site")
        check_name(self.cluster, f"{who}: cluster")
        if not isinstance(self.backend_kind, BackendKind):
            raise ScoringInputError(f"{who}: backend_kind must be a BackendKind")
        _check_observation(self.provider, self.metrics, self.updated_at)
        object.__setattr__(self, "key", (self.provider, self.model, self.site))
        object.__setattr__(self, "route", (self.model, self.site, self.cluster))
        object.__setattr__(self, "tie_break", (self.model, self.site, self.cluster, self.provider))
        updated = None if self.updated_at is None else self.updated_at.timestamp()
        object.__setattr__(self, "updated_seconds", updated)

    def observed(
        self,
        *,
        metrics: Metrics,
        healthy: bool | None,
        degraded: bool,
        updated_at: datetime | None,
    ) -> CandidateInput:
        """This candidate with what a new report of its provider says, checked as the
        constructor checks it; the names, kind, cost and policy were checked when this one
        was built. A large mesh's site takes in hundreds of reports a second."""
        _check_observation(self.provider, metrics, updated_at)
        copy = object.__new__(CandidateInput)
        for name in _KEPT_ON_OBSERVATION:
            object.__setattr__(copy, name, getattr(self, name))
        object.__setattr__(copy, "metrics", metrics)
        object.__setattr__(copy, "healthy", healthy)
        object.__setattr__(copy, "degraded", degraded)
        object.__setattr__(copy, "updated_at", updated_at)
        updated = None if updated_at is None else updated_at.timestamp()
        object.__setattr__(copy, "updated_seconds", updated)
        return copy


_OBSERVED_FIELDS = frozenset({"metrics", "healthy", "degraded", "updated_at", "updated_seconds"})
_KEPT_ON_OBSERVATION = tuple(
    f.name for f in fields(CandidateInput) if f.name not in _OBSERVED_FIELDS
)
"""What :meth:`CandidateInput.observed` copies: every field but what a report changes."""


def _check_observation(provider: str, metrics: Metrics, updated_at: datetime | None) -> None:
    who = f"provider {provider!r}"
    _check_non_negative(metrics.queue_depth, f"{who}: queue depth")
    _check_ratio(metrics.kv_cache_utilization, f"{who}: KV-cache utilization")
    _check_ratio(metrics.prefix_cache_hit_ratio, f"{who}: prefix-cache hit ratio")
    _check_non_negative(metrics.p99_latency_ms, f"{who}: P99 latency")
    if updated_at is not None and updated_at.utcoffset() is None:
        raise ScoringInputError(f"{who}: updated_at must carry a time zone")


def _check_non_negative(value: float | None, what: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ScoringInputError(f"{what} must be a number")
    if not math.isfinite(value) or value < 0:
        raise ScoringInputError(f"{what} must be a finite number >= 0")


def _check_ratio(value: float | None, what: str) -> None:
    _check_non_negative(value, what)
    if value is not None and value > 1:
        raise ScoringInputError(f"{what} must be between 0 and 1")


def _check_price(value: Decimal, what: str) -> None:
    if not isinstance(value, Decimal) or not value.is_finite() or value < 0:
        raise ScoringInputError(f"{what} must be a finite decimal >= 0")
