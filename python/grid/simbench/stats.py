"""Small statistics over simulation results: quantiles, coverage times and CDF points."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0 to 1) of ``values`` with linear interpolation between order
    statistics (numpy's default); ``values`` need not be sorted but must not be empty."""
    if not values:
        raise ValueError("quantile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be between 0 and 1, got {q}")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def spread(values: Sequence[float]) -> dict[str, float] | None:
    """p50, p99 and max of ``values`` (None when there are none)."""
    if not values:
        return None
    return {
        "p50": quantile(values, 0.5),
        "p99": quantile(values, 0.99),
        "max": max(values),
    }


def coverage_time(delays: Sequence[float], population: int, fraction: float) -> float | None:
    """When ``fraction`` of ``population`` had learned something, given the sorted delays
    of those who did; None if not enough of them ever did."""
    if population <= 0:
        return 0.0
    needed = max(1, math.ceil(fraction * population - 1e-9))
    if len(delays) < needed:
        return None
    return delays[needed - 1]


def pooled_cdf(
    runs: Sequence[tuple[Sequence[float], int]], points: int = 64
) -> list[tuple[float, float]]:
    """The mean fraction of the population that had learned something by each time, over
    several runs of (sorted delays, population): ``points`` (time, fraction) pairs at
    evenly spaced quantiles of all the learners' delays, so points gather where the curve
    climbs; for plotting."""
    learners = [d for delays, _ in runs for d in delays]
    if not learners or points < 2:
        return []
    times = sorted({quantile(learners, i / (points - 1)) for i in range(points)})
    curve = []
    for t in times:
        fractions = [
            _count_at_most(delays, t) / population for delays, population in runs if population
        ]
        curve.append((t, sum(fractions) / len(fractions) if fractions else 0.0))
    return curve


def _count_at_most(sorted_values: Sequence[float], t: float) -> int:
    low, high = 0, len(sorted_values)
    while low < high:
        mid = (low + high) // 2
        if sorted_values[mid] <= t:
            low = mid + 1
        else:
            high = mid
    return low


def uninformed_by_round(
    runs: Sequence[tuple[Sequence[float], int]], interval: float, last: int
) -> list[float]:
    """The mean fraction of the population that had *not* yet learned something by the end
    of each round ``0 .. last`` (rounds of ``interval`` seconds), over (sorted delays,
    population) runs."""
    curve = []
    for r in range(last + 1):
        t = r * interval + 1e-9
        fractions = [
            1.0 - _count_at_most(delays, t) / population
            for delays, population in runs
            if population
        ]
        curve.append(sum(fractions) / len(fractions) if fractions else 0.0)
    return curve


def tail_miss_bound(uninformed: Sequence[float], population: int, horizon: float) -> float | None:
    """An upper estimate of the chance that someone is still uninformed after ``horizon``
    rounds, from the measured curve of :func:`uninformed_by_round`.

    In the end phase of push gossip each uninformed member stays uninformed for another
    round with a probability that can only fall as more members become informed, so the
    curve decays at least geometrically; the slowest decay measured once half the members
    knew (the largest ratio of successive rounds) is extrapolated from the last round with
    a measured straggler to ``horizon``. Markov's inequality turns the expected number of
    stragglers into a probability. None when the curve has no tail to measure."""
    ratios = [
        after / before
        for before, after in itertools.pairwise(uninformed)
        if 0 < before <= 0.5 and after > 0
    ]
    if not ratios:
        return None
    last = max(r for r, u in enumerate(uninformed) if u > 0)
    if horizon <= last:
        return 1.0
    expected: float = population * uninformed[last] * max(ratios) ** (horizon - last)
    return min(1.0, expected)
