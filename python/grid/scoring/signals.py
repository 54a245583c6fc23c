"""The six signals, each normalized to [0, 1] (1 is best), and their weighted blend.

A signal whose raw value is missing scores a neutral 0.5. Contributions, totals and scores
are rounded to six decimals so that every site computes, publishes and digests exactly the
same numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from grid.models.common import BackendKind, ScoringWeights, SignalScales
from grid.scoring.inputs import CandidateInput, ConsumingSite, TokenCost

NEUTRAL = 0.5
"""The value of a signal nobody reported."""
NEUTRAL_SHARE = 1.0 - NEUTRAL
"""The share of a ceiling that scores :data:`NEUTRAL` on a lower-is-better signal."""

DECIMALS = 6

LOCAL_SITE = 1.0
SELF_HOSTED_SAME_REGION = 0.7
SELF_HOSTED_CROSS_REGION = 0.4
CLOUD_MANAGED = 0.2
API_PROVIDER = 0.1


class SignalValues(NamedTuple):
    """The normalized signals of one candidate, each in [0, 1], higher is better."""

    locality: float
    queue_depth: float
    kv_cache: float
    prefix_cache: float
    latency: float
    cost: float


class ScoreBreakdown(NamedTuple):
    """Each signal times its weight, and their sum: the overlay's ``score_breakdown``."""

    locality: float
    queue_depth: float
    kv_cache: float
    prefix_cache: float
    latency: float
    cost: float
    total: float

    def as_wire(self) -> dict[str, float]:
        """The contract's ``score_breakdown`` object."""
        return self._asdict()


def locality_signal(candidate: CandidateInput, consumer: ConsumingSite) -> float:
    """The preference ladder: capacity you own and that is near before third-party APIs.

    Self-hosted capacity (``local`` or ``remote``) scores 1.0 at the consuming site itself,
    0.7 at another site of the same region and 0.4 elsewhere, including when either region
    is unknown or the capacity is tied to no site (nearness that cannot be shown is not
    assumed). Managed cloud capacity scores 0.2 and third-party APIs 0.1 wherever they are.
    """
    backend_kind = candidate.backend_kind
    if backend_kind is BackendKind.CLOUD_MANAGED:
        return CLOUD_MANAGED
    if backend_kind is BackendKind.API_PROVIDER:
        return API_PROVIDER
    if not candidate.site_bound:
        return SELF_HOSTED_CROSS_REGION
    if candidate.site == consumer.name:
        return LOCAL_SITE
    region = candidate.geography.region
    if region is not None and region == consumer.geography.region:
        return SELF_HOSTED_SAME_REGION
    return SELF_HOSTED_CROSS_REGION


def blended_cost_per_million(cost: TokenCost, scales: SignalScales) -> float:
    """Input and output prices mixed by the configured output share (generation usually
    dominates what a request costs)."""
    output_share = scales.output_cost_weight
    return (1.0 - output_share) * cost.input_float + output_share * cost.output_float


def signal_reader(
    consumer: ConsumingSite, scales: SignalScales
) -> Callable[[CandidateInput], SignalValues]:
    """:func:`signal_values` for one consumer and one set of scales, which it reads once:
    a scoring pass applies it to every candidate."""
    queue_capacity = scales.queue_capacity
    latency_ceiling_ms = scales.latency_ceiling_ms
    cost_ceiling = scales.cost_ceiling_per_million

    def read(candidate: CandidateInput) -> SignalValues:
        metrics = candidate.metrics
        queue_depth = metrics.queue_depth
        kv_utilization = metrics.kv_cache_utilization
        hit_ratio = metrics.prefix_cache_hit_ratio
        p99_latency_ms = metrics.p99_latency_ms
        cost = candidate.cost
        queue_share = NEUTRAL_SHARE if queue_depth is None else queue_depth / queue_capacity
        latency_share = (
            NEUTRAL_SHARE if p99_latency_ms is None else p99_latency_ms / latency_ceiling_ms
        )
        cost_share = (
            NEUTRAL_SHARE if cost is None else blended_cost_per_million(cost, scales) / cost_ceiling
        )
        # tuple.__new__ rather than SignalValues(...): the named tuple's own __new__ is a
        # Python function that costs three times as much, once per candidate.
        return tuple.__new__(
            SignalValues,
            (
                locality_signal(candidate, consumer),
                1.0 - queue_share if queue_share < 1.0 else 0.0,
                NEUTRAL if kv_utilization is None else 1.0 - kv_utilization,
                NEUTRAL if hit_ratio is None else hit_ratio,
                1.0 - latency_share if latency_share < 1.0 else 0.0,
                1.0 - cost_share if cost_share < 1.0 else 0.0,
            ),
        )

    return read


def signal_values(
    candidate: CandidateInput, consumer: ConsumingSite, scales: SignalScales
) -> SignalValues:
    """All six signals of ``candidate`` as seen from ``consumer``.

    - locality: see :func:`locality_signal`;
    - queue depth: 1 for an empty queue, falling linearly to 0 at the queue capacity;
    - KV cache: the free share of the cache (1 - utilization);
    - prefix cache: the hit ratio;
    - latency: 1 at 0 ms, falling linearly to 0 at the latency ceiling;
    - cost: 1 when free, falling linearly to 0 at the cost ceiling
      (see :func:`blended_cost_per_million`).

    A missing value scores :data:`NEUTRAL`.
    """
    return signal_reader(consumer, scales)(candidate)


def score_blender(weights: ScoringWeights) -> Callable[[SignalValues], float]:
    """:func:`blended_score` for one set of weights, which it reads and sums once: a
    scoring pass applies it to every candidate."""
    w_locality, w_queue_depth, w_kv_cache, w_prefix_cache, w_latency, w_cost = _weights(weights)
    weight_sum = w_locality + w_queue_depth + w_kv_cache + w_prefix_cache + w_latency + w_cost

    def blend(signals: SignalValues) -> float:
        locality, queue_depth, kv_cache, prefix_cache, latency, cost = signals
        if weight_sum <= 0:
            return 0.0
        total = (
            locality * w_locality
            + queue_depth * w_queue_depth
            + kv_cache * w_kv_cache
            + prefix_cache * w_prefix_cache
            + latency * w_latency
            + cost * w_cost
        )
        return round(total / weight_sum, DECIMALS)

    return blend


def blended_score(signals: SignalValues, weights: ScoringWeights) -> float:
    """The score: the weighted sum of the signals divided by the sum of the weights, so it
    lies in [0, 1] whatever the weights (0 when every weight is 0), rounded to six
    decimals."""
    return score_blender(weights)(signals)


def score_breakdown(signals: SignalValues, weights: ScoringWeights) -> ScoreBreakdown:
    """Each weighted contribution rounded to six decimals; the total is the sum of those
    rounded contributions, so the published breakdown adds up exactly."""
    locality, queue_depth, kv_cache, prefix_cache, latency, cost = signals
    locality = round(locality * weights.locality, DECIMALS)
    queue_depth = round(queue_depth * weights.queue_depth, DECIMALS)
    kv_cache = round(kv_cache * weights.kv_cache, DECIMALS)
    prefix_cache = round(prefix_cache * weights.prefix_cache, DECIMALS)
    latency = round(latency * weights.latency, DECIMALS)
    cost = round(cost * weights.cost, DECIMALS)
    total = round(locality + queue_depth + kv_cache + prefix_cache + latency + cost, DECIMALS)
    return ScoreBreakdown(locality, queue_depth, kv_cache, prefix_cache, latency, cost, total)


def _weights(weights: ScoringWeights) -> tuple[float, float, float, float, float, float]:
    """The weights in the order of :class:`SignalValues`."""
    return (
        weights.locality,
        weights.queue_depth,
        weights.kv_cache,
        weights.prefix_cache,
        weights.latency,
        weights.cost,
    )
