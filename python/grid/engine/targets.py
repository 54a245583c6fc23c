"""What the shell must observe: the health and metrics endpoints of this site's providers,
the spend sources it reads, the object its egress address is read from, and the egress of
every site, derived from the resources. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from grid.models.egress_source import EgressSource
from grid.models.provider import Aggregation, InferenceProvider, MetricsConfig
from grid.models.provider import MetricSelector as ResourceSelector
from grid.models.provider import SignalMapping as ResourceMapping
from grid.models.site import EgressTlsMode
from grid.observe.signals import Aggregate, MetricSelector, OnError, SignalMapping

DEFAULT_METRICS_PATH = "/metrics"

_AGGREGATES = {
    Aggregation.SUM: Aggregate.SUM,
    Aggregation.MAX: Aggregate.MAX,
    Aggregation.MIN: Aggregate.MIN,
    Aggregation.AVG: Aggregate.MEAN,
}


@dataclass(frozen=True, slots=True)
class HealthTarget:
    """An HTTP health check to run every ``interval_s``."""

    url: str
    interval_s: float
    timeout_s: float
    expected_status: int
    server_name: str | None = None
    """TLS server name when the URL's host is an IP address the certificate does not name."""


@dataclass(frozen=True, slots=True)
class MetricsTarget:
    """A Prometheus scrape to run every ``interval_s``."""

    url: str
    interval_s: float
    timeout_s: float
    max_body_bytes: int


@dataclass(frozen=True, slots=True)
class SpendTarget:
    """A spend source (``spec.spendSources``) to scrape every ``interval_s``."""

    source: str
    url: str
    server_name: str | None
    interval_s: float
    timeout_s: float
    max_body_bytes: int


@dataclass(frozen=True, slots=True)
class ObservationTarget:
    """Everything to observe about one of this site's providers."""

    provider: str
    health: HealthTarget | None
    metrics: MetricsTarget | None


@dataclass(frozen=True, slots=True)
class EgressSourceTarget:
    """The object this site's egress address is read from (``spec.egress.from``), to read
    every ``interval_s``: a change of the cloud's address reaches the mesh within it."""

    source: EgressSource
    interval_s: float


@dataclass(frozen=True, slots=True)
class ProbeTarget:
    """A site's egress endpoint to probe: TLS (``tls_mode`` ``tls`` or ``mutual_tls``) or a
    plain TCP connect (``plaintext``)."""

    site: str
    address: str
    tls_mode: EgressTlsMode
    server_name: str | None


def _origin(endpoint: str) -> tuple[str, str]:
    parts = urlsplit(endpoint)
    return parts.scheme, parts.netloc


def health_target(provider: InferenceProvider) -> HealthTarget | None:
    """The provider's health check: ``healthCheck.path`` on the endpoint's host (the
    endpoint's own path is an API prefix, not where health is served)."""
    check = provider.spec.health_check
    if check is None:
        return None
    scheme, netloc = _origin(provider.spec.endpoint)
    return HealthTarget(
        url=f"{scheme}://{netloc}{check.path}",
        interval_s=check.interval.seconds,
        timeout_s=check.timeout.seconds,
        expected_status=check.expected_status,
        server_name=provider.spec.server_name,
    )


def metrics_url(provider: InferenceProvider, config: MetricsConfig) -> str:
    """``metricsConfig.url``, or ``port`` and ``path`` on the endpoint's host."""
    if config.url is not None:
        return config.url
    scheme, _ = _origin(provider.spec.endpoint)
    host = urlsplit(provider.spec.endpoint).hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{config.port}{config.path or DEFAULT_METRICS_PATH}"


def metrics_target(provider: InferenceProvider) -> MetricsTarget | None:
    """The provider's scrape, if it has a ``metricsConfig``."""
    config = provider.spec.metrics_config
    if config is None:
        return None
    return MetricsTarget(
        url=metrics_url(provider, config),
        interval_s=config.interval.seconds,
        timeout_s=config.timeout.seconds,
        max_body_bytes=config.max_body_bytes,
    )


def observation_target(provider: InferenceProvider) -> ObservationTarget:
    return ObservationTarget(
        provider.metadata.name, health_target(provider), metrics_target(provider)
    )


def _selector(selector: ResourceSelector | None) -> MetricSelector | None:
    if selector is None:
        return None
    # Unless the resource names an aggregation, each signal keeps its own default (a queue
    # sums its series, a utilization takes the maximum).
    return MetricSelector(
        name=selector.metric,
        labels=dict(selector.labels),
        scale=selector.scale,
        aggregate=None if selector.aggregation is None else _AGGREGATES[selector.aggregation],
        quantile=selector.quantile,
    )


def signal_mapping(signals: ResourceMapping) -> SignalMapping:
    """The resource's ``metricsConfig.signals`` in the form the extractor reads."""
    return SignalMapping(
        queue_depth=_selector(signals.queue_depth),
        kv_cache_utilization=_selector(signals.kv_cache_utilization),
        prefix_cache_hit_ratio=_selector(signals.prefix_cache_hit_ratio),
        p99_latency_ms=_selector(signals.p99_latency_ms),
        healthy=_selector(signals.health),
    )


def on_error(config: MetricsConfig) -> OnError:
    return OnError(config.on_error.value)
