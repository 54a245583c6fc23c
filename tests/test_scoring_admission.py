"""Admission: thresholds at their edges, and the stabilized (hysteresis) mode."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from grid.errors import ScoringInputError
from grid.models.common import (
    AdmissionState,
    AdmissionThresholds,
    BackendKind,
    Hysteresis,
    SignalScales,
)
from grid.scoring.admission import (
    AdmissionMemory,
    LoadObservation,
    admission_state,
    check_thresholds,
    stabilized_admission,
)
from grid.scoring.inputs import CandidateInput, Metrics

NEW = AdmissionState.NEW_AND_EXISTING
EXISTING = AdmissionState.EXISTING_ONLY
EXCLUDED = AdmissionState.EXCLUDED
T0 = datetime(2026, 7, 29, tzinfo=UTC)
PLAIN = AdmissionThresholds()
STABLE = AdmissionThresholds(
    hysteresis=Hysteresis(
        enabled=True,
        queue_depth_exit=0.7,
        kv_utilization_exit=0.8,
        consecutive_observations=3,
        min_seconds_in_state=30,
    )
)


def observe(
    queue: float | None = None, kv: float | None = None, healthy: bool | None = True
) -> LoadObservation:
    return LoadObservation(queue, kv, healthy)


@pytest.mark.parametrize(
    ("queue", "kv", "expected"),
    [
        (0.85, None, NEW),
        (0.850001, None, EXISTING),
        (None, 0.9, NEW),
        (None, 0.900001, EXISTING),
        (0.1, 0.95, EXISTING),
        (2.0, 0.0, EXISTING),
        (None, None, NEW),
    ],
)
def test_thresholds_restrict_strictly_above(
    queue: float | None, kv: float | None, expected: AdmissionState
) -> None:
    assert admission_state(observe(queue, kv), PLAIN) is expected


def test_unhealthy_is_excluded_and_unknown_health_is_not() -> None:
    assert admission_state(observe(0.1, 0.1, healthy=False), PLAIN) is EXCLUDED
    assert admission_state(observe(0.1, 0.1, healthy=None), PLAIN) is NEW


def test_thresholds_are_configurable() -> None:
    strict = AdmissionThresholds(queue_depth=0.5, kv_utilization=0.5)
    assert admission_state(observe(0.6), strict) is EXISTING
    assert admission_state(observe(None, 0.6), strict) is EXISTING


def test_queue_utilization_is_depth_over_capacity() -> None:
    candidate = CandidateInput(
        provider="p",
        model="m",
        site="s",
        cluster="c",
        backend_kind=BackendKind.LOCAL,
        metrics=Metrics(queue_depth=48, kv_cache_utilization=0.5),
        healthy=True,
    )
    observation = LoadObservation.of(candidate, SignalScales(queue_capacity=64))
    assert observation == LoadObservation(0.75, 0.5, True)
    assert LoadObservation.of(candidate, SignalScales(queue_capacity=50)).queue_utilization > 0.85


# --- stabilized mode --------------------------------------------------------------------


def run(
    observations: list[LoadObservation], step_seconds: float = 10, start: AdmissionState = NEW
) -> list[AdmissionState]:
    """States after each observation, one every ``step_seconds``, starting long settled."""
    memory = AdmissionMemory(state=start, since=T0 - timedelta(hours=1))
    states = []
    for index, observation in enumerate(observations):
        memory = stabilized_admission(
            memory, observation, STABLE, T0 + timedelta(seconds=step_seconds * index)
        )
        states.append(memory.state)
    return states


def test_first_observation_takes_the_plain_verdict_at_once() -> None:
    memory = stabilized_admission(None, observe(0.95), STABLE, T0)
    assert memory == AdmissionMemory(state=EXISTING, since=T0)


def test_a_provider_flapping_on_the_threshold_does_not_flap() -> None:
    flapping = [observe(0.86), observe(0.84)] * 10
    assert set(run(flapping)) == {NEW}


def test_a_change_needs_consecutive_observations() -> None:
    loaded = [observe(0.9)] * 4
    assert run(loaded) == [NEW, NEW, EXISTING, EXISTING]


def test_a_broken_streak_starts_over() -> None:
    series = [observe(0.9), observe(0.9), observe(0.5), observe(0.9), observe(0.9), observe(0.9)]
    assert run(series) == [NEW, NEW, NEW, NEW, NEW, EXISTING]


def test_recovery_needs_to_fall_below_the_exit_threshold() -> None:
    # 0.75 is under the entry threshold (0.85) but above the exit one (0.7): still loaded.
    assert set(run([observe(0.75)] * 6, start=EXISTING)) == {EXISTING}
    assert run([observe(0.6)] * 3, start=EXISTING) == [EXISTING, EXISTING, NEW]
    assert set(run([observe(0.6, 0.85)] * 6, start=EXISTING)) == {EXISTING}


def test_no_change_before_the_minimum_time_in_state() -> None:
    memory = AdmissionMemory(state=NEW, since=T0)
    for second in (1, 2, 3, 29):
        memory = stabilized_admission(memory, observe(0.95), STABLE, T0 + timedelta(seconds=second))
        assert memory.state is NEW
    assert memory.streak == 4
    memory = stabilized_admission(memory, observe(0.95), STABLE, T0 + timedelta(seconds=30))
    assert memory == AdmissionMemory(state=EXISTING, since=T0 + timedelta(seconds=30))


def test_unhealthy_excludes_at_once_and_recovery_is_stabilized() -> None:
    recovering = [observe(0.1, healthy=False), observe(0.1), observe(0.1), observe(0.1)]
    # Three healthy observations, but only 15 s in Excluded: not yet.
    assert run(recovering, step_seconds=5) == [EXCLUDED] * 4
    states = run([observe(healthy=False)] + [observe(0.1)] * 5, step_seconds=20)
    assert states == [EXCLUDED, EXCLUDED, EXCLUDED, NEW, NEW, NEW]


def test_staying_in_a_state_keeps_its_start_time() -> None:
    memory = AdmissionMemory(state=EXCLUDED, since=T0)
    later = stabilized_admission(memory, observe(healthy=False), STABLE, T0 + timedelta(hours=1))
    assert later == memory


def test_exit_thresholds_above_the_entry_ones_are_refused() -> None:
    bad_queue = AdmissionThresholds(queue_depth=0.5, hysteresis=Hysteresis(enabled=True))
    with pytest.raises(ScoringInputError, match="queueDepthExit"):
        check_thresholds(bad_queue)
    bad_kv = AdmissionThresholds(
        kv_utilization=0.5, hysteresis=Hysteresis(enabled=True, queue_depth_exit=0.1)
    )
    with pytest.raises(ScoringInputError, match="kvUtilizationExit"):
        check_thresholds(bad_kv)
    check_thresholds(AdmissionThresholds(queue_depth=0.5))  # not enabled: not checked
