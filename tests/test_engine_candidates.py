"""RemoteCandidates: a peer's candidates kept between ranking passes, rebuilt only for the
providers whose replicated entry changed, and whole when what this site knows of the peer
changed."""

from __future__ import annotations

from grid.crdt import GridState, ProviderMetrics
from grid.crdt.state import ProviderEntry
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
) -> tuple[list[CandidateInput], int]:
    calls: list[int] = []

    def entries() -> tuple[ProviderEntry, ...]:
        calls.append(1)
        return here.providers(site.name)

    candidates, refused = cache.of(site, here.providers_stamp(site.name), entries)
    assert refused == []
    # The same as building them all anew.
    fresh, _ = remote_candidates(site, here.providers(site.name), SelectorCache())
    assert candidates == fresh
    return candidates, len(calls)


def test_a_pass_with_nothing_new_reuses_the_peers_list_without_reading_its_providers() -> None:
    _, here = mesh()
    cache = RemoteCandidates()
    first, reads = read(cache, here)
    again, reads_again = read(cache, here)
    assert (reads, reads_again) == (1, 0)
    assert again is first


def test_only_the_changed_providers_candidates_are_built_again() -> None:
    origin, here = mesh()
    cache = RemoteCandidates()
    before, _ = read(cache, here)
    busy = ProviderMetrics.from_measurements(healthy=True, queue_depth=40)
    origin.put_provider(sample_record("qwen", metrics=busy), NOW + 5)
    sync(origin, here, NOW + 6)
    after, reads = read(cache, here)
    assert reads == 1
    by_key = {c.key: c for c in before}
    for candidate in after:
        same = candidate is by_key[candidate.key]
        assert same == (candidate.provider != "qwen")
    assert next(c for c in after if c.provider == "qwen").metrics.queue_depth == 40


def test_what_this_site_knows_of_the_peer_rebuilds_all_of_it() -> None:
    _, here = mesh()
    cache = RemoteCandidates()
    before, _ = read(cache, here)
    suspect = RemoteSite(WEST.name, WEST.geography, WEST.endpoint, suspect=True)
    after, reads = read(cache, here, suspect)
    assert reads == 1
    assert all(c.degraded for c in after) and not any(c.degraded for c in before)


def test_a_removed_or_forgotten_peer_offers_nothing() -> None:
    origin, here = mesh()
    cache = RemoteCandidates()
    read(cache, here)
    origin.remove_provider("llama", NOW + 5)
    sync(origin, here, NOW + 6)
    after, _ = read(cache, here)
    assert {c.provider for c in after} == {"qwen", "mistral"}
    here.forget_site("site-a")
    assert cache.of(WEST, here.providers_stamp("site-a"), lambda: ()) == ([], [])
