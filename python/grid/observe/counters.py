"""Prometheus counters read as increases: the series of one counter in an exposition
(:func:`read_counter`), and how much each series grew since the previous reading
(:func:`advance`), with the semantics of Prometheus' ``increase()``:

- a value lower than the last one seen is a counter reset (the exporter restarted): the
  whole new value is the increase;
- a series first seen after the first reading started from zero since: its whole value is
  the increase;
- a series that vanishes is remembered with its last value, so when it comes back only
  what it grew meanwhile counts (a reset still counts from zero);
- the first reading only sets the baseline: what a counter held before it is history this
  reader never saw grow.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

SeriesKey = tuple[tuple[str, str], ...]
"""A series' labels, sorted by name: what tells two series of one counter apart."""

MAX_SERIES = 10_000
"""Most series remembered per counter, those that vanished included: a reading with more
matching series is refused, and past the bound the series that vanished longest ago are
forgotten (one coming back then counts from zero)."""


@dataclass(frozen=True, slots=True)
class CounterReading:
    """The series of one counter in one exposition; ``error`` says why there are none to
    use (then ``series`` is empty)."""

    series: Mapping[SeriesKey, float]
    skipped: tuple[str, ...] = ()
    """Why some series were left out (a value that is no finite number >= 0)."""
    error: str | None = None


def read_counter(text: str, metric: str, matchers: Mapping[str, str]) -> CounterReading:
    """The series of sample ``metric`` in Prometheus ``text`` that carry every label value
    of ``matchers``. Never raises."""
    series: dict[SeriesKey, float] = {}
    skipped: list[str] = []
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name != metric:
                    continue
                labels = sample.labels
                if any(labels.get(name) != value for name, value in matchers.items()):
                    continue
                value = float(sample.value)
                if not math.isfinite(value) or value < 0:
                    skipped.append(f"a series of {metric} is {value:g}, not a count")
                    continue
                series[tuple(sorted(labels.items()))] = value
    except Exception:
        # The parser raises a variety of errors on garbled text; what matters is that it is.
        return CounterReading(
            {}, error="the metrics text is not valid Prometheus exposition format"
        )
    if len(series) > MAX_SERIES:
        return CounterReading(
            {}, error=f"{len(series)} series of {metric} match, more than {MAX_SERIES}: add labels"
        )
    return CounterReading(series, tuple(skipped[:3]))


def advance(
    baseline: Mapping[SeriesKey, float] | None, reading: Mapping[SeriesKey, float]
) -> tuple[dict[SeriesKey, float], dict[SeriesKey, float]]:
    """The new baseline after ``reading``, and each series' increase since ``baseline``
    (series that did not grow are left out). ``None``: nothing read before, so nothing has
    increased yet.

    The baseline keeps the last value of every series, those that vanished included, the
    most recently seen last; past :data:`MAX_SERIES` the oldest vanished ones go."""
    if baseline is None:
        return dict(reading), {}
    increases: dict[SeriesKey, float] = {}
    for key, value in reading.items():
        before = baseline.get(key)
        increase = value if before is None or value < before else value - before
        if increase > 0:
            increases[key] = increase
    remembered = {key: value for key, value in baseline.items() if key not in reading}
    remembered.update(reading)
    excess = len(remembered) - MAX_SERIES
    if excess > 0:
        # Only vanished series come before the reading's, and a reading holds at most
        # MAX_SERIES: what goes is the series gone longest.
        for key in list(remembered)[:excess]:
            del remembered[key]
    return remembered, increases
