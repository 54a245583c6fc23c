"""Extracting metric signals from Prometheus text (pure)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from grid.models.common import SignalScales
from grid.observe import (
    Aggregate,
    MetricSelector,
    OnError,
    SignalMapping,
    Signals,
    extract_signals,
    fallback_signals,
    histogram_quantile,
)

VLLM_TEXT = """\
# HELP vllm:num_requests_waiting Requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="llama"} 3
vllm:num_requests_waiting{model_name="qwen"} 5
# HELP vllm:gpu_cache_usage_perc KV-cache usage (1 = full).
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="llama"} 0.25
vllm:gpu_cache_usage_perc{model_name="qwen"} 0.75
# HELP prefix_hit_ratio Prefix cache hit ratio.
# TYPE prefix_hit_ratio gauge
prefix_hit_ratio{model_name="llama"} 0.5
prefix_hit_ratio{model_name="qwen"} 0.7
# HELP up Healthy.
# TYPE up gauge
up 1
# HELP vllm:e2e_request_latency_seconds End to end latency.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{model_name="llama",le="0.1"} 50
vllm:e2e_request_latency_seconds_bucket{model_name="llama",le="0.5"} 90
vllm:e2e_request_latency_seconds_bucket{model_name="llama",le="1.0"} 100
vllm:e2e_request_latency_seconds_bucket{model_name="llama",le="+Inf"} 100
vllm:e2e_request_latency_seconds_sum{model_name="llama"} 20
vllm:e2e_request_latency_seconds_count{model_name="llama"} 100
# HELP rpc_seconds A summary.
# TYPE rpc_seconds summary
rpc_seconds{quantile="0.5"} 0.2
rpc_seconds{quantile="0.99"} 1.5
rpc_seconds_sum 10
rpc_seconds_count 20
# HELP served_total Requests served.
# TYPE served_total counter
served_total 42
"""

MAPPING = SignalMapping(
    queue_depth=MetricSelector(name="vllm:num_requests_waiting"),
    kv_cache_utilization=MetricSelector(name="vllm:gpu_cache_usage_perc"),
    prefix_cache_hit_ratio=MetricSelector(name="prefix_hit_ratio"),
    p99_latency_ms=MetricSelector(
        name="vllm:e2e_request_latency_seconds", quantile=0.99, scale=1000
    ),
    healthy=MetricSelector(name="up"),
)

SCALES = SignalScales(queue_capacity=32, latency_ceiling_ms=5000)


def gauge(name: str, value: str, labels: str = "") -> str:
    return f"# TYPE {name} gauge\n{name}{labels} {value}\n"


def only(signal: str, selector: MetricSelector) -> SignalMapping:
    return SignalMapping(**{signal: selector})


# --- reading -----------------------------------------------------------------------------


def test_each_signal_is_read_with_its_default_aggregate() -> None:
    signals = extract_signals(VLLM_TEXT, MAPPING)
    assert signals.queue_depth == 8  # summed over models
    assert signals.kv_cache_utilization == 0.75  # the fullest cache
    assert signals.prefix_cache_hit_ratio == pytest.approx(0.6)  # mean
    # rank 99 of 100 falls in (0.5, 1.0] holding requests 91..100: 0.5 + 0.5 * 9/10 s
    assert signals.p99_latency_ms == pytest.approx(950)
    assert signals.healthy is True
    assert signals.reasons == ()
    assert signals.latency_buckets == ((0.1, 50), (0.5, 90), (1.0, 100), (math.inf, 100))


def test_labels_select_series_and_aggregates_can_be_chosen() -> None:
    llama = MetricSelector(name="vllm:num_requests_waiting", labels={"model_name": "llama"})
    assert extract_signals(VLLM_TEXT, only("queue_depth", llama)).queue_depth == 3
    for aggregate, expected in [
        (Aggregate.SUM, 8),
        (Aggregate.MAX, 5),
        (Aggregate.MIN, 3),
        (Aggregate.MEAN, 4),
    ]:
        selector = MetricSelector(name="vllm:num_requests_waiting", aggregate=aggregate)
        assert extract_signals(VLLM_TEXT, only("queue_depth", selector)).queue_depth == expected


def test_summary_quantiles_counters_and_scales() -> None:
    p99 = MetricSelector(name="rpc_seconds", labels={"quantile": "0.99"}, scale=1000)
    assert extract_signals(VLLM_TEXT, only("p99_latency_ms", p99)).p99_latency_ms == 1500
    served = MetricSelector(name="served_total")
    assert extract_signals(VLLM_TEXT, only("queue_depth", served)).queue_depth == 42
    percent = MetricSelector(name="kv_percent", scale=0.01)
    text = gauge("kv_percent", "40")
    assert extract_signals(text, only("kv_cache_utilization", percent)).kv_cache_utilization == 0.4


def test_unmapped_signals_stay_neutral_without_complaint() -> None:
    signals = extract_signals(VLLM_TEXT, SignalMapping(), OnError.PESSIMISTIC)
    assert signals == Signals()


@pytest.mark.parametrize(("value", "healthy"), [("1", True), ("0", False), ("-1", False)])
def test_the_health_series(value: str, healthy: bool) -> None:
    signals = extract_signals(gauge("up", value), only("healthy", MetricSelector(name="up")))
    assert signals.healthy is healthy


# --- problems, per policy --------------------------------------------------------------


def test_a_missing_metric_is_neutral_or_pessimistic() -> None:
    neutral = extract_signals("", MAPPING)
    assert (neutral.queue_depth, neutral.kv_cache_utilization, neutral.p99_latency_ms) == (
        None,
        None,
        None,
    )
    assert neutral.healthy is None
    assert (
        "queue_depth: no sample vllm:num_requests_waiting in the metrics; treated as neutral"
        in (neutral.reasons)
    )
    assert any(reason.startswith("healthy: no sample up") for reason in neutral.reasons)

    pessimistic = extract_signals("", MAPPING, OnError.PESSIMISTIC, scales=SCALES)
    assert pessimistic.queue_depth == 32
    assert pessimistic.kv_cache_utilization == 1.0
    assert pessimistic.prefix_cache_hit_ratio == 0.0
    assert pessimistic.p99_latency_ms == 5000
    assert pessimistic.healthy is None  # health is the health checks' call
    assert any("using pessimistic 32" in reason for reason in pessimistic.reasons)


def test_a_label_matcher_that_matches_nothing_is_named() -> None:
    selector = MetricSelector(name="vllm:num_requests_waiting", labels={"model_name": "gpt"})
    signals = extract_signals(VLLM_TEXT, only("queue_depth", selector))
    assert signals.queue_depth is None
    assert signals.reasons == (
        'queue_depth: no sample vllm:num_requests_waiting{model_name="gpt"} in the metrics; '
        "treated as neutral",
    )


@pytest.mark.parametrize(
    ("signal", "value", "problem"),
    [
        ("queue_depth", "NaN", "is NaN"),
        ("queue_depth", "-2", "out of range (expected >= 0)"),
        ("queue_depth", "+Inf", "not a finite number"),
        ("kv_cache_utilization", "1.5", "out of range (expected [0, 1])"),
        ("kv_cache_utilization", "-0.1", "out of range"),
        ("prefix_cache_hit_ratio", "3", "out of range"),
        ("p99_latency_ms", "-Inf", "not a finite number"),
    ],
)
def test_bad_values_are_refused_with_a_reason(signal: str, value: str, problem: str) -> None:
    mapping = only(signal, MetricSelector(name="m"))
    neutral = extract_signals(gauge("m", value), mapping)
    assert getattr(neutral, signal) is None
    assert len(neutral.reasons) == 1
    assert neutral.reasons[0].startswith(f"{signal}: ")
    assert problem in neutral.reasons[0]
    pessimistic = extract_signals(gauge("m", value), mapping, OnError.PESSIMISTIC, scales=SCALES)
    assert getattr(pessimistic, signal) is not None


def test_one_bad_signal_leaves_the_others_alone() -> None:
    text = VLLM_TEXT.replace(
        'gpu_cache_usage_perc{model_name="qwen"} 0.75',
        'gpu_cache_usage_perc{model_name="qwen"} NaN',
    )
    signals = extract_signals(text, MAPPING)
    assert signals.kv_cache_utilization is None
    assert signals.queue_depth == 8
    assert len(signals.reasons) == 1


@pytest.mark.parametrize(
    "text",
    [
        "this is { not prometheus",
        'metric{label="unterminated} 1\n',
        "metric not-a-number\n",
        "\x00\x01\x02",
        "# TYPE m gauge\nm 1\nm{ 2\n",
    ],
)
def test_garbled_text_falls_back_for_every_mapped_signal(text: str) -> None:
    neutral = extract_signals(text, MAPPING)
    assert neutral.reasons[0] == "the metrics text is not valid Prometheus exposition format"
    assert neutral.queue_depth is None and neutral.healthy is None
    pessimistic = extract_signals(text, MAPPING, OnError.PESSIMISTIC, scales=SCALES)
    assert pessimistic.queue_depth == 32 and pessimistic.p99_latency_ms == 5000
    partial = extract_signals(
        text, only("queue_depth", MetricSelector(name="m")), OnError.PESSIMISTIC
    )
    assert partial.kv_cache_utilization is None  # not mapped, so not made pessimistic


# --- histograms ----------------------------------------------------------------------------

LATENCY = MetricSelector(name="lat_seconds", quantile=0.99, scale=1000)


def histogram(counts: dict[str, float], name: str = "lat_seconds") -> str:
    lines = [f"# TYPE {name} histogram"]
    lines += [f'{name}_bucket{{le="{le}"}} {count}' for le, count in counts.items()]
    lines.append(f"{name}_count {max(counts.values(), default=0)}")
    return "\n".join(lines) + "\n"


def p99(text: str, previous: Signals | None = None) -> Signals:
    return extract_signals(text, only("p99_latency_ms", LATENCY), previous=previous)


def test_the_quantile_interpolates_like_prometheus() -> None:
    buckets = ((0.1, 10.0), (0.2, 20.0), (math.inf, 20.0))
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1)
    assert histogram_quantile(0.25, buckets) == pytest.approx(0.05)  # first bucket starts at 0
    assert histogram_quantile(0.75, buckets) == pytest.approx(0.15)
    assert histogram_quantile(0.99, ((0.1, 1.0), (math.inf, 10.0))) == 0.1  # in +Inf
    assert histogram_quantile(0.99, ((0.1, 0.0), (math.inf, 0.0))) is None
    with pytest.raises(ValueError, match="between 0 and 1"):
        histogram_quantile(1.0, buckets)
    with pytest.raises(ValueError, match=r"\+Inf"):
        histogram_quantile(0.5, ((0.1, 1.0),))


def test_series_are_summed_across_labels() -> None:
    text = (
        "# TYPE lat_seconds histogram\n"
        'lat_seconds_bucket{model="a",le="0.1"} 1\nlat_seconds_bucket{model="a",le="+Inf"} 1\n'
        'lat_seconds_bucket{model="b",le="0.1"} 0\nlat_seconds_bucket{model="b",le="+Inf"} 99\n'
    )
    signals = p99(text)
    assert signals.latency_buckets == ((0.1, 1), (math.inf, 100))
    assert signals.p99_latency_ms == pytest.approx(100)


def test_the_window_covers_requests_since_the_previous_scrape() -> None:
    slow = p99(histogram({"0.1": 0, "1": 100, "+Inf": 100}))
    assert slow.p99_latency_ms == pytest.approx(991)
    # 900 fast requests since: the windowed P99 sees only them.
    fast = p99(histogram({"0.1": 900, "1": 1000, "+Inf": 1000}), previous=slow)
    assert fast.p99_latency_ms == pytest.approx(99)
    assert fast.latency_buckets == ((0.1, 900), (1.0, 1000), (math.inf, 1000))


def test_without_a_usable_window_the_whole_histogram_counts() -> None:
    before = p99(histogram({"0.1": 900, "1": 1000, "+Inf": 1000}))
    idle = p99(histogram({"0.1": 900, "1": 1000, "+Inf": 1000}), previous=before)
    assert idle.p99_latency_ms == before.p99_latency_ms
    restarted = p99(histogram({"0.1": 0, "1": 10, "+Inf": 10}), previous=before)
    assert restarted.p99_latency_ms == pytest.approx(991)
    relaid = p99(histogram({"0.5": 10, "+Inf": 10}), previous=before)
    assert relaid.p99_latency_ms == pytest.approx(495)


def test_an_empty_histogram_is_unknown_even_when_pessimistic() -> None:
    text = histogram({"0.1": 0, "+Inf": 0})
    signals = extract_signals(text, only("p99_latency_ms", LATENCY), OnError.PESSIMISTIC)
    assert signals.p99_latency_ms is None
    assert signals.reasons == ("p99_latency_ms: no requests observed yet",)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (histogram({"0.1": 5}), "no +Inf bucket"),
        (histogram({"+Inf": 5}), "only a +Inf bucket"),
        (histogram({"0.1": 5, "+Inf": 3}), "not cumulative"),
        (histogram({"0.1": float("nan"), "+Inf": 3}), "finite number"),
        ("lat_seconds_bucket 5\n", "numeric le label"),
        (gauge("lat_seconds", "1"), "no sample lat_seconds_bucket"),
    ],
)
def test_broken_histograms_are_refused(text: str, problem: str) -> None:
    signals = extract_signals(
        text, only("p99_latency_ms", LATENCY), OnError.PESSIMISTIC, scales=SCALES
    )
    assert signals.p99_latency_ms == 5000
    assert problem in signals.reasons[0]


def test_the_last_histogram_survives_failures() -> None:
    good = p99(histogram({"0.1": 10, "+Inf": 10}))
    failed = fallback_signals("metrics scrape failed: connection refused", MAPPING, previous=good)
    assert failed.latency_buckets == good.latency_buckets
    assert failed.reasons[0] == "metrics scrape failed: connection refused"
    assert failed.queue_depth is None
    missing = p99("", previous=good)
    assert missing.latency_buckets == good.latency_buckets


# --- the mapping -------------------------------------------------------------------------


def test_the_mapping_reads_camel_case() -> None:
    mapping = SignalMapping.model_validate(
        {
            "queueDepth": {"name": "vllm:num_requests_waiting"},
            "p99LatencyMs": {"name": "lat_seconds", "quantile": 0.99, "scale": 1000},
            "kvCacheUtilization": {
                "name": "kv",
                "labels": {"model_name": "llama"},
                "aggregate": "max",
            },
        }
    )
    assert mapping.p99_latency_ms == LATENCY
    assert mapping.kv_cache_utilization is not None
    assert mapping.kv_cache_utilization.aggregate is Aggregate.MAX


@pytest.mark.parametrize(
    "document",
    [
        {"queueDepth": {"name": "bad name"}},
        {"queueDepth": {"name": "ok", "labels": {"bad-label": "x"}}},
        {"queueDepth": {"name": "ok", "scale": 0}},
        {"queueDepth": {"name": "ok", "scale": "inf"}},
        {"queueDepth": {"name": "ok", "quantile": 0.99}},
        {"p99LatencyMs": {"name": "ok", "quantile": 1.5}},
        {"p99LatencyMs": {"name": "ok", "quantile": 0.99, "aggregate": "max"}},
        {"queueDepth": {"name": "ok", "unknown": 1}},
        {"latency": {"name": "ok"}},
    ],
)
def test_bad_mappings_are_refused(document: dict) -> None:
    with pytest.raises(ValidationError):
        SignalMapping.model_validate(document)


# --- never a crash -----------------------------------------------------------------------


@settings(max_examples=300)
@given(st.text(max_size=500), st.sampled_from(list(OnError)))
def test_arbitrary_text_never_raises_and_stays_in_range(text: str, on_error: OnError) -> None:
    signals = extract_signals(text, MAPPING, on_error)
    for value in (signals.kv_cache_utilization, signals.prefix_cache_hit_ratio):
        assert value is None or 0 <= value <= 1
    for value in (signals.queue_depth, signals.p99_latency_ms):
        assert value is None or (math.isfinite(value) and value >= 0)


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                ["vllm:num_requests_waiting", "vllm:gpu_cache_usage_perc", "prefix_hit_ratio", "up"]
            ),
            st.floats(allow_nan=True, allow_infinity=True),
        ),
        max_size=8,
    )
)
def test_any_values_give_in_range_signals_or_reasons(samples: list[tuple[str, float]]) -> None:
    text = "".join(
        f"{name} {value!r}\n".replace("inf", "Inf").replace("nan", "NaN") for name, value in samples
    )
    signals = extract_signals(text, MAPPING)
    if signals.kv_cache_utilization is not None:
        assert 0 <= signals.kv_cache_utilization <= 1
    if signals.queue_depth is not None:
        assert math.isfinite(signals.queue_depth) and signals.queue_depth >= 0
    mapped = {"queue_depth", "kv_cache_utilization", "prefix_cache_hit_ratio", "p99_latency_ms"}
    unknown = {name for name in mapped if getattr(signals, name) is None}
    assert {reason.split(":")[0] for reason in signals.reasons} >= unknown


@settings(max_examples=200)
@given(
    st.dictionaries(
        st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), st.just("+Inf")),
        st.floats(allow_nan=True, allow_infinity=True),
        max_size=6,
    ),
    st.sampled_from(list(OnError)),
)
def test_any_histogram_gives_a_finite_p99_or_a_reason(
    counts: dict[str, float], on_error: OnError
) -> None:
    text = histogram(counts)
    signals = extract_signals(text, only("p99_latency_ms", LATENCY), on_error)
    if signals.p99_latency_ms is None:
        assert signals.reasons
    else:
        assert math.isfinite(signals.p99_latency_ms) and signals.p99_latency_ms >= 0


def test_a_minus_infinity_bound_is_not_the_inf_bucket() -> None:
    with pytest.raises(ValueError, match=r"\+Inf"):
        histogram_quantile(0.5, ((-math.inf, 3.0),))
    signals = p99(histogram({"-Inf": 3}))
    assert "no +Inf bucket" in signals.reasons[0]


def test_the_policy_may_be_given_as_text() -> None:
    signals = extract_signals("", MAPPING, "pessimistic", scales=SCALES)  # type: ignore[arg-type]
    assert signals.queue_depth == 32
