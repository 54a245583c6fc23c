"""RemoteCandidates: a peer's candidates kept between ranking passes, one route per model,
rebuilt only for the providers whose replicated entry changed, and whole when what this
site knows of the peer changed."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from grid.crdt import GridState, ModelEntry, ProviderMetrics
from grid.engine.candidates import RemoteCandidates, RemoteSite, SelectorCache, remote_candidates
from grid.models.site import EgressTlsMode
from grid.render.consumer import ClusterEndpoint
from grid.scoring.inputs import CandidateInput, Geography
from test_crdt_records import NOW, sample_record

WEST = RemoteSite(
    "site-a",
    Geography("us-west", "us-west-1a"),
    ClusterEndpoint(address="west.example:8443", tls_mode=EgressTlsMode.MUTUAL_TLS),
)
NAMES = ("llama", "qwen", "mistral")


def mesh() -> tuple[GridState, GridState]:
    origin, here = GridState("site-a"), GridState("site-b")
    for name in NAMES:
        origin.put_provider(sample_record(name), NOW)
    sync(origin, here)
    return origin, here


def sync(origin: GridState, here: GridState, now: float = NOW + 1) -> None:
    for item in origin.items_to_publish():
        here.apply_item("site-a", item.lane, item.key, item.version, item.payload, now)


def read(
    cache: RemoteCandidates, here: GridState, site: RemoteSite = WEST
) -> tuple[tuple[tuple[CandidateInput, ...], ...], list[CandidateInput]]:
    routes, refused = cache.of(site, here)
    assert refused == ()
    # The same candidates as building them all anew, each route one model's.
    candidates = [candidate for route in routes for candidate in route]
    fresh, _ = remote_candidates(site, here.providers(site.name), SelectorCache())
    assert sorted(candidates, key=lambda c: c.key) == sorted(fresh, key=lambda c: c.key)
    for route in routes:
        assert len({candidate.route for candidate in route}) == 1
    return routes, candidates


def test_a_pass_with_nothing_new_reuses_the_peers_routes() -> None:
    _, here = mesh()
    cache = RemoteCandidates()
    first, _ = read(cache, here)
    again, _ = read(cache, here)
    assert again is first


def test_only_the_changed_providers_candidates_and_routes_are_new() -> None:
    origin, here = mesh()
    cache = RemoteCandidates()
    routes_before, before = read(cache, here)
    busy = ProviderMetrics.from_measurements(healthy=True, queue_depth=40)
    origin.put_provider(sample_record("qwen", metrics=busy), NOW + 5)
    sync(origin, here, NOW + 6)
    routes_after, after = read(cache, here)
    by_key = {c.key: c for c in before}
    for candidate in after:
        same = candidate is by_key[candidate.key]
        assert same == (candidate.provider != "qwen")
    assert next(c for c in after if c.provider == "qwen").metrics.queue_depth == 40
    kept = {id(route) for route in routes_before}
    for route in routes_after:
        assert (id(route) in kept) == all(c.provider != "qwen" for c in route)


def test_what_this_site_knows_of_the_peer_rebuilds_all_of_it() -> None:
    _, here = mesh()
    cache = RemoteCandidates()
    _, before = read(cache, here)
    suspect = RemoteSite(WEST.name, WEST.geography, WEST.endpoint, suspect=True)
    _, after = read(cache, here, suspect)
    assert all(c.degraded for c in after) and not any(c.degraded for c in before)


def test_a_removed_or_forgotten_peer_offers_nothing() -> None:
    origin, here = mesh()
    cache = RemoteCandidates()
    read(cache, here)
    origin.remove_provider("llama", NOW + 5)
    sync(origin, here, NOW + 6)
    _, after = read(cache, here)
    assert {c.provider for c in after} == {"qwen", "mistral"}
    here.forget_site("site-a")
    assert cache.of(WEST, here) == ((), ())


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_pass_after_pass_the_routes_hold_what_building_anew_gives(seed: int) -> None:
    """Providers put with new loads, new models and removed; items delivered in any order;
    the peer forgotten and heard from again; the view of the peer changed."""
    rng = random.Random(seed)
    origin, here = GridState("site-a"), GridState("site-b")
    cache = RemoteCandidates()
    sent = []
    clock = NOW
    sites = [WEST, RemoteSite(WEST.name, WEST.geography, WEST.endpoint, suspect=True)]
    for _ in range(40):
        clock += 1
        action = rng.choice(("put", "put", "remove", "deliver", "deliver", "forget", "read"))
        name = rng.choice(NAMES)
        if action == "put":
            load = ProviderMetrics.from_measurements(healthy=True, queue_depth=rng.randint(0, 50))
            models = tuple(ModelEntry(m) for m in rng.sample(("m1", "m2", "m3"), rng.randint(1, 2)))
            origin.put_provider(sample_record(name, metrics=load, models=models), clock)
            sent += origin.items_to_publish()
        elif action == "remove":
            origin.remove_provider(name, clock)
            sent += origin.items_to_publish()
        elif action == "deliver" and sent:
            item = sent.pop(rng.randrange(len(sent)))
            here.apply_item("site-a", item.lane, item.key, item.version, item.payload, clock)
        elif action == "forget":
            here.forget_site("site-a")
        read(cache, here, rng.choice(sites))
