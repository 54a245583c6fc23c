"""What one network in the operator reports to Kubernetes: the status of the GridNetwork
and of its member resources (through the rate-limited status writer), the network's
report from the engine's view and what only the shell knows, and the Events of phase
changes, refused specs and name or version conflicts."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from grid.engine import SiteEngine
from grid.engine.budget_agreement import AGREEMENT_CONDITION
from grid.engine.escrow import ESCROW_CONDITION
from grid.engine.events import ResourceEvent
from grid.models.conditions import Condition, ConditionUpdate
from grid.models.network import GridNetwork, GridNetworkStatus
from grid.models.phases import Event
from grid.models.site import GridSitePhase
from grid.operator.cache import NETWORK, Entry
from grid.operator.ports import Assignment
from grid.operator.shared import Shared, utc_now
from grid.operator.spec_events import SPEC_REJECTED, SpecEvents
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
from grid.operator.writes import ConfigMapWriter, StatusWriter
from grid.runtime.notices import Notices
from grid.runtime.swim import SwimDriver
from grid.view import catch_up

_log = logging.getLogger("grid.operator")


class NetworkReporter:
    """One network's statuses and Events."""

    def __init__(self, name: str, shared: Shared, notices: Notices) -> None:
        self._name = name
        self._shared = shared
        self._notices = notices
        self._statuses = StatusWriter(shared.kube, shared.metrics, shared.options.status_interval_s)
        self.network_status: GridNetworkStatus | None = None
        """The network's status as last composed."""
        self._spec_events = SpecEvents()
        self._untold: list[Event] = []

    def recall(self, entry: Entry) -> None:
        """Start from the status an earlier run wrote, so phases continue rather than start
        over (once)."""
        if self.network_status is None:
            self.network_status = _recorded_status(entry)

    async def write_statuses(  # noqa: PLR0917 - the engine, the network, and when
        self,
        engine: SiteEngine,
        network: GridNetwork,
        entry: Entry,
        now: datetime,
        moment: float,
        report: Callable[[], NetworkReport],
    ) -> None:
        """Every member's status as the engine sees it (a member whose spec was refused:
        why), then the network's, from ``report``."""
        cache = self._shared.cache
        written = {(NETWORK, self._name)}
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
        for member in cache.members_of(self._name):
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
        await self.write_network_status(entry, network, report(), now)

    async def write_network_status(
        self, entry: Entry, network: GridNetwork, report: NetworkReport, now: datetime
    ) -> None:
        self._tell_spec_events(entry)
        status, events = network_status(network, self.network_status, report, now)
        self.network_status = status
        for event in events:
            self.post(entry, event)
        await self._write_status(
            NETWORK, self._name, dump_status(status), entry.status, time.monotonic()
        )

    async def report_rejected_network(self, entry: Entry, now: datetime) -> None:
        """A network whose spec never passed validation: Pending, and why."""
        self.recall(entry)
        report = NetworkReport(config_error="the spec was refused: " + "; ".join(entry.problems))
        await self.write_network_status(
            entry, rejected_network(self._name, entry.generation), report, now
        )

    async def report_without_engine(
        self, entry: Entry, network: GridNetwork, problem: str, config_error: str | None
    ) -> None:
        """A network this cluster cannot take part in yet (its site is unknown)."""
        errors = [problem, *(p for p in (config_error,) if p)]
        report = NetworkReport(config_error="; ".join(errors))
        await self.write_network_status(entry, network, report, utc_now())

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

    def post_events(self, events: tuple[ResourceEvent, ...]) -> None:
        cache = self._shared.cache
        for happened in events:
            # The network's phase is decided with what only the shell knows (see
            # network_report), and its events are posted with its status.
            if happened.kind == NETWORK:
                continue
            entry = cache.get(happened.kind, happened.name)
            if entry is not None:
                self.post(entry, happened.event)

    def hold(self, event: Event) -> None:
        """An Event for the network that the next pass posts (from outside a pass)."""
        self._untold.append(event)

    def tell_held(self, entry: Entry) -> None:
        untold, self._untold = self._untold, []
        for event in untold:
            self.post(entry, event)

    def post(self, entry: Entry, event: Event) -> None:
        self._shared.post_event(entry.reference, event.type, event.reason, event.message)
        self._shared.metrics.events.labels(entry.kind, str(event.type)).inc()

    def _tell_spec_events(self, entry: Entry) -> None:
        """A Warning Event and a log line when a resource's latest spec is refused, or
        carries fields this release ignores (once per distinct set: see SpecEvents)."""
        for event in self._spec_events.untold(entry):
            self.post(entry, event)
            said = (
                f"spec refused: {event.message}" if event.reason == SPEC_REJECTED else event.message
            )
            _log.warning("%s %s: %s", entry.kind, entry.name, said)


def network_report(  # noqa: PLR0917 - the engine's view and what only the shell knows
    name: str,
    engine: SiteEngine,
    network: GridNetwork,
    configmaps: ConfigMapWriter,
    mesh: SwimDriver,
    swim_port: Assignment | None,
    join_grace_s: float,
) -> NetworkReport:
    """What the network's status is made of: the engine's view, and what only the shell
    knows (ConfigMap writes, seeds, the node's catch-up)."""
    statuses = engine.statuses()
    view = statuses[(NETWORK, name)]
    assert isinstance(view, GridNetworkStatus)  # the engine keys it by kind
    unreachable = sorted(
        site
        for (kind, site), status in statuses.items()
        if kind == "GridSite" and site != engine.site and status.phase is GridSitePhase.UNREACHABLE
    )
    gateways = tuple(
        GatewayOutcome(
            name=overlay.gateway.name,
            namespace=overlay.gateway.namespace,
            revision=overlay.revision,
            candidates=0 if overlay.overlay is None else len(overlay.overlay.candidates),
            rendered_at=overlay.rendered_at,
            render_message=overlay.message,
            write_message=configmaps.message(*overlay.key),
        )
        for overlay in engine.overlays.values()
    )
    joining = time.monotonic() - mesh.started_at < join_grace_s
    caught_up, waiting = catch_up(mesh.node)
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
        swim_port=swim_port.describe() if swim_port is not None else "",
        caught_up=caught_up,
        items_waiting=waiting,
    )


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
