"""The GridNetwork's status as one site sees it: its phase machine, fed by the
configuration, membership, the sites out of reach and the renders of the gateways, and
what it shows (connected sites, providers, each gateway's overlay, each tenant's budget,
this site's spend sources). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from grid.crdt.state import GridState
from grid.engine.budget_agreement import AGREEMENT_CONDITION, agreement_events
from grid.engine.budgets import (
    BUDGETS_CONDITION,
    budget_condition,
    budget_events,
    budget_statuses,
    mesh_unheard,
)
from grid.engine.escrow import ESCROW_CONDITION, EscrowFigures
from grid.engine.events import NETWORK_KIND, EventLog
from grid.engine.inputs import SiteInputs
from grid.engine.rendering import GatewayOverlay
from grid.models.budgets import UnheardSite
from grid.models.conditions import ConditionStatus, ConditionUpdate, set_condition
from grid.models.network import GatewayOverlayStatus, GridNetworkStatus
from grid.models.phases import GatewayRender, NetworkObservation, evaluate_network
from grid.models.spend import SpendSourceStatus


@dataclass(frozen=True, slots=True)
class NetworkView:
    """What the network's phase is read from, besides the configuration."""

    config_error: str | None
    grid_id: str | None
    unreachable_sites: tuple[str, ...]
    connected_sites: int
    spend_sources: Sequence[SpendSourceStatus] = ()
    unheard: Mapping[str, Sequence[UnheardSite]] = field(default_factory=dict)
    """Per tenant, the sites whose spend in its window this site may not hold
    (grid.engine.budgets.unheard_sites)."""
    escrow: Mapping[str, EscrowFigures] = field(default_factory=dict)
    """Escrowed budgets' figures at this site, by tenant (grid.engine.escrow)."""
    escrow_condition: ConditionUpdate | None = None
    """``EscrowHeld``, while some budget asks for escrow."""
    agreement: ConditionUpdate | None = None
    """``BudgetsAgreed``, while the network has budgets (grid.engine.budget_agreement)."""


def network_status(  # noqa: PLR0917 - the network, its state, and what the rooms report
    current: GridNetworkStatus,
    inputs: SiteInputs,
    state: GridState,
    view: NetworkView,
    overlays: Mapping[tuple[str, str], GatewayOverlay],
    events: EventLog,
    now: datetime,
) -> GridNetworkStatus:
    """The network's next status from ``current``; its events go to ``events``."""
    network = inputs.network
    renders = tuple(
        GatewayRender(o.gateway.name, o.gateway.namespace, not o.message, o.message)
        for o in overlays.values()
    )
    observation = NetworkObservation(
        config_error=view.config_error,
        membership_running=inputs.membership_running,
        grid_id=view.grid_id,
        unreachable_sites=view.unreachable_sites,
        gateway_renders=renders,
    )
    outcome = evaluate_network(network.model_copy(update={"status": current}), observation, now)
    events.record(NETWORK_KIND, network.metadata.name, outcome.events, now)
    budgets = budget_statuses(
        network.spec.budgets, state, now, unheard=view.unheard, escrow=view.escrow
    )
    events.record(NETWORK_KIND, network.metadata.name, budget_events(current.budgets, budgets), now)
    held = {c.type: c for c in current.conditions}.get(AGREEMENT_CONDITION)
    before = None if held is None else held.status is ConditionStatus.TRUE
    told = agreement_events(before, view.agreement)
    events.record(NETWORK_KIND, network.metadata.name, told, now)
    ours = (BUDGETS_CONDITION, ESCROW_CONDITION, AGREEMENT_CONDITION)
    conditions = [c for c in outcome.conditions if c.type not in ours]
    if network.spec.budgets:
        generation = network.metadata.generation
        conditions = set_condition(conditions, budget_condition(budgets, generation), now)
    for update in (view.escrow_condition, view.agreement):
        if update is not None:
            conditions = set_condition(conditions, update, now)
    # Counted, not united: the union of 10,000 names on every pass would cost more than the
    # rest of this evaluation.
    published = state.provider_names()
    provider_count = len(published) + sum(
        1 for p in inputs.observing if p.metadata.name not in published
    )
    return GridNetworkStatus(
        phase=outcome.phase,
        phase_transition_time=outcome.phase_transition_time,
        observed_generation=network.metadata.generation,
        conditions=conditions,
        grid_id=view.grid_id,
        connected_sites=view.connected_sites,
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
            for _, o in sorted(overlays.items())
        ],
        budgets=budgets,
        spend_sources=list(view.spend_sources),
        unheard_sites=mesh_unheard(view.unheard),
    )
