"""The provider-phases room on its own: each observed provider's phase machine, evaluated
again only when what it is made from changes, the health verdict scoring reads, and the
status of a provider observed elsewhere (from what its site publishes)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from grid.crdt.state import GridState
from grid.engine.candidates import LocalView
from grid.engine.events import EventLog
from grid.engine.inputs import Observed, SiteInputs
from grid.engine.providers import ProviderPhases, local_view
from grid.engine.records import provider_metrics, provider_record
from grid.models.conditions import ConditionStatus, find_condition
from grid.models.provider import InferenceProvider, InferenceProviderPhase
from grid.observe.signals import Signals
from grid.observe.tracker import HealthObservation, HealthState, HealthStatus
from test_engine import T0, network, provider, site
from test_engine_rooms_publishing import deliver

AVAILABLE = InferenceProviderPhase.AVAILABLE
DEGRADED = InferenceProviderPhase.DEGRADED
UNAVAILABLE = InferenceProviderPhase.UNAVAILABLE


def site_a_inputs(*providers: InferenceProvider) -> SiteInputs:
    inputs = SiteInputs(network(), "site-a")
    inputs.set_resources(network(), [site("site-a"), site("site-b")], providers)
    return inputs


def evaluate(
    phases: ProviderPhases,
    inputs: SiteInputs,
    events: EventLog,
    seconds: float = 0,
    publish_error: str | None = None,
) -> tuple[InferenceProviderPhase, LocalView, bool]:
    """Evaluate site-a's only observed provider at ``T0 + seconds``."""
    ((resource, observed),) = inputs.observations()
    moment = T0 + timedelta(seconds=seconds)
    return phases.evaluate(resource, observed, publish_error, events, moment)


def test_the_verdict_is_reported_changed_only_when_it_changes() -> None:
    inputs = site_a_inputs(provider("llama-a", "site-a", health=True))
    phases, events = ProviderPhases("site-a"), EventLog()
    inputs.observe_health("llama-a", HealthObservation(True, 200, 0.001), T0)
    phase, view, changed = evaluate(phases, inputs, events)
    assert (phase, view.healthy, view.degraded, changed) == (AVAILABLE, True, False, True)
    assert phases.views == {"llama-a": view}
    assert evaluate(phases, inputs, events, 1)[2] is False
    second = T0 + timedelta(seconds=2)
    inputs.observe_health("llama-a", HealthObservation(True, 200, 0.001), second)
    assert evaluate(phases, inputs, events, 2)[2] is False  # a new check, the same verdict
    third = T0 + timedelta(seconds=3)
    inputs.observe_health("llama-a", HealthObservation(False, 500, 0.001, "HTTP 500"), third)
    phase, view, changed = evaluate(phases, inputs, events, 3)
    assert (phase, view.healthy, view.degraded, changed) == (DEGRADED, True, True, True)


def test_a_settled_status_is_not_evaluated_again_until_its_inputs_change() -> None:
    inputs = site_a_inputs(provider("llama-a", "site-a", health=True))
    phases, events = ProviderPhases("site-a"), EventLog()
    state = GridState("site-a")
    inputs.observe_health("llama-a", HealthObservation(True, 200, 0.001), T0)
    evaluate(phases, inputs, events)
    assert [e.event.reason for e in events.take()] == ["ProviderReady"]
    moved = phases.status("llama-a", inputs, state)
    evaluate(phases, inputs, events, 1)  # after a transition, evaluated again all the same
    settled = phases.status("llama-a", inputs, state)
    assert settled is not moved
    evaluate(phases, inputs, events, 2)
    assert phases.status("llama-a", inputs, state) is settled
    checked = T0 + timedelta(seconds=3)
    inputs.observe_health("llama-a", HealthObservation(True, 200, 0.001), checked)
    evaluate(phases, inputs, events, 3)
    fresh = phases.status("llama-a", inputs, state)
    assert fresh is not settled
    assert fresh.last_health_check is not None and fresh.last_health_check.at == checked
    assert events.take() == ()


def test_a_changed_resource_is_evaluated_again_even_when_equal() -> None:
    resource = provider("llama-a", "site-a")
    inputs = site_a_inputs(resource)
    phases, events, state = ProviderPhases("site-a"), EventLog(), GridState("site-a")
    evaluate(phases, inputs, events)
    evaluate(phases, inputs, events, 1)
    settled = phases.status("llama-a", inputs, state)
    inputs.set_resources(network(), [site("site-a")], [resource.model_copy()])
    evaluate(phases, inputs, events, 2)
    assert phases.status("llama-a", inputs, state) is not settled


def test_a_published_provider_carries_the_published_condition() -> None:
    inputs = site_a_inputs(provider("llama-a", "site-a"))
    phases, events, state = ProviderPhases("site-a"), EventLog(), GridState("site-a")
    evaluate(phases, inputs, events)
    status = phases.status("llama-a", inputs, state)
    assert status.matching_sites == ["site-a"]
    published = find_condition(status.conditions, "Published")
    assert published is not None
    assert (published.status, published.reason) == (ConditionStatus.TRUE, "RecordPublished")
    evaluate(phases, inputs, events, 1, publish_error="too large")
    published = find_condition(phases.status("llama-a", inputs, state).conditions, "Published")
    assert published is not None
    assert (published.status, published.reason, published.message) == (
        ConditionStatus.FALSE,
        "RecordRefused",
        "too large",
    )


def test_a_provider_of_no_site_is_not_published_and_matches_no_site() -> None:
    inputs = site_a_inputs(provider("openai", None))
    phases, events, state = ProviderPhases("site-a"), EventLog(), GridState("site-a")
    evaluate(phases, inputs, events)
    status = phases.status("openai", inputs, state)
    assert status.phase is AVAILABLE
    assert status.matching_sites == []
    assert find_condition(status.conditions, "Published") is None


def test_a_provider_observed_elsewhere_shows_the_phase_its_site_publishes() -> None:
    llama_b = provider("llama-b", "site-b")
    inputs = site_a_inputs(llama_b)
    phases, state = ProviderPhases("site-a"), GridState("site-a")
    pending = phases.status("llama-b", inputs, state)
    assert (pending.phase, pending.matching_sites) == (InferenceProviderPhase.PENDING, ["site-b"])
    peer = GridState("site-b")
    record = provider_record(llama_b, DEGRADED, provider_metrics(None, True))
    peer.put_provider(record, T0.timestamp())
    deliver(peer, state, T0)
    assert phases.status("llama-b", inputs, state).phase is DEGRADED


def test_dropped_providers_are_forgotten() -> None:
    inputs = site_a_inputs(provider("llama-a", "site-a"))
    phases, events, state = ProviderPhases("site-a"), EventLog(), GridState("site-a")
    evaluate(phases, inputs, events)
    phases.drop(["llama-a", "never-seen"])
    assert phases.views == {}
    assert phases.status("llama-a", inputs, state).phase is InferenceProviderPhase.PENDING
    assert evaluate(phases, inputs, events, 1)[2] is True


# --- the health verdict ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("health", "signals", "phase", "expected"),
    [
        (HealthState.UNKNOWN, None, AVAILABLE, (None, False)),
        (HealthState.HEALTHY, None, AVAILABLE, (True, False)),
        (HealthState.DEGRADED, None, AVAILABLE, (True, True)),
        (HealthState.UNHEALTHY, None, AVAILABLE, (False, False)),
        (HealthState.UNKNOWN, Signals(healthy=True), AVAILABLE, (True, False)),
        (HealthState.HEALTHY, Signals(healthy=False), AVAILABLE, (False, False)),
        (HealthState.UNHEALTHY, Signals(healthy=True), AVAILABLE, (False, False)),
        (HealthState.HEALTHY, Signals(healthy=True), UNAVAILABLE, (False, False)),
        (HealthState.HEALTHY, None, DEGRADED, (True, True)),
    ],
)
def test_the_health_verdict(
    health: HealthState,
    signals: Signals | None,
    phase: InferenceProviderPhase,
    expected: tuple[bool | None, bool],
) -> None:
    observed = Observed(health=HealthStatus(state=health), signals=signals)
    view = local_view(observed, phase)
    assert (view.healthy, view.degraded) == expected
    assert view.signals is signals
