"""Admission: may the gateway send a provider new sessions, only existing ones, or nothing?

Two modes. The plain mode reads the thresholds off the latest observation. The stabilized
mode (``AdmissionThresholds.hysteresis.enabled``) is a pure state machine over an
:class:`AdmissionMemory`: it leaves NewAndExisting only above the entry thresholds, comes
back only below the lower exit thresholds, and changes state only after the same verdict
was seen for ``consecutiveObservations`` observations in a row and no sooner than
``minSecondsInState`` after the last change, so a provider sitting on a threshold does not
flap. Unhealthy is the exception: it excludes at once in both modes, because routing to a
failing backend costs more than a flap.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from grid.errors import ScoringInputError
from grid.models.common import AdmissionState, AdmissionThresholds, SignalScales
from grid.scoring.inputs import CandidateInput


class LoadObservation(NamedTuple):
    """What admission looks at; None means not reported, which never restricts."""

    queue_utilization: float | None
    """Queue depth divided by the configured queue capacity (may exceed 1)."""
    kv_utilization: float | None
    healthy: bool | None

    @classmethod
    def of(cls, candidate: CandidateInput, scales: SignalScales) -> LoadObservation:
        """The observation carried by a candidate's latest state."""
        queue_depth = candidate.metrics.queue_depth
        return cls(
            None if queue_depth is None else queue_depth / scales.queue_capacity,
            candidate.metrics.kv_cache_utilization,
            candidate.healthy,
        )


@dataclass(frozen=True, slots=True)
class AdmissionMemory:
    """What the stabilized mode remembers about one candidate between observations."""

    state: AdmissionState
    since: datetime
    """When ``state`` was entered."""
    pending: AdmissionState | None = None
    """The state the recent observations point to, if different from ``state``."""
    streak: int = 0
    """How many observations in a row pointed to ``pending``."""


def check_thresholds(thresholds: AdmissionThresholds) -> None:
    """Refuse a stabilized mode whose exit thresholds sit above its entry thresholds: the
    band between them is what prevents flapping."""
    hysteresis = thresholds.hysteresis
    if not hysteresis.enabled:
        return
    if hysteresis.queue_depth_exit > thresholds.queue_depth:
        raise ScoringInputError(
            "admission.hysteresis.queueDepthExit must not exceed admission.queueDepth"
        )
    if hysteresis.kv_utilization_exit > thresholds.kv_utilization:
        raise ScoringInputError(
            "admission.hysteresis.kvUtilizationExit must not exceed admission.kvUtilization"
        )


def _above(value: float | None, threshold: float) -> bool:
    return value is not None and value > threshold


def admission_state(
    observation: LoadObservation, thresholds: AdmissionThresholds
) -> AdmissionState:
    """The plain mode: Excluded when unhealthy, ExistingOnly when the queue or the KV cache
    is above its threshold (strictly), NewAndExisting otherwise."""
    queue_utilization, kv_utilization, healthy = observation
    return load_admission(queue_utilization, kv_utilization, healthy, thresholds)


def load_admission(
    queue_utilization: float | None,
    kv_utilization: float | None,
    healthy: bool | None,
    thresholds: AdmissionThresholds,
) -> AdmissionState:
    """:func:`admission_state` of the observation made of these three values, without
    making it (ranking asks for every candidate of every pass)."""
    if healthy is False:
        return AdmissionState.EXCLUDED
    if (queue_utilization is not None and queue_utilization > thresholds.queue_depth) or (
        kv_utilization is not None and kv_utilization > thresholds.kv_utilization
    ):
        return AdmissionState.EXISTING_ONLY
    return AdmissionState.NEW_AND_EXISTING


def _target(
    current: AdmissionState, observation: LoadObservation, thresholds: AdmissionThresholds
) -> AdmissionState:
    """Where the observation points from ``current``: a loaded provider must fall below the
    exit thresholds to be offered new sessions again."""
    if current is AdmissionState.EXISTING_ONLY:
        hysteresis = thresholds.hysteresis
        if _above(observation.queue_utilization, hysteresis.queue_depth_exit) or _above(
            observation.kv_utilization, hysteresis.kv_utilization_exit
        ):
            return AdmissionState.EXISTING_ONLY
        return AdmissionState.NEW_AND_EXISTING
    return admission_state(observation, thresholds)


def stabilized_admission(
    previous: AdmissionMemory | None,
    observation: LoadObservation,
    thresholds: AdmissionThresholds,
    now: datetime,
) -> AdmissionMemory:
    """The stabilized mode: the next memory (whose ``state`` is the verdict) after
    ``observation`` at ``now``. A candidate seen for the first time takes the plain verdict
    at once."""
    if previous is None or observation.healthy is False:
        state = admission_state(observation, thresholds)
        if previous is not None and previous.state is state:
            return AdmissionMemory(state=state, since=previous.since)
        return AdmissionMemory(state=state, since=now)
    target = _target(previous.state, observation, thresholds)
    if target is previous.state:
        return AdmissionMemory(state=previous.state, since=previous.since)
    streak = previous.streak + 1 if previous.pending is target else 1
    hysteresis = thresholds.hysteresis
    settled = (now - previous.since).total_seconds() >= hysteresis.min_seconds_in_state
    if streak >= hysteresis.consecutive_observations and settled:
        return AdmissionMemory(state=target, since=now)
    return AdmissionMemory(
        state=previous.state, since=previous.since, pending=target, streak=streak
    )
