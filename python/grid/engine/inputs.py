"""The site's inputs: its resources and what it observed of its own providers.

The configuration (the GridNetwork, its GridSites and InferenceProviders) and, per
provider this site observes, the last health checks, the last scrape and what the shell
found where its Secret should be. Nothing here decides a phase or a record: the rooms that
do read these inputs. Pure: every method that needs time takes ``now``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType

from pydantic import ValidationError

from grid.engine.egress import EgressResolution, SourceRead, pending, resolve
from grid.engine.events import clip
from grid.engine.targets import ObservationTarget, observation_target, on_error, signal_mapping
from grid.errors import ConfigError
from grid.models.egress_source import EgressSource
from grid.models.network import GridNetwork
from grid.models.phases import CredentialState
from grid.models.provider import HealthCheckStatus, InferenceProvider, ScrapeStatus
from grid.models.selectors import selector_matches
from grid.models.site import GridSite
from grid.oauth.rotation import TokenKeys
from grid.observe.scrape import ScrapeResult
from grid.observe.signals import SignalMapping, Signals
from grid.observe.tracker import HealthObservation, HealthPolicy, HealthStatus


@dataclass(slots=True)
class Observed:
    """What this site observed of one of its own providers."""

    health: HealthStatus = field(default_factory=HealthStatus)
    last_health: HealthCheckStatus | None = None
    signals: Signals | None = None
    scrape: ScrapeStatus | None = None
    metrics_ok: bool | None = None
    metrics_message: str = ""
    credentials: CredentialState = CredentialState.NOT_REQUIRED
    credentials_message: str = ""


def same_inputs(held: tuple[object, ...] | None, inputs: tuple[object, ...]) -> bool:
    """Whether ``inputs`` are those ``held``: the resource (first) the very same object, the
    observations after it equal (what a phase was last evaluated from, against now)."""
    return held is not None and held[0] is inputs[0] and held[1:] == inputs[1:]


class SiteInputs:
    """The resources of one network as this site holds them, and the observations of the
    providers it observes (its own, and those tied to no site)."""

    def __init__(self, network: GridNetwork, site: str) -> None:
        self.site = site
        self.network = network
        self.sites: Mapping[str, GridSite] = MappingProxyType({})
        self.providers: Mapping[str, InferenceProvider] = MappingProxyType({})
        self.observing: tuple[InferenceProvider, ...] = ()
        """The providers this site observes, in name order: worked out when the resources
        change, since every pass reads them several times."""
        self._observed: dict[str, Observed] = {}
        self.config_error: str | None = None
        self.membership_running = False
        self.cert_pem: str | None = None
        self._egress: EgressResolution | None = None
        """The last reading of this site's ``spec.egress.from``."""
        self.token_keys: Mapping[str, TokenKeys] = MappingProxyType({})
        """Per provider whose tokens this site mints, the keys the gateway is told about
        (:mod:`grid.oauth.rotation`)."""

    @property
    def local_site(self) -> GridSite | None:
        """This site's own GridSite, if the configuration has one."""
        return self.sites.get(self.site)

    @property
    def egress_source(self) -> EgressSource | None:
        """The object this site's egress address is read from, if its GridSite says one."""
        local = self.local_site
        egress = local.spec.egress if local is not None else None
        return egress.from_ if egress is not None else None

    @property
    def egress_resolution(self) -> EgressResolution | None:
        """What the current ``spec.egress.from`` gave (pending until its first reading;
        None when the GridSite reads its address from nothing)."""
        source = self.egress_source
        if source is None:
            return None
        if self._egress is None or self._egress.source != source:
            return pending(source)
        return self._egress

    def observe_egress_source(self, read: SourceRead) -> bool:
        """A reading of the object ``spec.egress.from`` names; returns whether the address
        changed. A reading of a source the GridSite no longer names is dropped."""
        local = self.local_site
        egress = local.spec.egress if local is not None else None
        if egress is None or egress.from_ != read.source:
            return False
        before = self.egress_resolution
        self._egress = resolve(egress, read, before)
        return before is None or before.address != self._egress.address

    def observations(self) -> Iterator[tuple[InferenceProvider, Observed]]:
        """Each provider this site observes (in name order) with what was observed of it."""
        return ((p, self._observed[p.metadata.name]) for p in self.observing)

    def set_resources(
        self,
        network: GridNetwork,
        sites: Iterable[GridSite],
        providers: Iterable[InferenceProvider],
    ) -> frozenset[str]:
        """Replace the configuration, keeping only resources of this network; returns the
        providers no longer observed (what was observed of them is dropped)."""
        name = network.metadata.name
        if name != self.network.metadata.name:
            raise ConfigError(f"this engine serves GridNetwork {self.network.metadata.name!r}")
        self.network = network
        self.sites = MappingProxyType(
            {s.metadata.name: s for s in sites if s.spec.grid_network_ref == name}
        )
        self.providers = MappingProxyType(
            {p.metadata.name: p for p in providers if p.spec.grid_network_ref == name}
        )
        local = self.local_site
        labels = local.metadata.labels if local is not None else None
        self.observing = tuple(
            provider
            for _, provider in sorted(self.providers.items())
            if provider.spec.site_selector is None
            or (labels is not None and selector_matches(provider.spec.site_selector, labels))
        )
        observed = {p.metadata.name for p in self.observing}
        gone = frozenset(set(self._observed) - observed)
        for name in gone:
            del self._observed[name]
        for provider in observed:
            self._observed.setdefault(provider, Observed())
        return gone

    def set_config_error(self, message: str | None) -> None:
        self.config_error = None if message is None else clip(message)

    def observe_health(self, provider: str, observation: HealthObservation, now: datetime) -> None:
        """One health check of one of this site's providers."""
        observed = self._observed.get(provider)
        resource = self.providers.get(provider)
        if observed is None or resource is None or resource.spec.health_check is None:
            return
        check = resource.spec.health_check
        policy = HealthPolicy(check.healthy_threshold, check.unhealthy_threshold)
        observed.health = observed.health.observe(observation, now=now.timestamp(), policy=policy)
        observed.last_health = HealthCheckStatus(
            at=now,
            healthy=observation.healthy,
            status_code=observation.status
            if observation.status is not None and 100 <= observation.status <= 599
            else None,
            latency_ms=round(observation.latency_s * 1000, 3),
            consecutive_successes=observed.health.consecutive_successes,
            consecutive_failures=observed.health.consecutive_failures,
            message=clip(observation.reason or ""),
        )

    def observe_scrape(self, provider: str, result: ScrapeResult, now: datetime) -> None:
        """One metrics scrape of one of this site's providers; the signals are extracted
        here with the provider's mapping and the network's scales."""
        observed = self._observed.get(provider)
        resource = self.providers.get(provider)
        if observed is None or resource is None or resource.spec.metrics_config is None:
            return
        config = resource.spec.metrics_config
        try:
            mapping: SignalMapping = signal_mapping(config.signals)
        except ValidationError as error:
            reason = error.errors()[0]["msg"].removeprefix("Value error, ")
            # What an earlier mapping read says nothing about the load now.
            observed.signals = None
            observed.metrics_ok = False
            observed.metrics_message = f"metricsConfig.signals cannot be read: {reason}"
            observed.scrape = ScrapeStatus(at=now, ok=False, message=observed.metrics_message)
            return
        signals = result.signals(
            mapping,
            on_error(config),
            scales=self.network.spec.scoring.scales,
            previous=observed.signals,
        )
        values = (
            signals.queue_depth,
            signals.kv_cache_utilization,
            signals.prefix_cache_hit_ratio,
            signals.p99_latency_ms,
            signals.healthy,
        )
        # A scrape that reached the endpoint but yielded nothing usable counts as failed.
        ok = result.ok and (not signals.reasons or any(v is not None for v in values))
        message = clip("; ".join(signals.reasons))
        observed.signals = signals
        observed.metrics_ok = ok
        observed.metrics_message = message
        observed.scrape = ScrapeStatus(at=now, ok=ok, message=message)

    def observe_credentials(self, provider: str, state: CredentialState, message: str = "") -> None:
        """What the shell found where the provider's ``auth.secretRef`` points (presence
        and size only: the bytes never reach the engine), or how the token it mints for the
        provider stands (``message``: when, until when, what fails since when)."""
        observed = self._observed.get(provider)
        if observed is not None:
            observed.credentials = state
            observed.credentials_message = message

    def observation_targets(self) -> tuple[ObservationTarget, ...]:
        """The health checks and scrapes to run, one per provider this site observes."""
        return tuple(observation_target(p) for p in self.observing)

    def credential_refs(self) -> dict[str, tuple[str, str, str]]:
        """(namespace, Secret name, key) per observed provider that names a Secret."""
        refs = {}
        for provider in self.observing:
            auth = provider.spec.auth
            if auth is not None and auth.secret_ref is not None:
                ref = auth.secret_ref
                refs[provider.metadata.name] = (ref.namespace, ref.name, ref.key)
        return refs
