"""From Prometheus text to the metric signals the scorer reads.

A :class:`SignalMapping` says which metric gives each signal (name, label matchers, a scale
such as seconds to milliseconds, how to combine several matching series, and for latency
histograms the quantile to compute). :func:`extract_signals` parses the text with
``prometheus_client``'s parser and never raises: garbled text, a missing metric, NaN, an
infinite, negative or out-of-range value each give a reason and, as the ``on_error`` policy
says, either no value (the scorer then uses its neutral 0.5) or a pessimistic one.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Self

from prometheus_client.parser import text_string_to_metric_families
from pydantic import Field, StringConstraints, model_validator

from grid.models.common import GridModel, SignalScales

_METRIC_NAME = r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"
_LABEL_NAME = r"^[a-zA-Z_][a-zA-Z0-9_]*$"

Buckets = tuple[tuple[float, float], ...]
"""Cumulative histogram counts as ``(upper bound, count)`` pairs, ascending, ending at +Inf."""


class OnError(StrEnum):
    """What a signal becomes when its metric cannot be read."""

    NEUTRAL = "neutral"  # no value: the scorer uses 0.5
    PESSIMISTIC = "pessimistic"  # the worst value the scorer knows


class Aggregate(StrEnum):
    """How the values of several matching series combine into one."""

    SUM = "sum"
    MAX = "max"
    MIN = "min"
    MEAN = "mean"


class MetricSelector(GridModel):
    """Where one signal comes from in a Prometheus exposition."""

    name: str = Field(pattern=_METRIC_NAME, max_length=200, description="Sample name.")
    labels: dict[Annotated[str, StringConstraints(pattern=_LABEL_NAME)], str] = Field(
        default_factory=dict, description="Only series carrying these label values count."
    )
    scale: float = Field(
        1.0, gt=0, allow_inf_nan=False, description="Factor applied to the value (s→ms: 1000)."
    )
    aggregate: Aggregate | None = Field(
        None, description="How matching series combine; default depends on the signal."
    )
    quantile: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="Read `name` as a histogram (its `_bucket` series) and take this quantile.",
    )

    @model_validator(mode="after")
    def _histograms_sum(self) -> Self:
        if self.quantile is not None and self.aggregate is not None:
            raise ValueError(
                "a histogram selector (quantile) always sums its series; drop aggregate"
            )
        return self


class SignalMapping(GridModel):
    """Which metric gives each signal; an unmapped signal stays neutral."""

    queue_depth: MetricSelector | None = None
    kv_cache_utilization: MetricSelector | None = None
    prefix_cache_hit_ratio: MetricSelector | None = None
    p99_latency_ms: MetricSelector | None = None
    healthy: MetricSelector | None = Field(
        None, description="A series whose value is > 0 while the provider is healthy."
    )

    @model_validator(mode="after")
    def _quantiles_for_latency_only(self) -> Self:
        for name in ("queue_depth", "kv_cache_utilization", "prefix_cache_hit_ratio", "healthy"):
            selector: MetricSelector | None = getattr(self, name)
            if selector is not None and selector.quantile is not None:
                raise ValueError(f"{name}: only p99LatencyMs may read a histogram quantile")
        return self


@dataclass(frozen=True, slots=True)
class Signals:
    """Metric signals of one provider; ``None`` means unknown (neutral for the scorer).

    ``latency_buckets`` keeps the cumulative latency histogram, so the next extraction can
    compute P99 over the requests in between rather than over the provider's lifetime.
    """

    queue_depth: float | None = None
    kv_cache_utilization: float | None = None
    prefix_cache_hit_ratio: float | None = None
    p99_latency_ms: float | None = None
    healthy: bool | None = None
    reasons: tuple[str, ...] = ()
    latency_buckets: Buckets | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class _Signal:
    name: str
    default_aggregate: Aggregate
    low: float
    high: float
    pessimistic: Callable[[SignalScales], float]


_SIGNALS = (
    _Signal("queue_depth", Aggregate.SUM, 0.0, math.inf, lambda s: s.queue_capacity),
    _Signal("kv_cache_utilization", Aggregate.MAX, 0.0, 1.0, lambda _: 1.0),
    _Signal("prefix_cache_hit_ratio", Aggregate.MEAN, 0.0, 1.0, lambda _: 0.0),
    _Signal("p99_latency_ms", Aggregate.MAX, 0.0, math.inf, lambda s: s.latency_ceiling_ms),
)
_GARBLED = "the metrics text is not valid Prometheus exposition format"


class _Unreadable(ValueError):
    """A mapped metric has no usable value; the message says why (no secrets, no body)."""


def extract_signals(
    text: str,
    mapping: SignalMapping,
    on_error: OnError = OnError.NEUTRAL,
    *,
    scales: SignalScales | None = None,
    previous: Signals | None = None,
) -> Signals:
    """Read the mapped signals from Prometheus ``text``.

    ``scales`` supplies the pessimistic values of unbounded signals (a full queue, the
    latency ceiling). ``previous`` is the last extraction for the same provider: a latency
    histogram's quantile is then taken over the requests since then.
    """
    scales = scales or SignalScales()
    try:
        index = _index_samples(text)
    except Exception:
        return fallback_signals(_GARBLED, mapping, on_error, scales=scales, previous=previous)
    previous_buckets = previous.latency_buckets if previous is not None else None
    values: dict[str, float | None] = {}
    reasons: list[str] = []
    buckets: Buckets | None = None
    for signal in _SIGNALS:
        selector: MetricSelector | None = getattr(mapping, signal.name)
        values[signal.name] = None
        if selector is None:
            continue
        try:
            if selector.quantile is None:
                value = _combine(selector, index, signal.default_aggregate, signal)
            else:
                buckets = _histogram(selector, index)
                quantile = histogram_quantile(selector.quantile, _window(buckets, previous_buckets))
                if quantile is None:
                    reasons.append(f"{signal.name}: no requests observed yet")
                    continue
                value = quantile * selector.scale
            values[signal.name] = _in_range(signal, value)
        except _Unreadable as problem:
            values[signal.name] = _fall_back(signal, str(problem), on_error, scales, reasons)
    return Signals(
        queue_depth=values["queue_depth"],
        kv_cache_utilization=values["kv_cache_utilization"],
        prefix_cache_hit_ratio=values["prefix_cache_hit_ratio"],
        p99_latency_ms=values["p99_latency_ms"],
        healthy=_healthy(mapping.healthy, index, reasons),
        reasons=tuple(reasons),
        latency_buckets=buckets if buckets is not None else previous_buckets,
    )


def fallback_signals(
    reason: str,
    mapping: SignalMapping,
    on_error: OnError = OnError.NEUTRAL,
    *,
    scales: SignalScales | None = None,
    previous: Signals | None = None,
) -> Signals:
    """Signals when no metrics could be read at all: every mapped signal falls back per
    ``on_error``; health is left to the health checks. The previous latency histogram is
    kept, so the next good scrape measures over the whole gap."""
    scales = scales or SignalScales()
    reasons = [reason]
    values = {
        signal.name: _fall_back(signal, None, on_error, scales, reasons)
        if getattr(mapping, signal.name) is not None
        else None
        for signal in _SIGNALS
    }
    return Signals(
        queue_depth=values["queue_depth"],
        kv_cache_utilization=values["kv_cache_utilization"],
        prefix_cache_hit_ratio=values["prefix_cache_hit_ratio"],
        p99_latency_ms=values["p99_latency_ms"],
        reasons=tuple(reasons),
        latency_buckets=previous.latency_buckets if previous is not None else None,
    )


def histogram_quantile(quantile: float, buckets: Buckets) -> float | None:
    """The ``quantile`` (0 < q < 1) of a cumulative histogram, or ``None`` if it recorded
    nothing.

    Interpolates linearly inside the bucket where the quantile falls (the first bucket
    starts at 0); if it falls in the +Inf bucket, the largest finite bound is the answer.
    Raises ``ValueError`` for a quantile outside (0, 1) or buckets not ending at +Inf.
    """
    if not 0 < quantile < 1:
        raise ValueError("the quantile must lie strictly between 0 and 1")
    if not buckets or buckets[-1][0] != math.inf:
        raise _Unreadable("the histogram has no +Inf bucket")
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = quantile * total
    lower_bound, lower_count = 0.0, 0.0
    for upper_bound, count in buckets[:-1]:
        if count >= rank:
            if upper_bound <= lower_bound:
                return upper_bound
            share = (rank - lower_count) / (count - lower_count)
            return lower_bound + (upper_bound - lower_bound) * share
        lower_bound, lower_count = upper_bound, count
    if len(buckets) < 2:
        raise _Unreadable("the histogram has only a +Inf bucket")
    return lower_bound


def _index_samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    index: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            index[sample.name].append((sample.labels, float(sample.value)))
    return index


def _matching(
    name: str, selector: MetricSelector, index: dict[str, list[tuple[dict[str, str], float]]]
) -> list[tuple[dict[str, str], float]]:
    series = [
        (labels, value)
        for labels, value in index.get(name, ())
        if all(labels.get(key) == wanted for key, wanted in selector.labels.items())
    ]
    if not series:
        raise _Unreadable(f"no sample {name}{_format_labels(selector.labels)} in the metrics")
    return series


def _combine(
    selector: MetricSelector,
    index: dict[str, list[tuple[dict[str, str], float]]],
    default: Aggregate,
    signal: _Signal | None = None,
) -> float:
    """The matching series, scaled and combined. With ``signal``, each series is checked
    against its range first, so a bad series cannot hide inside a sum or a mean."""
    values = [value * selector.scale for _, value in _matching(selector.name, selector, index)]
    if any(math.isnan(value) for value in values):
        raise _Unreadable(f"{selector.name} is NaN")
    if signal is not None:
        values = [_in_range(signal, value) for value in values]
    return _AGGREGATES[selector.aggregate or default](values)


# Plain sums, not math.fsum: a huge value must overflow to inf (refused as not finite)
# rather than raise.
_AGGREGATES: dict[Aggregate, Callable[[Sequence[float]], float]] = {
    Aggregate.SUM: lambda values: float(sum(values)),
    Aggregate.MAX: max,
    Aggregate.MIN: min,
    Aggregate.MEAN: lambda values: float(sum(values)) / len(values),
}


def _histogram(
    selector: MetricSelector, index: dict[str, list[tuple[dict[str, str], float]]]
) -> Buckets:
    name = f"{selector.name}_bucket"
    counts: dict[float, float] = defaultdict(float)
    for labels, count in _matching(name, selector, index):
        try:
            upper_bound = float(labels["le"])
        except (KeyError, ValueError):
            raise _Unreadable(f"{name} has a series without a numeric le label") from None
        if not math.isfinite(count) or count < 0 or math.isnan(upper_bound):
            raise _Unreadable(f"{name} has a count that is not a finite number >= 0")
        counts[upper_bound] += count
    buckets = tuple(sorted(counts.items()))
    if any(later < earlier for (_, earlier), (_, later) in itertools.pairwise(buckets)):
        raise _Unreadable(f"{name} counts are not cumulative")
    return buckets


def _window(current: Buckets, previous: Buckets | None) -> Buckets:
    """The requests since ``previous``; all of ``current`` after a restart (counts went
    down), a change of bucket layout, an inconsistent difference, or when nothing new
    arrived."""
    if previous is None or [bound for bound, _ in previous] != [bound for bound, _ in current]:
        return current
    delta = tuple(
        (bound, count - before)
        for (bound, count), (_, before) in zip(current, previous, strict=True)
    )
    counts = [count for _, count in delta]
    if min(counts) < 0 or counts != sorted(counts) or counts[-1] == 0:
        return current
    return delta


def _in_range(signal: _Signal, value: float) -> float:
    if not math.isfinite(value):
        raise _Unreadable(f"the value is not a finite number ({value})")
    if not signal.low <= value <= signal.high:
        bounds = f"[{signal.low:g}, {signal.high:g}]" if math.isfinite(signal.high) else ">= 0"
        raise _Unreadable(f"the value {value:g} is out of range (expected {bounds})")
    return value


def _fall_back(
    signal: _Signal,
    problem: str | None,
    on_error: OnError,
    scales: SignalScales,
    reasons: list[str],
) -> float | None:
    value = signal.pessimistic(scales) if on_error == OnError.PESSIMISTIC else None
    consequence = "treated as neutral" if value is None else f"using pessimistic {value:g}"
    cause = f"{problem}; " if problem else ""
    reasons.append(f"{signal.name}: {cause}{consequence}")
    return value


def _healthy(
    selector: MetricSelector | None,
    index: dict[str, list[tuple[dict[str, str], float]]],
    reasons: list[str],
) -> bool | None:
    if selector is None:
        return None
    try:
        return _combine(selector, index, Aggregate.MIN) > 0
    except _Unreadable as problem:
        reasons.append(f"healthy: {problem}; left to the health checks")
        return None


def _format_labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{key}="{value}"' for key, value in sorted(labels.items())) + "}"
