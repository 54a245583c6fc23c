"""One GridNetwork in the operator: its SWIM node, its site engine, what feeds the engine
(membership, received items, health checks, scrapes, probes, credential checks, its
Secrets through :mod:`grid.operator.material`) and the Kubernetes writes that carry out what
it decides (ConfigMaps, the spend checkpoint; statuses and Events through
:mod:`grid.operator.network_reports`; auto-discovered GridSites through
:mod:`grid.operator.discovery`).

Everything runs on kopf's event loop. A pass (:meth:`NetworkRuntime.reconcile`) runs when
something changed (a resource, a membership event, an observation) and at least every
``tick_s``. A pass never raises: what fails is logged, counted and reported in status, and
the last good state keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import secrets
import time
from collections.abc import Mapping
from functools import partial
from typing import Any

from grid.engine import EscrowCheckpoint, RefreshResult, SiteEngine, SpendCheckpoint
from grid.engine.escrow_checkpoint import items_to_send
from grid.errors import KubernetesApiError
from grid.membership import NameConflict, SwimNode, VersionRefused
from grid.models.fields import DNS_LABEL_PATTERN
from grid.models.network import GridNetwork, GridNetworkStatus, generate_grid_id
from grid.models.phases import Event, EventType
from grid.operator.cache import Entry, valid_network
from grid.operator.configmaps import Target
from grid.operator.credentials import CredentialChecks
from grid.operator.discovery import SiteDiscovery
from grid.operator.egress import read_egress_source
from grid.operator.material import NetworkMaterial
from grid.operator.network_reports import NetworkReporter, network_report
from grid.operator.options import OperatorOptions
from grid.operator.ports import Assignment, claims_of
from grid.operator.shared import PostEvent, Shared, utc_now
from grid.operator.sites import resolve_local_site
from grid.operator.spend_checkpoints import CheckpointUnusable, SpendCheckpoints
from grid.operator.tokens import operator_io, operator_values
from grid.operator.writes import ConfigMapWriter
from grid.runtime.minters import TokenMinters
from grid.runtime.notices import Notices
from grid.runtime.observers import Observers
from grid.runtime.probes import SiteProber
from grid.runtime.swim import SwimDriver, SwimPlan

__all__ = ["SPEND_CHECKPOINT_IGNORED", "NetworkRuntime", "PostEvent", "Shared", "utc_now"]

_log = logging.getLogger("grid.operator")

_GRID_ID = re.compile(DNS_LABEL_PATTERN)
_WRITE_RETRY_TICKS = 5
SPEND_CHECKPOINT_IGNORED = "SpendCheckpointIgnored"


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
            operator_values(shared.kube),
            shared.session,
            where=f"network {name}",
            on_change=self.wake,
            now=utc_now,
            settle=shared.options.token_settle,
            recheck_s=options.secret_refresh_s,
        )
        self._minting: asyncio.Task[None] | None = None
        self._configmaps = ConfigMapWriter(
            name,
            shared.kube,
            shared.metrics,
            self._notices,
            retry_s=options.tick_s * _WRITE_RETRY_TICKS,
        )
        self._reports = NetworkReporter(name, shared, self._notices)
        self._material = NetworkMaterial(shared, self._notices)
        self._discovery = SiteDiscovery(name, shared, self._notices)
        self._swim_port: Assignment | None = None
        self._escrow_withheld = False
        """Whether the escrow holder could not be stored: its items and the budget
        documents wait until it is."""
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
        return self._reports.network_status

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
            await self._reports.report_rejected_network(entry, now)
            return
        self._reports.recall(entry)
        self._owner = entry.body
        await self._material.refresh(network, entry, now, moment, self._observers)
        engine = await self._engine_for(network, entry, revision)
        if engine is None:
            return
        port = self._swim_port = shared.ports.assign(self.name, claims_of(shared.cache))
        if port.port is None and self.mesh.node is not None:
            await self.mesh.stop(leave=True)
        material = self._material.material
        if material is None or port.port is None:
            engine.set_membership_running(False)
        else:
            plan = _swim_plan(network, shared.options, port.port)
            await self.mesh.ensure(engine, plan, material.keyring, material.credentials)
        self._material.advertise(engine, self.mesh, now)
        self._reports.tell_held(entry)
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
        result, held = await self._keep_escrow(engine, result)
        self.mesh.apply(result)
        await self._configmaps.sync(engine, network, entry.body, hold_budgets=held)
        self._reports.post_events(result.events)
        report = partial(
            network_report,
            self.name,
            engine,
            network,
            self._configmaps,
            self.mesh,
            self._swim_port,
            shared.options.join_grace_s,
        )
        await self._reports.write_statuses(engine, network, entry, now, moment, report)
        await self._write_spend(moment)
        await self._discovery.discover(engine, network)

    async def _engine_for(
        self, network: GridNetwork, entry: Entry, revision: int
    ) -> SiteEngine | None:
        """The engine with the resources of cache ``revision``, created once this cluster's
        site is known (and again if it changes)."""
        cache = self._shared.cache
        sites, providers = cache.sites_of(self.name), cache.providers_of(self.name)
        material = self._material.material
        fingerprint = material.certificate_fingerprint if material else None
        local = resolve_local_site(self._shared.options.site, self.name, sites, fingerprint)
        if local.name is None and self.engine is None:
            self._notices.say("site", local.how, logging.WARNING)
            await self._reports.report_without_engine(
                entry, network, local.how, self._config_error(entry)
            )
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
            holder = self._escrow_holder(local.name, entry)
            if holder is not None:
                self.engine.restore_escrow(holder)
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
            self._reports.post(entry, Event(EventType.WARNING, SPEND_CHECKPOINT_IGNORED, message))
            return None
        if checkpoint is not None:
            self._notices.say("spend checkpoint", f"spend counts on from {self._spend.where}")
        return checkpoint

    def _escrow_holder(self, site: str, entry: Entry) -> EscrowCheckpoint | None:
        """This site's escrow holder as the checkpoint ConfigMap held it, if usable; one
        that is not is reported (a Warning Event and a log line) and a new holder starts."""
        try:
            holder = self._spend.escrow_holder(site)
        except CheckpointUnusable as problem:
            message = f"{problem}; a new escrow holder starts"
            _log.warning("network %s: %s", self.name, message)
            self._reports.post(entry, Event(EventType.WARNING, SPEND_CHECKPOINT_IGNORED, message))
            return None
        if holder is not None:
            self._notices.say("escrow holder", f"goes on as {site}#{holder.epoch}")
        return holder

    async def _keep_escrow(
        self, engine: SiteEngine, result: RefreshResult
    ) -> tuple[RefreshResult, bool]:
        """Store this life's escrow holder before anything of it goes out; while it cannot
        be stored, its items and the budget documents wait (a restart from an older one
        could grant or give the same allowance again), and once it is, they all go out.
        The result to publish, and whether the budget documents wait."""
        holder = engine.take_escrow_checkpoint()
        if holder is None and not self._escrow_withheld:
            return result, False
        kept = True
        if holder is not None:
            try:
                assert self._owner is not None  # set by the pass before its refresh
                await self._spend.keep_holder(self._owner, holder)
            except (KubernetesApiError, CheckpointUnusable) as error:
                kept = False
                engine.escrow_not_kept()
                said = f"escrow holder not stored ({error}): its items and budget documents wait"
                self._notices.say("escrow holder", said, logging.WARNING)
        withheld = self._escrow_withheld
        own = engine.state.all_items() if kept and withheld else ()
        items = items_to_send(result.items, own, kept=kept, withheld=withheld)
        self._escrow_withheld = not kept
        return dataclasses.replace(result, items=items), not kept

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
                self._material.error,
                self._material.certificate_error,
                port_error,
                self.mesh.setup_error,
            )
            if problem
        ]
        return "; ".join(problems) or None

    # -- conflicts ----------------------------------------------------------------------

    def _name_conflict(self, conflict: NameConflict, message: str) -> None:
        """Another live node claims this site's name: a Warning Event on the network (the
        next pass posts it); the driver counts it."""
        reason = "SiteNameConflict" if conflict.yielded else "SiteNameClaimRefused"
        self._reports.hold(Event(EventType.WARNING, reason, message))
        self.wake()

    def _version_refused(self, refused: VersionRefused, message: str) -> None:
        """A peer of a release too far from this one: a Warning Event on the network (the
        next pass posts it, and the ``PeersCompatible`` condition says it while it lasts)."""
        del refused  # the message names the peer and both ranges
        self._reports.hold(Event(EventType.WARNING, "ProtocolVersionRefused", message))
        self.wake()


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
