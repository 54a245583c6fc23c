"""A network's SWIM node in the operator: started from the network's settings and the keyring
of its Secret, restarted when the settings change, its keyring rotated in place when the
Secret changes, and its events (membership changes, received items) fed to the engine."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from grid.crdt.snapshot import Item
from grid.engine import ItemOutcome, SiteEngine
from grid.errors import BroadcastRefused, GridError
from grid.membership import ItemEvent, MemberEvent, SwimConfig, SwimNode, parse_address
from grid.models.network import GridNetwork
from grid.models.phases import MemberState
from grid.operator.keyring import Keyring
from grid.operator.metrics import OperatorMetrics
from grid.operator.notices import Notices
from grid.operator.options import OperatorOptions

_log = logging.getLogger("grid.operator")

EngineOf = Callable[[], SiteEngine | None]


@dataclass(frozen=True, slots=True)
class SwimPlan:
    """How the network's SWIM node is set up; a change means a new node."""

    bind: str
    advertise: str | None
    config: SwimConfig
    seeds: tuple[str, ...]

    @classmethod
    def of(cls, network: GridNetwork, options: OperatorOptions) -> SwimPlan:
        """The plan for ``network``: its ``spec.swim`` settings and seeds, on its own port
        when ``spec.swim.port`` is set, else on the operator's (``GRID_SWIM_PORT``)."""
        swim = network.spec.swim
        port = swim.port if "port" in swim.model_fields_set else options.swim_port
        probe = swim.probe_interval.seconds
        config = SwimConfig(
            probe_interval=probe,
            suspicion_timeout=swim.suspicion_timeout.seconds,
            gossip_nodes=swim.gossip_nodes,
            push_pull_interval=probe * options.push_pull_factor,
        )
        return cls(
            options.swim_bind(port), options.swim_advertise(port), config, tuple(network.spec.seeds)
        )


class MeshNode:
    """The SWIM node of one network (at most one at a time)."""

    def __init__(
        self,
        network: str,
        metrics: OperatorMetrics,
        notices: Notices,
        engine_of: EngineOf,
        wake: Callable[[], None],
    ) -> None:
        self._network = network
        self._metrics = metrics
        self._notices = notices
        self._engine_of = engine_of
        self._wake = wake
        self.node: SwimNode | None = None
        self.error: str | None = None
        """Why the node could not start, or its keyring could not be rotated."""
        self.unusable_seeds: tuple[str, ...] = ()
        """Seeds that could not be joined, each with its reason."""
        self.started_at = 0.0
        self._plan: SwimPlan | None = None
        self._keys: Keyring | None = None
        self._events: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self.node is not None and self.node.running

    def peers_known(self) -> int:
        """Peers alive or suspected right now."""
        node = self.node
        if node is None or not node.running:
            return 0
        return sum(1 for member in node.members() if member.state in ("alive", "suspect"))

    async def ensure(self, engine: SiteEngine, plan: SwimPlan, keyring: Keyring) -> None:
        """Run a node with ``plan`` and ``keyring``: start it, restart it for a new plan, or
        rotate its keys."""
        if self.node is not None and plan != self._plan:
            _log.info("network %s: SWIM settings changed, restarting the node", self._network)
            await self.stop(leave=True)
            # Peers forgot this site when it left: its records must come back as news.
            engine.reset_state()
        if self.node is None:
            await self._start(engine, plan, keyring)
        elif keyring != self._keys:
            self._rotate(keyring)

    async def _start(self, engine: SiteEngine, plan: SwimPlan, keyring: Keyring) -> None:
        try:
            node = SwimNode(plan.bind, engine.site, plan.advertise, keyring.keys, plan.config)
            node.start()
        except GridError as error:
            self.error = f"SWIM cannot start on {plan.bind}: {error}"
            self._notices.say("node", self.error, logging.ERROR)
            engine.set_membership_running(False)
            return
        self.error = None
        self.node, self._plan, self._keys = node, plan, keyring
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
            _log.warning("network %s: seed not used: %s", self._network, problem)
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
            self.error = f"SWIM key rotation failed: {error}"
            self._notices.say("rotation", self.error, logging.ERROR)
            return
        self.error = None
        self._keys = keyring
        self._notices.say("rotation", f"keyring is now {', '.join(node.key_ids())}")

    async def stop(self, *, leave: bool) -> None:
        """Stop the node: ``leave`` tells peers at once, otherwise they detect a failure."""
        node, self.node = self.node, None
        self._plan = self._keys = None
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
            _log.warning("network %s: stopping SWIM: %s", self._network, error)

    def publish(self, item: Item) -> None:
        node = self.node
        if node is None:
            return
        try:
            sent = node.publish(item.lane, item.key, item.version, item.payload)
        except BroadcastRefused as error:
            _log.error(
                "network %s: %s/%s not published: %s", self._network, item.lane, item.key, error
            )
            return
        if sent:
            self._metrics.items_published.labels(self._network, item.lane).inc()

    def sync_members(self, engine: SiteEngine, now: datetime) -> None:
        """Events can be lost (a slow reader) and suspicion has no event: the member list
        tells who is alive or suspected right now. The list can lag behind the events,
        though (a member that just left may still be listed alive), so an identity the
        engine saw leave or fail is only revived by an event, which comes with a newer
        generation; the list revives only a suspect that refuted its suspicion."""
        node = self.node
        if node is None or not node.running:
            engine.set_membership_running(False)
            return
        known = engine.members
        for member in node.members():
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
            now = datetime.now(UTC)
            if isinstance(event, ItemEvent):
                outcome = engine.receive_item(
                    event.origin, event.lane, event.key, event.version, event.payload, now
                )
                self._metrics.items_received.labels(self._network, event.lane, outcome.value).inc()
                if outcome is ItemOutcome.APPLIED:
                    self._wake()
                continue
            self._member_event(engine, event, now)
            self._wake()

    def _member_event(self, engine: SiteEngine, event: MemberEvent, now: datetime) -> None:
        if event.kind in ("member_up", "member_renamed"):
            engine.member_up(event.site, event.address, event.generation, now)
            _log.info("network %s: %s is up (%s)", self._network, event.site, event.address)
        elif event.kind == "member_down":
            engine.member_down(event.site, event.address, event.generation, now)
            _log.warning("network %s: %s is down", self._network, event.site)
        else:
            engine.member_left(event.site, event.address, event.generation, now)
            _log.info("network %s: %s left", self._network, event.site)


async def _usable_seeds(
    seeds: tuple[str, ...], own_address: str
) -> tuple[list[str], tuple[str, ...]]:
    """The seeds to join (resolved, this node excluded) and the ones that cannot be used,
    each with its reason. Name resolution blocks, so it runs off the event loop."""
    usable: list[str] = []
    unusable: list[str] = []
    for seed in seeds:
        try:
            address = await asyncio.to_thread(parse_address, seed, "seed")
        except GridError as error:
            unusable.append(f"{seed} ({error})")
            continue
        if address != own_address:
            usable.append(seed)
    return usable, tuple(unusable)
