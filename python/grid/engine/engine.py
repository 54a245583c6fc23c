"""The site engine: one site's state and decisions for one GridNetwork.

Resources, membership changes, received items, observations and probe results go in; the
items to publish, the overlay document per gateway, and phases, conditions and events per
resource come out. No sockets, no clock, no threads: every method that needs time takes
``now`` (an aware datetime). The shells (the standalone agent, the operator) feed it and
carry out what it decides.

:class:`SiteEngine` is the one object the shells hold. It coordinates rooms of one concern
each: the site's inputs (:mod:`grid.engine.inputs`), membership (:mod:`~grid.engine.members`)
and trust in the sites (:mod:`~grid.engine.sites`, :mod:`~grid.engine.probes`,
:mod:`~grid.engine.advertised`), the providers' phases (:mod:`~grid.engine.providers`),
publishing (:mod:`~grid.engine.publishing`), rendering (:mod:`~grid.engine.rendering`,
paced by :mod:`~grid.engine.pacing`), spend (:mod:`~grid.engine.spend`) and the network's
status (:mod:`~grid.engine.network_status`). Each room says whether an input changed what routing
reads; the engine renders again only then, at the pace :class:`RenderPacing` allows, and
:attr:`RefreshResult.next_render_at` tells the shell when to call :meth:`SiteEngine.refresh`
for a change held back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from types import MappingProxyType

from grid.crdt.escrow import ESCROW_PREFIX, EscrowRecord
from grid.crdt.snapshot import GATEWAY_LANE, SPEND_PREFIX, Item
from grid.crdt.state import GridState
from grid.engine.advertised import AdvertisedCerts
from grid.engine.budget_agreement import agreement_condition, disagreements
from grid.engine.budgets import HEARTBEAT_S, unheard_sites
from grid.engine.certificates import KnownCertificates, SiteCertificate
from grid.engine.egress import SourceRead
from grid.engine.escrow import (
    EscrowKeeper,
    EscrowPlan,
    escrow_condition,
    peers_without_escrow,
    run_escrow,
    switched_within,
)
from grid.engine.escrow_checkpoint import EscrowCheckpoint
from grid.engine.events import (
    NETWORK_KIND,
    PROVIDER_KIND,
    SITE_KIND,
    EventLog,
    ResourceEvent,
)
from grid.engine.inputs import SiteInputs
from grid.engine.members import MemberInfo, Members
from grid.engine.network_status import NetworkView, network_status
from grid.engine.pacing import RenderPacing
from grid.engine.probes import Probes
from grid.engine.providers import ProviderPhases
from grid.engine.publishing import Publisher, adopted_grid_id, sites_to_forget
from grid.engine.rendering import GatewayOverlay, Renderer, remote_sites
from grid.engine.sites import SiteTrust, site_egress
from grid.engine.spend import CountedSpend, SpendCounting
from grid.engine.spend_checkpoint import SpendCheckpoint
from grid.engine.targets import EgressSourceTarget, ObservationTarget, ProbeTarget, SpendTarget
from grid.engine.windows import budget_window, spend_horizon
from grid.errors import (
    ConfigError,
    CrdtDecodeError,
    CrdtForgedItemError,
    CrdtLimitError,
    CrdtValueError,
)
from grid.models.network import GridNetwork, GridNetworkStatus
from grid.models.phases import CredentialState, MemberState
from grid.models.provider import InferenceProvider, InferenceProviderStatus
from grid.models.site import EgressTlsMode, GridSite, GridSiteStatus
from grid.oauth.rotation import TokenKeys
from grid.observe.scrape import ScrapeResult
from grid.observe.tracker import HealthObservation
from grid.render.consumer import ClusterEndpoint
from grid.scoring.ranking import Ranking
from grid.trust.chain import NetworkCa
from grid.trust.pem import check_public_cert_pem
from grid.trust.site import ProbeResult

DEFAULT_PROBE_INTERVAL_S = 10.0

ResourceStatus = GridNetworkStatus | GridSiteStatus | InferenceProviderStatus


class ItemOutcome(StrEnum):
    """What became of a received item."""

    APPLIED = "applied"
    UNCHANGED = "unchanged"
    REFUSED = "refused"


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
    site is back. Also, per site, its spend items of budget windows closed everywhere
    (grid.engine.windows), which the engine no longer merges."""
    next_render_at: datetime | None = None
    """When a change already taken in is due to be rendered (its render interval is not
    over yet): refresh then. None when every change so far is rendered."""
    rendered: bool = False
    """This refresh ranked and rendered: the shell tells the engine what it cost
    (:meth:`SiteEngine.note_render_cost`)."""


class SiteEngine:
    """One site's view of one GridNetwork, and every decision made from it.

    Feed it with :meth:`set_resources`, the ``member_*`` methods, :meth:`receive_item`,
    :meth:`observe_health`, :meth:`observe_scrape`, :meth:`observe_credentials`,
    :meth:`observe_probe` and spend scrapes (:meth:`count_spend`); then call
    :meth:`refresh`, which returns the items to publish, the overlays that changed and the
    events to report. It never holds a credential: a
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
        self._grid_id = network.spec.grid_id or grid_id
        self._inputs = SiteInputs(network, site)
        self._members = Members(site)
        self._probes = Probes(probe_interval_s)
        self._advertised = AdvertisedCerts(timedelta(seconds=probe_interval_s))
        self._certificates = KnownCertificates(site)
        self._trust = SiteTrust(site)
        self._phases = ProviderPhases(site)
        self._publisher = Publisher()
        self._renderer = Renderer()
        self._spend = SpendCounting(site)
        self._escrow = EscrowKeeper(site)
        self._escrow_resume: EscrowCheckpoint | None = None
        """The holder to go on as at the next refresh: a checkpoint's, or the replaced
        state's."""
        self._escrow_same_life: EscrowCheckpoint | None = None
        """The holder to go on as when it is this life's own (a new SWIM node)."""
        self._escrow_kept: tuple[EscrowRecord, ...] | None = None
        """This life's escrow records as last handed to the shell to keep."""
        self._protocols: dict[str, int] = {}
        """The SWIM protocol each peer was last heard speaking."""
        self._pacing = RenderPacing()
        self._network_status = GridNetworkStatus()
        self._events = EventLog()
        self._forgotten: list[tuple[str, tuple[tuple[str, str], ...]]] = []
        self.refused_items: Counter[str] = Counter()
        """Received items refused, by reason (``malformed``, ``forged``, ``limit``)."""
        self.set_resources(network, sites, providers)

    # -- identity -------------------------------------------------------------------------

    @property
    def site(self) -> str:
        """This site's name (its GridSite and its SWIM identity)."""
        return self._site

    @property
    def network(self) -> GridNetwork:
        return self._inputs.network

    @property
    def grid_id(self) -> str | None:
        """The grid id in use: the spec's, else the smallest one known in the mesh."""
        return self._grid_id

    def __repr__(self) -> str:
        return (
            f"SiteEngine(network={self.network.metadata.name!r}, site={self._site!r}, "
            f"members={len(self._members)}, trusted={len(self._trust.trusted)})"
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
        gone = self._inputs.set_resources(network, sites, providers)
        if network.spec.grid_id:
            self._grid_id = network.spec.grid_id
        self._phases.drop(gone)
        self._publisher.drop(gone)
        self._spend.configure(network, self._inputs.local_site)
        self._probes.soon(self._inputs.sites)
        self._pacing.pending = True

    def set_config_error(self, message: str | None) -> None:
        """Report (or clear) a configuration the shell could not apply; the previous one
        keeps serving and the network reports Degraded."""
        self._inputs.set_config_error(message)

    def set_membership_running(self, running: bool) -> None:
        """Whether the SWIM node of this network is running."""
        self._inputs.membership_running = running

    def set_certificate(self, pem: str | None, now: datetime) -> None:
        """This site's public certificate PEM, advertised on the cert lane (``None``: none
        is advertised). Raises :class:`~grid.errors.CertificateRejected` for anything but a
        bundle of valid public certificates; the message never quotes it."""
        if pem is not None:
            # Checked here so that a bad file is reported at once, not on the next refresh.
            check_public_cert_pem(pem, now)
        self._inputs.cert_pem = pem

    def set_network_ca(self, ca: NetworkCa) -> None:
        """The network CA, to tell which certificates it vouches for (none is known until
        this is called: the certificates then rest on their pins alone)."""
        self._advertised.ca = ca

    # -- inputs: membership and items -----------------------------------------------------

    def member_up(self, site: str, address: str, generation: int, now: datetime) -> None:
        """SWIM reports ``site`` alive (joined, or back with a new generation)."""
        if self._members.up(site, address, generation, now):
            self._probes.soon((site,))
            self._pacing.pending = True

    def member_suspect(self, site: str, address: str, generation: int, now: datetime) -> None:
        """SWIM suspects ``site``: its candidates stay until it is declared down, published
        as not fresh."""
        if self._members.suspect(site, address, generation, now):
            self._pacing.pending = True

    def member_down(self, site: str, address: str, generation: int, now: datetime) -> None:
        """SWIM declared ``site`` down: its candidates leave at once. Its state is kept
        until it goes stale, because a site declared down by mistake rejoins without
        publishing its unchanged items again."""
        if self._members.gone(site, address, generation, MemberState.DOWN, now):
            self._pacing.pending = True

    def member_left(self, site: str, address: str, generation: int, now: datetime) -> None:
        """``site`` left the mesh on purpose: its candidates leave and its state is
        dropped."""
        if self._members.gone(site, address, generation, MemberState.LEFT, now):
            self._forget(site)

    def _forget(self, site: str) -> None:
        items = self._state.forget_site(site)
        if items:
            self._forgotten.append((site, items))
        self._advertised.forget(site)
        self._certificates.forget(site)
        self._pacing.pending = True

    def note_protocols(self, protocols: Mapping[str, int | None]) -> None:
        """The SWIM protocol version spoken with each peer (None: not heard yet): escrowed
        budgets are held back while a peer speaks one without escrow."""
        self._protocols.update({s: p for s, p in protocols.items() if p is not None})

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
            self._probes.soon((origin,))
        if not key.startswith((SPEND_PREFIX, ESCROW_PREFIX)):
            # Spend and escrow show in the status and the budget document; routing never
            # reads them.
            self._pacing.pending = True
        return ItemOutcome.APPLIED

    # -- inputs: observations -------------------------------------------------------------

    def observe_health(self, provider: str, observation: HealthObservation, now: datetime) -> None:
        """One health check of one of this site's providers."""
        self._inputs.observe_health(provider, observation, now)

    def observe_scrape(self, provider: str, result: ScrapeResult, now: datetime) -> None:
        """One metrics scrape of one of this site's providers; the signals are extracted
        here with the provider's mapping and the network's scales."""
        self._inputs.observe_scrape(provider, result, now)

    def observe_credentials(self, provider: str, state: CredentialState, message: str = "") -> None:
        """What the shell found where the provider's ``auth.secretRef`` points (it checks
        presence and size only; the engine never sees the bytes), or how the token it mints
        for the provider stands, told in ``message``."""
        self._inputs.observe_credentials(provider, state, message)

    def observe_token_keys(self, keys: Mapping[str, TokenKeys]) -> None:
        """The keys of the tokens the shell mints, per provider: which one the overlay's
        reference names, and which the gateway configuration lists. A change is rendered."""
        if dict(keys) != dict(self._inputs.token_keys):
            self._inputs.token_keys = MappingProxyType(dict(keys))
            self._pacing.pending = True

    def observe_probe(self, site: str, result: ProbeResult, now: datetime) -> None:
        """A probe of ``site``'s egress (TLS, or a TCP connect for ``plaintext``)."""
        if site not in self._inputs.sites:
            return
        egress = self._egress(site)
        mode = egress.tls_mode if egress is not None else EgressTlsMode.MUTUAL_TLS
        self._probes.observe(site, result, now, mode)

    def observe_egress_source(self, site: str, read: SourceRead, now: datetime) -> None:
        """A reading of the object this site's ``spec.egress.from`` names (``site`` is this
        site's name: the shell hands every observation over with what it is about). A new
        address is announced with the next :meth:`refresh` and probed at once."""
        del now  # the reading is as of now; its condition takes its time at refresh
        if site == self._site and self._inputs.observe_egress_source(read):
            self._probes.soon((site,))

    def count_spend(self, source: str, result: ScrapeResult, now: datetime) -> CountedSpend | None:
        """What one scrape of a spend source this site reads adds to its spend (None:
        nothing); counted by :meth:`commit_spend`, once the shell has kept its checkpoint."""
        return self._spend.count(source, result, self._state, self.network, now)

    def commit_spend(self, counted: CountedSpend, now: datetime) -> None:
        """Count what :meth:`count_spend` found in this site's budget slots."""
        self._spend.commit(counted, self._state, self.network, now)

    def restore_escrow(self, checkpoint: EscrowCheckpoint) -> None:
        """Go on as the escrow holder of this site's previous life (before the first
        refresh), from a checkpoint its shell wrote before publishing anything of it.
        Raises :class:`ValueError` for a checkpoint of another site."""
        if checkpoint.site != self._site:
            raise ValueError(f"the escrow checkpoint is site {checkpoint.site!r}'s")
        self._escrow_resume = checkpoint
        self._escrow_kept = checkpoint.records

    def take_escrow_checkpoint(self) -> EscrowCheckpoint | None:
        """This life's escrow holder, when its records changed since the last call: a
        shell that restarts as the same holder writes it durably before it publishes the
        refresh's items or budget documents (grid.engine.escrow_checkpoint)."""
        epoch = self._state.escrow_epoch
        records = self._state.own_escrow()
        if (
            epoch is None
            or records == self._escrow_kept
            or (records, self._escrow_kept) == ((), None)
        ):
            return None  # unchanged, or a holder with nothing to lose yet
        self._escrow_kept = records
        return EscrowCheckpoint(self._site, epoch, records)

    def escrow_not_kept(self) -> None:
        """The shell could not keep the last checkpoint: the next call of
        :meth:`take_escrow_checkpoint` returns the holder again."""
        self._escrow_kept = None

    def restore_spend(self, checkpoint: SpendCheckpoint) -> None:
        """Go on from the spend checkpoint of this site's previous life (before its first
        scrape): its slots, and the baselines of the sources that still read the same.
        Raises :class:`ValueError` for a checkpoint of another site."""
        self._spend.restore(checkpoint)

    # -- outputs: what to observe ---------------------------------------------------------

    def observation_targets(self) -> tuple[ObservationTarget, ...]:
        """The health checks and scrapes to run, one entry per provider this site
        observes (its own, and those tied to no site)."""
        return self._inputs.observation_targets()

    def spend_targets(self) -> tuple[SpendTarget, ...]:
        """The spend sources this site scrapes (those whose siteSelector matches it)."""
        return self._spend.targets()

    @property
    def own_providers(self) -> tuple[InferenceProvider, ...]:
        """The providers this site observes: it checks them, scrapes them and mints the
        tokens of the Oauth2, ServiceAccount and Sigv4 ones."""
        return self._inputs.observing

    def credential_refs(self) -> dict[str, tuple[str, str, str]]:
        """(namespace, Secret name, key) per observed provider that names a Secret."""
        return self._inputs.credential_refs()

    def egress_source_target(self) -> EgressSourceTarget | None:
        """The object to read this site's egress address from, and how often (once per
        probe interval); None when its GridSite reads it from nothing."""
        source = self._inputs.egress_source
        if source is None:
            return None
        return EgressSourceTarget(source, self._probes.interval_s)

    def take_due_probes(self, now: datetime) -> tuple[ProbeTarget, ...]:
        """The sites whose egress should be probed now: never probed, probed more than the
        probe interval ago, or just seen joining or changing address. Each is marked as
        requested, so the next call does not return it again before the interval."""
        return self._probes.take_due(sorted(self._inputs.sites), self._egress, now)

    def _egress(self, site: str) -> ClusterEndpoint | None:
        return site_egress(self._inputs, self._state, site)

    # -- outputs: state -------------------------------------------------------------------

    @property
    def members(self) -> Mapping[str, MemberInfo]:
        """Peers as SWIM last reported them (down and left ones included)."""
        return self._members.view

    @property
    def trusted_sites(self) -> frozenset[str]:
        """Sites (this one excluded) whose GridSite is Active: their certificate matched
        its pin, so their providers are routable."""
        return self._trust.trusted

    def site_pins(self) -> dict[str, tuple[str, ...]]:
        """The certificate fingerprints each GridSite pins (current first, then the one of
        a rotation), for the sites that pin any."""
        return {
            name: resource.spec.trust.pins
            for name, resource in sorted(self._inputs.sites.items())
            if resource.spec.trust.pins
        }

    @property
    def certificates(self) -> Mapping[str, SiteCertificate]:
        """This site's certificate and each peer's advertised one, by site, as of the last
        :meth:`refresh` (a forgotten peer's is gone at once)."""
        return self._certificates.view

    @property
    def discovered_sites(self) -> tuple[str, ...]:
        """Alive peers that no GridSite describes: seen, never trusted."""
        return self._members.alive_unknown(self._inputs.sites)

    @property
    def state(self) -> GridState:
        """The replicated state (read it; write only through the engine)."""
        return self._state

    @property
    def overlays(self) -> Mapping[tuple[str, str], GatewayOverlay]:
        """The current overlay per gateway, keyed by (namespace, name)."""
        return self._renderer.overlays

    @property
    def ranking(self) -> Ranking | None:
        """The last ranking, for explanations."""
        return self._renderer.ranking

    @property
    def not_offered(self) -> tuple[tuple[str, str], ...]:
        """(provider, reason) for providers that yielded no candidate in the last pass."""
        return self._renderer.not_offered

    @property
    def network_status(self) -> GridNetworkStatus:
        """The network's status as of the last :meth:`refresh`."""
        return self._network_status

    def statuses(self) -> dict[tuple[str, str], ResourceStatus]:
        """The status of every resource of this network, keyed by (kind, name)."""
        result: dict[tuple[str, str], ResourceStatus] = {
            (NETWORK_KIND, self.network.metadata.name): self._network_status
        }
        for name, status in self._trust.statuses():
            result[(SITE_KIND, name)] = status
        for name in sorted(self._inputs.providers):
            result[(PROVIDER_KIND, name)] = self._phases.status(name, self._inputs, self._state)
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
        ttl = self.network.spec.stale_candidate_ttl_seconds
        for site in sites_to_forget(self._state, self._members.view, ttl, now):
            self._forget(site)
        horizon = spend_horizon(self.network.spec.budgets, now)
        self._forgotten.extend(self._state.close_budget_windows(horizon))
        if not self.network.spec.grid_id:
            self._grid_id = adopted_grid_id(self._grid_id, self._members.view, self._state)
        self._spend.resume_into(self._state, now)
        for budget in self.network.spec.budgets:
            counting = budget_window(budget, now).counting
            self._state.heartbeat_spend(budget.tenant, counting, now.timestamp(), HEARTBEAT_S)
        if self._escrow_resume is not None:
            resumed, self._escrow_resume = self._escrow_resume, None
            self._state.resume_escrow(resumed.epoch, resumed.records, now.timestamp())
            if resumed is not self._escrow_same_life:
                # What the earlier life saw of the budgets is not in the file: it claims
                # no window begun before now (it may have spent in one outside escrow).
                self._escrow.claim_from(now.timestamp())
            self._escrow_same_life = None
        self._state.take_escrow_epoch(now.timestamp())  # a life's holder begins with it
        if self._publisher.write(
            self._state, self._inputs, self._phases, self._grid_id, self._events, now
        ):
            self._pacing.pending = True
        self._certificates.refresh(self._inputs, self._state, self._advertised, now)
        if self._trust.evaluate(
            self._inputs,
            self._state,
            self._members,
            self._probes,
            self._advertised,
            self._events,
            now,
            certificates=self._certificates.view,
        ):
            self._pacing.pending = True
        stale_at = self._renderer.stale_at
        if stale_at is not None and now.timestamp() > stale_at:
            self._pacing.pending = True
        render_at = self.render_due_at(now)
        rendered = render_at is not None and (flush or render_at <= now)
        if rendered:
            self._pacing.rendered(now, self._render_interval)
            self._render(now)
            render_at = None
        self._evaluate_network(now)
        forgotten = tuple(self._forgotten)
        self._forgotten.clear()
        return RefreshResult(
            tuple(self._state.items_to_publish()),
            self._renderer.take_changed(),
            self._events.take(),
            forgotten,
            render_at,
            rendered,
        )

    def note_render_cost(self, seconds: float) -> None:
        """What the last :meth:`refresh` that rendered cost (CPU seconds, measured by the
        shell: the engine reads no clock). Renders are spaced so that they take at most
        :data:`~grid.engine.pacing.RENDER_SHARE` of the time; see :meth:`render_spacing`."""
        self._pacing.note_cost(seconds)

    @property
    def render_spacing(self) -> timedelta:
        """The average time between renders under a steady stream of changes: the
        network's ``renderInterval``, stretched while a pass costs more than
        :data:`~grid.engine.pacing.RENDER_SHARE` of it (up to
        :data:`~grid.engine.pacing.MAX_RENDER_SPACING`; an interval of 0s or above that is
        never stretched)."""
        return self._pacing.spacing(self._render_interval)

    def render_due_at(self, now: datetime) -> datetime | None:
        """When the pending change should be rendered: at once while the renders so far
        keep within one per render spacing (with room for a burst), else when the pacing
        allows the next one; None when nothing changed. A shell woken by received items
        alone needs no :meth:`refresh` before then."""
        return self._pacing.due_at(now, self._render_interval)

    @property
    def _render_interval(self) -> timedelta:
        return timedelta(seconds=self.network.spec.render_interval.seconds)

    def reset_state(self) -> None:
        """Start the replicated state afresh, for a new SWIM node: peers' items arrive
        again through it, and this site's records are written again (on the next refresh)
        under versions above every earlier one, so peers that forgot them take them."""
        self._spend.state_replaced(self._state)
        epoch = self._state.escrow_epoch
        if self._escrow_resume is None and epoch is not None:
            # The same life goes on as the same holder: nothing of it is stranded.
            self._escrow_resume = EscrowCheckpoint(self._site, epoch, self._state.own_escrow())
            self._escrow_same_life = self._escrow_resume
        self._state = GridState(self._site)
        self._advertised.clear()
        self._pacing.pending = True

    def _render(self, now: datetime) -> None:
        remotes = remote_sites(
            self._inputs, self._state, self._members, self._trust.trusted, self._egress
        )
        self._renderer.render(
            self._inputs, self._state, self._phases.views, remotes, self._egress, self._grid_id, now
        )

    def _evaluate_network(self, now: datetime) -> None:
        budgets = self.network.spec.budgets
        old_peers = peers_without_escrow(self._members.view, self._protocols)
        plan = EscrowPlan(tuple(self._inputs.sites), self._members.view, held=not old_peers)
        windows = {budget.tenant: budget_window(budget, now) for budget in budgets}
        view = NetworkView(
            config_error=self._inputs.config_error or self._publisher.records_error,
            grid_id=self._grid_id,
            unreachable_sites=self._trust.unreachable(),
            connected_sites=len(self._trust.trusted),
            spend_sources=self._spend.statuses(),
            unheard=unheard_sites(
                self._site,
                self._inputs.sites,
                self._members.view,
                self._state,
                windows,
                now.timestamp(),
                old_peers,
            ),
            escrow=run_escrow(self._escrow, budgets, windows, self._state, plan, now.timestamp()),
            escrow_condition=escrow_condition(
                budgets,
                old_peers,
                self.network.metadata.generation,
                switched_within(self._escrow, budgets, windows, self._state),
            ),
            agreement=agreement_condition(
                budgets,
                disagreements(budgets, tuple(self._inputs.sites), self._state, now),
                self.network.metadata.generation,
            ),
        )
        self._network_status = network_status(
            self._network_status,
            self._inputs,
            self._state,
            view,
            self._renderer.overlays,
            self._events,
            now,
        )
