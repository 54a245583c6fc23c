"""Statuses the operator writes, as pure functions: the network's phase (the engine's view
plus what only the shell knows: whether each ConfigMap was written, whether a seed
answered), a spec-validity condition, the status of resources that never passed
validation, tenant budgets, and when a status is worth a write.

No clock is read: every function takes ``now``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from grid.engine.budget_agreement import AGREEMENT_CONDITION, agreement_events
from grid.engine.budgets import BUDGETS_CONDITION, budget_condition, budget_events
from grid.engine.escrow import ESCROW_CONDITION
from grid.models.budgets import TenantBudgetStatus, UnheardSite
from grid.models.conditions import Condition, ConditionStatus, ConditionUpdate, set_condition
from grid.models.meta import ObjectMeta
from grid.models.network import (
    GatewayOverlayStatus,
    GridNetwork,
    GridNetworkSpec,
    GridNetworkStatus,
)
from grid.models.phases import (
    Event,
    GatewayRender,
    NetworkObservation,
    condition_update,
    evaluate_network,
)
from grid.models.provider import InferenceProviderStatus
from grid.models.site import GridSiteStatus
from grid.models.spend import SpendSourceStatus

JsonObject = dict[str, Any]
SPEC_VALID = "SpecValid"
SEEDS_REACHABLE = "SeedsReachable"
MEMBERSHIP_READY = "MembershipReady"
PEERS_COMPATIBLE = "PeersCompatible"
CAUGHT_UP = "CaughtUp"
MAX_MESSAGE = 4096

VOLATILE_FIELDS = frozenset(
    {"lastProbe", "lastHealthCheck", "lastMetricsScrape", "lastSeenAlive", "itemsWaiting"}
)
"""Status fields that change with every observation: written at most once per status
interval unless something else changed too."""
VOLATILE_MESSAGES = frozenset({CAUGHT_UP})
"""Conditions whose message alone changes with every observation (it counts items): a
change of their message only is written at most once per status interval, a change of
their status or reason at once."""


def _clip(text: str, limit: int = MAX_MESSAGE) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _update(
    type_: str, status: bool | None, reason: str, message: str, generation: int | None
) -> ConditionUpdate:
    return condition_update(type_, status, reason, message, generation, limit=MAX_MESSAGE)


# --- spec validity -------------------------------------------------------------------------


def with_spec_condition(
    conditions: Sequence[Condition],
    problems: Sequence[str],
    generation: int | None,
    now: datetime,
) -> list[Condition]:
    """``conditions`` with ``SpecValid``: True, or False listing why the latest spec was
    refused (the last valid one keeps serving)."""
    if problems:
        message = "the latest spec was refused, the last valid one keeps serving: " + "; ".join(
            problems
        )
        update = _update(SPEC_VALID, False, "SpecRejected", message, generation)
    else:
        update = _update(SPEC_VALID, True, "SpecAccepted", "", generation)
    return set_condition(conditions, update, now)


def rejected_member_status(
    kind: str,
    problems: Sequence[str],
    generation: int | None,
    previous: Mapping[str, Any],
    now: datetime,
) -> GridSiteStatus | InferenceProviderStatus:
    """The status of a GridSite or InferenceProvider that never passed validation: Pending,
    not ready, and why."""
    conditions = _previous_conditions(previous)
    message = "the spec was refused: " + "; ".join(problems)
    conditions = set_condition(
        conditions, _update(SPEC_VALID, False, "SpecRejected", message, generation), now
    )
    conditions = set_condition(
        conditions, _update("Ready", False, "SpecRejected", "phase is Pending", generation), now
    )
    if kind == "GridSite":
        return GridSiteStatus(observed_generation=generation, conditions=conditions)
    return InferenceProviderStatus(observed_generation=generation, conditions=conditions)


def orphan_status(
    kind: str,
    network: str | None,
    *,
    network_exists: bool,
    generation: int | None,
    previous: Mapping[str, Any],
    now: datetime,
) -> GridSiteStatus | InferenceProviderStatus:
    """The status of a GridSite or InferenceProvider that no network serves: its GridNetwork
    does not exist, or its spec was refused."""
    conditions = _previous_conditions(previous)
    if network_exists:
        reason = "NetworkRejected"
        message = f"GridNetwork {network} has no valid spec (see its ConfigValid condition)"
    else:
        reason = "NetworkNotFound"
        message = f"GridNetwork {network} does not exist" if network else "no gridNetworkRef"
    conditions = set_condition(
        conditions, _update("Ready", False, reason, message, generation), now
    )
    if kind == "GridSite":
        return GridSiteStatus(observed_generation=generation, conditions=conditions)
    return InferenceProviderStatus(observed_generation=generation, conditions=conditions)


def _previous_conditions(previous: Mapping[str, Any]) -> list[Condition]:
    found = []
    for item in previous.get("conditions") or []:
        try:
            found.append(Condition.model_validate(item))
        except ValueError:
            continue
    return found


# --- the network ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GatewayOutcome:
    """One gateway's overlay as rendered by the engine and written by the shell."""

    name: str
    namespace: str
    revision: str | None = None
    candidates: int = 0
    rendered_at: datetime | None = None
    render_message: str = ""
    """Why the engine refused the last render (the previous overlay stays)."""
    write_message: str = ""
    """Why the ConfigMap could not be written (the previous one stays)."""

    @property
    def message(self) -> str:
        return "; ".join(part for part in (self.render_message, self.write_message) if part)


@dataclass(frozen=True, slots=True)
class SeedReport:
    """What became of the network's seeds."""

    configured: tuple[str, ...] = ()
    unresolved: tuple[str, ...] = ()
    """Seeds that are not addresses this site can send to (with the reason)."""
    peers_known: int = 0
    """Peers this site's SWIM node knows (alive or suspected)."""
    joining: bool = False
    """The node started recently: no verdict yet."""


@dataclass(frozen=True, slots=True)
class NetworkReport:
    """Everything one network's status is made of."""

    config_error: str | None = None
    membership_running: bool = False
    name_conflict: str | None = None
    """Why the SWIM node stopped: an older live node holds this site's name."""
    refused_versions: tuple[str, ...] = ()
    """Peers refused because they speak no SWIM protocol version this node speaks, each
    described with both ranges."""
    grid_id: str | None = None
    unreachable_sites: tuple[str, ...] = ()
    connected_sites: int = 0
    provider_count: int = 0
    gateways: tuple[GatewayOutcome, ...] = ()
    seeds: SeedReport = field(default_factory=SeedReport)
    budgets: tuple[TenantBudgetStatus, ...] = ()
    spend_sources: tuple[SpendSourceStatus, ...] = ()
    unheard_sites: tuple[UnheardSite, ...] = ()
    budget_conditions: tuple[ConditionUpdate, ...] = ()
    """The engine's ``EscrowHeld`` and ``BudgetsAgreed``, as it computed them."""
    swim_port: str = ""
    """The SWIM node's port and how it was chosen (``MembershipReady``'s message)."""
    caught_up: bool = False
    """The node walked a peer's whole store since it joined (or found members again) and
    no item waits for its origin's certificate (grid.view.node.catch_up)."""
    items_waiting: int = 0
    """Items the node holds back until their origin's certificate is verified."""


def network_status(
    network: GridNetwork,
    previous: GridNetworkStatus | None,
    report: NetworkReport,
    now: datetime,
) -> tuple[GridNetworkStatus, list[Event]]:
    """The network's status and the events its phase change calls for."""
    observation = NetworkObservation(
        config_error=report.config_error,
        membership_running=report.membership_running,
        grid_id=report.grid_id,
        unreachable_sites=report.unreachable_sites,
        gateway_renders=tuple(
            GatewayRender(g.name, g.namespace, not g.message, g.message) for g in report.gateways
        ),
    )
    current = network.model_copy(update={"status": previous})
    outcome = evaluate_network(current, observation, now)
    generation = network.metadata.generation
    conditions = set_condition(outcome.conditions, _seeds_condition(report, generation), now)
    if report.name_conflict is not None and not report.membership_running:
        conflict = _update(
            MEMBERSHIP_READY, False, "SiteNameConflict", report.name_conflict, generation
        )
        conditions = set_condition(conditions, conflict, now)
    elif report.membership_running and report.swim_port:
        running = _update(MEMBERSHIP_READY, True, "MembershipRunning", report.swim_port, generation)
        conditions = set_condition(conditions, running, now)
    if report.membership_running:
        conditions = set_condition(conditions, _peers_condition(report, generation), now)
    conditions = set_condition(conditions, _caught_up_condition(report, generation), now)
    ours = (BUDGETS_CONDITION, ESCROW_CONDITION, AGREEMENT_CONDITION)
    conditions = [c for c in conditions if c.type not in ours]
    if network.spec.budgets:
        budgets = budget_condition(report.budgets, generation)
        conditions = set_condition(conditions, budgets, now)
    for update in report.budget_conditions:
        conditions = set_condition(conditions, update, now)
    before = () if previous is None else previous.budgets
    agreed = {c.type: c for c in (previous.conditions if previous else ())}
    held = agreed.get(AGREEMENT_CONDITION)
    agreement = next((u for u in report.budget_conditions if u.type == AGREEMENT_CONDITION), None)
    was = None if held is None else held.status is ConditionStatus.TRUE
    told = agreement_events(was, agreement)
    events = [*outcome.events, *budget_events(before, report.budgets), *told]
    status = GridNetworkStatus(
        phase=outcome.phase,
        phase_transition_time=outcome.phase_transition_time,
        observed_generation=generation,
        conditions=conditions,
        grid_id=report.grid_id,
        connected_sites=report.connected_sites,
        provider_count=report.provider_count,
        gateways=[
            GatewayOverlayStatus(
                name=g.name,
                namespace=g.namespace,
                revision=g.revision,
                candidates=g.candidates,
                rendered_at=g.rendered_at,
                message=_clip(g.message),
            )
            for g in sorted(report.gateways, key=lambda g: (g.namespace, g.name))
        ],
        budgets=list(report.budgets),
        spend_sources=list(report.spend_sources),
        unheard_sites=list(report.unheard_sites),
        items_waiting=report.items_waiting if report.membership_running else None,
    )
    return status, events


def rejected_network(name: str, generation: int | None) -> GridNetwork:
    """A stand-in for a network whose spec never passed validation, for its status only."""
    return GridNetwork(
        metadata=ObjectMeta(name=name, generation=generation), spec=GridNetworkSpec()
    )


def _peers_condition(report: NetworkReport, generation: int | None) -> ConditionUpdate:
    """Whether every peer met speaks a protocol version this node speaks."""
    if report.refused_versions:
        message = "; ".join(report.refused_versions)
        return _update(PEERS_COMPATIBLE, False, "ProtocolVersionRefused", message, generation)
    message = "every peer met speaks a protocol version this node speaks"
    return _update(PEERS_COMPATIBLE, True, "NoPeerRefused", message, generation)


def _caught_up_condition(report: NetworkReport, generation: int | None) -> ConditionUpdate:
    """Whether this site's view of the mesh's items is complete, and what it still lacks."""
    if not report.membership_running:
        message = "the SWIM node does not run (see MembershipReady)"
        return _update(CAUGHT_UP, False, "NotRunning", message, generation)
    if report.caught_up:
        message = (
            "walked a peer's whole store since the node joined (or found members again) and "
            "no item waits for its origin's certificate: this site's view of the mesh is complete"
        )
        return _update(CAUGHT_UP, True, "CaughtUp", message, generation)
    partial = "this site's view of the mesh is partial"
    if report.items_waiting:
        count = report.items_waiting
        waiting = (
            "1 item waits for its origin's certificate"
            if count == 1
            else f"{count} items wait for their origin's certificate"
        )
        return _update(CAUGHT_UP, False, "ItemsWaiting", f"{waiting}: {partial}", generation)
    if report.seeds.peers_known:
        message = f"walking peers' stores: {partial} until it has walked a peer's whole store"
    else:
        message = f"no peer known yet: {partial} until it finds one and walks its whole store"
    return _update(CAUGHT_UP, False, "CatchingUp", message, generation)


def _seeds_condition(report: NetworkReport, generation: int | None) -> ConditionUpdate:
    seeds = report.seeds
    unresolved = f"; not usable: {', '.join(seeds.unresolved)}" if seeds.unresolved else ""
    if not report.membership_running:
        return _update(SEEDS_REACHABLE, None, "MembershipStopped", "", generation)
    if seeds.peers_known:
        return _update(
            SEEDS_REACHABLE,
            True,
            "PeersKnown",
            f"{seeds.peers_known} peer(s) known{unresolved}",
            generation,
        )
    if not seeds.configured:
        return _update(
            SEEDS_REACHABLE,
            True,
            "NoSeeds",
            "no seeds configured: this site waits for peers to join it",
            generation,
        )
    if seeds.joining and not seeds.unresolved:
        return _update(SEEDS_REACHABLE, None, "Joining", "waiting for a seed to answer", generation)
    reachable = [seed for seed in seeds.configured if not _listed(seed, seeds.unresolved)]
    waiting = f"no answer yet from {', '.join(reachable)} (joins are retried)" if reachable else ""
    message = "; ".join(part for part in (waiting, unresolved.removeprefix("; ")) if part)
    return _update(SEEDS_REACHABLE, False, "NoSeedAnswered", message, generation)


def _listed(seed: str, unresolved: Sequence[str]) -> bool:
    return any(entry.startswith(f"{seed} ") or entry == seed for entry in unresolved)


# --- when to write -------------------------------------------------------------------------


def dump_status(status: Any) -> JsonObject:
    """A status model as the API stores it (camelCase, unset fields left out)."""
    dumped = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped if isinstance(dumped, dict) else {}


def significant(status: Mapping[str, Any]) -> str:
    """The part of a status whose change is written at once: all but the volatile fields
    and the messages of the volatile conditions."""
    kept = {key: value for key, value in status.items() if key not in VOLATILE_FIELDS}
    conditions = kept.get("conditions")
    if isinstance(conditions, list):
        kept["conditions"] = [_significant_condition(item) for item in conditions]
    return json.dumps(kept, sort_keys=True)


def _significant_condition(condition: Any) -> Any:
    if isinstance(condition, Mapping) and condition.get("type") in VOLATILE_MESSAGES:
        return {key: value for key, value in condition.items() if key != "message"}
    return condition


@dataclass(slots=True)
class _Written:
    document: JsonObject
    significant: str
    at: float


@dataclass
class StatusMemory:
    """What was last written per resource, to write only what changed: a significant change
    at once, a change of volatile fields only at most every ``interval_s``. A status that
    someone else changed (the API holds something else than what was written, for longer
    than the watch takes to catch up) is written again."""

    interval_s: float
    _written: dict[tuple[str, str], _Written] = field(default_factory=dict)

    def due(
        self,
        kind: str,
        name: str,
        document: Mapping[str, Any],
        stored: Mapping[str, Any],
        now: float,
    ) -> JsonObject | None:
        """The merge patch to write, or None when nothing needs writing. ``stored`` is the
        status the API holds (as last seen through the watch)."""
        key = (kind, name)
        new, held = dict(document), dict(stored)
        written = self._written.get(key)
        drifted = written is not None and (
            held != written.document and now - written.at >= self.interval_s
        )
        if written is None or drifted:
            if held == new:
                self._written[key] = _Written(new, significant(new), now)
                return None
            return merge_patch(held, new)
        assert written is not None
        if new == written.document:
            return None
        if written.significant == significant(new) and now - written.at < self.interval_s:
            return None
        return merge_patch(written.document, new)

    def last(self, kind: str, name: str) -> JsonObject | None:
        """The status last written (None before the first write)."""
        written = self._written.get((kind, name))
        return None if written is None else written.document

    def wrote(self, kind: str, name: str, document: Mapping[str, Any], now: float) -> None:
        new = dict(document)
        self._written[(kind, name)] = _Written(new, significant(new), now)

    def forget(self, kind: str, name: str) -> None:
        self._written.pop((kind, name), None)

    def keep_only(self, keys: set[tuple[str, str]]) -> None:
        """Forget every resource but ``keys`` (the ones this writer still writes)."""
        for key in set(self._written) - keys:
            del self._written[key]


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> JsonObject:
    """The RFC 7386 merge patch that turns ``old`` into ``new`` (``null`` removes a key;
    lists are replaced whole)."""
    patch: JsonObject = {}
    for key in old:
        if key not in new:
            patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            nested = merge_patch(before, value)
            if nested:
                patch[key] = nested
        elif before != value or key not in old:
            patch[key] = value
    return patch
