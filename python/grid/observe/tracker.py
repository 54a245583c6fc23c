"""Turning a stream of health observations into a health state, with thresholds.

Pure: no I/O; ``now`` is supplied by the caller (seconds on any monotonic scale).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class HealthObservation:
    """One health check: ``reason`` says why it failed (``None`` when healthy)."""

    healthy: bool
    status: int | None
    latency_s: float
    reason: str | None = None


class HealthState(StrEnum):
    """A provider's health as the thresholds see it.

    ``DEGRADED``: was healthy and has failed recently, fewer times in a row than the
    unhealthy threshold; it is still routable.
    """

    UNKNOWN = "Unknown"
    HEALTHY = "Healthy"
    DEGRADED = "Degraded"
    UNHEALTHY = "Unhealthy"


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    """How many checks in a row flip the state: ``healthy_threshold`` successes to become
    healthy, ``unhealthy_threshold`` failures to become unhealthy."""

    healthy_threshold: int = 1
    unhealthy_threshold: int = 3

    def __post_init__(self) -> None:
        if self.healthy_threshold < 1 or self.unhealthy_threshold < 1:
            raise ValueError("health thresholds must be at least 1")


@dataclass(frozen=True, slots=True)
class HealthStatus:
    """Where a provider's health stands after the observations so far."""

    state: HealthState = HealthState.UNKNOWN
    consecutive_successes: int = 0
    consecutive_failures: int = 0
    changed_at: float | None = None
    observed_at: float | None = None
    reason: str | None = None

    def observe(
        self, observation: HealthObservation, *, now: float, policy: HealthPolicy
    ) -> HealthStatus:
        """The status after one more observation made at ``now``."""
        if observation.healthy:
            successes = self.consecutive_successes + 1
            state = self.state
            if self.state is HealthState.DEGRADED or successes >= policy.healthy_threshold:
                state = HealthState.HEALTHY
            return self._next(state, now, successes=successes, failures=0, reason=None)
        failures = self.consecutive_failures + 1
        state = self.state
        if failures >= policy.unhealthy_threshold:
            state = HealthState.UNHEALTHY
        elif self.state is HealthState.HEALTHY:
            state = HealthState.DEGRADED
        return self._next(state, now, successes=0, failures=failures, reason=observation.reason)

    def is_stale(self, now: float, max_age_s: float) -> bool:
        """No observation for longer than ``max_age_s`` (or none at all)."""
        return self.observed_at is None or now - self.observed_at > max_age_s

    def _next(
        self, state: HealthState, now: float, *, successes: int, failures: int, reason: str | None
    ) -> HealthStatus:
        return replace(
            self,
            state=state,
            consecutive_successes=successes,
            consecutive_failures=failures,
            changed_at=now if state is not self.state else self.changed_at,
            observed_at=now,
            reason=reason,
        )
