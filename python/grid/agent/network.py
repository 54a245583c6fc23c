"""One GridNetwork at this site: its SWIM node, its engine, and the loops that feed the
engine (membership events, health checks, scrapes, probes) and carry out what it decides
(publish items, write overlays and status files)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from grid.agent.keys import KeyFile, merge_keys, read_key_file
from grid.agent.outputs import OutputWriter
from grid.agent.probes import Prober
from grid.crdt.snapshot import Item
from grid.engine import GatewayOverlay, ItemOutcome, ObservationTarget, ProbeTarget, SiteEngine
from grid.engine.targets import HealthTarget, MetricsTarget
from grid.errors import BroadcastRefused, GridError, KeyFileError, NodeStateError
from grid.membership import ItemEvent, MemberEvent, SwimConfig, SwimNode, parse_address
from grid.models.network import GridNetwork
from grid.models.phases import CredentialState, EventType, MemberState
from grid.models.provider import InferenceProvider
from grid.models.site import GridSite
from grid.observe.health import check_health
from grid.observe.scrape import scrape

_log = logging.getLogger("grid.agent")

OverlayListener = Callable[[str, GatewayOverlay, Path], None]
PublishListener = Callable[[str, Item], None]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Shared:
    """What every network of the agent shares."""

    writer: OutputWriter
    prober: Prober
    session: aiohttp.ClientSession
    secrets_dir: Path | None
    tick_s: float
    probe_interval_s: float
    push_pull_factor: float
    certificate_pem: str | None
    overlay_listeners: list[OverlayListener] = field(default_factory=list)
    publish_listeners: list[PublishListener] = field(default_factory=list)
    events: list[dict[str, str]] = field(default_factory=list)
    """Recent resource events, newest last (bounded)."""


_MAX_EVENTS = 200


@dataclass(frozen=True, slots=True)
class SwimPlan:
    """How this network's SWIM node is set up; a change means a new node."""

    bind: str
    advertise: str | None
    config: SwimConfig
    seeds: tuple[str, ...]


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
        self._keys: tuple[bytes, ...] = ()
        self.swim_error: str | None = None
        self.node: SwimNode | None = None
        self._plan: SwimPlan | None = None
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._events_task: asyncio.Task[None] | None = None
        self._observers: dict[str, tuple[ObservationTarget, list[asyncio.Task[None]]]] = {}
        self._probing: set[str] = set()
        self.items_published: Counter[str] = Counter()
        self.items_received: Counter[tuple[str, str]] = Counter()
        self.publish_refused: Counter[str] = Counter()
        self.overlay_writes: Counter[tuple[str, str]] = Counter()
        self.overlay_paths: dict[tuple[str, str], Path] = {}
        self._stopped = False

    @property
    def name(self) -> str:
        return self.engine.network.metadata.name

    @property
    def where(self) -> str:
        """``site/network``, the prefix of this network's log lines."""
        return f"{self.engine.site}/{self.name}"

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        now = utc_now()
        if self._shared.certificate_pem is not None:
            try:
                self.engine.set_certificate(self._shared.certificate_pem, now)
            except GridError as error:
                _log.error("%s: the site certificate is not advertised: %s", self.where, error)
        self._start_node()
        self._reconcile_observers()
        self._spawn(self._refresh_loop())
        self._spawn(self._probe_loop())
        self.wake()

    async def stop(self, *, leave: bool = True) -> None:
        """Stop every loop; ``leave`` tells peers this site is going (they record it as
        left at once), otherwise it vanishes as a crash would. The outputs are flushed."""
        if self._stopped:
            return
        self._stopped = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._stop_node(leave=leave)
        if leave:
            self._refresh(force_status=True)

    def wake(self) -> None:
        """Refresh the engine as soon as possible (something it depends on changed)."""
        self._wake.set()

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        name = getattr(coroutine, "__qualname__", "task")
        task = asyncio.create_task(coroutine, name=f"{self.where} {name}")
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            error = task.exception()
            _log.error("%s stopped: %r", task.get_name(), error)

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
        """New resources: the engine gets them at once; the SWIM node is replaced only if
        its settings changed; observations follow the providers."""
        self.engine.set_resources(network, sites, providers)
        self.engine.set_config_error(None)
        self._bind, self._advertise = bind, advertise
        if self.node is not None and self._plan != self._swim_plan():
            _log.info("%s: SWIM settings changed, restarting the node", self.where)
            self._spawn(self._restart_node())
        elif self.node is None:
            self._start_node()
        self._reconcile_observers()
        self.wake()

    def reject(self, message: str) -> None:
        """The resources on disk could not be applied: keep serving, report it."""
        self.engine.set_config_error(message)
        self.wake()

    def reload_keys(self) -> None:
        """Re-read the key files if they changed: install new keys, switch the sealing
        key, forget removed ones. A bad file is reported and the keyring left as it is."""
        changed = False
        for path in self._key_paths:
            try:
                mtime = path.stat().st_mtime_ns
            except OSError:
                mtime = -1
            if self._key_mtimes.get(path) != mtime:
                self._key_mtimes[path] = mtime
                changed = True
        if not changed and self._keys:
            return
        keys = self._read_keys()
        if keys is None or keys == self._keys:
            return
        if self.node is None:
            self._keys = keys
            self._start_node()
            return
        self._rotate(keys)

    def _read_keys(self) -> tuple[bytes, ...] | None:
        if not self._key_paths:
            self.swim_error = "no SWIM key file is configured for this network (--key-file)"
            return None
        files = []
        try:
            for path in self._key_paths:
                file = read_key_file(path)
                if file.readable_by_others and path not in self._key_files:
                    _log.warning("key file %s is readable by other users; chmod 600 it", path)
                files.append(file)
        except KeyFileError as error:
            if self.swim_error != str(error):
                _log.error("%s: %s; keeping the current keys", self.where, error)
            self.swim_error = str(error)
            return None
        self._key_files = {file.path: file for file in files}
        self.swim_error = None
        return merge_keys(files)

    def _rotate(self, keys: tuple[bytes, ...]) -> None:
        node = self.node
        assert node is not None
        try:
            for key in keys:
                if key not in self._keys:
                    node.install_key(key)
            node.use_key(keys[0])
            for key in self._keys:
                if key not in keys:
                    node.remove_key(key)
        except GridError as error:
            _log.error("%s: key rotation failed: %s", self.where, error)
            self.swim_error = str(error)
            return
        self._keys = keys
        _log.info("%s: keyring is now %s", self.where, ", ".join(node.key_ids()))

    # -- the SWIM node --------------------------------------------------------------------

    def _swim_plan(self) -> SwimPlan:
        spec = self.engine.network.spec
        swim = spec.swim
        probe = swim.probe_interval.seconds
        config = SwimConfig(
            probe_interval=probe,
            suspicion_timeout=swim.suspicion_timeout.seconds,
            gossip_nodes=swim.gossip_nodes,
            push_pull_interval=probe * self._shared.push_pull_factor,
        )
        return SwimPlan(self._bind, self._advertise, config, tuple(spec.seeds))

    def _start_node(self) -> None:
        if self.node is not None or self._stopped:
            return
        if not self._keys:
            keys = self._read_keys()
            if keys is None:
                self.engine.set_membership_running(False)
                return
            self._keys = keys
        plan = self._swim_plan()
        try:
            node = SwimNode(plan.bind, self.engine.site, plan.advertise, self._keys, plan.config)
            node.start()
        except GridError as error:
            if self.swim_error != str(error):  # retried every tick: report each problem once
                _log.error("%s: SWIM cannot start: %s", self.where, error)
            self.swim_error = str(error)
            self.engine.set_membership_running(False)
            return
        self.swim_error = None
        self.node, self._plan = node, plan
        seeds = self._resolvable_seeds(plan.seeds, node.address)
        if seeds:
            try:
                node.join(seeds)
            except GridError as error:
                _log.error("%s: cannot join the seeds: %s", self.where, error)
        self.engine.set_membership_running(True)
        _log.info(
            "%s: SWIM node %s at %s (keys %s), seeds %s",
            self.where,
            node.site,
            node.address,
            ", ".join(node.key_ids()),
            ", ".join(seeds) or "none",
        )
        self._events_task = self._spawn(self._events_loop(node))
        # Everything this site holds goes out again under the new node.
        for item in self.engine.state.all_items():
            self._publish(item)

    def _resolvable_seeds(self, seeds: tuple[str, ...], own: str) -> list[str]:
        """The seeds to join: each one that resolves, this node excluded. A seed that does
        not resolve is reported and skipped, so one bad name does not keep the others out."""
        usable = []
        for seed in seeds:
            try:
                address = parse_address(seed, "seed")
            except GridError as error:
                _log.error("%s: seed skipped: %s", self.where, error)
                continue
            if address != own:
                usable.append(address)
        return usable

    async def _stop_node(self, *, leave: bool) -> None:
        node, self.node = self.node, None
        self.engine.set_membership_running(False)
        if node is None:
            return
        try:
            if leave:
                await asyncio.to_thread(node.leave)
            else:
                node.close()
        except GridError as error:
            _log.warning("%s: stopping SWIM: %s", self.where, error)
        if self._events_task is not None:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                async with asyncio.timeout(2.0):
                    await self._events_task

    async def _restart_node(self) -> None:
        # Peers forget this site when it leaves: its records must come back as news, so the
        # state starts afresh (before the refresh loop may start the new node).
        self.engine.reset_state()
        await self._stop_node(leave=True)
        self._start_node()
        self.wake()

    async def _events_loop(self, node: SwimNode) -> None:
        async for event in node.events():
            try:
                self._handle(event, utc_now())
            except Exception:
                # One bad event must not stop the stream: report it and take the next.
                _log.exception("%s: a SWIM event could not be handled", self.where)

    def _handle(self, event: ItemEvent | MemberEvent, now: datetime) -> None:
        if isinstance(event, ItemEvent):
            outcome = self.engine.receive_item(
                event.origin, event.lane, event.key, event.version, event.payload, now
            )
            self.items_received[(event.lane, outcome.value)] += 1
            if outcome is ItemOutcome.APPLIED:
                self.wake()
            return
        self._member_event(event, now)
        self.wake()

    def _member_event(self, event: MemberEvent, now: datetime) -> None:
        engine = self.engine
        if event.kind in ("member_up", "member_renamed"):
            engine.member_up(event.site, event.address, event.generation, now)
            _log.info("%s: %s is up (%s)", self.where, event.site, event.address)
        elif event.kind == "member_down":
            engine.member_down(event.site, event.address, event.generation, now)
            _log.warning("%s: %s is down", self.where, event.site)
        else:
            engine.member_left(event.site, event.address, event.generation, now)
            _log.info("%s: %s left", self.where, event.site)

    def _publish(self, item: Item) -> None:
        node = self.node
        if node is None:
            return
        try:
            sent = node.publish(item.lane, item.key, item.version, item.payload)
        except BroadcastRefused as error:
            self.publish_refused[type(error).__name__] += 1
            _log.error("%s: %s/%s not published: %s", self.where, item.lane, item.key, error)
            return
        except NodeStateError:
            return  # the node stopped under us; the next node publishes everything again
        if sent:
            self.items_published[item.lane] += 1
            for listener in self._shared.publish_listeners:
                listener(self.name, item)

    # -- the refresh loop -----------------------------------------------------------------

    async def _refresh_loop(self) -> None:
        while True:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
            # that races with the event being set, and the loop would never stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._shared.tick_s):
                    await self._wake.wait()
            self._wake.clear()
            try:
                self.reload_keys()
                if self.node is None:
                    self._start_node()  # keys became readable, or a bind failed earlier
                self._refresh()
            except Exception:
                # A bug must not stop the site from serving: report it, try again next tick.
                _log.exception("%s: refresh failed", self.where)

    def _refresh(self, *, force_status: bool = False) -> None:
        now = utc_now()
        self._sync_members(now)
        self._check_credentials()
        result = self.engine.refresh(now)
        for item in result.items:
            self._publish(item)
        for overlay in result.changed:
            self._write_overlay(overlay)
        for event in result.events:
            self._report_event(
                event.kind, event.name, event.event.type, event.event.reason, event.event.message
            )
        moment = time.monotonic()
        for (kind, name), status in self.engine.statuses().items():
            self._shared.writer.write_status(kind, name, status, moment, force=force_status)

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

    def _report_event(
        self, kind: str, name: str, type_: EventType, reason: str, message: str
    ) -> None:
        level = logging.WARNING if type_ is EventType.WARNING else logging.INFO
        _log.log(level, "%s: %s %s: %s: %s", self.where, kind, name, reason, message)
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

    def _sync_members(self, now: datetime) -> None:
        # Events can be lost (a slow reader) and suspicion has no event: the member list
        # is the ground truth for who is alive or suspected right now.
        node = self.node
        if node is None or not node.running:
            self.engine.set_membership_running(False)
            return
        known = self.engine.members
        try:
            members = node.members()
        except GridError:
            return  # stopped between the check and the call
        for member in members:
            seen = known.get(member.site)
            if member.state == "alive":
                # A down or left identity never comes back (a rejoin has a new generation),
                # and this list can lag behind the events: only a newer generation, or a
                # suspect cleared, makes a site alive here.
                newer = seen is None or seen.generation < member.generation
                cleared = (
                    seen is not None
                    and seen.generation == member.generation
                    and seen.state is MemberState.SUSPECT
                )
                if newer or cleared:
                    self.engine.member_up(member.site, member.address, member.generation, now)
            elif member.state == "suspect":
                self.engine.member_suspect(member.site, member.address, member.generation, now)

    def _check_credentials(self) -> None:
        base = self._shared.secrets_dir
        if base is None:
            return
        for provider, (namespace, name, key) in self.engine.credential_refs().items():
            self.engine.observe_credentials(provider, credential_state(base, namespace, name, key))

    # -- observations ---------------------------------------------------------------------

    def _reconcile_observers(self) -> None:
        wanted = {target.provider: target for target in self.engine.observation_targets()}
        for name in list(self._observers):
            target, tasks = self._observers[name]
            if wanted.get(name) != target:
                for task in tasks:
                    task.cancel()
                del self._observers[name]
        for name, target in wanted.items():
            if name in self._observers:
                continue
            tasks = []
            if target.health is not None:
                tasks.append(self._spawn(self._health_loop(name, target.health)))
            if target.metrics is not None:
                tasks.append(self._spawn(self._scrape_loop(name, target.metrics)))
            self._observers[name] = (target, tasks)

    async def _health_loop(self, provider: str, target: HealthTarget) -> None:
        while True:
            observation = await check_health(
                target.url,
                timeout=target.timeout_s,
                expected_status=target.expected_status,
                session=self._shared.session,
            )
            self.engine.observe_health(provider, observation, utc_now())
            self.wake()
            await asyncio.sleep(target.interval_s)

    async def _scrape_loop(self, provider: str, target: MetricsTarget) -> None:
        while True:
            result = await scrape(
                target.url,
                timeout=target.timeout_s,
                max_body_bytes=target.max_body_bytes,
                session=self._shared.session,
            )
            self.engine.observe_scrape(provider, result, utc_now())
            self.wake()
            await asyncio.sleep(target.interval_s)

    async def _probe_loop(self) -> None:
        period = min(1.0, self._shared.probe_interval_s / 2)
        while True:
            for target in self.engine.take_due_probes(utc_now()):
                if target.site not in self._probing:
                    self._probing.add(target.site)
                    self._spawn(self._probe(target))
            await asyncio.sleep(period)

    async def _probe(self, target: ProbeTarget) -> None:
        try:
            result = await self._shared.prober.probe(target)
            self.engine.observe_probe(target.site, result, utc_now())
            self.wake()
        finally:
            self._probing.discard(target.site)


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
