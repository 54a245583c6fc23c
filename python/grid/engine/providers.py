"""The phases of the providers: the phase machine of each provider this site observes, the
health verdict scoring reads from it, and the status of those observed elsewhere (from
what their site publishes). Pure: time comes in as ``now``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType

from grid.crdt.state import GridState
from grid.engine.candidates import LocalView
from grid.engine.events import PROVIDER_KIND, EventLog, with_condition
from grid.engine.inputs import Observed, SiteInputs, same_inputs
from grid.models.phases import ProviderObservation, evaluate_provider
from grid.models.provider import InferenceProvider, InferenceProviderPhase, InferenceProviderStatus
from grid.models.selectors import selector_matches
from grid.observe.tracker import HealthState


@dataclass(slots=True)
class _Evaluated:
    status: InferenceProviderStatus
    settled: tuple[object, ...] | None
    """What ``status`` was evaluated from, when evaluating it again from the same would take
    no transition: a pass skips the evaluation while nothing of it changes."""


class ProviderPhases:
    """The status of each provider this site observes, and its health verdict."""

    def __init__(self, site: str) -> None:
        self._site = site
        self._evaluated: dict[str, _Evaluated] = {}
        self._views: dict[str, LocalView] = {}

    @property
    def views(self) -> Mapping[str, LocalView]:
        """The health verdict per observed provider, as scoring reads it."""
        return MappingProxyType(self._views)

    def drop(self, providers: Iterable[str]) -> None:
        """Forget providers this site no longer observes."""
        for name in providers:
            self._evaluated.pop(name, None)
            self._views.pop(name, None)

    def evaluate(
        self,
        provider: InferenceProvider,
        observed: Observed,
        publish_error: str | None,
        events: EventLog,
        now: datetime,
    ) -> tuple[InferenceProviderPhase, LocalView, bool]:
        """Advance ``provider``'s phase: returns it, the health verdict, and whether the
        verdict changed (what routing reads)."""
        name = provider.metadata.name
        phase = self._phase(provider, observed, publish_error, events, now)
        view = local_view(observed, phase)
        if self._views.get(name) == view:
            return phase, view, False
        self._views[name] = view
        return phase, view, True

    def _phase(
        self,
        provider: InferenceProvider,
        observed: Observed,
        publish_error: str | None,
        events: EventLog,
        now: datetime,
    ) -> InferenceProviderPhase:
        health = observed.health
        observation = ProviderObservation(
            credentials=observed.credentials,
            credentials_message=observed.credentials_message,
            consecutive_successes=health.consecutive_successes,
            consecutive_failures=health.consecutive_failures,
            health_message=health.reason or "",
            metrics_ok=observed.metrics_ok,
            metrics_message=observed.metrics_message,
        )
        made_from = (provider, observation, observed.last_health, observed.scrape, publish_error)
        held = self._evaluated.get(provider.metadata.name)
        if held is not None and same_inputs(held.settled, made_from):
            return held.status.phase
        status = None if held is None else held.status
        outcome = evaluate_provider(
            provider.model_copy(update={"status": status}), observation, now
        )
        events.record(PROVIDER_KIND, provider.metadata.name, outcome.events, now)
        conditions = outcome.conditions
        publishes = provider.spec.site_selector is not None
        if publishes:
            conditions = with_condition(
                conditions,
                "Published",
                publish_error is None,
                "RecordPublished" if publish_error is None else "RecordRefused",
                publish_error or "",
                provider.metadata.generation,
                now,
            )
        self._evaluated[provider.metadata.name] = _Evaluated(
            InferenceProviderStatus(
                phase=outcome.phase,
                phase_transition_time=outcome.phase_transition_time,
                observed_generation=provider.metadata.generation,
                conditions=conditions,
                matching_sites=[self._site] if publishes else [],
                last_health_check=observed.last_health,
                last_metrics_scrape=observed.scrape,
            ),
            None if outcome.transitions else made_from,
        )
        return outcome.phase

    def status(self, name: str, inputs: SiteInputs, state: GridState) -> InferenceProviderStatus:
        """``name``'s status: this site's evaluation when it observes the provider, else the
        phase its first matching site publishes (Pending while none does)."""
        held = self._evaluated.get(name)
        if held is not None:
            return held.status
        provider = inputs.providers[name]
        selector = provider.spec.site_selector
        sites = sorted(
            site
            for site, resource in inputs.sites.items()
            if selector is not None and selector_matches(selector, resource.metadata.labels)
        )
        phase = InferenceProviderPhase.PENDING
        for site in sites:
            entry = state.provider(site, name)
            if entry is not None:
                phase = InferenceProviderPhase(entry.record.phase)
                break
        return InferenceProviderStatus(
            phase=phase, observed_generation=provider.metadata.generation, matching_sites=sites
        )


def local_view(observed: Observed, phase: InferenceProviderPhase) -> LocalView:
    """A provider's health verdict: excluded when its checks fail, its credentials are
    unusable or its own metrics say it is down; routable but not fresh when degraded."""
    state = observed.health.state
    signals = observed.signals
    healthy: bool | None = None
    if state in (HealthState.HEALTHY, HealthState.DEGRADED):
        healthy = True
    if signals is not None and signals.healthy is False:
        healthy = False
    elif signals is not None and signals.healthy and healthy is None:
        healthy = True
    if state is HealthState.UNHEALTHY or phase is InferenceProviderPhase.UNAVAILABLE:
        healthy = False
    degraded = state is HealthState.DEGRADED or phase is InferenceProviderPhase.DEGRADED
    return LocalView(healthy, degraded, signals)
