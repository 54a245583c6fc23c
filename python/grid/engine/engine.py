"""The site engine: one site's state and decisions for one GridNetwork.

Resources, membership changes, received items, observations and probe results go in; the
items to publish, the overlay document per gateway, and phases, conditions and events per
resource come out. No sockets, no clock, no threads: every method that needs time takes
``now`` (an aware datetime). The shells (the standalone agent, the operator) feed it and
carry out what it decides.

Renders are coalesced: the overlays are rendered again only when an input changed, and at
most once per ``spec.renderInterval`` on average. A change is rendered at once while the
renders so far keep within that rate (with room for :data:`RENDER_BURST` in a row); when
changes come faster, they are rendered together, one render per interval, and
:attr:`RefreshResult.next_render_at` tells the shell when to call :meth:`SiteEngine.refresh`
for the next one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from types import MappingProxyType

from pydantic import ValidationError

from grid.crdt.records import ProviderRecord
from grid.crdt.snapshot import GATEWAY_LANE, Item
from grid.crdt.state import GridState
from grid.engine.candidates import (
    LocalCandidates,
    LocalView,
    RemoteCandidates,
    RemoteSite,
)
from grid.engine.records import (
    gateway_record,
    provider_metrics,
    provider_record,
    signal_thresholds,
    signals_refresh_seconds,
    site_metadata,
)
from grid.engine.targets import (
    ObservationTarget,
    ProbeTarget,
    observation_target,
    on_error,
    signal_mapping,
)
from grid.errors import (
    CertificateRejected,
    ConfigError,
    CrdtDecodeError,
    CrdtForgedItemError,
    CrdtLimitError,
    CrdtValueError,
    EmptyOverlayError,
    OverlayRenderError,
    ScoringInputError,
    TrustConfigError,
)
from grid.models.conditions import Condition, ConditionStatus, ConditionUpdate, set_condition
from grid.models.network import (
    GatewayOverlayStatus,
    GatewayRef,
    GridNetwork,
    GridNetworkStatus,
)
from grid.models.phases import (
    CredentialState,
    Event,
    GatewayRender,
    MemberState,
    NetworkObservation,
    ProbeObservation,
    ProviderObservation,
    SiteObservation,
    evaluate_network,
    evaluate_provider,
    evaluate_site,
)
from grid.models.provider import (
    HealthCheckStatus,
    InferenceProvider,
    InferenceProviderPhase,
    InferenceProviderStatus,
    ScrapeStatus,
)
from grid.models.selectors import selector_matches
from grid.models.site import EgressTlsMode, GridSite, GridSitePhase, GridSiteStatus, ProbeStatus
from grid.observe.scrape import ScrapeResult
from grid.observe.signals import SignalMapping, Signals
from grid.observe.tracker import HealthObservation, HealthPolicy, HealthState, HealthStatus
from grid.render.consumer import ClusterEndpoint, GatewayPlan, consumer_config_yaml
from grid.render.overlay import (
    DocumentMemo,
    OverlayScope,
    OverlaySource,
    RenderedOverlay,
    render_overlay,
)
from grid.render.whatif import REMOTE_CLUSTER_PREFIX
from grid.scoring.admission import AdmissionMemory
from grid.scoring.inputs import CandidateInput, ConsumingSite, Geography
from grid.scoring.ranking import CandidateKey, Ranking, ScoringMemo, rank_candidates
from grid.trust.pem import check_public_cert_pem
from grid.trust.site import ProbeResult

DEFAULT_PROBE_INTERVAL_S = 10.0
RENDER_BURST = 16
"""Renders that may follow one another at once before ``renderInterval`` paces them: a site
whose inputs change less often than once per interval on average renders every change at
once, and one under a steady stream of changes renders once per interval."""
RENDER_SHARE = 0.04
"""Under a steady stream of changes, renders are spaced so that they take at most this
share of one core: a pass that costs more than this share of ``renderInterval`` (a large
mesh) stretches the spacing, up to :data:`MAX_RENDER_SPACING`."""
MAX_RENDER_SPACING = timedelta(seconds=1)
"""The most the spacing of renders is stretched to, so a change still reaches the overlay
within about a second whatever a pass costs."""
_RENDER_COST_WEIGHT = 0.3
"""Weight of the latest pass in the running render cost (one slow pass does not stretch
the spacing on its own)."""
MAX_MESSAGE = 4096
_NETWORK = "GridNetwork"
_SITE = "GridSite"
_PROVIDER = "InferenceProvider"

ResourceStatus = GridNetworkStatus | GridSiteStatus | InferenceProviderStatus


class ItemOutcome(StrEnum):
    """What became of a received item."""

    APPLIED = "applied"
    UNCHANGED = "unchanged"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """A peer as SWIM last reported it."""

    site: str
    address: str
    generation: int
    state: MemberState
    since: datetime


@dataclass(frozen=True, slots=True)
class ResourceEvent:
    """An event about one resource (a phase change, a condition turning bad)."""

    kind: str
    name: str
    event: Event
    at: datetime


@dataclass(frozen=True, slots=True)
class GatewayOverlay:
    """The current overlay of one gateway: the last good document (kept when a render is
    refused), and why the last render was refused, if it was."""

    gateway: GatewayRef
    scope: OverlayScope
    overlay: RenderedOverlay | None = None
    consumer_config: str | None = None
    """The complete gateway configuration (YAML) when the gateway enables it."""
    rendered_at: datetime | None = None
    message: str = ""

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name) of the gateway."""
        return (self.gateway.namespace, self.gateway.name)

    @property
    def revision(self) -> str | None:
        return None if self.overlay is None else self.overlay.revision


@dataclass(frozen=True, slots=True)
class RefreshResult:
    """What one :meth:`SiteEngine.refresh` decided."""

    items: tuple[Item, ...]
    """This site's items to publish (new versions)."""
    changed: tuple[GatewayOverlay, ...]
    """Gateways whose overlay has a new revision (or a new refusal message)."""
    events: tuple[ResourceEvent, ...]
    forgotten: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    """Sites whose records this refresh dropped, each with the ``(lane, key)`` of the
    items they came from: the transport forgets them too, and takes them back when the
    site is back."""
    next_render_at: datetime | None = None
    """When a change already taken in is due to be rendered (its render interval is not
    over yet): refresh then. None when every change so far is rendered."""
    rendered: bool = False
    """This refresh ranked and rendered: the shell tells the engine what it cost
    (:meth:`SiteEngine.note_render_cost`)."""


@dataclass(slots=True)
class _Observed:
    """What this site observed of one of its own providers."""

    health: HealthStatus = field(default_factory=HealthStatus)
    last_health: HealthCheckStatus | None = None
    signals: Signals | None = None
    scrape: ScrapeStatus | None = None
    metrics_ok: bool | None = None
    metrics_message: str = ""
    credentials: CredentialState = CredentialState.NOT_REQUIRED
    status: InferenceProviderStatus | None = None
    publish_error: str | None = None
    settled: tuple[object, ...] | None = None
    """What ``status`` was evaluated from, when evaluating it again from the same would take
    no transition: a pass skips the evaluation while nothing of it changes."""
    record: tuple[tuple[object, ...], ProviderRecord] | None = None
    """What the record last published for the provider was built from, and the record."""


@dataclass(frozen=True, slots=True)
class _Probe:
    result: ProbeResult
    at: datetime
    tls_mode: EgressTlsMode


@dataclass(frozen=True, slots=True)
class _AdvertisedCert:
    """The verdict on a site's advertised certificate, for as long as it holds."""

    pem: str
    fingerprint: str | None
    problem: str | None
    checked_at: datetime
    recheck_at: datetime
    """When the verdict may change with time alone: the leaf's expiry, or a probe interval
    after the check (a certificate of the chain expiring, one not yet valid becoming
    valid)."""


def _clip(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


class SiteEngine:
    """One site's view of one GridNetwork, and every decision made from it.

    Feed it with :meth:`set_resources`, the ``member_*`` methods, :meth:`receive_item`,
    :meth:`observe_health`, :meth:`observe_scrape`, :meth:`observe_credentials` and
    :meth:`observe_probe`; then call :meth:`refresh`, which returns the items to publish,
    the overlays that changed and the events to report. It never holds a credential: a
    provider's Secret is known by reference only.
    """

    def __init__(
        self,
        network: GridNetwork,
        site: str,
        *,
        sites: Iterable[GridSite] = (),
        providers: Iterable[InferenceProvider] = (),
        grid_id: str | None = None,
        probe_interval_s: float = DEFAULT_PROBE_INTERVAL_S,
    ) -> None:
        if not probe_interval_s > 0:
            raise ConfigError("the probe interval must be a positive number of seconds")
        self._site = site
        self._state = GridState(site)
        self._network = network
        self._sites: dict[str, GridSite] = {}
        self._providers: dict[str, InferenceProvider] = {}
        self._observing: tuple[InferenceProvider, ...] = ()
        """The providers this site observes, in name order: worked out when the resources
        change, since every pass reads them several times."""
        self._grid_id = network.spec.grid_id or grid_id
        self._probe_interval_s = probe_interval_s
        self._members: dict[str, MemberInfo] = {}
        self._observed: dict[str, _Observed] = {}
        self._views: dict[str, LocalView] = {}
        self._probes: dict[str, _Probe] = {}
        self._probe_requested: dict[str, datetime] = {}
        self._probe_soon: set[str] = set()
        self._site_status: dict[str, GridSiteStatus] = {}
        self._site_settled: dict[str, tuple[object, ...]] = {}
        """What each site's status was evaluated from, while evaluating it again from the
        same would take no transition (as :attr:`_Observed.settled`)."""
        self._network_status = GridNetworkStatus()
        self._overlays: dict[tuple[str, str], GatewayOverlay] = {}
        self._admission: Mapping[CandidateKey, AdmissionMemory] = MappingProxyType({})
        self._ranking: Ranking | None = None
        self._not_offered: tuple[tuple[str, str], ...] = ()
        self._cert_pem: str | None = None
        self._advertised: dict[str, _AdvertisedCert] = {}
        self._local_candidates = LocalCandidates()
        self._remote_candidates = RemoteCandidates()
        self._scoring_memo = ScoringMemo()
        self._documents = DocumentMemo()
        self._config_error: str | None = None
        self._records_error: str | None = None
        self._membership_running = False
        self._trusted: frozenset[str] = frozenset()
        self._events: list[ResourceEvent] = []
        self._forgotten: list[tuple[str, tuple[tuple[str, str], ...]]] = []
        self._stale_at: float | None = None
        """When (seconds) the next remote candidate in the ranking goes stale."""
        self._changed: dict[tuple[str, str], GatewayOverlay] = {}
        self.refused_items: Counter[str] = Counter()
        """Received items refused, by reason (``malformed``, ``forged``, ``limit``)."""
        self._dirty = True
        self._render_tokens = float(RENDER_BURST)
        """Renders the pacing allowed at the last render, that one spent (a token bucket of
        :data:`RENDER_BURST`, refilled at one token per render spacing)."""
        self._render_tokens_at: datetime | None = None
        """When the last render counted against the pacing was made."""
        self._render_cost_s: float | None = None
        """Running cost (CPU seconds) of a render pass, as the shell measured it."""
        self.set_resources(network, sites, providers)

    # -- identity -------------------------------------------------------------------------

    @property
    def site(self) -> str:
        """This site's name (its GridSite and its SWIM identity)."""
        return self._site

    @property
    def network(self) -> GridNetwork:
        return self._network

    @property
    def grid_id(self) -> str | None:
        """The grid id in use: the spec's, else the smallest one known in the mesh."""
        return self._grid_id

    def __repr__(self) -> str:
        return (
            f"SiteEngine(network={self._network.metadata.name!r}, site={self._site!r}, "
            f"members={len(self._members)}, trusted={len(self._trusted)})"
        )

    # -- inputs: configuration ------------------------------------------------------------

    def set_resources(
        self,
        network: GridNetwork,
        sites: Iterable[GridSite],
        providers: Iterable[InferenceProvider],
    ) -> None:
        """Replace the configuration. Only resources of this engine's network are kept;
        state learned about providers that are gone is dropped."""
        name = network.metadata.name
        if name != self._network.metadata.name:
            raise ConfigError(f"this engine serves GridNetwork {self._network.metadata.name!r}")
        self._network = network
        if network.spec.grid_id:
            self._grid_id = network.spec.grid_id
        self._sites = {s.metadata.name: s for s in sites if s.spec.grid_network_ref == name}
        self._providers = {p.metadata.name: p for p in providers if p.spec.grid_network_ref == name}
        local = self._sites.get(self._site)
        labels = local.metadata.labels if local is not None else None
        self._observing = tuple(
            provider
            for _, provider in sorted(self._providers.items())
            if provider.spec.site_selector is None
            or (labels is not None and selector_matches(provider.spec.site_selector, labels))
        )
        observed = {p.metadata.name for p in self._observed_providers()}
        for gone in set(self._observed) - observed:
            del self._observed[gone]
            self._views.pop(gone, None)
        for provider in observed:
            self._observed.setdefault(provider, _Observed())
        self._probe_soon.update(self._sites)
        self._dirty = True

    def set_config_error(self, message: str | None) -> None:
        """Report (or clear) a configuration the shell could not apply; the previous one
        keeps serving and the network reports Degraded."""
        self._config_error = None if message is None else _clip(message)

    def set_membership_running(self, running: bool) -> None:
        """Whether the SWIM node of this network is running."""
        self._membership_running = running

    def set_certificate(self, pem: str | None, now: datetime) -> None:
        """This site's public certificate PEM, advertised on the cert lane (``None``: none
        is advertised). Raises :class:`~grid.errors.CertificateRejected` for anything but a
        bundle of valid public certificates; the message never quotes it."""
        if pem is not None:
            # Checked here so that a bad file is reported at once, not on the next refresh.
            check_public_cert_pem(pem, now)
        self._cert_pem = pem

    # -- inputs: membership and items -----------------------------------------------------

    def member_up(self, site: str, address: str, generation: int, now: datetime) -> None:
        """SWIM reports ``site`` alive (joined, or back with a new generation)."""
        if site == self._site:
            return
        previous = self._members.get(site)
        if previous is not None and generation < previous.generation:
            return
        self._members[site] = MemberInfo(site, address, generation, MemberState.ALIVE, now)
        if previous is None or previous.state is not MemberState.ALIVE:
            self._probe_soon.add(site)
            self._dirty = True

    def member_suspect(self, site: str, address: str, generation: int, now: datetime) -> None:
        """SWIM suspects ``site``: its candidates stay until it is declared down, published
        as not fresh."""
        if site == self._site:
            return
        previous = self._members.get(site)
        if previous is None or generation < previous.generation:
            return
        if previous.state is MemberState.ALIVE and generation == previous.generation:
            self._members[site] = MemberInfo(site, address, generation, MemberState.SUSPECT, now)
            self._dirty = True

    def member_down(self, site: str, address: str, generation: int, now: datetime) -> None:
        """SWIM declared ``site`` down: its candidates leave at once. Its state is kept
        until it goes stale, because a site declared down by mistake rejoins without
        publishing its unchanged items again."""
        self._member_gone(site, address, generation, MemberState.DOWN, now)

    def member_left(self, site: str, address: str, generation: int, now: datetime) -> None:
        """``site`` left the mesh on purpose: its candidates leave and its state is
        dropped."""
        if self._member_gone(site, address, generation, MemberState.LEFT, now):
            self._forget(site)

    def _member_gone(
        self, site: str, address: str, generation: int, state: MemberState, now: datetime
    ) -> bool:
        if site == self._site:
            return False
        previous = self._members.get(site)
        if previous is not None and generation < previous.generation:
            return False  # an older identity of a site that is already back
        self._members[site] = MemberInfo(site, address, generation, state, now)
        self._dirty = True
        return True

    def _forget(self, site: str) -> None:
        items = self._state.forget_site(site)
        if items:
            self._forgotten.append((site, items))
        self._advertised.pop(site, None)
        self._dirty = True

    def receive_item(  # noqa: PLR0917 - the transport's delivery tuple, then the time
        self, origin: str, lane: str, key: str, version: int, payload: bytes, now: datetime
    ) -> ItemOutcome:
        """Merge one item a peer published. A malformed, forged or oversized item is
        refused and counted in :attr:`refused_items`; nothing changes then."""
        try:
            changed = self._state.apply_item(origin, lane, key, version, payload, now.timestamp())
        except CrdtForgedItemError:
            self.refused_items["forged"] += 1
            return ItemOutcome.REFUSED
        except (CrdtDecodeError, CrdtValueError):
            self.refused_items["malformed"] += 1
            return ItemOutcome.REFUSED
        except CrdtLimitError:
            self.refused_items["limit"] += 1
            return ItemOutcome.REFUSED
        if not changed:
            return ItemOutcome.UNCHANGED
        if lane == GATEWAY_LANE:
            self._probe_soon.add(origin)
        self._dirty = True
        return ItemOutcome.APPLIED

    # -- inputs: observations -------------------------------------------------------------

    def observe_health(self, provider: str, observation: HealthObservation, now: datetime) -> None:
        """One health check of one of this site's providers."""
        observed = self._observed.get(provider)
        resource = self._providers.get(provider)
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
            message=_clip(observation.reason or ""),
        )

    def observe_scrape(self, provider: str, result: ScrapeResult, now: datetime) -> None:
        """One metrics scrape of one of this site's providers; the signals are extracted
        here with the provider's mapping and the network's scales."""
        observed = self._observed.get(provider)
        resource = self._providers.get(provider)
        if observed is None or resource is None or resource.spec.metrics_config is None:
            return
        config = resource.spec.metrics_config
        try:
            mapping: SignalMapping = signal_mapping(config.signals)
        except ValidationError as error:
            reason = error.errors()[0]["msg"].removeprefix("Value error, ")
            observed.metrics_ok = False
            observed.metrics_message = f"metricsConfig.signals cannot be read: {reason}"
            observed.scrape = ScrapeStatus(at=now, ok=False, message=observed.metrics_message)
            return
        signals = result.signals(
            mapping,
            on_error(config),
            scales=self._network.spec.scoring.scales,
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
        message = _clip("; ".join(signals.reasons))
        observed.signals = signals
        observed.metrics_ok = ok
        observed.metrics_message = message
        observed.scrape = ScrapeStatus(at=now, ok=ok, message=message)

    def observe_credentials(self, provider: str, state: CredentialState) -> None:
        """What the shell found where the provider's ``auth.secretRef`` points (it checks
        presence and size only; the engine never sees the bytes)."""
        observed = self._observed.get(provider)
        if observed is not None:
            observed.credentials = state

    def observe_probe(self, site: str, result: ProbeResult, now: datetime) -> None:
        """A probe of ``site``'s egress (TLS, or a TCP connect for ``plaintext``)."""
        resource = self._sites.get(site)
        egress = self._egress(site)
        mode = egress.tls_mode if egress is not None else EgressTlsMode.MUTUAL_TLS
        if resource is not None:
            self._probes[site] = _Probe(result, now, mode)

    # -- outputs: what to observe ---------------------------------------------------------

    def observation_targets(self) -> tuple[ObservationTarget, ...]:
        """The health checks and scrapes to run, one entry per provider this site
        observes (its own, and those tied to no site)."""
        return tuple(observation_target(p) for p in self._observed_providers())

    def credential_refs(self) -> dict[str, tuple[str, str, str]]:
        """(namespace, Secret name, key) per observed provider that names a Secret."""
        refs = {}
        for provider in self._observed_providers():
            auth = provider.spec.auth
            if auth is not None and auth.secret_ref is not None:
                ref = auth.secret_ref
                refs[provider.metadata.name] = (ref.namespace, ref.name, ref.key)
        return refs

    def take_due_probes(self, now: datetime) -> tuple[ProbeTarget, ...]:
        """The sites whose egress should be probed now: never probed, probed more than the
        probe interval ago, or just seen joining or changing address. Each is marked as
        requested, so the next call does not return it again before the interval."""
        due: list[ProbeTarget] = []
        for name in sorted(self._sites):
            egress = self._egress(name)
            if egress is None:
                continue
            last = self._probe_requested.get(name)
            soon = name in self._probe_soon
            recent = last is not None and (now - last).total_seconds() < self._probe_interval_s
            if recent and not soon:
                continue
            self._probe_requested[name] = now
            self._probe_soon.discard(name)
            due.append(ProbeTarget(name, egress.address, egress.tls_mode, egress.server_name))
        return tuple(due)

    def _egress(self, site: str) -> ClusterEndpoint | None:
        resource = self._sites.get(site)
        if resource is not None and resource.spec.egress is not None:
            egress = resource.spec.egress
            return ClusterEndpoint(egress.address, egress.tls_mode, egress.server_name)
        learned = self._state.gateway(site) if site != self._site else None
        if learned is None:
            return None
        try:
            mode = EgressTlsMode(learned.tls_mode)
        except ValueError:
            return None
        return ClusterEndpoint(learned.address, mode, learned.server_name)

    # -- outputs: state -------------------------------------------------------------------

    @property
    def members(self) -> Mapping[str, MemberInfo]:
        """Peers as SWIM last reported them (down and left ones included)."""
        return MappingProxyType(self._members)

    @property
    def trusted_sites(self) -> frozenset[str]:
        """Sites (this one excluded) whose GridSite is Active: their certificate matched
        its pin, so their providers are routable."""
        return self._trusted

    def site_pins(self) -> dict[str, tuple[str, ...]]:
        """The certificate fingerprints each GridSite pins (current first, then the one of
        a rotation), for the sites that pin any."""
        return {
            name: resource.spec.trust.pins
            for name, resource in sorted(self._sites.items())
            if resource.spec.trust.pins
        }

    @property
    def discovered_sites(self) -> tuple[str, ...]:
        """Alive peers that no GridSite describes: seen, never trusted."""
        return tuple(
            sorted(
                name
                for name, member in self._members.items()
                if member.state is MemberState.ALIVE and name not in self._sites
            )
        )

    @property
    def state(self) -> GridState:
        """The replicated state (read it; write only through the engine)."""
        return self._state

    @property
    def overlays(self) -> Mapping[tuple[str, str], GatewayOverlay]:
        """The current overlay per gateway, keyed by (namespace, name)."""
        return MappingProxyType(self._overlays)

    @property
    def ranking(self) -> Ranking | None:
        """The last ranking, for explanations."""
        return self._ranking

    @property
    def not_offered(self) -> tuple[tuple[str, str], ...]:
        """(provider, reason) for providers that yielded no candidate in the last pass."""
        return self._not_offered

    def statuses(
        self,
    ) -> dict[tuple[str, str], GridNetworkStatus | GridSiteStatus | InferenceProviderStatus]:
        """The status of every resource of this network, keyed by (kind, name)."""
        result: dict[
            tuple[str, str], GridNetworkStatus | GridSiteStatus | InferenceProviderStatus
        ] = {(_NETWORK, self._network.metadata.name): self._network_status}
        for name, status in sorted(self._site_status.items()):
            result[(_SITE, name)] = status
        for name in sorted(self._providers):
            result[(_PROVIDER, name)] = self._provider_status(name)
        return result

    # -- the decision pass ----------------------------------------------------------------

    def refresh(self, now: datetime, *, flush: bool = False) -> RefreshResult:
        """Bring every output up to date with the inputs so far: evict stale peers, write
        this site's records, advance the phases, and re-rank and re-render when anything
        that affects the order changed (when the render pacing allows: see
        :attr:`RefreshResult.next_render_at`). ``flush`` renders a pending change at once,
        whatever the pacing: for a shell that stops, so its overlays hold the last inputs."""
        if now.utcoffset() is None:
            raise ConfigError("now must carry a time zone")
        self._evict_stale(now)
        self._adopt_grid_id()
        self._write_own_records(now)
        self._evaluate_sites(now)
        if self._stale_at is not None and now.timestamp() > self._stale_at:
            self._dirty = True
        render_at = self.render_due_at(now)
        rendered = render_at is not None and (flush or render_at <= now)
        if rendered:
            self._dirty = False
            self._paced(now)
            self._render(now)
            render_at = None
        self._evaluate_network(now)
        changed = tuple(self._changed.values())
        self._changed.clear()
        events = tuple(self._events)
        self._events.clear()
        forgotten = tuple(self._forgotten)
        self._forgotten.clear()
        return RefreshResult(
            tuple(self._state.items_to_publish()), changed, events, forgotten, render_at, rendered
        )

    def note_render_cost(self, seconds: float) -> None:
        """What the last :meth:`refresh` that rendered cost (CPU seconds, measured by the
        shell: the engine reads no clock). Renders are spaced so that they take at most
        :data:`RENDER_SHARE` of the time; see :meth:`render_spacing`."""
        if not seconds >= 0:
            raise ValueError("a render cost is a number of seconds >= 0")
        previous = self._render_cost_s
        self._render_cost_s = (
            seconds if previous is None else previous + _RENDER_COST_WEIGHT * (seconds - previous)
        )

    @property
    def render_spacing(self) -> timedelta:
        """The average time between renders under a steady stream of changes: the
        network's ``renderInterval``, stretched while a pass costs more than
        :data:`RENDER_SHARE` of it (up to :data:`MAX_RENDER_SPACING`; an interval of 0s or
        above that is never stretched)."""
        interval = timedelta(seconds=self._network.spec.render_interval.seconds)
        cost = self._render_cost_s
        if cost is None or not interval or interval >= MAX_RENDER_SPACING:
            return interval
        return max(interval, min(MAX_RENDER_SPACING, timedelta(seconds=cost / RENDER_SHARE)))

    def render_due_at(self, now: datetime) -> datetime | None:
        """When the pending change should be rendered: at once while the renders so far
        keep within one per render spacing (with room for a burst), else when the pacing
        allows the next one; None when nothing changed. A shell woken by received items
        alone needs no :meth:`refresh` before then."""
        if not self._dirty:
            return None
        tokens = self._render_tokens_now(now)
        if tokens is None or tokens >= 1:
            return now
        return now + self.render_spacing * (1 - tokens)

    def _render_tokens_now(self, now: datetime) -> float | None:
        """Renders the pacing allows at ``now``, or None when it holds nothing back: never
        rendered, a spacing of 0s, or a clock that went back (before the last render). The
        bucket refills at the spacing of the moment, so a spacing that changes with the
        cost of passes changes the rate from then on and never moves a render already due
        (worked out from a pacing time instead, a spacing a little shorter than the last
        put the next render off by the burst's length times the difference: seconds under
        a steady stream)."""
        at = self._render_tokens_at
        spacing = self.render_spacing
        if at is None or now < at or not spacing:
            return None
        return min(float(RENDER_BURST), self._render_tokens + (now - at) / spacing)

    def _paced(self, now: datetime) -> None:
        """Count a render made at ``now`` against the pacing (a flushed render may leave
        the bucket below empty: the renders after it wait for it too)."""
        tokens = self._render_tokens_now(now)
        self._render_tokens = (float(RENDER_BURST) if tokens is None else tokens) - 1
        self._render_tokens_at = now

    def _evict_stale(self, now: datetime) -> None:
        ttl = self._network.spec.stale_candidate_ttl_seconds
        moment = now.timestamp()
        for site in self._state.sites():
            if site == self._site:
                continue
            member = self._members.get(site)
            if member is not None and member.state in (MemberState.ALIVE, MemberState.SUSPECT):
                continue
            if member is not None and member.state is MemberState.LEFT:
                self._forget(site)
                continue
            heard = self._state.last_received_at(site) or 0.0
            if member is not None:
                heard = max(heard, member.since.timestamp())
            if moment - heard > ttl:
                self._forget(site)

    def reset_state(self) -> None:
        """Start the replicated state afresh, for a new SWIM node: peers' items arrive
        again through it, and this site's records are written again (on the next refresh)
        under versions above every earlier one, so peers that forgot them take them."""
        self._state = GridState(self._site)
        self._advertised.clear()
        self._dirty = True

    def _adopt_grid_id(self) -> None:
        # Without a grid id in spec, every site starts with its own; the smallest id any
        # live peer publishes wins, so the mesh converges on one without a coordinator.
        if self._network.spec.grid_id:
            return
        known = [self._grid_id] if self._grid_id else []
        for site, member in self._members.items():
            metadata = self._state.metadata(site) if member.state is MemberState.ALIVE else None
            if metadata is not None and metadata.grid_id:
                known.append(metadata.grid_id)
        if known and min(known) != self._grid_id:
            self._grid_id = min(known)

    def _observed_providers(self) -> tuple[InferenceProvider, ...]:
        """Providers this site observes: those sitting here and those tied to no site."""
        return self._observing

    def _write_own_records(self, now: datetime) -> None:
        moment = now.timestamp()
        published: set[str] = set()
        thresholds = signal_thresholds(self._network.spec)
        refresh = signals_refresh_seconds(self._network.spec)
        for provider in self._observed_providers():
            name = provider.metadata.name
            observed = self._observed[name]
            phase = self._evaluate_provider(provider, observed, now)
            view = _local_view(observed, phase)
            if self._views.get(name) != view:
                self._views[name] = view
                self._dirty = True
            if provider.spec.site_selector is None:
                continue
            try:
                made_from = (provider, phase, observed.signals, view.healthy)
                held = observed.record
                if held is not None and _same_inputs(held[0], made_from):
                    record = held[1]
                else:
                    record = provider_record(
                        provider, phase, provider_metrics(observed.signals, view.healthy)
                    )
                    observed.record = (made_from, record)
                self._state.put_provider(
                    record, moment, refresh_after=refresh, thresholds=thresholds
                )
            except (CrdtValueError, CrdtLimitError) as error:
                observed.publish_error = str(error)
                continue
            observed.publish_error = None
            published.add(name)
        for name in set(self._state.own_provider_names()) - published:
            self._state.remove_provider(name, moment)
        local = self._sites.get(self._site)
        try:
            self._state.set_metadata(site_metadata(local, self._grid_id), moment)
            gateway = gateway_record(local)
            if gateway is not None:
                self._state.set_gateway(gateway, moment)
            if self._cert_pem is not None:
                self._state.set_cert(self._cert_pem, moment)
        except (CrdtValueError, CrdtLimitError) as error:
            self._records_error = _clip(f"this site's records cannot be published: {error}")
        else:
            self._records_error = None

    def _evaluate_provider(
        self, provider: InferenceProvider, observed: _Observed, now: datetime
    ) -> InferenceProviderPhase:
        health = observed.health
        observation = ProviderObservation(
            credentials=observed.credentials,
            consecutive_successes=health.consecutive_successes,
            consecutive_failures=health.consecutive_failures,
            health_message=health.reason or "",
            metrics_ok=observed.metrics_ok,
            metrics_message=observed.metrics_message,
        )
        inputs = (
            provider,
            observation,
            observed.last_health,
            observed.scrape,
            observed.publish_error,
        )
        if observed.status is not None and _same_inputs(observed.settled, inputs):
            return observed.status.phase
        current = provider.model_copy(update={"status": observed.status})
        outcome = evaluate_provider(current, observation, now)
        observed.settled = None if outcome.transitions else inputs
        self._record_events(_PROVIDER, provider.metadata.name, outcome.events, now)
        conditions = outcome.conditions
        if provider.spec.site_selector is not None:
            conditions = _with_condition(
                conditions,
                "Published",
                observed.publish_error is None,
                "RecordPublished" if observed.publish_error is None else "RecordRefused",
                observed.publish_error or "",
                provider.metadata.generation,
                now,
            )
        observed.status = InferenceProviderStatus(
            phase=outcome.phase,
            phase_transition_time=outcome.phase_transition_time,
            observed_generation=provider.metadata.generation,
            conditions=conditions,
            matching_sites=[self._site] if provider.spec.site_selector is not None else [],
            last_health_check=observed.last_health,
            last_metrics_scrape=observed.scrape,
        )
        return outcome.phase

    def _provider_status(self, name: str) -> InferenceProviderStatus:
        observed = self._observed.get(name)
        if observed is not None and observed.status is not None:
            return observed.status
        provider = self._providers[name]
        selector = provider.spec.site_selector
        sites = sorted(
            site
            for site, resource in self._sites.items()
            if selector is not None and selector_matches(selector, resource.metadata.labels)
        )
        phase = InferenceProviderPhase.PENDING
        for site in sites:
            entry = self._state.provider(site, name)
            if entry is not None:
                phase = InferenceProviderPhase(entry.record.phase)
                break
        return InferenceProviderStatus(
            phase=phase, observed_generation=provider.metadata.generation, matching_sites=sites
        )

    def _advertised_cert(self, site: str, now: datetime) -> _AdvertisedCert | None:
        """The verdict on ``site``'s advertised certificate: checked again only when the
        certificate changes or when time alone may change the verdict, not on every pass
        (a busy peer's items arrive all the time; its certificate seldom changes)."""
        pem = self._state.cert_pem(site)
        if pem is None:
            self._advertised.pop(site, None)
            return None
        known = self._advertised.get(site)
        if known is not None and known.pem == pem and known.checked_at <= now < known.recheck_at:
            return known
        recheck_at = now + timedelta(seconds=self._probe_interval_s)
        try:
            info = check_public_cert_pem(pem, now)
        except (CertificateRejected, TrustConfigError) as error:
            problem = f"the advertised certificate was discarded: {error}"
            known = _AdvertisedCert(pem, None, problem, now, recheck_at)
        else:
            # Valid up to and including notAfter: the first moment it is not is just after.
            expired_at = info.not_after + timedelta(microseconds=1)
            known = _AdvertisedCert(pem, info.fingerprint, None, now, min(recheck_at, expired_at))
        self._advertised[site] = known
        return known

    def _member_state(self, site: str) -> MemberState | None:
        if site == self._site:
            return MemberState.ALIVE if self._membership_running else None
        member = self._members.get(site)
        return None if member is None else member.state

    def _evaluate_sites(self, now: datetime) -> None:
        trusted: set[str] = set()
        for name in set(self._site_status) - set(self._sites):
            del self._site_status[name]
            self._site_settled.pop(name, None)
        for name, site in sorted(self._sites.items()):
            status = self._site_status.get(name)
            egress = self._egress(name)
            advertised = self._advertised_cert(name, now) if name != self._site else None
            probe = self._probes.get(name)
            observation = SiteObservation(
                member=self._member_state(name),
                egress_address=None if egress is None else egress.address,
                probe=None if probe is None else _probe_observation(probe, advertised),
            )
            inputs = (site, observation, advertised, probe, egress)
            if status is not None and _same_inputs(self._site_settled.get(name), inputs):
                member = self._members.get(name)
                alive = member is not None and member.state is MemberState.ALIVE
                if alive and status.last_seen_alive != now:
                    status = status.model_copy(update={"last_seen_alive": now})
                    self._site_status[name] = status
                if name != self._site and status.phase is GridSitePhase.ACTIVE:
                    trusted.add(name)
                continue
            outcome = evaluate_site(site.model_copy(update={"status": status}), observation, now)
            if outcome.transitions:
                self._site_settled.pop(name, None)
            else:
                self._site_settled[name] = inputs
            self._record_events(_SITE, name, outcome.events, now)
            conditions = outcome.conditions
            if name != self._site:
                conditions = _advertised_condition(
                    conditions, site, advertised, site.metadata.generation, now
                )
            member = self._members.get(name)
            alive_since = status.last_seen_alive if status is not None else None
            if member is not None and member.state is MemberState.ALIVE:
                alive_since = now
            observed_fingerprint = None
            if probe is not None and probe.result.fingerprint is not None:
                observed_fingerprint = probe.result.fingerprint
            elif probe is not None and probe.tls_mode is EgressTlsMode.PLAINTEXT and advertised:
                observed_fingerprint = advertised.fingerprint
            self._site_status[name] = GridSiteStatus(
                phase=outcome.phase,
                phase_transition_time=outcome.phase_transition_time,
                observed_generation=site.metadata.generation,
                conditions=conditions,
                last_probe=None if probe is None else _probe_status(probe),
                observed_fingerprint=observed_fingerprint,
                matched_pin=site.spec.trust.match(observed_fingerprint),
                egress_address=None if egress is None else egress.address,
                last_seen_alive=alive_since,
            )
            if name != self._site and outcome.phase is GridSitePhase.ACTIVE:
                trusted.add(name)
        if frozenset(trusted) != self._trusted:
            self._trusted = frozenset(trusted)
            self._dirty = True

    def _consumer(self) -> ConsumingSite:
        local = self._sites.get(self._site)
        if local is None:
            return ConsumingSite(name=self._site)
        return ConsumingSite(
            name=self._site,
            geography=Geography(local.spec.region, local.spec.zone),
            labels=local.metadata.labels,
        )

    def _remote_sites(self) -> list[RemoteSite]:
        remote = []
        for name in sorted(self._trusted):
            member = self._members.get(name)
            egress = self._egress(name)
            if member is None or egress is None:
                continue
            if member.state not in (MemberState.ALIVE, MemberState.SUSPECT):
                continue
            spec = self._sites[name].spec
            metadata = self._state.metadata(name)
            # The local GridSite says where a peer is; what the peer says of itself only
            # fills the gaps.
            region = spec.region or (metadata.region if metadata else None)
            zone = spec.zone or (metadata.zone if metadata else None)
            remote.append(
                RemoteSite(
                    name,
                    Geography(region, zone),
                    egress,
                    suspect=member.state is MemberState.SUSPECT,
                )
            )
        return remote

    def _render(self, now: datetime) -> None:
        gateways = self._network.spec.gateway_refs
        if not gateways:
            self._ranking = None
            return
        try:
            what_if = self._local_candidates.of(
                self._network,
                gateway=gateways[0],
                site_name=self._site,
                local_site=self._sites.get(self._site),
                providers=self._observed_providers(),
                views=self._views,
            )
        except ConfigError as error:
            self._refuse_all(gateways, f"the local providers cannot be rendered: {error}")
            return
        endpoints: dict[str, ClusterEndpoint] = dict(what_if.endpoints)
        credentials = what_if.plan.credentials
        not_offered = list(what_if.not_offered)
        routes: list[tuple[CandidateInput, ...]] = []
        remotes = self._remote_sites()
        self._remote_candidates.keep_only(remote.name for remote in remotes)
        for remote in remotes:
            offered, refused = self._remote_candidates.of(remote, self._state)
            not_offered += refused
            if offered and endpoints.setdefault(remote.cluster, remote.endpoint) != (
                remote.endpoint
            ):
                not_offered.append((remote.cluster, "a local cluster has the same name"))
                continue
            routes += offered
        self._not_offered = tuple(not_offered)
        try:
            ranking = rank_candidates(
                what_if.candidates,
                self._consumer(),
                self._network.spec.scoring,
                now,
                stale_after_seconds=self._network.spec.stale_candidate_ttl_seconds,
                admission_memory=self._admission,
                memo=self._scoring_memo,
                routes=routes,
            )
        except ScoringInputError as error:
            self._refuse_all(gateways, f"the candidates cannot be ranked: {error}")
            return
        self._ranking = ranking
        self._admission = ranking.admission_memory
        ttl = self._network.spec.stale_candidate_ttl_seconds
        self._stale_at = min(
            (
                entry.candidate.updated_seconds + ttl
                for entry in ranking.candidates
                if entry.candidate.site != self._site
                and entry.candidate.updated_seconds is not None
            ),
            default=None,
        )
        source = self._source()
        declared = self._declared_clusters(endpoints)
        for gateway in gateways:
            plan = GatewayPlan(self._scope(gateway), declared, credentials)
            self._render_gateway(gateway, ranking, source, plan, now)
        live = {(g.namespace, g.name) for g in gateways}
        for key in set(self._overlays) - live:
            del self._overlays[key]

    def _declared_clusters(
        self, endpoints: Mapping[str, ClusterEndpoint]
    ) -> Mapping[str, ClusterEndpoint]:
        """Every cluster an overlay of this site's gateways can name: the local ones and
        the egress of every known site, whatever its state today, so that a site coming back
        (or a re-ranking) never names a cluster the gateway's configuration lacks."""
        declared = dict(endpoints)
        for name in sorted(self._sites):
            egress = self._egress(name) if name != self._site else None
            if egress is not None:
                declared.setdefault(f"{REMOTE_CLUSTER_PREFIX}{name}", egress)
        return MappingProxyType(declared)

    def _source(self) -> OverlaySource:
        metadata = self._network.metadata
        return OverlaySource(
            name=metadata.name,
            uid=metadata.uid or self._grid_id or f"standalone-{metadata.name}",
            generation=max(metadata.generation or 1, 1),
        )

    def _scope(self, gateway: GatewayRef) -> OverlayScope:
        return OverlayScope(
            network=self._network.metadata.name,
            gateway=gateway.name,
            namespace=gateway.namespace,
            local_site=self._site,
        )

    def _render_gateway(
        self,
        gateway: GatewayRef,
        ranking: Ranking,
        source: OverlaySource,
        plan: GatewayPlan,
        now: datetime,
    ) -> None:
        key = (gateway.namespace, gateway.name)
        current = self._overlays.get(key) or GatewayOverlay(gateway, self._scope(gateway))
        try:
            rendered = render_overlay(
                ranking, self._scope(gateway), source, now, documents=self._documents
            )
            consumer = gateway.consumer_config
            config = None
            if consumer is not None and consumer.enabled:
                config = consumer_config_yaml(
                    plan,
                    consumer,
                    overlay_key=gateway.config_map_key,
                    overlay=rendered,
                    route_filter=gateway.route_filter_name,
                    credential_filter=gateway.credential_filter_name,
                )
        except (EmptyOverlayError, OverlayRenderError) as error:
            self._refuse(current, replace(current, gateway=gateway), str(error))
            return
        if current.overlay is not None and current.overlay.revision == rendered.revision:
            updated = replace(current, gateway=gateway, consumer_config=config, message="")
            if current.message or current.consumer_config != config:
                self._changed[key] = updated
            self._overlays[key] = updated
            return
        updated = GatewayOverlay(gateway, self._scope(gateway), rendered, config, now, "")
        self._overlays[key] = updated
        self._changed[key] = updated

    def _refuse(self, current: GatewayOverlay, updated: GatewayOverlay, message: str) -> None:
        updated = replace(updated, message=_clip(message))
        self._overlays[updated.key] = updated
        if current.message != updated.message:
            self._changed[updated.key] = updated

    def _refuse_all(self, gateways: Sequence[GatewayRef], message: str) -> None:
        for gateway in gateways:
            key = (gateway.namespace, gateway.name)
            current = self._overlays.get(key) or GatewayOverlay(gateway, self._scope(gateway))
            self._refuse(current, replace(current, gateway=gateway), message)

    def _evaluate_network(self, now: datetime) -> None:
        network = self._network
        unreachable = tuple(
            name
            for name, status in self._site_status.items()
            if name != self._site and status.phase is GridSitePhase.UNREACHABLE
        )
        renders = tuple(
            GatewayRender(o.gateway.name, o.gateway.namespace, not o.message, o.message)
            for o in self._overlays.values()
        )
        observation = NetworkObservation(
            config_error=self._config_error or self._records_error,
            membership_running=self._membership_running,
            grid_id=self._grid_id,
            unreachable_sites=unreachable,
            gateway_renders=renders,
        )
        current = network.model_copy(update={"status": self._network_status})
        outcome = evaluate_network(current, observation, now)
        self._record_events(_NETWORK, network.metadata.name, outcome.events, now)
        # Counted, not united: the union of 10,000 names on every pass would cost more than
        # the rest of this evaluation.
        published = self._state.provider_names()
        provider_count = len(published) + sum(
            1 for p in self._observed_providers() if p.metadata.name not in published
        )
        self._network_status = GridNetworkStatus(
            phase=outcome.phase,
            phase_transition_time=outcome.phase_transition_time,
            observed_generation=network.metadata.generation,
            conditions=outcome.conditions,
            grid_id=self._grid_id,
            connected_sites=len(self._trusted),
            provider_count=provider_count,
            gateways=[
                GatewayOverlayStatus(
                    name=o.gateway.name,
                    namespace=o.gateway.namespace,
                    revision=o.revision,
                    candidates=0 if o.overlay is None else len(o.overlay.candidates),
                    rendered_at=o.rendered_at,
                    message=o.message,
                )
                for _, o in sorted(self._overlays.items())
            ],
        )

    def _record_events(self, kind: str, name: str, events: Iterable[Event], now: datetime) -> None:
        self._events.extend(ResourceEvent(kind, name, event, now) for event in events)


def _local_view(observed: _Observed, phase: InferenceProviderPhase) -> LocalView:
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


def _same_inputs(held: tuple[object, ...] | None, inputs: tuple[object, ...]) -> bool:
    """Whether ``inputs`` are those ``held``: the resource (first) the very same object, the
    observations after it equal."""
    return held is not None and held[0] is inputs[0] and held[1:] == inputs[1:]


def _probe_observation(probe: _Probe, advertised: _AdvertisedCert | None) -> ProbeObservation:
    result = probe.result
    latency = round(result.latency_s * 1000, 3)
    if probe.tls_mode is EgressTlsMode.PLAINTEXT:
        # No TLS to read a certificate from: the site is pinned by the one it advertises.
        reachable = result.reachable and result.error is None
        presented = advertised.fingerprint if advertised is not None else None
        return ProbeObservation(probe.at, reachable, presented, latency, result.error or "")
    if result.ok:
        return ProbeObservation(probe.at, True, result.fingerprint, latency)
    return ProbeObservation(probe.at, False, None, latency, result.error or "probe failed")


def _probe_status(probe: _Probe) -> ProbeStatus:
    result = probe.result
    return ProbeStatus(
        at=probe.at,
        reachable=result.reachable,
        latency_ms=round(result.latency_s * 1000, 3),
        message=_clip(result.error or ""),
    )


_CONDITION_STATUS = {
    True: ConditionStatus.TRUE,
    False: ConditionStatus.FALSE,
    None: ConditionStatus.UNKNOWN,
}


def _with_condition(  # noqa: PLR0917 - one condition's fields
    conditions: list[Condition],
    type_: str,
    status: bool | None,
    reason: str,
    message: str,
    generation: int | None,
    now: datetime,
) -> list[Condition]:
    value = {
        True: ConditionStatus.TRUE,
        False: ConditionStatus.FALSE,
        None: ConditionStatus.UNKNOWN,
    }
    update = ConditionUpdate(
        type=type_,
        status=value[status],
        reason=reason,
        message=_clip(message),
        observed_generation=generation,
    )
    return set_condition(conditions, update, now)


def _advertised_condition(
    conditions: list[Condition],
    site: GridSite,
    advertised: _AdvertisedCert | None,
    generation: int | None,
    now: datetime,
) -> list[Condition]:
    if advertised is None:
        return _with_condition(
            conditions,
            "CertificateAdvertised",
            None,
            "NotAdvertised",
            "no certificate received on the cert lane",
            generation,
            now,
        )
    if advertised.problem is not None:
        return _with_condition(
            conditions,
            "CertificateAdvertised",
            False,
            "CertificateDiscarded",
            advertised.problem,
            generation,
            now,
        )
    pinned = site.spec.trust.match(advertised.fingerprint) is not None
    message = (
        "the advertised certificate matches a pinned fingerprint"
        if pinned
        else f"the advertised certificate (SHA-256 {advertised.fingerprint}) matches no pin"
    )
    return _with_condition(
        conditions,
        "CertificateAdvertised",
        pinned,
        "AdvertisedPinned" if pinned else "AdvertisedNotPinned",
        message,
        generation,
        now,
    )
