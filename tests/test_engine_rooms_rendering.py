"""The rendering room on its own: one overlay per gateway, ranked from this site's
providers and those of the trusted sites in reach; a refused render keeps the last good
overlay and says why; and which trusted sites are in reach at all."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from grid.crdt.records import SiteMetadata
from grid.crdt.state import GridState
from grid.engine.candidates import LocalView, RemoteSite
from grid.engine.inputs import SiteInputs
from grid.engine.members import Members
from grid.engine.records import provider_metrics, provider_record
from grid.engine.rendering import Renderer, consuming_site, remote_sites
from grid.models.network import GridNetwork
from grid.models.phases import MemberState
from grid.models.provider import InferenceProvider, InferenceProviderPhase
from grid.models.site import EgressTlsMode
from grid.render.consumer import ClusterEndpoint
from grid.scoring.inputs import Geography
from test_engine import LLAMA, SITES, T0, network, provider, site
from test_engine_rooms_publishing import deliver

EDGE = ("grid-system", "edge")
INNER = ("team", "inner")
HEALTHY = LocalView(True, False, None)
UNHEALTHY = LocalView(False, False, None)
ENDPOINTS = {
    "site-b": ClusterEndpoint("site-b.test:8443", EgressTlsMode.MUTUAL_TLS),
    "site-c": ClusterEndpoint("site-c.test:8443", EgressTlsMode.MUTUAL_TLS),
}
REMOTE_B = RemoteSite("site-b", Geography("us-east", "us-east-1b"), ENDPOINTS["site-b"])


def with_gateways(*gateways: tuple[str, str]) -> GridNetwork:
    refs = [{"namespace": namespace, "name": name} for namespace, name in gateways]
    return network(gatewayRefs=refs)


def site_a(net: GridNetwork, *providers: InferenceProvider) -> SiteInputs:
    inputs = SiteInputs(net, "site-a")
    inputs.set_resources(net, SITES, providers)
    return inputs


def render(
    renderer: Renderer,
    inputs: SiteInputs,
    views: Mapping[str, LocalView],
    *,
    state: GridState | None = None,
    remotes: Sequence[RemoteSite] = (),
    now: datetime = T0,
) -> None:
    renderer.render(
        inputs, state or GridState("site-a"), views, remotes, ENDPOINTS.get, "grid-1", now
    )


def routes(renderer: Renderer, key: tuple[str, str] = EDGE) -> list[tuple[str, str, str]]:
    overlay = renderer.overlays[key].overlay
    assert overlay is not None
    document: dict[str, Any] = dict(overlay.document)
    return [(c["name"], c["site"], c["cluster"]) for c in document["overlay"]["candidates"]]


def publishing_llama_b(at: datetime = T0) -> GridState:
    """site-a's state holding site-b's llama-b, written and received ``at``."""
    peer = GridState("site-b")
    record = provider_record(
        provider("llama-b", "site-b"),
        InferenceProviderPhase.AVAILABLE,
        provider_metrics(None, True),
    )
    peer.put_provider(record, at.timestamp())
    state = GridState("site-a")
    deliver(peer, state, at)
    return state


def test_every_gateway_gets_its_own_overlay_and_is_reported_changed_once() -> None:
    renderer = Renderer()
    inputs = site_a(with_gateways(EDGE, INNER), provider("llama-a", "site-a"))
    render(renderer, inputs, {"llama-a": HEALTHY})
    assert set(renderer.overlays) == {EDGE, INNER}
    for key in (EDGE, INNER):
        current = renderer.overlays[key]
        assert (current.key, current.rendered_at, current.message) == (key, T0, "")
        assert current.scope.gateway == key[1]
        assert routes(renderer, key) == [(LLAMA, "site-a", "llama-a")]
    assert {o.key for o in renderer.take_changed()} == {EDGE, INNER}
    assert renderer.take_changed() == ()


def test_an_unchanged_ranking_keeps_the_overlay_and_reports_nothing() -> None:
    renderer = Renderer()
    inputs = site_a(with_gateways(EDGE), provider("llama-a", "site-a"))
    render(renderer, inputs, {"llama-a": HEALTHY})
    first = renderer.overlays[EDGE]
    renderer.take_changed()
    render(renderer, inputs, {"llama-a": HEALTHY}, now=T0 + timedelta(seconds=5))
    assert renderer.take_changed() == ()
    assert renderer.overlays[EDGE].revision == first.revision
    assert renderer.overlays[EDGE].rendered_at == T0


def test_a_refused_render_keeps_the_last_good_overlay_and_says_why_once() -> None:
    renderer = Renderer()
    inputs = site_a(with_gateways(EDGE), provider("llama-a", "site-a"))
    render(renderer, inputs, {"llama-a": HEALTHY})
    good = renderer.overlays[EDGE]
    renderer.take_changed()
    render(renderer, inputs, {"llama-a": UNHEALTHY}, now=T0 + timedelta(seconds=1))
    refused = renderer.overlays[EDGE]
    assert (refused.overlay, refused.rendered_at) == (good.overlay, T0)
    assert "no candidate" in refused.message
    assert renderer.take_changed() == (refused,)
    render(renderer, inputs, {"llama-a": UNHEALTHY}, now=T0 + timedelta(seconds=2))
    assert renderer.take_changed() == ()


def test_a_render_that_works_again_clears_the_message_and_is_reported() -> None:
    renderer = Renderer()
    inputs = site_a(with_gateways(EDGE), provider("llama-a", "site-a"))
    render(renderer, inputs, {"llama-a": HEALTHY})
    render(renderer, inputs, {"llama-a": UNHEALTHY}, now=T0 + timedelta(seconds=1))
    renderer.take_changed()
    render(renderer, inputs, {"llama-a": HEALTHY}, now=T0 + timedelta(seconds=2))
    (changed,) = renderer.take_changed()
    assert changed.message == ""
    assert changed.rendered_at == T0  # the same document as before the refusal


def test_a_gateway_removed_from_the_network_loses_its_overlay() -> None:
    renderer = Renderer()
    llama = provider("llama-a", "site-a")
    render(renderer, site_a(with_gateways(EDGE, INNER), llama), {"llama-a": HEALTHY})
    renderer.take_changed()
    render(renderer, site_a(with_gateways(INNER), llama), {"llama-a": HEALTHY})
    assert set(renderer.overlays) == {INNER}
    assert renderer.take_changed() == ()


def test_a_trusted_sites_providers_are_offered_through_its_cluster() -> None:
    renderer = Renderer()
    inputs = site_a(with_gateways(EDGE), provider("llama-a", "site-a"))
    state = publishing_llama_b(T0)
    render(renderer, inputs, {"llama-a": HEALTHY}, state=state, remotes=[REMOTE_B])
    assert routes(renderer) == [(LLAMA, "site-a", "llama-a"), (LLAMA, "site-b", "site-site-b")]
    ttl = inputs.network.spec.stale_candidate_ttl_seconds
    assert renderer.stale_at == T0.timestamp() + ttl
    assert renderer.ranking is not None
    render(renderer, inputs, {"llama-a": HEALTHY}, state=state)
    assert routes(renderer) == [(LLAMA, "site-a", "llama-a")]
    assert renderer.stale_at is None


def test_a_remote_site_whose_cluster_a_local_provider_is_named_after_is_not_offered() -> None:
    renderer = Renderer()
    clash = provider("site-site-b", "site-a", models=["qwen"])
    inputs = site_a(with_gateways(EDGE), clash)
    render(renderer, inputs, {}, state=publishing_llama_b(), remotes=[REMOTE_B])
    assert routes(renderer) == [("qwen", "site-a", "site-site-b")]
    assert renderer.not_offered == (("site-site-b", "a local cluster has the same name"),)


def test_the_overlay_of_the_last_gateway_removed_goes_with_it() -> None:
    renderer = Renderer()
    llama = provider("llama-a", "site-a")
    render(renderer, site_a(with_gateways(EDGE), llama), {"llama-a": HEALTHY})
    assert list(renderer.overlays) == [EDGE]
    render(renderer, site_a(network(gatewayRefs=[]), llama), {"llama-a": HEALTHY})
    assert renderer.overlays == {}
    assert renderer.ranking is None


def test_without_gateways_nothing_is_ranked() -> None:
    renderer = Renderer()
    inputs = site_a(network(gatewayRefs=[]), provider("llama-a", "site-a"))
    render(renderer, inputs, {"llama-a": HEALTHY})
    assert renderer.ranking is None
    assert renderer.overlays == {}


# --- the trusted sites in reach --------------------------------------------------------


def members_of_a(states: Mapping[str, MemberState]) -> Members:
    """site-a's members: each of ``states`` joined at T0, then put in its state."""
    members = Members("site-a")
    for name, state in states.items():
        members.up(name, f"{name}:7946", 1, T0)
        if state is MemberState.SUSPECT:
            members.suspect(name, f"{name}:7946", 1, T0)
        elif state is not MemberState.ALIVE:
            members.gone(name, f"{name}:7946", 1, state, T0)
    return members


def test_trusted_sites_in_reach_are_the_alive_and_suspect_ones_in_name_order() -> None:
    inputs = site_a(network())
    members = members_of_a({"site-c": MemberState.SUSPECT, "site-b": MemberState.ALIVE})
    trusted = frozenset({"site-c", "site-b"})
    remotes = remote_sites(inputs, GridState("site-a"), members, trusted, ENDPOINTS.get)
    assert remotes == [
        RemoteSite("site-b", Geography("us-east", "us-east-1b"), ENDPOINTS["site-b"]),
        RemoteSite("site-c", Geography("us-west", "us-west-2a"), ENDPOINTS["site-c"], suspect=True),
    ]


def test_down_left_unknown_or_untrusted_sites_and_those_without_egress_are_out_of_reach() -> None:
    inputs = site_a(network())
    state = GridState("site-a")
    down = members_of_a({"site-b": MemberState.DOWN, "site-c": MemberState.LEFT})
    assert remote_sites(inputs, state, down, frozenset({"site-b", "site-c"}), ENDPOINTS.get) == []
    nobody = Members("site-a")
    assert remote_sites(inputs, state, nobody, frozenset({"site-b"}), ENDPOINTS.get) == []
    alive = members_of_a({"site-b": MemberState.ALIVE, "site-c": MemberState.ALIVE})
    assert remote_sites(inputs, state, alive, frozenset({"site-b"}), lambda _: None) == []
    (only,) = remote_sites(inputs, state, alive, frozenset({"site-c"}), ENDPOINTS.get)
    assert only.name == "site-c"


def test_where_a_site_is_comes_from_its_gridsite_else_from_what_it_publishes() -> None:
    unplaced = site("site-b").model_copy(deep=True)
    unplaced.spec.region = None
    unplaced.spec.zone = None
    inputs = SiteInputs(network(), "site-a")
    inputs.set_resources(network(), [site("site-a"), unplaced, site("site-c")], [])
    peer = GridState("site-b")
    peer.set_metadata(SiteMetadata(region="eu-west", zone="eu-west-1a"), T0.timestamp())
    state = GridState("site-a")
    deliver(peer, state, T0)
    members = members_of_a({"site-b": MemberState.ALIVE})
    (remote,) = remote_sites(inputs, state, members, frozenset({"site-b"}), ENDPOINTS.get)
    assert remote.geography == Geography("eu-west", "eu-west-1a")
    (bare,) = remote_sites(
        inputs, GridState("site-a"), members, frozenset({"site-b"}), ENDPOINTS.get
    )
    assert bare.geography == Geography(None, None)


def test_the_consuming_site_is_where_this_sites_gridsite_puts_it() -> None:
    placed = consuming_site(site_a(network()))
    assert (placed.name, placed.geography) == ("site-a", Geography("us-east", "us-east-1a"))
    assert placed.labels == {"grid.praxis-proxy.io/site": "site-a"}
    bare = SiteInputs(network(), "site-a")
    assert consuming_site(bare).name == "site-a"
    assert consuming_site(bare).geography == Geography()
