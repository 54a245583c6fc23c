"""Each scoring signal, the blend, the breakdown, and the checks on scoring inputs."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from grid.errors import ScoringInputError
from grid.models.common import BackendKind, ScoringWeights, SignalScales
from grid.scoring.inputs import (
    CandidateInput,
    ConsumingSite,
    Geography,
    Metrics,
    SecretRef,
    TokenCost,
)
from grid.scoring.signals import (
    NEUTRAL,
    SignalValues,
    blended_cost_per_million,
    blended_score,
    locality_signal,
    score_breakdown,
    signal_values,
)

CONSUMER = ConsumingSite("east", Geography("us-east", "us-east-1a"), {})
SCALES = SignalScales()


def candidate(**overrides: object) -> CandidateInput:
    fields: dict[str, object] = {
        "provider": "p",
        "model": "m",
        "site": "east",
        "cluster": "c",
        "backend_kind": BackendKind.LOCAL,
    }
    fields.update(overrides)
    return CandidateInput(**fields)  # type: ignore[arg-type]


def signals(**overrides: object) -> SignalValues:
    return signal_values(candidate(**overrides), CONSUMER, SCALES)


# --- locality -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "site", "region", "expected"),
    [
        (BackendKind.LOCAL, "east", "us-east", 1.0),
        (BackendKind.REMOTE, "east", "us-east", 1.0),
        (BackendKind.LOCAL, "east-2", "us-east", 0.7),
        (BackendKind.REMOTE, "east-2", "us-east", 0.7),
        (BackendKind.REMOTE, "west", "us-west", 0.4),
        (BackendKind.REMOTE, "somewhere", None, 0.4),
        (BackendKind.CLOUD_MANAGED, "east", "us-east", 0.2),
        (BackendKind.CLOUD_MANAGED, "west", "us-west", 0.2),
        (BackendKind.API_PROVIDER, "east", "us-east", 0.1),
        (BackendKind.API_PROVIDER, "west", None, 0.1),
    ],
)
def test_locality_follows_the_backend_kind_ladder(
    kind: BackendKind, site: str, region: str | None, expected: float
) -> None:
    placed = candidate(backend_kind=kind, site=site, geography=Geography(region, None))
    assert locality_signal(placed, CONSUMER) == expected


def test_locality_of_a_consumer_without_region_is_cross_region() -> None:
    consumer = ConsumingSite("east")
    placed = candidate(backend_kind=BackendKind.REMOTE, site="x", geography=Geography("us-east"))
    assert locality_signal(placed, consumer) == 0.4


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (BackendKind.LOCAL, 0.4),
        (BackendKind.REMOTE, 0.4),
        (BackendKind.CLOUD_MANAGED, 0.2),
        (BackendKind.API_PROVIDER, 0.1),
    ],
)
def test_capacity_tied_to_no_site_is_never_local(kind: BackendKind, expected: float) -> None:
    unbound = candidate(backend_kind=kind, site="east", site_bound=False)
    assert locality_signal(unbound, CONSUMER) == expected


# --- load signals ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("depth", "expected"), [(0, 1.0), (16, 0.75), (32, 0.5), (64, 0.0), (1000, 0.0)]
)
def test_queue_depth_falls_linearly_to_the_capacity(depth: float, expected: float) -> None:
    assert signals(metrics=Metrics(queue_depth=depth)).queue_depth == pytest.approx(expected)


def test_queue_capacity_is_configurable() -> None:
    scales = SignalScales(queue_capacity=10)
    value = signal_values(candidate(metrics=Metrics(queue_depth=5)), CONSUMER, scales)
    assert value.queue_depth == pytest.approx(0.5)


@pytest.mark.parametrize(("utilization", "expected"), [(0.0, 1.0), (0.25, 0.75), (1.0, 0.0)])
def test_kv_cache_rewards_free_cache(utilization: float, expected: float) -> None:
    metrics = Metrics(kv_cache_utilization=utilization)
    assert signals(metrics=metrics).kv_cache == pytest.approx(expected)


@pytest.mark.parametrize("ratio", [0.0, 0.3, 1.0])
def test_prefix_cache_rewards_a_warm_cache(ratio: float) -> None:
    assert signals(metrics=Metrics(prefix_cache_hit_ratio=ratio)).prefix_cache == ratio


@pytest.mark.parametrize(
    ("latency", "expected"), [(0, 1.0), (2500, 0.75), (10_000, 0.0), (60_000, 0.0)]
)
def test_latency_falls_linearly_to_the_ceiling(latency: float, expected: float) -> None:
    assert signals(metrics=Metrics(p99_latency_ms=latency)).latency == pytest.approx(expected)


def test_cost_blends_input_and_output_by_the_output_share() -> None:
    cost = TokenCost(Decimal("4"), Decimal("12"))
    assert blended_cost_per_million(cost, SCALES) == pytest.approx(0.25 * 4 + 0.75 * 12)
    even = SignalScales(output_cost_weight=0.5)
    assert blended_cost_per_million(cost, even) == pytest.approx(8)


@pytest.mark.parametrize(
    ("input_price", "output_price", "expected"),
    [("0", "0", 1.0), ("0", "40", 0.5), ("60", "60", 0.0), ("100", "200", 0.0)],
)
def test_cheaper_is_better_against_the_cost_ceiling(
    input_price: str, output_price: str, expected: float
) -> None:
    cost = TokenCost(Decimal(input_price), Decimal(output_price))
    assert signals(cost=cost).cost == pytest.approx(expected)


def test_every_missing_signal_is_neutral() -> None:
    value = signals()
    assert value[1:] == (NEUTRAL,) * 5


# --- blend and breakdown --------------------------------------------------------------------


def test_score_is_the_weighted_mean_of_the_signals() -> None:
    value = SignalValues(1.0, 0.5, 0.25, 0.0, 1.0, 0.5)
    weights = ScoringWeights()
    expected = (3 * 1.0 + 3 * 0.5 + 2 * 0.25 + 2 * 0.0 + 2 * 1.0 + 1 * 0.5) / 13
    assert blended_score(value, weights) == round(expected, 6)


def test_a_perfect_candidate_scores_one_and_an_empty_blend_scores_zero() -> None:
    perfect = SignalValues(1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    assert blended_score(perfect, ScoringWeights()) == 1.0
    nothing = ScoringWeights(
        locality=0, queue_depth=0, kv_cache=0, prefix_cache=0, latency=0, cost=0
    )
    assert blended_score(perfect, nothing) == 0.0


def test_weights_change_the_order_of_two_candidates() -> None:
    near_but_busy = SignalValues(1.0, 0.0, 0.5, 0.5, 0.5, 0.5)
    far_but_idle = SignalValues(0.4, 1.0, 0.5, 0.5, 0.5, 0.5)
    default = ScoringWeights()
    assert blended_score(near_but_busy, default) < blended_score(far_but_idle, default)
    locality_first = ScoringWeights(locality=10)
    assert blended_score(near_but_busy, locality_first) > blended_score(
        far_but_idle, locality_first
    )


def test_breakdown_holds_each_weighted_contribution_and_their_total() -> None:
    value = SignalValues(0.7, 0.5, 0.75, 0.2, 1.0 / 3.0, 0.9)
    breakdown = score_breakdown(value, ScoringWeights())
    assert breakdown.locality == pytest.approx(2.1)
    assert breakdown.queue_depth == 1.5
    assert breakdown.kv_cache == 1.5
    assert breakdown.prefix_cache == 0.4
    assert breakdown.latency == 0.666667
    assert breakdown.cost == 0.9
    parts = breakdown[:6]
    assert breakdown.total == round(sum(parts), 6)
    assert set(breakdown.as_wire()) == {
        "locality",
        "queue_depth",
        "kv_cache",
        "prefix_cache",
        "latency",
        "cost",
        "total",
    }


def test_published_numbers_have_at_most_six_decimals() -> None:
    value = signals(
        metrics=Metrics(queue_depth=1, kv_cache_utilization=1 / 7, p99_latency_ms=1234.567),
        cost=TokenCost(Decimal("0.333"), Decimal("1.777")),
    )
    breakdown = score_breakdown(value, ScoringWeights())
    for number in (*breakdown, blended_score(value, ScoringWeights())):
        assert round(number, 6) == number


# --- input checks -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "metrics",
    [
        Metrics(queue_depth=-1),
        Metrics(queue_depth=math.inf),
        Metrics(kv_cache_utilization=1.5),
        Metrics(kv_cache_utilization=-0.1),
        Metrics(prefix_cache_hit_ratio=math.nan),
        Metrics(p99_latency_ms=-5),
        Metrics(p99_latency_ms=True),
    ],
)
def test_out_of_range_metrics_are_refused_naming_the_provider(metrics: Metrics) -> None:
    with pytest.raises(ScoringInputError, match="provider 'p'"):
        candidate(metrics=metrics)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("provider", ""),
        ("model", "   "),
        ("site", "s" * 257),
        ("cluster", "\ud800"),
        ("model", 42),
    ],
)
def test_names_the_contract_would_refuse_are_refused(field: str, value: object) -> None:
    with pytest.raises(ScoringInputError):
        candidate(**{field: value})


def test_a_name_of_exactly_256_bytes_is_accepted() -> None:
    assert candidate(model="é" * 128).model == "é" * 128


@pytest.mark.parametrize("price", [Decimal("-1"), Decimal("NaN"), Decimal("Infinity")])
def test_bad_prices_are_refused(price: Decimal) -> None:
    with pytest.raises(ScoringInputError, match="cost"):
        TokenCost(price, Decimal("1"))


def test_updated_at_must_carry_a_time_zone() -> None:
    with pytest.raises(ScoringInputError, match="time zone"):
        candidate(updated_at=datetime(2026, 1, 1))
    assert candidate(updated_at=datetime(2026, 1, 1, tzinfo=UTC)).updated_seconds is not None


def test_backend_kind_must_be_a_backend_kind() -> None:
    with pytest.raises(ScoringInputError, match="backend_kind"):
        candidate(backend_kind="local-ish")


def test_secret_references_are_checked() -> None:
    with pytest.raises(ScoringInputError, match="secret reference key"):
        SecretRef("name", "ns", "")


def test_consumer_labels_are_copied() -> None:
    labels = {"tier": "edge"}
    consumer = ConsumingSite("east", labels=labels)
    labels["tier"] = "core"
    assert consumer.labels == {"tier": "edge"}
