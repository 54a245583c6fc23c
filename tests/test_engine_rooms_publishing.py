"""The publishing room on its own: this site's records written into the replicated state
(built again only when what they are made from changes, refused ones reported on the
provider), which peers' records to forget, and the grid id the site adopts."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

import grid.engine.publishing as publishing_module
from grid.crdt.records import ProviderMetrics, ProviderRecord, SiteMetadata
from grid.crdt.state import GridState
from grid.engine.events import EventLog
from grid.engine.inputs import SiteInputs
from grid.engine.members import MemberInfo
from grid.engine.providers import ProviderPhases
from grid.engine.publishing import Publisher, adopted_grid_id, sites_to_forget
from grid.engine.records import provider_record
from grid.models.conditions import ConditionStatus, find_condition
from grid.models.phases import MemberState
from grid.models.provider import InferenceProvider, InferenceProviderPhase
from grid.observe.tracker import HealthObservation
from test_engine import LLAMA, T0, network, provider, scrape, site

TTL = 60.0
OVERSIZED_MODELS = [f"org/model-{index:03d}-{'x' * 40}" for index in range(40)]
"""Enough model names that the provider's record exceeds the 1024-byte item limit."""


def deliver(peer: GridState, state: GridState, now: datetime) -> None:
    """Every current item of ``peer`` received by ``state`` at ``now`` (what gossip does)."""
    for item in peer.all_items():
        state.apply_item(
            peer.site, item.lane, item.key, item.version, item.payload, now.timestamp()
        )


class Site:
    """site-a's inputs, phases and publisher, writing into its replicated state."""

    def __init__(self, *providers: InferenceProvider) -> None:
        self.inputs = SiteInputs(network(), "site-a")
        self.inputs.set_resources(network(), [site("site-a")], providers)
        self.state = GridState("site-a")
        self.phases = ProviderPhases("site-a")
        self.publisher = Publisher()
        self.events = EventLog()

    def write(self, seconds: float = 0) -> bool:
        """One pass at ``T0 + seconds``, under grid id ``grid-1``."""
        moment = T0 + timedelta(seconds=seconds)
        return self.publisher.write(
            self.state, self.inputs, self.phases, "grid-1", self.events, moment
        )

    def published(self) -> dict[str, str]:
        """This site's live providers in the replicated state, with their phase."""
        return {e.record.name: e.record.phase for e in self.state.providers("site-a")}


class Builds:
    """Counts the provider records the publisher builds."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.names: list[str] = []

        def counted(
            resource: InferenceProvider, phase: InferenceProviderPhase, metrics: ProviderMetrics
        ) -> ProviderRecord:
            self.names.append(resource.metadata.name)
            return provider_record(resource, phase, metrics)

        monkeypatch.setattr(publishing_module, "provider_record", counted)


def test_records_are_written_for_placed_providers_only() -> None:
    a = Site(provider("llama-a", "site-a"), provider("openai", None))
    assert a.write() is True  # the first verdicts
    assert a.published() == {"llama-a": "Available"}
    entry = a.state.provider("site-a", "llama-a")
    assert entry is not None and [m.name for m in entry.record.models] == [LLAMA]
    metadata = a.state.metadata("site-a")
    assert metadata is not None
    assert (metadata.grid_id, metadata.region) == ("grid-1", "us-east")
    gateway = a.state.gateway("site-a")
    assert gateway is not None and gateway.address == "site-a.test:8443"


def test_write_reports_a_change_only_when_a_verdict_changes() -> None:
    a = Site(provider("llama-a", "site-a", health=True))
    a.inputs.observe_health("llama-a", HealthObservation(True, 200, 0.1), T0)
    assert a.write() is True
    assert a.write(1) is False
    failed = T0 + timedelta(seconds=2)
    a.inputs.observe_health("llama-a", HealthObservation(False, 500, 0.1, "down"), failed)
    assert a.write(2) is True
    assert a.phases.views["llama-a"].degraded


def test_a_record_is_built_again_only_when_its_inputs_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    builds = Builds(monkeypatch)
    a = Site(provider("llama-a", "site-a", metrics=True), provider("qwen-a", "site-a"))
    a.write()
    assert sorted(builds.names) == ["llama-a", "qwen-a"]
    a.write(1)
    a.write(2)
    assert len(builds.names) == 2
    a.inputs.observe_scrape("llama-a", scrape(queue=3, kv=0.2), T0 + timedelta(seconds=3))
    a.write(3)
    assert sorted(builds.names) == ["llama-a", "llama-a", "qwen-a"]
    entry = a.state.provider("site-a", "llama-a")
    assert entry is not None and entry.record.metrics.queue_depth == 3


def test_an_oversized_record_is_refused_and_reported_on_the_next_pass() -> None:
    a = Site(provider("big-a", "site-a", models=OVERSIZED_MODELS), provider("llama-a", "site-a"))
    a.write()
    assert a.published() == {"llama-a": "Available"}
    status = a.phases.status("big-a", a.inputs, a.state)
    published = find_condition(status.conditions, "Published")
    assert published is not None and published.status is ConditionStatus.TRUE
    a.write(1)
    published = find_condition(a.phases.status("big-a", a.inputs, a.state).conditions, "Published")
    assert published is not None
    assert (published.status, published.reason) == (ConditionStatus.FALSE, "RecordRefused")
    assert "1024-byte limit" in published.message
    assert a.published() == {"llama-a": "Available"}


def test_a_refused_record_is_reported_published_again_once_it_fits() -> None:
    big = provider("big-a", "site-a", models=OVERSIZED_MODELS)
    a = Site(big)
    a.write()
    a.write(1)
    a.inputs.set_resources(network(), [site("site-a")], [provider("big-a", "site-a")])
    a.write(2)
    assert a.published() == {"big-a": "Available"}
    a.write(3)
    published = find_condition(a.phases.status("big-a", a.inputs, a.state).conditions, "Published")
    assert published is not None and published.reason == "RecordPublished"


def test_a_provider_no_longer_observed_is_removed_from_the_state() -> None:
    llama, qwen = provider("llama-a", "site-a"), provider("qwen-a", "site-a")
    a = Site(llama, qwen)
    a.write()
    assert set(a.published()) == {"llama-a", "qwen-a"}
    gone = a.inputs.set_resources(network(), [site("site-a")], [llama])
    a.phases.drop(gone)
    a.publisher.drop(gone)
    a.write(1)
    assert a.published() == {"llama-a": "Available"}
    assert a.state.own_provider_names() == ("llama-a",)


def test_this_sites_records_that_cannot_be_published_are_reported_until_fixed() -> None:
    a = Site()
    a.inputs.cert_pem = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
    a.write()
    assert a.publisher.records_error is not None
    assert a.publisher.records_error.startswith("this site's records cannot be published: ")
    assert "PRIVATE KEY-----\nAAAA" not in a.publisher.records_error
    a.inputs.cert_pem = None
    a.write(1)
    assert a.publisher.records_error is None


# --- forgetting peers ------------------------------------------------------------------


def heard_from(*peers: str, at: datetime = T0) -> GridState:
    """site-a's state, holding one item from each of ``peers`` received ``at``."""
    state = GridState("site-a")
    for name in peers:
        peer = GridState(name)
        peer.set_metadata(SiteMetadata(grid_id=f"grid-{name}"), at.timestamp())
        deliver(peer, state, at)
    return state


def member(name: str, state: MemberState, since: datetime = T0) -> MemberInfo:
    return MemberInfo(name, f"{name}:7946", 1, state, since)


def test_a_peer_that_left_is_forgotten_at_once() -> None:
    state = heard_from("site-b")
    members = {"site-b": member("site-b", MemberState.LEFT)}
    assert sites_to_forget(state, members, TTL, T0) == ["site-b"]


def test_live_peers_are_kept_however_long_unheard() -> None:
    state = heard_from("site-b", "site-c")
    members = {
        "site-b": member("site-b", MemberState.ALIVE),
        "site-c": member("site-c", MemberState.SUSPECT),
    }
    assert sites_to_forget(state, members, TTL, T0 + timedelta(days=1)) == []


def test_a_down_peer_is_forgotten_a_ttl_after_it_was_declared_down_or_last_heard() -> None:
    state = heard_from("site-b")
    down_at = T0 + timedelta(seconds=100)
    members = {"site-b": member("site-b", MemberState.DOWN, since=down_at)}
    assert sites_to_forget(state, members, TTL, down_at + timedelta(seconds=TTL)) == []
    assert sites_to_forget(state, members, TTL, down_at + timedelta(seconds=TTL + 1)) == ["site-b"]
    # An item relayed after the down counts from its arrival instead.
    heard_at = T0 + timedelta(seconds=100)
    late = heard_from("site-b", at=heard_at)
    declared = {"site-b": member("site-b", MemberState.DOWN, since=T0)}
    assert sites_to_forget(late, declared, TTL, heard_at + timedelta(seconds=TTL)) == []
    assert sites_to_forget(late, declared, TTL, heard_at + timedelta(seconds=TTL + 1)) == ["site-b"]


def test_a_peer_no_member_reports_is_forgotten_a_ttl_after_its_last_item() -> None:
    state = heard_from("site-b", "site-c", at=T0)
    later = GridState("site-c")
    later.set_metadata(SiteMetadata(grid_id="grid-site-c", region="later"), T0.timestamp() + 30)
    deliver(later, state, T0 + timedelta(seconds=30))
    moment = T0 + timedelta(seconds=TTL + 1)
    assert sites_to_forget(state, {}, TTL, moment) == ["site-b"]
    assert sites_to_forget(state, {}, TTL, moment + timedelta(seconds=30)) == ["site-b", "site-c"]


def test_this_site_is_never_forgotten() -> None:
    state = GridState("site-a")
    assert sites_to_forget(state, {}, TTL, T0 + timedelta(days=1)) == []


# --- the grid id -----------------------------------------------------------------------


def test_the_smallest_grid_id_of_alive_peers_wins() -> None:
    state = heard_from("site-b", "site-c")  # grid-site-b, grid-site-c
    alive = {name: member(name, MemberState.ALIVE) for name in ("site-b", "site-c")}
    assert adopted_grid_id("grid-z", alive, state) == "grid-site-b"
    assert adopted_grid_id("grid-a", alive, state) == "grid-a"
    assert adopted_grid_id(None, alive, state) == "grid-site-b"


def test_peers_not_alive_or_without_a_grid_id_are_ignored() -> None:
    state = heard_from("site-b", "site-c")
    quiet = GridState("site-d")
    quiet.set_metadata(SiteMetadata(), T0.timestamp())
    deliver(quiet, state, T0)
    members = {
        "site-b": member("site-b", MemberState.DOWN),
        "site-c": member("site-c", MemberState.SUSPECT),
        "site-d": member("site-d", MemberState.ALIVE),
        "site-e": member("site-e", MemberState.ALIVE),  # alive, nothing received yet
    }
    assert adopted_grid_id("grid-z", members, state) == "grid-z"
    assert adopted_grid_id(None, members, state) is None
