"""When a site publishes a provider's signals: only moves scoring or admission can tell
apart, always health and phase changes, and a refresh that bounds how long anything waits."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grid.crdt import GridState, ProviderMetrics
from grid.crdt.signals import SignalThresholds
from grid.engine.records import signal_thresholds, signals_refresh_seconds
from grid.errors import CrdtValueError, InvalidResourceError
from grid.models import GridNetwork, load_resource
from grid.models.network import GridNetworkSpec
from support.pages import paged
from test_crdt_records import NOW, sample_record

# The defaults of a GridNetwork: 2 % steps, queue capacity 64, latency ceiling 10 s,
# admission at queue 0.85 and KV 0.90.
THRESHOLDS = SignalThresholds(
    queue_depth_milli=1_280,
    kv_cache_ppm=20_000,
    prefix_cache_ppm=20_000,
    p99_latency_us=200_000,
    queue_capacity=64.0,
    queue_levels=(0.85,),
    kv_levels=(0.9,),
)


def load(
    queue: float | None = 10.0,
    kv: float | None = 0.5,
    prefix: float | None = 0.5,
    p99: float | None = 500.0,
    healthy: bool | None = True,
) -> ProviderMetrics:
    return ProviderMetrics.from_measurements(
        healthy=healthy,
        queue_depth=queue,
        kv_cache_utilization=kv,
        prefix_cache_hit_ratio=prefix,
        p99_latency_ms=p99,
    )


def published_signals(state: GridState) -> list[str]:
    """The providers whose signals the next items publish (in a page)."""
    return sorted(paged(state.items_to_publish(), state.site))


def written(state: GridState) -> ProviderMetrics:
    entry = state.provider(state.site, "llama")
    assert entry is not None
    return entry.record.metrics


def test_without_thresholds_every_change_is_published() -> None:
    a = GridState("site-a")
    a.put_provider(sample_record(metrics=load()), NOW)
    a.items_to_publish()
    assert a.put_provider(sample_record(metrics=load(queue=10.001)), NOW + 1)
    assert published_signals(a) == ["llama"]


@pytest.mark.parametrize(
    ("before", "after", "sent"),
    [
        (load(), load(queue=11.0), False),
        (load(), load(queue=11.28), True),
        (load(), load(queue=8.72), True),
        (load(), load(kv=0.519), False),
        (load(), load(kv=0.52), True),
        (load(), load(prefix=0.481), False),
        (load(), load(prefix=0.48), True),
        (load(), load(p99=699.0), False),
        (load(), load(p99=700.0), True),
        (load(), load(healthy=False), True),
        (load(), load(healthy=None), True),
        (load(), load(queue=None), True),
        (load(queue=None), load(queue=0.0), True),
        (load(p99=None), load(p99=None, kv=0.51), False),
        # Admission's levels: a move across one is sent however small.
        (load(queue=54.4), load(queue=54.5), True),  # 0.85 of 64 is 54.4: not above
        (load(queue=54.5), load(queue=54.4), True),
        (load(queue=54.5), load(queue=55.0), False),
        (load(kv=0.895), load(kv=0.905), True),
        (load(kv=0.9), load(kv=0.91), True),
        (load(kv=0.905), load(kv=0.915), False),
    ],
)
def test_steps_and_admission_levels_decide(
    before: ProviderMetrics, after: ProviderMetrics, sent: bool
) -> None:
    assert THRESHOLDS.worth_publishing(before, after) is sent
    a = GridState("site-a")
    a.put_provider(sample_record(metrics=before), NOW, thresholds=THRESHOLDS)
    a.items_to_publish()
    assert a.put_provider(sample_record(metrics=after), NOW + 1, thresholds=THRESHOLDS) is sent
    assert published_signals(a) == (["llama"] if sent else [])
    assert written(a) == (after if sent else before)


def test_moves_add_up_against_what_was_last_published() -> None:
    a = GridState("site-a")
    a.put_provider(sample_record(metrics=load(queue=10.0)), NOW, thresholds=THRESHOLDS)
    a.items_to_publish()
    for step, queue in enumerate((10.5, 11.0, 11.2), start=1):
        assert not a.put_provider(
            sample_record(metrics=load(queue=queue)), NOW + step, thresholds=THRESHOLDS
        )
    assert a.put_provider(sample_record(metrics=load(queue=11.3)), NOW + 4, thresholds=THRESHOLDS)
    assert written(a) == load(queue=11.3)


def test_phase_and_catalogue_changes_are_always_sent() -> None:
    a = GridState("site-a")
    a.put_provider(sample_record(metrics=load()), NOW, thresholds=THRESHOLDS)
    a.items_to_publish()
    record = sample_record(metrics=load(queue=10.1), phase="Degraded")
    assert a.put_provider(record, NOW + 1, thresholds=THRESHOLDS)
    assert [item.key for item in a.items_to_publish()] == ["signals-page/0"]
    # A catalogue change with a small load move sends the catalogue only.
    record = dataclasses.replace(record, metrics=load(queue=10.2), tools=("calculator",))
    assert a.put_provider(record, NOW + 2, thresholds=THRESHOLDS)
    assert [item.key for item in a.items_to_publish()] == ["provider/llama"]
    entry = a.provider("site-a", "llama")
    assert entry is not None and entry.record.metrics == load(queue=10.1)


def test_the_refresh_sends_the_current_values_and_keeps_a_quiet_provider_fresh() -> None:
    a, b = GridState("site-a"), GridState("site-b")
    a.put_provider(sample_record(metrics=load()), NOW, refresh_after=60, thresholds=THRESHOLDS)
    for item in a.items_to_publish():
        b.apply_item("site-a", item.lane, item.key, item.version, item.payload, NOW)
    drifted = sample_record(metrics=load(queue=10.5))
    assert not a.put_provider(drifted, NOW + 59, refresh_after=60, thresholds=THRESHOLDS)
    assert a.put_provider(drifted, NOW + 60, refresh_after=60, thresholds=THRESHOLDS)
    (item,) = a.items_to_publish()
    assert list(paged([item], "site-a")) == ["llama"]
    b.apply_item("site-a", item.lane, item.key, item.version, item.payload, NOW + 61)
    entry = b.provider("site-a", "llama")
    assert entry is not None and entry.record.metrics == load(queue=10.5)
    assert entry.updated_at == NOW + 60 and entry.received_at == NOW + 61
    # Unchanged: written again all the same once refresh_after has passed.
    assert not a.put_provider(drifted, NOW + 119, refresh_after=60, thresholds=THRESHOLDS)
    assert a.put_provider(drifted, NOW + 120, refresh_after=60)
    assert published_signals(a) == ["llama"]


def test_thresholds_are_checked() -> None:
    with pytest.raises(CrdtValueError):
        SignalThresholds(-1, 0, 0, 0)
    with pytest.raises(CrdtValueError):
        SignalThresholds(0, 0, 0, 0, queue_capacity=0.0)
    with pytest.raises(CrdtValueError):
        GridState("site-a").put_provider(sample_record(), NOW, thresholds="2%")  # type: ignore[arg-type]


def test_steps_of_zero_send_every_change() -> None:
    every = SignalThresholds(0, 0, 0, 0)
    assert every.worth_publishing(load(), load(queue=10.001))
    assert not every.worth_publishing(load(), load())


ratios = st.none() | st.floats(0, 1)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.none() | st.floats(0, 100), ratios, ratios, st.none() | st.floats(0, 20_000)),
        min_size=1,
        max_size=40,
    ),
    st.lists(st.booleans(), min_size=40, max_size=40),
)
def test_what_was_published_stays_within_a_step_on_the_same_side_of_every_level(
    walk: list[tuple[float | None, float | None, float | None, float | None]],
    health: list[bool],
) -> None:
    a = GridState("site-a")
    for step, (queue, kv, prefix, p99) in enumerate(walk):
        measured = load(queue, kv, prefix, p99, healthy=health[step])
        a.put_provider(sample_record(metrics=measured), NOW + step, thresholds=THRESHOLDS)
        shown = written(a)
        assert shown.healthy == measured.healthy
        assert not THRESHOLDS.worth_publishing(shown, measured)
        for old, new, bound in (
            (shown.queue_depth_milli, measured.queue_depth_milli, THRESHOLDS.queue_depth_milli),
            (shown.kv_cache_utilization_ppm, measured.kv_cache_utilization_ppm, 20_000),
            (shown.prefix_cache_hit_ppm, measured.prefix_cache_hit_ppm, 20_000),
            (shown.p99_latency_us, measured.p99_latency_us, 200_000),
        ):
            assert (old is None) == (new is None)
            if old is not None and new is not None:
                assert abs(old - new) < bound
        if queue is not None:
            assert (shown.queue_depth / 64 > 0.85) == (measured.queue_depth / 64 > 0.85)  # type: ignore[operator]
        if kv is not None:
            assert (shown.kv_cache_utilization > 0.9) == (measured.kv_cache_utilization > 0.9)  # type: ignore[operator]


def _network(**spec: object) -> GridNetworkSpec:
    document = {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "GridNetwork",
        "metadata": {"name": "mesh"},
        "spec": spec,
    }
    resource = load_resource(document)
    assert isinstance(resource, GridNetwork)
    return resource.spec


def test_the_network_spec_sets_the_steps_and_admission_sets_the_levels() -> None:
    spec = _network()
    assert signal_thresholds(spec) == THRESHOLDS
    assert signals_refresh_seconds(spec) == 60  # maxInterval, under 300 s / 3
    spec = _network(
        staleCandidateTtlSeconds=90,
        signalPublishing={"queueDepthStep": 0.1, "latencyStep": 0, "maxInterval": "2m"},
        scoring={
            "scales": {"queueCapacity": 10},
            "admission": {"queueDepth": 0.8, "hysteresis": {"enabled": True}},
        },
    )
    thresholds = signal_thresholds(spec)
    assert thresholds is not None
    assert (thresholds.queue_depth_milli, thresholds.p99_latency_us) == (1_000, 0)
    assert thresholds.queue_levels == (0.7, 0.8) and thresholds.kv_levels == (0.8, 0.9)
    assert signals_refresh_seconds(spec) == 30
    off = _network(signalPublishing={"enabled": False})
    assert signal_thresholds(off) is None and signals_refresh_seconds(off) == 100


@pytest.mark.parametrize(
    "publishing",
    [
        {"queueDepthStep": -0.1},
        {"kvCacheStep": 1.5},
        {"prefixCacheStep": "a lot"},
        {"maxInterval": "0s"},
        {"maxInterval": "2h"},
        {"everySecond": True},
    ],
)
def test_invalid_publishing_settings_are_refused(publishing: dict[str, object]) -> None:
    with pytest.raises(InvalidResourceError):
        _network(signalPublishing=publishing)
