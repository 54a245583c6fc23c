"""The network-status and events rooms on their own: the GridNetwork's next status as one
site sees it (its phase, its counts, each gateway's overlay), the events of a pass taken
once in the order recorded, and the condition and message helpers every room uses."""

from __future__ import annotations

from datetime import datetime, timedelta

from grid.crdt.state import GridState
from grid.engine.candidates import LocalView
from grid.engine.events import MAX_MESSAGE, EventLog, ResourceEvent, clip, with_condition
from grid.engine.inputs import SiteInputs
from grid.engine.network_status import NetworkView, network_status
from grid.engine.records import provider_metrics, provider_record
from grid.engine.rendering import GatewayOverlay, Renderer
from grid.models.conditions import ConditionStatus, find_condition
from grid.models.network import GridNetworkPhase, GridNetworkStatus
from grid.models.phases import Event, EventType
from grid.models.provider import InferenceProvider, InferenceProviderPhase
from test_engine import SITES, T0, network, provider
from test_engine_rooms_publishing import deliver

GATEWAYS = [
    {"namespace": "team", "name": "inner"},
    {"namespace": "grid-system", "name": "edge"},
]
VIEW = NetworkView(config_error=None, grid_id="grid-1", unreachable_sites=(), connected_sites=0)


def site_a(*providers: InferenceProvider) -> SiteInputs:
    net = network(gatewayRefs=GATEWAYS)
    inputs = SiteInputs(net, "site-a")
    inputs.set_resources(net, SITES, providers)
    inputs.membership_running = True
    return inputs


def overlays(inputs: SiteInputs, view: LocalView) -> dict[tuple[str, str], GatewayOverlay]:
    """Each gateway's overlay after rendering site-a's llama-a healthy, then with ``view``
    (a refusal that keeps the first document when ``view`` is unhealthy)."""
    renderer = Renderer()
    healthy = LocalView(True, False, None)
    renderer.render(inputs, GridState("site-a"), {"llama-a": healthy}, (), lambda _: None, None, T0)
    renderer.render(inputs, GridState("site-a"), {"llama-a": view}, (), lambda _: None, None, T0)
    return dict(renderer.overlays)


def status_after(
    inputs: SiteInputs,
    view: NetworkView = VIEW,
    gateways: dict[tuple[str, str], GatewayOverlay] | None = None,
    *,
    current: GridNetworkStatus | None = None,
    events: EventLog | None = None,
    now: datetime = T0,
) -> GridNetworkStatus:
    return network_status(
        current or GridNetworkStatus(),
        inputs,
        GridState("site-a"),
        view,
        gateways or {},
        events or EventLog(),
        now,
    )


def test_a_running_network_turns_active_and_says_so_once() -> None:
    inputs, events = site_a(), EventLog()
    status = status_after(inputs, events=events)
    assert status.phase is GridNetworkPhase.ACTIVE
    taken = events.take()
    assert {(e.kind, e.name) for e in taken} == {("GridNetwork", "mesh")}
    assert "MeshJoined" in [e.event.reason for e in taken]
    again = status_after(inputs, current=status, events=events, now=T0 + timedelta(seconds=1))
    assert again.phase is GridNetworkPhase.ACTIVE
    assert again.phase_transition_time == status.phase_transition_time
    assert events.take() == ()


def test_without_membership_the_network_is_initializing() -> None:
    inputs = site_a()
    inputs.membership_running = False
    status = status_after(inputs)
    assert status.phase is GridNetworkPhase.INITIALIZING
    ready = find_condition(status.conditions, "MembershipReady")
    assert ready is not None and ready.status is ConditionStatus.FALSE


def test_a_config_error_or_an_unreachable_site_degrades_an_active_network() -> None:
    inputs = site_a()
    active = status_after(inputs)
    broken = NetworkView("spec.swim: bad", "grid-1", (), 0)
    degraded = status_after(inputs, broken, current=active)
    assert degraded.phase is GridNetworkPhase.DEGRADED
    config = find_condition(degraded.conditions, "ConfigValid")
    assert config is not None
    assert (config.status, config.message) == (ConditionStatus.FALSE, "spec.swim: bad")
    cut_off = NetworkView(None, "grid-1", ("site-c", "site-b"), 0)
    unreachable = status_after(inputs, cut_off, current=active)
    assert unreachable.phase is GridNetworkPhase.DEGRADED
    reachable = find_condition(unreachable.conditions, "SitesReachable")
    assert reachable is not None and reachable.message == "unreachable: site-b, site-c"


def test_each_gateway_is_shown_in_order_with_its_revision_and_candidates() -> None:
    inputs = site_a(provider("llama-a", "site-a"))
    gateways = overlays(inputs, LocalView(True, False, None))
    status = status_after(inputs, gateways=gateways)
    assert [(g.namespace, g.name) for g in status.gateways] == [
        ("grid-system", "edge"),
        ("team", "inner"),
    ]
    for shown in status.gateways:
        current = gateways[(shown.namespace, shown.name)]
        assert (shown.revision, shown.candidates, shown.rendered_at, shown.message) == (
            current.revision,
            1,
            T0,
            "",
        )
    assert status.phase is GridNetworkPhase.ACTIVE


def test_a_refused_render_degrades_the_network_and_names_the_gateways() -> None:
    inputs = site_a(provider("llama-a", "site-a"))
    active = status_after(inputs)
    gateways = overlays(inputs, LocalView(False, False, None))
    status = status_after(inputs, gateways=gateways, current=active)
    assert status.phase is GridNetworkPhase.DEGRADED
    written = find_condition(status.conditions, "OverlaysWritten")
    assert written is not None
    assert (written.status, written.message) == (
        ConditionStatus.FALSE,
        "not written for: grid-system/edge, team/inner",
    )
    assert all("no candidate" in g.message and g.candidates == 1 for g in status.gateways)


def test_providers_are_counted_once_whether_published_observed_or_both() -> None:
    inputs = site_a(provider("llama-a", "site-a"), provider("openai", None))
    state = GridState("site-a")
    metrics = provider_metrics(None, True)
    available = InferenceProviderPhase.AVAILABLE
    state.put_provider(provider_record(provider("llama-a", "site-a"), available, metrics), 1.0)
    peer = GridState("site-b")
    peer.put_provider(provider_record(provider("llama-b", "site-b"), available, metrics), 1.0)
    deliver(peer, state, T0)
    view = NetworkView(None, "grid-9", (), connected_sites=2)
    status = network_status(GridNetworkStatus(), inputs, state, view, {}, EventLog(), T0)
    assert (status.provider_count, status.connected_sites, status.grid_id) == (3, 2, "grid-9")


# --- events, conditions, messages --------------------------------------------------------


def test_events_are_taken_once_in_the_order_recorded() -> None:
    log = EventLog()
    first, second, third = (Event(EventType.NORMAL, f"Reason{n}", f"message {n}") for n in range(3))
    log.record("GridSite", "site-b", [first, second], T0)
    log.record("GridSite", "site-c", [], T0)
    log.record("InferenceProvider", "llama-a", [third], T0 + timedelta(seconds=1))
    assert log.take() == (
        ResourceEvent("GridSite", "site-b", first, T0),
        ResourceEvent("GridSite", "site-b", second, T0),
        ResourceEvent("InferenceProvider", "llama-a", third, T0 + timedelta(seconds=1)),
    )
    assert log.take() == ()


def test_clip_cuts_only_messages_too_long_and_marks_the_cut() -> None:
    exact = "m" * MAX_MESSAGE
    assert clip(exact) == exact
    clipped = clip(exact + "!")
    assert len(clipped) == MAX_MESSAGE
    assert clipped == "m" * (MAX_MESSAGE - 1) + "…"


def test_with_condition_keeps_the_transition_time_while_the_status_stays() -> None:
    later, latest = T0 + timedelta(seconds=5), T0 + timedelta(seconds=9)
    first = with_condition([], "Probed", True, "ProbeOk", "fine", 3, T0)
    same = with_condition(first, "Probed", True, "ProbeStillOk", "x" * (MAX_MESSAGE + 1), 4, later)
    (condition,) = same
    assert condition.last_transition_time == T0
    assert (condition.reason, len(condition.message), condition.observed_generation) == (
        "ProbeStillOk",
        MAX_MESSAGE,
        4,
    )
    (unknown,) = with_condition(same, "Probed", None, "NotProbed", "", 4, latest)
    assert (unknown.status, unknown.last_transition_time) == (ConditionStatus.UNKNOWN, latest)
