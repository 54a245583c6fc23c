"""Observing inference providers: HTTP health checks and their thresholds, Prometheus
scrapes, and the metric signals extracted from them.

``tracker`` and ``signals`` are pure; ``health`` and ``scrape`` do network I/O and never
raise for trouble on the wire: every failure comes back as a value with a reason.
"""

from grid.observe.health import check_health
from grid.observe.scrape import ScrapeResult, scrape
from grid.observe.signals import (
    Aggregate,
    Buckets,
    MetricSelector,
    OnError,
    SignalMapping,
    Signals,
    extract_signals,
    fallback_signals,
    histogram_quantile,
)
from grid.observe.tracker import HealthObservation, HealthPolicy, HealthState, HealthStatus

__all__ = [
    "Aggregate",
    "Buckets",
    "HealthObservation",
    "HealthPolicy",
    "HealthState",
    "HealthStatus",
    "MetricSelector",
    "OnError",
    "ScrapeResult",
    "SignalMapping",
    "Signals",
    "check_health",
    "extract_signals",
    "fallback_signals",
    "histogram_quantile",
    "scrape",
]
