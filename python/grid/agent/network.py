"""One GridNetwork at this site: its key files, its engine, and the loops that feed the
engine and carry out what it decides (overlay and status files). The SWIM node and the
observations run in the shell-neutral :mod:`grid.runtime`."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import aiohttp

from grid.agent.keys import KeyFile, merge_keys, read_key_file
from grid.agent.outputs import OutputWriter
from grid.agent.spend_store import EscrowStore, SpendStore
from grid.agent.tokens import agent_io, agent_values
from grid.crdt.snapshot import Item
from grid.engine import GatewayOverlay, RefreshResult, SiteEngine, SourceRead
from grid.engine.escrow_checkpoint import items_to_send
from grid.errors import GridError, KeyFileError
from grid.membership import NameConflict, SwimCredentials, SwimNode
from grid.models.egress_source import EgressSource
from grid.models.network import GridNetwork
from grid.models.phases import CredentialState, EventType
from grid.models.provider import InferenceProvider
from grid.models.site import GridSite
from grid.render.budgets import BudgetScope, render_budget_document
from grid.runtime.keyring import Keyring
from grid.runtime.minters import TokenMinters
from grid.runtime.notices import Notices
from grid.runtime.observers import Observers
from grid.runtime.probes import SiteProber
from grid.runtime.swim import SwimDriver, SwimPlan
from grid.runtime.tasks import Tasks
from grid.trust.chain import NetworkCa

_log = logging.getLogger("grid.agent")

OverlayListener = Callable[[str, GatewayOverlay, Path], None]
PublishListener = Callable[[str, Item], None]
ConflictListener = Callable[[str, str], None]
"""Called as ``(network, message)`` when a network's node gave way to an older node of the
same site and stopped."""


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Shared:
    """What every network of the agent shares."""

    writer: OutputWriter
    prober: SiteProber
    session: aiohttp.ClientSession
    secrets_dir: Path | None
    tick_s: float
    probe_interval_s: float
    push_pull_factor: float
    certificate_pem: str | None
    swim_credentials: SwimCredentials
    """The site certificate and key every SWIM message is signed with, and the CA."""
    network_ca: NetworkCa
    """The same CA, to report which certificates it vouches for."""
    overlay_listeners: list[OverlayListener] = field(default_factory=list)
    publish_listeners: list[PublishListener] = field(default_factory=list)
    on_name_conflict: ConflictListener | None = None
    events: list[dict[str, str]] = field(default_factory=list)
    """Recent resource events, newest last (bounded)."""


_MAX_EVENTS = 200


class NetworkRuntime:
    """Runs one network: create with the resources, :meth:`start`, feed it new resources
    with :meth:`apply`, and :meth:`stop` (leaving the mesh, or not, to simulate a crash)."""

    def __init__(
        self,
        shared: Shared,
        engine: SiteEngine,
        *,
        bind: str,
        advertise: str | None,
        key_paths: tuple[Path, ...],
    ) -> None:
        self._shared = shared
        self.engine = engine
        self._bind = bind
        self._advertise = advertise
        self._key_paths = key_paths
        self._key_files: dict[Path, KeyFile] = {}
        self._key_mtimes: dict[Path, int] = {}
        self._keyring: Keyring | None = None
        self._key_error: str | None = None
        self._wake = asyncio.Event()
        self._pass_wanted = False
        """Whether something other than received items woke the refresh loop."""
        self._probes_wanted = asyncio.Event()
        """Set when what decides which sites are due a probe may have changed: received
        items (a gateway, and with it a site's egress) or anything that wakes the loop."""
        self._tasks = Tasks(_log, self.where)
        self.spend_store = SpendStore(shared.writer.state_dir, self.name, engine.site)
        self.escrow_store = EscrowStore(shared.writer.state_dir, self.name, engine.site)
        self._escrow_withheld = False
        """Whether the escrow holder could not be written to disk: its items and the
        budget documents wait until it is."""
        self._budgets_written: object = None
        """The budget figures the gateways' budget documents were last rendered from."""
        self.swim = SwimDriver(
            Notices(_log, self.where),
            _log,
            self._engine,
            self.wake,
            on_published=self._published,
            on_conflict=self._name_conflict,
            on_applied=self._items_applied,
        )
        self.observers = Observers(
            session=shared.session,
            prober=shared.prober,
            engine_of=self._engine,
            wake=self.wake,
            logger=_log,
            prefix=self.where,
            egress_reader=no_kubernetes,
            keep_spend=self.spend_store.keep,
        )
        self.tokens = TokenMinters(
            agent_io(shared.writer.state_dir, shared.secrets_dir),
            agent_values(shared.writer.state_dir, shared.secrets_dir),
            shared.session,
            where=self.where,
            on_change=self.wake,
            now=utc_now,
        )
        self.tokens.follow(engine.own_providers)
        self.overlay_writes: Counter[tuple[str, str]] = Counter()
        self.overlay_paths: dict[tuple[str, str], Path] = {}
        self._stopped = False
        self._advertised_pem: str | None = None
        """The certificate last handed to the engine to advertise."""

    @property
    def name(self) -> str:
        return self.engine.network.metadata.name

    @property
    def where(self) -> str:
        """``site/network``, the prefix of this network's log lines."""
        return f"{self.engine.site}/{self.name}"

    @property
    def node(self) -> SwimNode | None:
        """The network's SWIM node (None while it does not run)."""
        return self.swim.node

    @property
    def swim_error(self) -> str | None:
        """Why SWIM does not run as configured: an unusable key file, a node that cannot
        start, a failed key rotation, refused credentials, an older node of this site."""
        return self._key_error or self.swim.error

    def _engine(self) -> SiteEngine:
        return self.engine

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        self._advertise_certificate()
        self.engine.set_network_ca(self._shared.network_ca)
        checkpoint = self.spend_store.load()
        if checkpoint is not None:
            self.engine.restore_spend(checkpoint)
        holder = self.escrow_store.load()
        if holder is not None:
            self.engine.restore_escrow(holder)
        await self._ensure_node()
        self.observers.follow(self.engine)
        self._tasks.spawn(self._refresh_loop())
        self._tasks.spawn(self._probe_loop())
        self._tasks.spawn(self.tokens.loop())
        self.wake()

    async def stop(self, *, leave: bool = True) -> None:
        """Stop every loop; ``leave`` tells peers this site is going (they record it as
        left at once) and flushes the outputs: the statuses, and the overlays with a change
        still waiting for its render. Otherwise it vanishes as a crash would."""
        if self._stopped:
            return
        self._stopped = True
        await self._tasks.cancel_all()
        await self.observers.stop()
        await self.swim.stop(leave=leave)
        if leave:
            self._refresh(final=True)

    def wake(self) -> None:
        """Refresh the engine as soon as possible (something it depends on changed)."""
        self._pass_wanted = True
        self._wake.set()
        self._probes_wanted.set()

    def _items_applied(self) -> None:
        """Received items changed the engine's state: what that needs is a render, which
        the engine paces, so the loop takes a pass only once the render is due. They may
        also have brought a site's egress, which is probed at once."""
        self._wake.set()
        self._probes_wanted.set()

    def use_prober(self, prober: SiteProber) -> None:
        """Probe with new TLS material from now on."""
        self.observers.prober = prober

    # -- resources and keys ---------------------------------------------------------------

    def apply(
        self,
        network: GridNetwork,
        sites: list[GridSite],
        providers: list[InferenceProvider],
        *,
        bind: str,
        advertise: str | None,
    ) -> None:
        """New resources: the engine gets them at once; the SWIM node is replaced (on the
        next refresh) only if its settings changed; observations follow the providers."""
        self.engine.set_resources(network, sites, providers)
        self.engine.set_config_error(None)
        self._bind, self._advertise = bind, advertise
        self.observers.follow(self.engine)
        self.tokens.follow(self.engine.own_providers)
        self.wake()

    def reject(self, message: str) -> None:
        """The resources on disk could not be applied: keep serving, report it."""
        self.engine.set_config_error(message)
        self.wake()

    def reload_keys(self) -> None:
        """Re-read the key files if they changed; the next refresh installs new keys,
        switches the sealing key and forgets removed ones. A bad file is reported and the
        keyring left as it is."""
        changed = False
        for path in self._key_paths:
            try:
                mtime = path.stat().st_mtime_ns
            except OSError:
                mtime = -1
            if self._key_mtimes.get(path) != mtime:
                self._key_mtimes[path] = mtime
                changed = True
        if not changed and self._keyring is not None:
            return
        keyring = self._read_keys()
        if keyring is not None and keyring != self._keyring:
            self._keyring = keyring
            self.wake()

    def _read_keys(self) -> Keyring | None:
        if not self._key_paths:
            self._key_error = "no SWIM key file is configured for this network (--key-file)"
            return None
        files = []
        try:
            for path in self._key_paths:
                file = read_key_file(path)
                if file.readable_by_others and path not in self._key_files:
                    _log.warning("key file %s is readable by other users; chmod 600 it", path)
                files.append(file)
        except KeyFileError as error:
            if self._key_error != str(error):
                _log.error("%s: %s; keeping the current keys", self.where, error)
            self._key_error = str(error)
            return None
        self._key_files = {file.path: file for file in files}
        self._key_error = None
        return Keyring(merge_keys(files))

    async def _ensure_node(self) -> None:
        """Run the SWIM node with the current settings and keys (once the keys are
        readable, and again after a bind failed)."""
        self.reload_keys()
        if self._stopped:
            return
        if self._keyring is None:
            self.engine.set_membership_running(False)
            return
        plan = SwimPlan.of(
            self.engine.network, self._bind, self._advertise, self._shared.push_pull_factor
        )
        await self.swim.ensure(self.engine, plan, self._keyring, self._shared.swim_credentials)
        self._advertise_certificate()

    def _advertise_certificate(self) -> None:
        """Advertise the site certificate, once the node signs with it: a renewed one the
        node refused (it kept the current one; ``swim_error`` says why) is not."""
        pem = self._shared.certificate_pem
        if pem is None or pem == self._advertised_pem:
            return
        if not self.swim.signs_with(self._shared.swim_credentials):
            return
        try:
            self.engine.set_certificate(pem, utc_now())
        except GridError as error:
            _log.error("%s: the site certificate is not advertised: %s", self.where, error)
        self._advertised_pem = pem

    def _published(self, item: Item) -> None:
        for listener in self._shared.publish_listeners:
            listener(self.name, item)

    def _name_conflict(self, conflict: NameConflict, message: str) -> None:
        reason = "SiteNameConflict" if conflict.yielded else "SiteNameClaimRefused"
        self._record_event("GridNetwork", self.name, EventType.WARNING, reason, message)
        if conflict.yielded and self._shared.on_name_conflict is not None:
            self._shared.on_name_conflict(self.name, message)

    # -- the refresh loop -----------------------------------------------------------------

    async def _refresh_loop(self) -> None:
        render_due: float | None = None  # when (monotonic) the engine has a change to render
        while True:
            timeout = self._shared.tick_s
            if render_due is not None:
                timeout = min(timeout, max(render_due - time.monotonic(), 0.0))
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
            # that races with the event being set, and the loop would never stop.
            ticked = False
            try:
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            except TimeoutError:
                ticked = True
            self._wake.clear()
            if render_due is not None and time.monotonic() < render_due:
                # A render is already due then: what woke the loop (a burst of received
                # items) joins it rather than costing a pass of its own.
                continue
            if not ticked and not self._pass_wanted:
                # Only received items: a pass now would only learn when to render them.
                now = utc_now()
                due = self.engine.render_due_at(now)
                if due is None:
                    continue
                if due > now:
                    render_due = time.monotonic() + (due - now).total_seconds()
                    continue
            self._pass_wanted = False
            render_due = None
            try:
                await self._ensure_node()
                render_due = self._refresh()
            except Exception:
                # A bug must not stop the site from serving: report it, try again next tick.
                _log.exception("%s: refresh failed", self.where)

    def _refresh(self, *, final: bool = False) -> float | None:
        """One engine pass and what it decided; returns when (monotonic) the engine has a
        change to render, if it has one. The ``final`` pass, on a graceful stop, renders a
        change still held back and writes every status."""
        now = utc_now()
        self.swim.sync_members(self.engine, now)
        self._check_credentials()
        started = time.thread_time()
        result = self.engine.refresh(now, flush=final)
        if result.rendered:
            self.engine.note_render_cost(time.thread_time() - started)
        result = self._keep_escrow(result)
        self.swim.apply(result)
        for overlay in result.changed:
            self._write_overlay(overlay)
        for event in result.events:
            self._report_event(
                event.kind, event.name, event.event.type, event.event.reason, event.event.message
            )
        moment = time.monotonic()
        for (kind, name), status in self.engine.statuses().items():
            self._shared.writer.write_status(kind, name, status, moment, force=final)
        if not self._escrow_withheld:
            self._write_budgets(now)
        if result.next_render_at is None:
            return None
        return moment + (result.next_render_at - now).total_seconds()

    def _keep_escrow(self, result: RefreshResult) -> RefreshResult:
        """Write this life's escrow holder to disk before anything of it goes out: while
        it cannot be written, its items and the budget documents are held back (a restart
        from the older file could otherwise grant or give the same allowance again), and
        once it is, every one of its items goes out again."""
        holder = self.engine.take_escrow_checkpoint()
        if holder is None and not self._escrow_withheld:
            return result
        kept = holder is None or self.escrow_store.keep(holder)
        if not kept:
            self.engine.escrow_not_kept()
        withheld = self._escrow_withheld
        own = self.engine.state.all_items() if kept and withheld else ()
        items = items_to_send(result.items, own, kept=kept, withheld=withheld)
        self._escrow_withheld = not kept
        return dataclasses.replace(result, items=items)

    def _write_overlay(self, overlay: GatewayOverlay) -> None:
        gateway = f"{overlay.gateway.namespace}/{overlay.gateway.name}"
        if overlay.message:
            _log.warning("%s: overlay for %s not updated: %s", self.where, gateway, overlay.message)
            return
        path = self._shared.writer.write_overlay(self.name, overlay)
        if path is None or overlay.overlay is None:
            return
        key = overlay.key
        self.overlay_writes[key] += 1
        self.overlay_paths[key] = path
        _log.info(
            "%s: overlay for %s revision %s with %d candidates",
            self.where,
            gateway,
            overlay.overlay.revision[:12],
            len(overlay.overlay.candidates),
        )
        for listener in self._shared.overlay_listeners:
            listener(self.name, overlay, path)

    def _write_budgets(self, now: datetime) -> None:
        """Each gateway's budget document, when the figures changed (a pass that changed
        nothing renders nothing)."""
        network, status = self.engine.network, self.engine.network_status
        spec = network.spec
        figures = (spec.budgets, spec.gateway_refs, status.budgets, status.unheard_sites)
        if not spec.budgets or figures == self._budgets_written:
            return
        writer = self._shared.writer
        failures = writer.failures
        for gateway in spec.gateway_refs:
            scope = BudgetScope(self.name, gateway.name, gateway.namespace, self.engine.site)
            rendered = render_budget_document(scope, spec.budgets, status, now)
            writer.write_budgets(self.name, gateway, rendered)
        if writer.failures == failures:  # else the next pass tries again
            self._budgets_written = figures

    def _report_event(
        self, kind: str, name: str, type_: EventType, reason: str, message: str
    ) -> None:
        level = logging.WARNING if type_ is EventType.WARNING else logging.INFO
        _log.log(level, "%s: %s %s: %s: %s", self.where, kind, name, reason, message)
        self._record_event(kind, name, type_, reason, message)

    def _record_event(
        self, kind: str, name: str, type_: EventType, reason: str, message: str
    ) -> None:
        """Keep an event for ``/status`` (logged already)."""
        events = self._shared.events
        events.append(
            {
                "at": utc_now().isoformat(),
                "network": self.name,
                "kind": kind,
                "name": name,
                "type": str(type_),
                "reason": reason,
                "message": message,
            }
        )
        del events[:-_MAX_EVENTS]

    def _check_credentials(self) -> None:
        base = self._shared.secrets_dir
        now = utc_now()
        for provider in self.tokens.providers():
            # Judged at this pass: a token that lapsed since withdraws the provider now.
            self.engine.observe_credentials(provider, *self.tokens.verdict(provider, now))
        self.engine.observe_token_keys(self.tokens.token_keys(now))
        for provider, (namespace, name, key) in self.engine.credential_refs().items():
            if self.tokens.minting(provider):
                continue
            if base is not None:
                state = credential_state(base, namespace, name, key)
                self.engine.observe_credentials(provider, state)

    async def _probe_loop(self) -> None:
        """Probes the sites due a probe: every ``period``, and as soon as received items may
        have made one due (a site is probed the moment its egress is learned, which matters
        most to a site that just joined: it learns every egress within its first second)."""
        period = min(1.0, self._shared.probe_interval_s / 2)
        while True:
            self._probes_wanted.clear()
            self.observers.probe_due_sites(self.engine, utc_now())
            try:
                async with asyncio.timeout(period):
                    await self._probes_wanted.wait()
            except TimeoutError:
                pass


def credential_state(base: Path, namespace: str, name: str, key: str) -> CredentialState:
    """What a mounted Secret holds for a reference, judged by the file's presence and size
    alone: the credential itself is never read."""
    secret = base / namespace / name
    if not secret.is_dir():
        return CredentialState.SECRET_NOT_FOUND
    try:
        size = (secret / key).stat().st_size
    except OSError:
        return CredentialState.KEY_NOT_FOUND
    return CredentialState.VALID if size > 0 else CredentialState.EMPTY


async def no_kubernetes(source: EgressSource) -> SourceRead:
    """The agent's reading of a ``spec.egress.from``: it has no Kubernetes API to read the
    object from, and says so on the GridSite (``EgressResolved=False``)."""
    return SourceRead(
        source,
        error=f"grid agent reads no Kubernetes objects ({source.described}): "
        "spec.egress.from needs grid operator; give the agent spec.egress.address",
    )
