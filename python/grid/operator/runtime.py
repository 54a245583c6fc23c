"""One GridNetwork in the operator: its Secrets, its SWIM node, its site engine, what feeds
the engine (membership, received items, health checks, scrapes, probes, credential checks)
and the Kubernetes writes that carry out what it decides (ConfigMaps, statuses, Events,
auto-discovered GridSites).

Everything runs on kopf's event loop. A pass (:meth:`NetworkRuntime.reconcile`) runs when
something changed (a resource, a membership event, an observation) and at least every
``tick_s``. A pass never raises: what fails is logged, counted and reported in status, and
the last good state keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

import aiohttp

from grid.engine import SiteEngine, SpendCheckpoint
from grid.engine.budget_agreement import AGREEMENT_CONDITION
from grid.engine.escrow import ESCROW_CONDITION
from grid.engine.events import ResourceEvent
from grid.errors import (
    CertificateRejected,
    KubernetesApiError,
    SecretMaterialError,
    TrustConfigError,
)
from grid.membership import NameConflict, SwimNode, VersionRefused
from grid.models.conditions import Condition, ConditionUpdate
from grid.models.fields import DNS_LABEL_PATTERN
from grid.models.network import GridNetwork, GridNetworkStatus, generate_grid_id
from grid.models.phases import Event, EventType
from grid.models.site import GridSitePhase
from grid.operator.cache import NETWORK, Entry, ResourceCache, valid_network
from grid.operator.configmaps import Target
from grid.operator.credentials import CredentialChecks
from grid.operator.egress import read_egress_source
from grid.operator.kube import KubeApi
from grid.operator.metrics import OperatorMetrics
from grid.operator.options import OperatorOptions
from grid.operator.ports import Assignment, SwimPorts, claims_of
from grid.operator.secrets import TrustMaterial, load_trust_material
from grid.operator.sites import auto_discovers, discovered_site_manifest, resolve_local_site
from grid.operator.spec_events import SPEC_REJECTED, SpecEvents
from grid.operator.spend_checkpoints import CheckpointUnusable, SpendCheckpoints
from grid.operator.status import (
    SPEC_VALID,
    GatewayOutcome,
    NetworkReport,
    SeedReport,
    dump_status,
    network_status,
    rejected_member_status,
    rejected_network,
    with_spec_condition,
)
from grid.operator.tokens import operator_io
from grid.operator.writes import ConfigMapWriter, StatusWriter
from grid.runtime.notices import Notices
from grid.runtime.observers import Observers
from grid.runtime.probes import SiteProber
from grid.runtime.swim import SwimDriver, SwimPlan
from grid.runtime.tokens import TokenMinters
from grid.trust.chain import NetworkCa

_log = logging.getLogger("grid.operator")

PostEvent = Callable[[Mapping[str, Any], EventType, str, str], None]
"""Posts a Kubernetes Event: (object reference, type, reason, message)."""

_GRID_ID = re.compile(DNS_LABEL_PATTERN)
_WRITE_RETRY_TICKS = 5
SPEND_CHECKPOINT_IGNORED = "SpendCheckpointIgnored"


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Shared:
    """What every network of the operator shares."""

    options: OperatorOptions
    kube: KubeApi
    cache: ResourceCache
    metrics: OperatorMetrics
    session: aiohttp.ClientSession
    post_event: PostEvent
    ports: SwimPorts


class NetworkRuntime:
    """Runs one network: :meth:`start`, :meth:`wake` it when its resources change,
    :meth:`stop` (leaving the mesh, or vanishing as a crash would)."""

    def __init__(self, name: str, shared: Shared) -> None:
        self.name = name
        self._shared = shared
        options = shared.options
        self.engine: SiteEngine | None = None
        self._notices = Notices(_log, f"network {name}")
        metrics = shared.metrics
        # Its counters (items, name conflicts) are read by /metrics at scrape time.
        self.mesh = SwimDriver(
            self._notices,
            _log,
            self._engine,
            self.wake,
            on_conflict=self._name_conflict,
            on_version_refused=self._version_refused,
        )
        self._spend = SpendCheckpoints(shared.kube, options.namespace, name)
        self._owner: Mapping[str, Any] | None = None
        """The GridNetwork as last read, which the spend checkpoint's ConfigMap names."""
        self._observers = Observers(
            session=shared.session,
            prober=SiteProber.from_pem(),
            engine_of=self._engine,
            wake=self.wake,
            logger=_log,
            prefix=f"network {name}",
            egress_reader=partial(read_egress_source, shared.kube),
            keep_spend=self._spend.keep,
        )
        self._credentials = CredentialChecks(
            shared.kube, metrics, self._notices, options.secret_refresh_s
        )
        self.tokens = TokenMinters(
            operator_io(shared.kube),
            shared.session,
            where=f"network {name}",
            on_change=self.wake,
            now=utc_now,
            settle=shared.options.token_settle,
        )
        self._minting: asyncio.Task[None] | None = None
        self._configmaps = ConfigMapWriter(
            name,
            shared.kube,
            shared.metrics,
            self._notices,
            retry_s=options.tick_s * _WRITE_RETRY_TICKS,
        )
        self._statuses = StatusWriter(shared.kube, shared.metrics, options.status_interval_s)
        self._material: TrustMaterial | None = None
        self._network_ca = NetworkCa()
        """The CA of the material in use, for the engine to tell which certificates it
        vouches for."""
        self._material_error: str | None = None
        self._material_read_at: float | None = None
        self._material_generation: int | None = None
        self._advertised_pem: str | None = None
        self._certificate_error: str | None = None
        self._swim_port: Assignment | None = None
        self._network_status: GridNetworkStatus | None = None
        self._spec_events = SpecEvents()
        self._untold_conflicts: list[Event] = []
        self._discovery_tried: set[str] = set()
        self._applied_revision = -1
        self._wake = asyncio.Event()
        self._render_due: float | None = None
        """When (monotonic) the engine has a change to render, if it has one."""
        self._main: asyncio.Task[None] | None = None
        self._stopped = False
        self._stopping: asyncio.Future[None] | None = None
        self.passes = 0
        """Reconcile passes run so far."""

    def __repr__(self) -> str:
        return f"NetworkRuntime({self.name!r}, site={self.site!r})"

    def _engine(self) -> SiteEngine | None:
        return self.engine

    @property
    def site(self) -> str | None:
        return None if self.engine is None else self.engine.site

    @property
    def node(self) -> SwimNode | None:
        """The network's SWIM node (None while it does not run)."""
        return self.mesh.node

    @property
    def observers(self) -> Observers:
        """The network's health checks, scrapes and probes (``/metrics`` reads their
        durations)."""
        return self._observers

    @property
    def alive(self) -> bool:
        """Whether the reconcile loop runs (or has not been started yet)."""
        return self._main is None or not self._main.done()

    @property
    def network_status(self) -> GridNetworkStatus | None:
        """The network's status as last composed."""
        return self._network_status

    def write_message(self, namespace: str, gateway: str) -> str:
        """Why the gateway's ConfigMaps could not be written ("" when they were)."""
        return self._configmaps.message(namespace, gateway)

    @property
    def written_targets(self) -> set[Target]:
        """Every ConfigMap this runtime wrote or was told about."""
        return self._configmaps.targets

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the reconcile loop (on the running event loop)."""
        if self._main is None and not self._stopped:
            self._main = asyncio.create_task(self._loop(), name=f"grid-network-{self.name}")
            self._minting = asyncio.create_task(
                self.tokens.loop(), name=f"grid-network-{self.name}-tokens"
            )

    async def stop(self, *, leave: bool = True) -> None:
        """Stop every loop; ``leave`` tells peers this site is going, otherwise it vanishes
        as a crash would; leaving, the spend checkpoint is written. Idempotent: a second
        call waits for the first."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._stop(leave))
        await self._stopping

    async def _stop(self, leave: bool) -> None:
        self._stopped = True
        for task in (self._main, self._minting):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self._observers.stop()
        if leave:
            await self._write_spend(time.monotonic(), now=True)
        await self.mesh.stop(leave=leave)
        self._shared.ports.release(self.name)
        _log.info("network %s stopped (%s)", self.name, "left the mesh" if leave else "crashed")

    def wake(self) -> None:
        """Reconcile as soon as possible."""
        self._wake.set()

    def retire(self, targets: set[Target]) -> None:
        """ConfigMaps an earlier spec named: deleted unless the current spec wants them."""
        self._configmaps.retire(targets)
        self.wake()

    async def _loop(self) -> None:
        tick = self._shared.options.tick_s
        while not self._stopped:
            self._wake.clear()
            await self.reconcile()
            while True:
                due = self._render_due
                timeout = tick if due is None else min(tick, max(due - time.monotonic(), 0.0))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
                if due is None or time.monotonic() >= due:
                    break
                # A render is already due then: what woke the loop (a burst of received
                # items) joins it rather than costing a pass of its own.
                self._wake.clear()

    # -- the pass -------------------------------------------------------------------------

    async def reconcile(self) -> None:
        """Bring everything up to date once. Never raises (but lets cancellation through)."""
        try:
            await self._reconcile()
        except asyncio.CancelledError:
            raise
        except Exception:
            # A control loop must outlive a bug in one pass: log it (with its traceback,
            # which carries no values) and try again on the next pass.
            self._shared.metrics.reconcile_errors.labels(self.name).inc()
            _log.exception("network %s: reconcile pass failed", self.name)
        self.passes += 1

    async def _reconcile(self) -> None:
        shared = self._shared
        # The resources as of now: whatever arrives while this pass awaits is the next one's.
        revision = shared.cache.revision
        entry = shared.cache.network(self.name)
        if entry is None:
            return
        now, moment = utc_now(), time.monotonic()
        network = valid_network(entry)
        if network is None:
            await self._report_rejected_network(entry, now)
            return
        if self._network_status is None:
            self._network_status = _recorded_status(entry)
        self._owner = entry.body
        await self._refresh_material(network, entry, now, moment)
        engine = await self._engine_for(network, entry, revision)
        if engine is None:
            return
        port = self._swim_port = shared.ports.assign(self.name, claims_of(shared.cache))
        if port.port is None and self.mesh.node is not None:
            await self.mesh.stop(leave=True)
        if self._material is None or port.port is None:
            engine.set_membership_running(False)
        else:
            plan = _swim_plan(network, shared.options, port.port)
            material = self._material
            await self.mesh.ensure(engine, plan, material.keyring, material.credentials)
        self._advertise_certificate(engine, now)
        self._tell_conflicts(entry)
        engine.set_config_error(self._config_error(entry))
        await self._credentials.check(engine, moment)
        self.tokens.follow(engine.own_providers)
        for provider in self.tokens.providers():
            # Judged at each pass: a token that lapsed since withdraws the provider now.
            engine.observe_credentials(provider, *self.tokens.verdict(provider, now))
        engine.observe_token_keys(self.tokens.token_keys(now))
        self._observers.follow(engine)
        self._observers.probe_due_sites(engine, now)
        self.mesh.sync_members(engine, now)
        started = time.thread_time()
        result = engine.refresh(now)
        if result.rendered:
            engine.note_render_cost(time.thread_time() - started)
        self._render_due = None
        if result.next_render_at is not None:
            self._render_due = moment + (result.next_render_at - now).total_seconds()
        self.mesh.apply(result)
        await self._configmaps.sync(engine, network, entry.body)
        self._post_events(result.events)
        await self._write_statuses(engine, network, entry, now, moment)
        await self._write_spend(moment)
        await self._discover_sites(engine, network)

    async def _engine_for(
        self, network: GridNetwork, entry: Entry, revision: int
    ) -> SiteEngine | None:
        """The engine with the resources of cache ``revision``, created once this cluster's
        site is known (and again if it changes)."""
        cache = self._shared.cache
        sites, providers = cache.sites_of(self.name), cache.providers_of(self.name)
        fingerprint = self._material.certificate_fingerprint if self._material else None
        local = resolve_local_site(self._shared.options.site, self.name, sites, fingerprint)
        if local.name is None and self.engine is None:
            self._notices.say("site", local.how, logging.WARNING)
            await self._report_without_engine(entry, network, local.how)
            return None
        if local.name is not None and self.engine is not None and local.name != self.engine.site:
            _log.warning("network %s: this cluster is now site %s", self.name, local.name)
            await self.mesh.stop(leave=True)
            await self._observers.stop()
            self.engine = None
        if self.engine is None:
            assert local.name is not None
            try:
                checkpoint = await self._spend_checkpoint(local.name, entry)
            except KubernetesApiError as error:
                # Going on without it would count from scratch and write over it.
                self._notices.say("spend checkpoint", f"{error}; not started yet", logging.WARNING)
                return None
            self.engine = SiteEngine(
                network,
                local.name,
                sites=sites,
                providers=providers,
                grid_id=_grid_id(network, entry),
                probe_interval_s=self._shared.options.probe_interval_s,
            )
            if checkpoint is not None:
                self.engine.restore_spend(checkpoint)
            self._notices.say("site", f"this cluster is site {local.name} ({local.how})")
        elif revision != self._applied_revision:
            # Only on a change: the engine re-ranks everything after new resources.
            self.engine.set_resources(network, sites, providers)
        self._applied_revision = revision
        return self.engine

    async def _spend_checkpoint(self, site: str, entry: Entry) -> SpendCheckpoint | None:
        """This site's spend checkpoint, if usable; one that is not is reported (a Warning
        Event and a log line) and ignored."""
        try:
            checkpoint = await self._spend.load(site)
        except CheckpointUnusable as problem:
            message = f"{problem}; spend counts from the first scrape"
            _log.warning("network %s: %s", self.name, message)
            self._post(entry, Event(EventType.WARNING, SPEND_CHECKPOINT_IGNORED, message))
            return None
        if checkpoint is not None:
            self._notices.say("spend checkpoint", f"spend counts on from {self._spend.where}")
        return checkpoint

    async def _write_spend(self, moment: float, *, now: bool = False) -> None:
        """Store the spend checkpoint when due (see grid.operator.spend_checkpoints)."""
        if self._owner is None:
            return
        try:
            await self._spend.write(self._owner, moment, now=now)
        except KubernetesApiError as error:
            self._notices.say("spend checkpoint write", str(error), logging.WARNING)

    def _config_error(self, entry: Entry) -> str | None:
        problems = []
        if entry.problems:
            problems.append(
                "the latest spec was refused, the last valid one keeps serving: "
                + "; ".join(entry.problems)
            )
        # A name conflict is not a setting: MembershipReady and an Event report it.
        port_error = self._swim_port.problem if self._swim_port is not None else None
        problems += [
            problem
            for problem in (
                self._material_error,
                self._certificate_error,
                port_error,
                self.mesh.setup_error,
            )
            if problem
        ]
        return "; ".join(problems) or None

    # -- Secrets --------------------------------------------------------------------------

    async def _refresh_material(
        self, network: GridNetwork, entry: Entry, now: datetime, moment: float
    ) -> None:
        """Read the network's Secrets again when the spec changed or the refresh interval
        passed; take the material only if all of it is usable."""
        due = (
            self._material_read_at is None
            or moment - self._material_read_at >= self._shared.options.secret_refresh_s
            or entry.generation != self._material_generation
        )
        if not due:
            return
        self._material_read_at, self._material_generation = moment, entry.generation
        metrics = self._shared.metrics
        try:
            material = await load_trust_material(self._shared.kube, network.spec.tls, now)
            prober = _prober(material) if material != self._material else None
        except (SecretMaterialError, TrustConfigError) as error:
            self._material_error = str(error)
            metrics.secret_reads.labels("trust", "invalid").inc()
            kept = "; the material in use is kept" if self._material is not None else ""
            self._notices.say("material", f"{error}{kept}", logging.WARNING)
            return
        metrics.secret_reads.labels("trust", "ok").inc()
        self._material_error = None
        if prober is None:
            return
        self._material, self._observers.prober = material, prober
        self._network_ca = NetworkCa(material.credentials.trust_anchors)
        self._notices.say(
            "material",
            f"trust material loaded: {len(material.keyring.keys)} SWIM key(s), CA "
            f"{'set' if material.ca_pem else 'not set'}, site certificate "
            f"{material.certificate_fingerprint or 'not set'}",
        )

    def _advertise_certificate(self, engine: SiteEngine, now: datetime) -> None:
        # Set on every pass (an assignment): a new engine (this cluster is another site now)
        # and new material (a rotated CA) both have it at once.
        engine.set_network_ca(self._network_ca)
        material = self._material
        if material is not None and not self.mesh.signs_with(material.credentials):
            return  # the node kept its certificate (ConfigValid says why): so does the lane
        pem = material.certificate_pem if material is not None else None
        if pem == self._advertised_pem and self._certificate_error is None:
            return
        try:
            engine.set_certificate(pem, now)
        except (CertificateRejected, TrustConfigError) as error:
            self._certificate_error = f"the site certificate is not advertised: {error}"
            return
        self._advertised_pem, self._certificate_error = pem, None

    # -- statuses and events --------------------------------------------------------------

    async def _write_statuses(
        self, engine: SiteEngine, network: GridNetwork, entry: Entry, now: datetime, moment: float
    ) -> None:
        cache = self._shared.cache
        written = {(NETWORK, self.name)}
        for (kind, name), status in engine.statuses().items():
            member = cache.get(kind, name) if kind != NETWORK else None
            if member is None:
                continue
            written.add((kind, name))
            self._tell_spec_events(member)
            previous = self._statuses.last(kind, name) or member.status
            conditions = _carry(status.conditions, previous, SPEC_VALID)
            conditions = with_spec_condition(conditions, member.problems, member.generation, now)
            document = dump_status(status.model_copy(update={"conditions": conditions}))
            await self._write_status(kind, name, document, member.status, moment)
        for member in cache.members_of(self.name):
            if member.resource is not None:
                continue
            written.add((member.kind, member.name))
            self._tell_spec_events(member)
            previous = self._statuses.last(member.kind, member.name) or member.status
            rejected = rejected_member_status(
                member.kind, member.problems, member.generation, previous, now
            )
            await self._write_status(
                member.kind, member.name, dump_status(rejected), member.status, moment
            )
        self._statuses.keep_only(written)
        await self._write_network_status(entry, network, self._report(engine, network, now), now)

    def _report(self, engine: SiteEngine, network: GridNetwork, now: datetime) -> NetworkReport:
        """What the network's status is made of: the engine's view, and what only the shell
        knows (ConfigMap writes, seeds)."""
        statuses = engine.statuses()
        view = statuses[(NETWORK, self.name)]
        assert isinstance(view, GridNetworkStatus)  # the engine keys it by kind
        unreachable = sorted(
            name
            for (kind, name), status in statuses.items()
            if kind == "GridSite"
            and name != engine.site
            and status.phase is GridSitePhase.UNREACHABLE
        )
        gateways = tuple(
            GatewayOutcome(
                name=overlay.gateway.name,
                namespace=overlay.gateway.namespace,
                revision=overlay.revision,
                candidates=0 if overlay.overlay is None else len(overlay.overlay.candidates),
                rendered_at=overlay.rendered_at,
                render_message=overlay.message,
                write_message=self._configmaps.message(*overlay.key),
            )
            for overlay in engine.overlays.values()
        )
        mesh = self.mesh
        joining = time.monotonic() - mesh.started_at < self._shared.options.join_grace_s
        return NetworkReport(
            config_error=_condition_message(view.conditions, "ConfigValid"),
            membership_running=mesh.running,
            name_conflict=mesh.conflict,
            refused_versions=tuple(r.describe() for r in mesh.refused_versions.values()),
            grid_id=engine.grid_id,
            unreachable_sites=tuple(unreachable),
            connected_sites=view.connected_sites,
            provider_count=view.provider_count,
            gateways=gateways,
            seeds=SeedReport(
                configured=tuple(network.spec.seeds),
                unresolved=mesh.unusable_seeds,
                peers_known=mesh.peers_known(),
                joining=joining,
            ),
            budgets=tuple(view.budgets),
            spend_sources=tuple(view.spend_sources),
            unheard_sites=tuple(view.unheard_sites),
            budget_conditions=tuple(
                ConditionUpdate(
                    type=c.type,
                    status=c.status,
                    reason=c.reason,
                    message=c.message,
                    observed_generation=c.observed_generation,
                )
                for c in view.conditions
                if c.type in (ESCROW_CONDITION, AGREEMENT_CONDITION)
            ),
            swim_port=self._swim_port.describe() if self._swim_port is not None else "",
        )

    async def _write_network_status(
        self, entry: Entry, network: GridNetwork, report: NetworkReport, now: datetime
    ) -> None:
        self._tell_spec_events(entry)
        status, events = network_status(network, self._network_status, report, now)
        self._network_status = status
        for event in events:
            self._post(entry, event)
        await self._write_status(
            NETWORK, self.name, dump_status(status), entry.status, time.monotonic()
        )

    async def _report_rejected_network(self, entry: Entry, now: datetime) -> None:
        """A network whose spec never passed validation: Pending, and why."""
        if self._network_status is None:
            self._network_status = _recorded_status(entry)
        report = NetworkReport(config_error="the spec was refused: " + "; ".join(entry.problems))
        await self._write_network_status(
            entry, rejected_network(self.name, entry.generation), report, now
        )

    async def _report_without_engine(
        self, entry: Entry, network: GridNetwork, problem: str
    ) -> None:
        """A network this cluster cannot take part in yet (its site is unknown)."""
        errors = [problem, *(p for p in (self._config_error(entry),) if p)]
        report = NetworkReport(config_error="; ".join(errors))
        await self._write_network_status(entry, network, report, utc_now())

    async def _write_status(
        self,
        kind: str,
        name: str,
        document: Mapping[str, Any],
        stored: Mapping[str, Any],
        moment: float,
    ) -> None:
        problem = await self._statuses.write(kind, name, document, stored, moment)
        if problem is not None:
            self._notices.say(f"status {kind} {name}", problem, logging.WARNING)

    def _post_events(self, events: tuple[ResourceEvent, ...]) -> None:
        cache = self._shared.cache
        for happened in events:
            # The network's phase is decided with what only the shell knows (see _report),
            # and its events are posted with its status.
            if happened.kind == NETWORK:
                continue
            entry = cache.get(happened.kind, happened.name)
            if entry is not None:
                self._post(entry, happened.event)

    def _name_conflict(self, conflict: NameConflict, message: str) -> None:
        """Another live node claims this site's name: a Warning Event on the network (the
        next pass posts it); the driver counts it."""
        reason = "SiteNameConflict" if conflict.yielded else "SiteNameClaimRefused"
        self._untold_conflicts.append(Event(EventType.WARNING, reason, message))
        self.wake()

    def _version_refused(self, refused: VersionRefused, message: str) -> None:
        """A peer of a release too far from this one: a Warning Event on the network (the
        next pass posts it, and the ``PeersCompatible`` condition says it while it lasts)."""
        del refused  # the message names the peer and both ranges
        self._untold_conflicts.append(Event(EventType.WARNING, "ProtocolVersionRefused", message))
        self.wake()

    def _tell_conflicts(self, entry: Entry) -> None:
        untold, self._untold_conflicts = self._untold_conflicts, []
        for event in untold:
            self._post(entry, event)

    def _post(self, entry: Entry, event: Event) -> None:
        self._shared.post_event(entry.reference, event.type, event.reason, event.message)
        self._shared.metrics.events.labels(entry.kind, str(event.type)).inc()

    def _tell_spec_events(self, entry: Entry) -> None:
        """A Warning Event and a log line when a resource's latest spec is refused, or
        carries fields this release ignores (once per distinct set: see SpecEvents)."""
        for event in self._spec_events.untold(entry):
            self._post(entry, event)
            said = (
                f"spec refused: {event.message}" if event.reason == SPEC_REJECTED else event.message
            )
            _log.warning("%s %s: %s", entry.kind, entry.name, said)

    # -- auto-discovery -------------------------------------------------------------------

    async def _discover_sites(self, engine: SiteEngine, network: GridNetwork) -> None:
        """A GridSite for each peer seen alive that has none, when the network carries the
        auto-discover label."""
        if not auto_discovers(network):
            return
        cache, kube, metrics = self._shared.cache, self._shared.kube, self._shared.metrics
        discovered = set(engine.discovered_sites)
        self._discovery_tried &= discovered
        for peer in sorted(discovered - self._discovery_tried):
            self._discovery_tried.add(peer)
            topic = f"discovery {peer}"
            existing = cache.get("GridSite", peer)
            if existing is not None:
                self._notices.say(
                    topic,
                    f"peer {peer} is alive but GridSite {peer} belongs to network "
                    f"{existing.network_ref}: not created",
                    logging.WARNING,
                )
                continue
            manifest = discovered_site_manifest(self.name, peer)
            if manifest is None:
                self._notices.say(
                    topic,
                    "a peer's name is not a valid GridSite name: not created",
                    logging.WARNING,
                )
                continue
            try:
                created = await kube.create_site(manifest)
            except KubernetesApiError as error:
                self._discovery_tried.discard(peer)
                self._notices.say(topic, str(error), logging.WARNING)
                continue
            if created is not None:
                metrics.sites_created.labels(self.name).inc()
                self._notices.say(topic, f"created GridSite {peer} for a peer seen alive")


def _swim_plan(network: GridNetwork, options: OperatorOptions, port: int) -> SwimPlan:
    """The plan for ``network`` on ``port`` (see :mod:`grid.operator.ports`)."""
    return SwimPlan.of(
        network, options.swim_bind(port), options.swim_advertise(port), options.push_pull_factor
    )


def _grid_id(network: GridNetwork, entry: Entry) -> str:
    """The spec's grid id, else the one recorded in status by an earlier run, else new."""
    if network.spec.grid_id:
        return network.spec.grid_id
    recorded = entry.status.get("gridId")
    if isinstance(recorded, str) and len(recorded) <= 63 and _GRID_ID.fullmatch(recorded):
        return recorded
    return generate_grid_id(secrets.SystemRandom())


def _recorded_status(entry: Entry) -> GridNetworkStatus | None:
    """The status an earlier run wrote, so phases continue rather than start over."""
    try:
        return GridNetworkStatus.model_validate(dict(entry.status))
    except ValueError:
        return None


def _condition_message(conditions: list[Condition], type_: str) -> str | None:
    """The message of a False condition (None when it holds)."""
    for condition in conditions:
        if condition.type == type_ and condition.status.value == "False":
            return condition.message or condition.reason
    return None


def _carry(conditions: list[Condition], previous: Mapping[str, Any], type_: str) -> list[Condition]:
    """``conditions`` plus the one of ``type_`` from an earlier status, so that its
    transition time carries over."""
    for item in previous.get("conditions") or []:
        if isinstance(item, Mapping) and item.get("type") == type_:
            try:
                return [*conditions, Condition.model_validate(item)]
            except ValueError:
                break
    return list(conditions)


def _prober(material: TrustMaterial) -> SiteProber:
    """A prober with the network's CA and site certificate (the private key stays inside
    its TLS context, it is not kept anywhere else)."""
    return SiteProber.from_pem(material.ca_pem, material.certificate_pem, material.private_key_pem)
