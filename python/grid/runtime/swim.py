"""Driving a network's SWIM node: started from a plan, a keyring and the site's
credentials, restarted when the plan changes, its credentials renewed, its keyring rotated
and its pins replaced in place, its events (membership changes, received items, name
conflicts) fed to the engine and the engine's items published.

A member comes back to life in the engine by an event (a rejoin carries a newer
generation) or, in the member list, by a newer generation or a refuted suspicion only: a
site the engine saw leave or fail is never revived by the list alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from grid.crdt.snapshot import Item
from grid.engine import ItemOutcome, RefreshResult, SiteEngine
from grid.errors import BroadcastRefused, GridError, NodeStateError, SiteCredentialsError
from grid.membership import (
    Event,
    ItemEvent,
    NameConflict,
    SwimConfig,
    SwimCredentials,
    SwimNode,
    VersionRefused,
    parse_address,
)
from grid.models.network import GridNetwork
from grid.models.phases import MemberState
from grid.runtime.credentials import revoked_fingerprints, swim_pins
from grid.runtime.keyring import Keyring
from grid.runtime.metrics import SUSPICION_BUCKETS, Durations
from grid.runtime.notices import Notices

EngineOf = Callable[[], SiteEngine | None]
"""The network's engine right now (None while there is none)."""
Pins = dict[str, tuple[bytes, ...]]
ConflictListener = Callable[[NameConflict, str], None]
"""Hears of a name conflict and what was logged about it."""
RefusalListener = Callable[[VersionRefused, str], None]
"""Hears of a peer refused for its protocol versions and what was logged about it."""
REFUSED_PEERS_KEPT = 32
"""Peers refused for their versions that the status lists (the latest ones)."""


@dataclass(frozen=True, slots=True)
class SwimPlan:
    """How a network's SWIM node is set up; a change means a new node."""

    bind: str
    advertise: str | None
    config: SwimConfig
    seeds: tuple[str, ...]

    @classmethod
    def of(
        cls, network: GridNetwork, bind: str, advertise: str | None, push_pull_factor: float
    ) -> SwimPlan:
        """The plan for ``network``'s ``spec.swim`` settings and seeds on ``bind``, with a
        push/pull sync every ``push_pull_factor`` probe intervals."""
        swim = network.spec.swim
        probe = swim.probe_interval.seconds
        config = SwimConfig(
            probe_interval=probe,
            suspicion_timeout=swim.suspicion_timeout.seconds,
            gossip_nodes=swim.gossip_nodes,
            push_pull_interval=probe * push_pull_factor,
        )
        return cls(bind, advertise, config, tuple(network.spec.seeds))


class SwimDriver:
    """The SWIM node of one network (at most one at a time), between it and the engine.

    Counts what it moves: :attr:`published` by lane, :attr:`received` by lane and outcome,
    :attr:`refused` by error, :attr:`name_conflicts` by outcome; ``on_published``,
    ``on_received`` and ``on_conflict`` hear of each one too. ``wake`` is called when the
    engine should take a pass; an item that changed the engine's state calls
    ``on_applied`` instead, if given (its only effect is a render, which the engine paces).
    """

    def __init__(
        self,
        notices: Notices,
        logger: logging.Logger,
        engine_of: EngineOf,
        wake: Callable[[], None],
        *,
        on_published: Callable[[Item], None] | None = None,
        on_received: Callable[[str, ItemOutcome], None] | None = None,
        on_conflict: ConflictListener | None = None,
        on_applied: Callable[[], None] | None = None,
        on_version_refused: RefusalListener | None = None,
    ) -> None:
        self._notices = notices
        self._log = logger
        self._engine_of = engine_of
        self._wake = wake
        self._on_applied = on_applied or wake
        self._on_published = on_published
        self._on_received = on_received
        self._on_conflict = on_conflict
        self._on_version_refused = on_version_refused
        self.node: SwimNode | None = None
        self.unusable_seeds: tuple[str, ...] = ()
        """Seeds that could not be joined, each with its reason."""
        self.started_at = 0.0
        """When the node started (monotonic seconds)."""
        self.credentials_error: str | None = None
        """Why the node refused the site's credentials: it does not start with them again."""
        self.conflict: str | None = None
        """Why the node stopped: an older live node holds this site's name."""
        self.published: Counter[str] = Counter()
        self.received: Counter[tuple[str, str]] = Counter()
        self.refused: Counter[str] = Counter()
        self.name_conflicts: Counter[str] = Counter()
        """Other nodes claiming this site's name: ``refused`` or ``yielded`` to."""
        self.refused_versions: dict[tuple[str, str], VersionRefused] = {}
        """Peers (by site and address, the latest identity) refused because they speak no
        SWIM protocol version this node speaks; the latest :data:`REFUSED_PEERS_KEPT`."""
        self.suspicion_to_down = Durations(SUSPICION_BUCKETS)
        """Seconds from the engine seeing a peer suspected to the peer declared down."""
        self._start_error: str | None = None
        self._rotation_error: str | None = None
        self._replacement_error: str | None = None
        self._plan: SwimPlan | None = None
        self._keys: Keyring | None = None
        self._credentials: SwimCredentials | None = None
        self._pins: Pins | None = None
        self._refused_start: tuple[object, ...] | None = None
        self._refused_replacement: tuple[object, ...] | None = None
        self._events: asyncio.Task[None] | None = None

    @property
    def _prefix(self) -> str:
        return self._notices.prefix

    @property
    def error(self) -> str | None:
        """Why the node does not run as configured: it gave way to an older node of the
        same site, or one of :attr:`setup_error`'s reasons."""
        return (
            "; ".join(problem for problem in (self.conflict, self.setup_error) if problem) or None
        )

    @property
    def setup_error(self) -> str | None:
        """Why the node does not run with the settings given: it could not start, its
        keyring could not be rotated, or new credentials were refused."""
        problems = (self._start_error, self._replacement_error, self._rotation_error)
        return "; ".join(problem for problem in problems if problem) or None

    @property
    def problems(self) -> dict[str, bool]:
        """Which of :attr:`error`'s reasons hold now (for the metrics)."""
        return {
            "start": self._start_error is not None,
            "credentials": self._replacement_error is not None,
            "rotation": self._rotation_error is not None,
            "name_conflict": self.conflict is not None,
        }

    @property
    def running(self) -> bool:
        return self.node is not None and self.node.running

    def signs_with(self, credentials: SwimCredentials) -> bool:
        """Whether the node signs with ``credentials``' certificate, or none runs yet. A
        shell advertises a new certificate only then: one the node refused (it kept the
        current one) would make peers read the site's messages against the wrong key."""
        current = self._credentials
        return (
            self.node is None
            or current is None
            or (current.certificate_chain == credentials.certificate_chain)
        )

    def peers_known(self) -> int:
        """Peers alive or suspected right now."""
        node = self.node
        if node is None or not node.running:
            return 0
        try:
            members = node.members()
        except GridError:
            return 0  # stopped between the check and the call
        return sum(1 for member in members if member.state in ("alive", "suspect"))

    async def ensure(
        self,
        engine: SiteEngine,
        plan: SwimPlan,
        keyring: Keyring,
        credentials: SwimCredentials,
    ) -> None:
        """Run a node with ``plan``, ``keyring`` and ``credentials`` (the site's certificate
        and key, and the network CA), pinning what the engine's GridSites pin: start it,
        restart it for a new plan, or renew its credentials, rotate its keys and replace its
        pins in place.

        New credentials the node would refuse leave the running node as it is. A node that
        gave way to an older node of its site stays stopped until the plan or the
        credentials change."""
        identity = replace(credentials, pins={}, revoked=revoked_fingerprints(engine.network))
        pins = swim_pins(engine.site_pins())
        if self.node is not None:
            identity = self._acceptable(engine.site, keyring, identity, pins)
            renewal = identity != self._credentials
            if plan != self._plan or (renewal and self.conflict is not None):
                what = "settings" if plan != self._plan else "site certificate"
                self._log.info("%s: SWIM %s changed, restarting the node", self._prefix, what)
                await self.stop(leave=True)
                # Peers forgot this site when it left: its records must come back as news.
                engine.reset_state()
        if self.node is None:
            await self._start(engine, plan, keyring, identity, pins)
        elif self.conflict is None:
            if identity != self._credentials:
                self._renew(identity, pins)
            if keyring != self._keys:
                self._rotate(keyring)
            if pins != self._pins:
                self._set_pins(pins)

    def _acceptable(
        self, site: str, keyring: Keyring, identity: SwimCredentials, pins: Pins
    ) -> SwimCredentials:
        """``identity`` if the running node may be replaced by one using it, else the
        credentials in use (new ones a node would refuse are reported, once)."""
        current = self._credentials
        assert current is not None  # set with the node
        if identity == current:
            self._replacement_error = self._refused_replacement = None
            return identity
        attempt = (site, identity, pins)
        if attempt == self._refused_replacement:
            return current
        problem = _refusal(site, identity, pins)
        if problem is not None:
            self._refused_replacement = attempt
            self._replacement_error = (
                f"the new site certificate is not used, the node keeps the current one: {problem}"
            )
            self._notices.say("credentials", self._replacement_error, logging.ERROR)
            return current
        self._replacement_error = self._refused_replacement = None
        return identity

    async def _start(
        self,
        engine: SiteEngine,
        plan: SwimPlan,
        keyring: Keyring,
        identity: SwimCredentials,
        pins: Pins,
    ) -> None:
        attempt = (engine.site, plan.bind, identity, pins)
        if attempt == self._refused_start:
            engine.set_membership_running(False)
            return  # the same credentials would be refused again
        try:
            node = SwimNode(
                plan.bind,
                engine.site,
                plan.advertise,
                keyring.keys,
                plan.config,
                credentials=replace(identity, pins=pins),
            )
            node.start()
        except SiteCredentialsError as error:
            self._refused_start = attempt
            self.credentials_error = self._start_error = f"SWIM cannot start: {error}"
            self._notices.say("node", self._start_error, logging.ERROR)
            engine.set_membership_running(False)
            return
        except GridError as error:
            self.credentials_error = None
            self._start_error = f"SWIM cannot start on {plan.bind}: {error}"
            self._notices.say("node", self._start_error, logging.ERROR)
            engine.set_membership_running(False)
            return
        self._start_error = self.credentials_error = self._refused_start = None
        self._rotation_error = self._replacement_error = self.conflict = None
        self.node, self._plan, self._keys = node, plan, keyring
        self._credentials, self._pins = identity, pins
        self.started_at = time.monotonic()
        seeds, self.unusable_seeds = await _usable_seeds(plan.seeds, node.address)
        if seeds:
            try:
                node.join(seeds)
            except GridError as error:
                self.unusable_seeds += (f"{', '.join(seeds)} ({error})",)
        engine.set_membership_running(True)
        self._notices.say(
            "node",
            f"SWIM node {node.site} at {node.address} (keys {', '.join(node.key_ids())}), "
            f"seeds {', '.join(seeds) or 'none'}",
        )
        for problem in self.unusable_seeds:
            self._log.warning("%s: seed not used: %s", self._prefix, problem)
        self._events = asyncio.create_task(self._read_events(node))
        # Everything this site holds goes out again under the new node.
        for item in engine.state.all_items():
            self.publish(item)

    def _rotate(self, keyring: Keyring) -> None:
        node, current = self.node, self._keys
        if node is None or current is None:
            return
        try:
            for key in keyring.keys:
                if key not in current.keys:
                    node.install_key(key)
            node.use_key(keyring.primary)
            for key in current.keys:
                if key not in keyring.keys:
                    node.remove_key(key)
        except GridError as error:
            self._rotation_error = f"SWIM key rotation failed: {error}"
            self._notices.say("rotation", self._rotation_error, logging.ERROR)
            return
        self._rotation_error = None
        self._keys = keyring
        self._notices.say("rotation", f"keyring is now {', '.join(node.key_ids())}")

    def _renew(self, identity: SwimCredentials, pins: Pins) -> None:
        """Signs with ``identity`` from now on, without a restart: peers switch to the new
        certificate as its ``HELLO`` reaches them, and what the site signed before stays
        verifiable until it has signed it again."""
        node = self.node
        if node is None:
            return
        try:
            node.renew(replace(identity, pins=pins))
        except GridError as error:
            # Checked just before (_acceptable); a node that refuses now keeps what it has.
            self._replacement_error = (
                f"the new site certificate is not used, the node keeps the current one: {error}"
            )
            self._notices.say("credentials", self._replacement_error, logging.ERROR)
            return
        self._credentials, self._pins = identity, pins
        self._replacement_error = None
        leaf = hashlib.sha256(identity.certificate_chain[0]).hexdigest()
        self._notices.say(
            "credentials", f"SWIM signs with the renewed site certificate {leaf}, no restart"
        )

    def _set_pins(self, pins: Pins) -> None:
        node = self.node
        if node is None:
            return
        try:
            node.set_pins(pins)
        except GridError as error:
            self._notices.say("pins", f"pins not replaced: {error}", logging.WARNING)
            return
        self._pins = pins
        self._notices.say("pins", f"pinned certificates of {_sites(pins)}")

    async def stop(self, *, leave: bool) -> None:
        """Stop the node: ``leave`` tells peers at once, otherwise they detect a failure."""
        node, self.node = self.node, None
        self._plan = self._keys = self._credentials = self._pins = None
        self.conflict = self._rotation_error = self._replacement_error = None
        self._refused_replacement = None
        engine = self._engine_of()
        if engine is not None:
            engine.set_membership_running(False)
        events, self._events = self._events, None
        if events is not None:
            events.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await events
        if node is None:
            return
        try:
            if leave and node.running:
                await asyncio.to_thread(node.leave)
            else:
                node.close()
        except GridError as error:
            self._log.warning("%s: stopping SWIM: %s", self._prefix, error)

    def publish(self, item: Item) -> None:
        """Hand ``item`` to the node (nothing while none runs: the next node publishes
        everything the engine holds)."""
        node = self.node
        if node is None:
            return
        try:
            sent = node.publish(item.lane, item.key, item.version, item.payload)
        except BroadcastRefused as error:
            self.refused[type(error).__name__] += 1
            self._log.error("%s: %s/%s not published: %s", self._prefix, item.lane, item.key, error)
            return
        except NodeStateError:
            return  # the node stopped under us; the next node publishes everything again
        if sent:
            self.published[item.lane] += 1
            if self._on_published is not None:
                self._on_published(item)

    def apply(self, result: RefreshResult) -> None:
        """Carry out what a refresh decided for the mesh: publish this site's new items and
        forget the items of the sites whose records the engine dropped (they come back at
        the same versions once those sites are live again)."""
        for item in result.items:
            self.publish(item)
        node = self.node
        if node is None:
            return
        for site, items in result.forgotten:
            try:
                node.forget(site, items)
            except NodeStateError:
                return  # stopped under us; a new node holds nothing of theirs yet

    def sync_members(self, engine: SiteEngine, now: datetime) -> None:
        """Events can be lost (a slow reader) and suspicion has no event: the member list
        tells who is alive or suspected right now. An identity the engine saw leave or fail
        is revived only by a newer generation (a rejoin); the list revives a suspect that
        refuted its suspicion."""
        node = self.node
        if node is None or not node.running:
            engine.set_membership_running(False)
            return
        try:
            members = node.members()
        except GridError:
            return  # stopped between the check and the call
        engine.note_protocols({member.site: member.protocol for member in members})
        known = engine.members
        for member in members:
            seen = known.get(member.site)
            if member.state == "alive":
                newer = seen is None or seen.generation < member.generation
                refuted = (
                    seen is not None
                    and seen.generation == member.generation
                    and seen.state is MemberState.SUSPECT
                )
                if newer or refuted:
                    engine.member_up(member.site, member.address, member.generation, now)
            elif member.state == "suspect":
                engine.member_suspect(member.site, member.address, member.generation, now)

    async def _read_events(self, node: SwimNode) -> None:
        async for event in node.events():
            engine = self._engine_of()
            if engine is None:
                continue
            try:
                self._handle(engine, event, datetime.now(UTC))
            except Exception:
                # One bad event must not stop the stream: report it and take the next.
                self._log.exception("%s: a SWIM event could not be handled", self._prefix)

    def _handle(self, engine: SiteEngine, event: Event, now: datetime) -> None:
        if isinstance(event, NameConflict):
            self._name_conflict(engine, event)
            return
        if isinstance(event, VersionRefused):
            self._version_refused(event)
            return
        if isinstance(event, ItemEvent):
            outcome = engine.receive_item(
                event.origin, event.lane, event.key, event.version, event.payload, now
            )
            self.received[(event.lane, outcome.value)] += 1
            if self._on_received is not None:
                self._on_received(event.lane, outcome)
            if outcome is ItemOutcome.APPLIED:
                self._on_applied()
            return
        if event.kind in ("member_up", "member_renamed"):
            engine.member_up(event.site, event.address, event.generation, now)
            # A node met again at that address speaks with us: it is no longer refused.
            self.refused_versions.pop((event.site, event.address), None)
            self._log.info("%s: %s is up (%s)", self._prefix, event.site, event.address)
        elif event.kind == "member_down":
            suspected = engine.members.get(event.site)
            engine.member_down(event.site, event.address, event.generation, now)
            if (
                suspected is not None
                and suspected.state is MemberState.SUSPECT
                and suspected.generation == event.generation
            ):
                seconds = (now - suspected.since).total_seconds()
                self.suspicion_to_down.observe((), max(seconds, 0.0))
            self._log.warning("%s: %s is down", self._prefix, event.site)
        else:
            engine.member_left(event.site, event.address, event.generation, now)
            self._log.info("%s: %s left", self._prefix, event.site)
        self._wake()

    def _name_conflict(self, engine: SiteEngine, event: NameConflict) -> None:
        """Another live node claims this site: the one that started later gives way."""
        if event.yielded:
            if self.conflict is not None:
                return  # the node stopped once; later reports of it add nothing
            self.name_conflicts["yielded"] += 1
            message = (
                f"site {event.site} is already held by a live node at {event.address} "
                "(started earlier); this node stopped"
            )
            self.conflict = message
            self._log.error("%s: %s", self._prefix, message)
            engine.set_membership_running(False)
        else:
            self.name_conflicts["refused"] += 1
            message = (
                f"another node at {event.address} also claims site {event.site}; it was refused"
            )
            self._log.warning("%s: %s", self._prefix, message)
        if self._on_conflict is not None:
            self._on_conflict(event, message)
        self._wake()

    def _version_refused(self, event: VersionRefused) -> None:
        """A peer of a release too far from this one: said once per identity, listed in
        the status while it is among the latest refused."""
        message = event.describe()
        self._log.warning("%s: %s", self._prefix, message)
        refused = self.refused_versions
        refused.pop((event.site, event.address), None)
        refused[(event.site, event.address)] = event
        while len(refused) > REFUSED_PEERS_KEPT:
            del refused[next(iter(refused))]
        if self._on_version_refused is not None:
            self._on_version_refused(event, message)
        self._wake()


def _refusal(site: str, identity: SwimCredentials, pins: Pins) -> str | None:
    """Why a node of ``site`` would refuse these credentials (None: it would take them)."""
    try:
        replace(identity, pins=pins).check(site)
    except SiteCredentialsError as error:
        return str(error)
    except GridError:
        return None  # not about the credentials: the real start will say what it is
    return None


def _sites(pins: Pins) -> str:
    return ", ".join(sorted(pins)) or "no site"


async def _usable_seeds(
    seeds: tuple[str, ...], own_address: str
) -> tuple[list[str], tuple[str, ...]]:
    """The seeds to join, resolved one by one (this node excluded, so one bad name does not
    keep the others out), and the ones that cannot be used, each with its reason. Name
    resolution blocks, so it runs off the event loop."""
    usable: list[str] = []
    unusable: list[str] = []
    for seed in seeds:
        try:
            address = await asyncio.to_thread(parse_address, seed, "seed")
        except GridError as error:
            unusable.append(f"{seed} ({error})")
            continue
        if address != own_address:
            usable.append(address)
    return usable, tuple(unusable)
