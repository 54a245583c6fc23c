"""The site engine with plain inputs and an explicit ``now``: no sockets, no clock.

Two or three engines exchange items by hand (what SWIM would carry), membership changes
and probe results are handed in as values, and each test checks the overlays, phases and
items that come out.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grid.crdt.snapshot import CERT_LANE, STATE_LANE
from grid.engine import ItemOutcome, SiteEngine
from grid.errors import CertificateRejected, ConfigError
from grid.models import GridNetwork, GridSite, InferenceProvider, load_resource
from grid.models.network import GridNetworkPhase
from grid.models.phases import CredentialState
from grid.models.provider import InferenceProviderPhase
from grid.models.site import GridSitePhase
from grid.observe.scrape import ScrapeResult
from grid.observe.tracker import HealthObservation
from grid.render.validate import ExpectedScope, validate_overlay
from grid.trust import self_signed_certificate
from grid.trust.site import ProbeResult
from support.pages import paged

T0 = datetime(2026, 7, 1, 12, 0, 0, tzinfo=UTC)
NETWORK = "mesh"
GATEWAY = ("grid-system", "edge-gateway")
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
FINGERPRINTS = {"site-a": "aa" * 32, "site-b": "bb" * 32, "site-c": "cc" * 32}
REGIONS = {
    "site-a": ("us-east", "us-east-1a"),
    "site-b": ("us-east", "us-east-1b"),
    "site-c": ("us-west", "us-west-2a"),
}


def network(**spec: Any) -> GridNetwork:
    document = {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "GridNetwork",
        "metadata": {"name": spec.pop("name", NETWORK)},
        "spec": {
            "gatewayRefs": [{"name": GATEWAY[1], "namespace": GATEWAY[0]}],
            "staleCandidateTtlSeconds": 60,
            # Each step here is one refresh at one instant: render every change (coalescing
            # has tests of its own in test_engine_render_interval.py).
            "renderInterval": "0s",
            **spec,
        },
    }
    resource = load_resource(document)
    assert isinstance(resource, GridNetwork)
    return resource


def site(
    name: str, *, network_name: str = NETWORK, tls_mode: str = "mutual_tls", pin: str | None = None
) -> GridSite:
    region, zone = REGIONS[name]
    trust = {"certFingerprint": pin or FINGERPRINTS[name]}
    resource = load_resource(
        {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "GridSite",
            "metadata": {"name": name, "labels": {"grid.praxis-proxy.io/site": name}},
            "spec": {
                "gridNetworkRef": network_name,
                "egress": {"address": f"{name}.test:8443", "tlsMode": tls_mode},
                "region": region,
                "zone": zone,
                "trust": trust,
            },
        }
    )
    assert isinstance(resource, GridSite)
    return resource


def provider(
    name: str,
    at: str | None,
    *,
    network_name: str = NETWORK,
    models: Iterable[str] = (LLAMA,),
    health: bool = False,
    metrics: bool = False,
    token: bool = False,
    backend: str = "local",
    policy: dict[str, Any] | None = None,
) -> InferenceProvider:
    spec: dict[str, Any] = {
        "gridNetworkRef": network_name,
        "backendKind": backend,
        "providerKind": "self_hosted",
        "models": [{"name": model} for model in models],
        "endpoint": f"http://{name}.test:8000",
        "cost": {"inputPerMillion": "0.10", "outputPerMillion": "0.20"},
    }
    if at is not None:
        spec["siteSelector"] = {"matchLabels": {"grid.praxis-proxy.io/site": at}}
    if health:
        spec["healthCheck"] = {
            "path": "/health",
            "interval": "1s",
            "timeout": "500ms",
            "healthyThreshold": 1,
            "unhealthyThreshold": 2,
        }
    if metrics:
        spec["metricsConfig"] = {
            "port": 9100,
            "interval": "1s",
            "timeout": "500ms",
            "signals": {"queueDepth": {"metric": "queue"}, "kvCacheUtilization": {"metric": "kv"}},
        }
    if token:
        spec["auth"] = {
            "strategy": "BearerToken",
            "secretRef": {"name": f"{name}-token", "namespace": "grid", "key": "token"},
        }
    if policy is not None:
        spec["accessPolicy"] = {"siteSelector": policy}
    resource = load_resource(
        {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "InferenceProvider",
            "metadata": {"name": name},
            "spec": spec,
        }
    )
    assert isinstance(resource, InferenceProvider)
    return resource


SITES = [site("site-a"), site("site-b"), site("site-c")]


def engine(name: str, providers: Iterable[InferenceProvider], **kwargs: Any) -> SiteEngine:
    kwargs.setdefault("grid_id", "grid-1")
    e = SiteEngine(
        kwargs.pop("net", network()),
        name,
        sites=kwargs.pop("sites", SITES),
        providers=providers,
        **kwargs,
    )
    e.set_membership_running(True)
    return e


def trusted_probe(name: str) -> ProbeResult:
    return ProbeResult(reachable=True, fingerprint=FINGERPRINTS[name], error=None, latency_s=0.001)


def connect(engines: list[SiteEngine], now: datetime) -> None:
    """Every engine sees every other alive and trusted."""
    for viewer in engines:
        for peer in engines:
            if peer is not viewer:
                viewer.member_up(peer.site, f"{peer.site}:7946", 1, now)
                viewer.observe_probe(peer.site, trusted_probe(peer.site), now)


def exchange(engines: list[SiteEngine], now: datetime) -> None:
    """Refresh each engine and hand its new items to the others (what gossip does)."""
    for _ in range(2):
        outputs = {e.site: e.refresh(now).items for e in engines}
        for origin, items in outputs.items():
            for receiver in engines:
                if receiver.site != origin:
                    for item in items:
                        receiver.receive_item(
                            origin, item.lane, item.key, item.version, item.payload, now
                        )
    for e in engines:
        e.refresh(now)


def overlay_of(e: SiteEngine) -> dict[str, Any]:
    current = e.overlays[GATEWAY]
    assert current.overlay is not None, current.message
    return dict(current.overlay.document)


def routes(e: SiteEngine) -> list[tuple[str, str, str]]:
    return [(c["name"], c["site"], c["cluster"]) for c in overlay_of(e)["overlay"]["candidates"]]


def scrape(**values: float) -> ScrapeResult:
    text = "".join(f"# TYPE {k} gauge\n{k} {v}\n" for k, v in values.items())
    return ScrapeResult(200, 0.001, text=text)


# --- pins ------------------------------------------------------------------------------


def test_the_pins_of_every_gridsite_that_has_them_are_given_to_swim() -> None:
    rotating = site("site-b").model_copy(deep=True)
    rotating.spec.trust.previous_cert_fingerprint = "dd" * 32
    unpinned = site("site-c").model_copy(deep=True)
    unpinned.spec.trust.cert_fingerprint = None
    e = engine("site-a", [], sites=[site("site-a"), rotating, unpinned])
    assert e.site_pins() == {"site-a": ("aa" * 32,), "site-b": ("bb" * 32, "dd" * 32)}
    e.set_resources(network(), [site("site-a")], [])
    assert e.site_pins() == {"site-a": ("aa" * 32,)}


# --- local rendering -------------------------------------------------------------------


def test_own_providers_render_at_once_and_the_document_is_accepted() -> None:
    a = engine("site-a", [provider("llama-a", "site-a")])
    result = a.refresh(T0)
    assert [o.key for o in result.changed] == [GATEWAY]
    assert routes(a) == [(LLAMA, "site-a", "llama-a")]
    text = a.overlays[GATEWAY].overlay.text  # type: ignore[union-attr]
    verdict = validate_overlay(text, ExpectedScope(network=NETWORK, local_site="site-a"))
    assert verdict.accepted, verdict.detail
    assert [i.key for i in result.items if i.lane == STATE_LANE] == [
        "provider/llama-a",
        "signals-page/0",
    ]
    assert list(paged(result.items, "site-a")) == ["llama-a"]


def test_an_unchanged_order_is_not_rendered_again() -> None:
    a = engine("site-a", [provider("llama-a", "site-a")])
    first = a.refresh(T0)
    revision = a.overlays[GATEWAY].revision
    again = a.refresh(T0 + timedelta(seconds=5))
    assert first.changed and not again.changed
    assert a.overlays[GATEWAY].revision == revision
    assert a.overlays[GATEWAY].rendered_at == T0


def test_providers_of_other_sites_in_the_yaml_are_not_offered_from_the_yaml() -> None:
    a = engine("site-a", [provider("llama-a", "site-a"), provider("llama-b", "site-b")])
    a.refresh(T0)
    assert routes(a) == [(LLAMA, "site-a", "llama-a")]
    published = {i.key for i in a.refresh(T0).items} | {
        i.key for i in a.state.all_items() if i.lane == STATE_LANE
    }
    assert published == {"provider/llama-a", "signals-page/0"}
    assert list(paged(a.state.all_items(), "site-a")) == ["llama-a"]


def test_a_provider_tied_to_no_site_is_offered_locally_and_not_published() -> None:
    a = engine("site-a", [provider("openai", None, backend="api_provider", token=True)])
    a.refresh(T0)
    (candidate,) = overlay_of(a)["overlay"]["candidates"]
    assert candidate["selection_tier"] == "unknown"
    assert candidate["credential"]["secretRef"] == {
        "name": "openai-token",
        "namespace": "grid",
        "key": "token",
    }
    assert not [i for i in a.state.all_items() if i.lane == STATE_LANE]


def test_the_network_counts_each_provider_once_published_observed_or_both() -> None:
    a = engine(
        "site-a",
        [provider("llama-a", "site-a"), provider("openai", None, backend="api_provider")],
    )
    b = engine("site-b", [provider("llama-b", "site-b")])
    a.member_up("site-b", "b:7946", 1, T0)
    b.member_up("site-a", "a:7946", 1, T0)
    exchange([a, b], T0)
    # llama-a is published and observed here, openai only observed, llama-b only published.
    network_status = a.statuses()[("GridNetwork", NETWORK)]
    assert network_status.provider_count == 3  # type: ignore[union-attr]


# --- trust gates remote providers ------------------------------------------------------


def test_remote_providers_route_only_once_their_site_is_trusted() -> None:
    a = engine("site-a", [provider("llama-a", "site-a")])
    b = engine("site-b", [provider("llama-b", "site-b")])
    a.member_up("site-b", "b:7946", 1, T0)
    b.member_up("site-a", "a:7946", 1, T0)
    exchange([a, b], T0)
    assert routes(a) == [(LLAMA, "site-a", "llama-a")]
    assert a.statuses()[("GridSite", "site-b")].phase is GridSitePhase.CONNECTING  # type: ignore[union-attr]

    a.observe_probe("site-b", trusted_probe("site-b"), T0 + timedelta(seconds=1))
    a.refresh(T0 + timedelta(seconds=1))
    assert a.trusted_sites == {"site-b"}
    assert (LLAMA, "site-b", "site-site-b") in routes(a)
    status = a.statuses()[("GridSite", "site-b")]
    assert status.phase is GridSitePhase.ACTIVE  # type: ignore[union-attr]
    assert status.observed_fingerprint == FINGERPRINTS["site-b"]  # type: ignore[union-attr]


def test_an_access_policy_admits_only_the_sites_it_selects() -> None:
    only_a = {"matchLabels": {"grid.praxis-proxy.io/site": "site-a"}}
    a = engine("site-a", [provider("llama-a", "site-a")])
    b = engine("site-b", [provider("llama-b", "site-b", policy=only_a)])
    c = engine("site-c", [provider("llama-c", "site-c")])
    connect([a, b, c], T0)
    exchange([a, b, c], T0)
    assert (LLAMA, "site-b", "site-site-b") in routes(a)
    assert all(site != "site-b" for _, site, _ in routes(c))
    assert c.ranking is not None
    [left_out] = c.ranking.left_out
    assert (left_out.candidate.provider, left_out.reason.value) == ("llama-b", "access_denied")


def test_a_site_whose_certificate_does_not_match_its_pin_never_routes() -> None:
    a = engine("site-a", [provider("llama-a", "site-a")])
    b = engine("site-b", [provider("llama-b", "site-b")])
    a.member_up("site-b", "b:7946", 1, T0)
    exchange([a, b], T0)
    wrong = ProbeResult(reachable=True, fingerprint="dd" * 32, error=None, latency_s=0.001)
    for second in range(1, 5):
        a.observe_probe("site-b", wrong, T0 + timedelta(seconds=second))
        a.refresh(T0 + timedelta(seconds=second))
    assert a.trusted_sites == frozenset()
    assert routes(a) == [(LLAMA, "site-a", "llama-a")]
    status = a.statuses()[("GridSite", "site-b")]
    trusted = next(c for c in status.conditions if c.type == "Trusted")
    assert (status.phase, trusted.status, trusted.reason) == (  # type: ignore[union-attr]
        GridSitePhase.CONNECTING,
        "False",
        "FingerprintMismatch",
    )


def test_a_trusted_site_whose_certificate_changes_stops_routing() -> None:
    a, b = (
        engine("site-a", [provider("llama-a", "site-a")]),
        engine("site-b", [provider("llama-b", "site-b")]),
    )
    connect([a, b], T0)
    exchange([a, b], T0)
    assert (LLAMA, "site-b", "site-site-b") in routes(a)
    later = T0 + timedelta(seconds=10)
    a.observe_probe("site-b", ProbeResult(True, "dd" * 32, None, 0.001), later)
    a.refresh(later)
    assert a.trusted_sites == frozenset()
    assert routes(a) == [(LLAMA, "site-a", "llama-a")]


def test_a_failed_handshake_makes_an_active_site_unreachable() -> None:
    a, b = (
        engine("site-a", [provider("llama-a", "site-a")]),
        engine("site-b", [provider("llama-b", "site-b")]),
    )
    connect([a, b], T0)
    exchange([a, b], T0)
    later = T0 + timedelta(seconds=10)
    refused = ProbeResult(True, FINGERPRINTS["site-b"], "the peer refused the TLS session", 0.001)
    a.observe_probe("site-b", refused, later)
    result = a.refresh(later)
    status = a.statuses()[("GridSite", "site-b")]
    assert status.phase is GridSitePhase.UNREACHABLE  # type: ignore[union-attr]
    assert "refused" in status.last_probe.message  # type: ignore[union-attr]
    assert any(e.event.reason == "ProbeFailed" for e in result.events)
    assert routes(a) == [(LLAMA, "site-a", "llama-a")]
    network_status = a.statuses()[("GridNetwork", NETWORK)]
    assert network_status.phase is GridNetworkPhase.DEGRADED  # type: ignore[union-attr]


def test_plaintext_egress_is_pinned_by_the_advertised_certificate() -> None:
    cert = self_signed_certificate("site-b", now=T0)
    sites = [site("site-a"), site("site-b", tls_mode="plaintext", pin=cert.fingerprint)]
    a = engine("site-a", [provider("llama-a", "site-a")], sites=sites)
    b = engine("site-b", [provider("llama-b", "site-b")], sites=sites)
    b.set_certificate(cert.certificate_pem, T0)
    a.member_up("site-b", "b:7946", 1, T0)
    exchange([a, b], T0)
    a.observe_probe("site-b", ProbeResult(True, None, None, 0.001), T0 + timedelta(seconds=1))
    a.refresh(T0 + timedelta(seconds=1))
    assert a.trusted_sites == {"site-b"}
    advertised = next(
        c
        for c in a.statuses()[("GridSite", "site-b")].conditions
        if c.type == "CertificateAdvertised"
    )
    assert (advertised.status, advertised.reason) == ("True", "AdvertisedPinned")


def test_a_certificate_with_a_private_key_is_never_advertised() -> None:
    cert = self_signed_certificate("site-a", now=T0)
    a = engine("site-a", [])
    with pytest.raises(CertificateRejected) as caught:
        a.set_certificate(cert.certificate_pem + cert.private_key_pem().decode(), T0)
    assert caught.value.reason == "private_key"
    assert "BEGIN" not in str(caught.value)
    assert not [i for i in a.refresh(T0).items if i.lane == CERT_LANE]


# --- metrics, health and propagation ---------------------------------------------------


def test_a_metric_change_at_one_site_reorders_the_others() -> None:
    a = engine("site-a", [provider("llama-a", "site-a", metrics=True)])
    b = engine("site-b", [provider("llama-b", "site-b", metrics=True)])
    c = engine("site-c", [])
    engines = [a, b, c]
    connect(engines, T0)
    a.observe_scrape("llama-a", scrape(queue=1, kv=0.1), T0)
    b.observe_scrape("llama-b", scrape(queue=2, kv=0.2), T0)
    exchange(engines, T0)
    assert [r[1] for r in routes(c)] == ["site-a", "site-b"]

    later = T0 + timedelta(seconds=2)
    a.observe_scrape("llama-a", scrape(queue=63, kv=0.99), later)
    exchange(engines, later)
    order = overlay_of(c)["overlay"]["candidates"]
    assert [entry["site"] for entry in order] == ["site-b", "site-a"]
    assert order[1]["admission_state"] == "existing_only"


def _signals_sent(e: SiteEngine, moment: datetime, **values: float) -> bool:
    e.observe_scrape("llama-a", scrape(**values), moment)
    return "llama-a" in paged(e.refresh(moment).items, "site-a")


def test_load_is_republished_only_when_it_moves_enough_to_matter() -> None:
    # Defaults: steps of 2 % (1.28 of a queue capacity of 64, 0.02 of KV), admission at
    # queue 0.85 (54.4) and KV 0.90, and every provider refreshed within the TTL / 3.
    a = engine("site-a", [provider("llama-a", "site-a", metrics=True)])
    moment = T0
    assert _signals_sent(a, moment, queue=10, kv=0.5)
    steps = [
        (dict(queue=10.5, kv=0.51), False),
        (dict(queue=11.5, kv=0.51), True),
        (dict(queue=54, kv=0.51), True),
        (dict(queue=54.5, kv=0.51), True),  # crosses admission's queue level
        (dict(queue=55, kv=0.895), True),
        (dict(queue=55, kv=0.905), True),  # crosses admission's KV level
        (dict(queue=55.5, kv=0.91), False),
    ]
    for values, sent in steps:
        moment += timedelta(seconds=1)
        assert _signals_sent(a, moment, **values) is sent, values
    entry = a.state.provider("site-a", "llama-a")
    assert entry is not None and entry.record.metrics.queue_depth == 55
    # The refresh (TTL / 3 = 20 s here) then sends what is measured now.
    assert _signals_sent(a, moment + timedelta(seconds=21), queue=55.5, kv=0.91)
    entry = a.state.provider("site-a", "llama-a")
    assert entry is not None and entry.record.metrics.queue_depth == 55.5

    every = engine(
        "site-a",
        [provider("llama-a", "site-a", metrics=True)],
        net=network(signalPublishing={"enabled": False}),
    )
    assert _signals_sent(every, T0, queue=10, kv=0.5)
    assert _signals_sent(every, T0 + timedelta(seconds=1), queue=10.5, kv=0.51)


def test_failing_health_checks_take_a_provider_out_everywhere() -> None:
    a = engine(
        "site-a",
        [provider("llama-a", "site-a", health=True), provider("qwen-a", "site-a", models=["qwen"])],
    )
    b = engine("site-b", [])
    connect([a, b], T0)
    a.observe_health("llama-a", HealthObservation(True, 200, 0.001), T0)
    exchange([a, b], T0)
    assert (LLAMA, "site-a", "site-site-a") in routes(b)

    for second in (1, 2):
        moment = T0 + timedelta(seconds=second)
        a.observe_health(
            "llama-a", HealthObservation(False, None, 0.5, "connection refused"), moment
        )
        exchange([a, b], moment)
    status = a.statuses()[("InferenceProvider", "llama-a")]
    assert status.phase is InferenceProviderPhase.UNAVAILABLE  # type: ignore[union-attr]
    assert status.last_health_check.consecutive_failures == 2  # type: ignore[union-attr]
    assert routes(a) == [("qwen", "site-a", "qwen-a")]
    assert routes(b) == [("qwen", "site-a", "site-site-a")]
    assert b.state.provider("site-a", "llama-a").record.phase == "Unavailable"  # type: ignore[union-attr]


def test_one_failed_check_degrades_without_removing() -> None:
    a = engine("site-a", [provider("llama-a", "site-a", health=True)])
    a.observe_health("llama-a", HealthObservation(True, 200, 0.001), T0)
    a.refresh(T0)
    a.observe_health(
        "llama-a",
        HealthObservation(False, 500, 0.001, "HTTP status 500"),
        T0 + timedelta(seconds=1),
    )
    a.refresh(T0 + timedelta(seconds=1))
    (candidate,) = overlay_of(a)["overlay"]["candidates"]
    assert candidate["fresh"] is False
    assert a.statuses()[("InferenceProvider", "llama-a")].phase is InferenceProviderPhase.DEGRADED  # type: ignore[union-attr]


def test_an_unreadable_scrape_degrades_with_a_reason() -> None:
    a = engine("site-a", [provider("llama-a", "site-a", metrics=True)])
    a.observe_scrape("llama-a", ScrapeResult(None, 0.5, "connection refused"), T0)
    a.refresh(T0)
    status = a.statuses()[("InferenceProvider", "llama-a")]
    assert status.phase is InferenceProviderPhase.DEGRADED  # type: ignore[union-attr]
    assert "connection refused" in status.last_metrics_scrape.message  # type: ignore[union-attr]
    garbled = ScrapeResult(200, 0.001, text="this { is not prometheus")
    a.observe_scrape("llama-a", garbled, T0 + timedelta(seconds=1))
    a.refresh(T0 + timedelta(seconds=1))
    status = a.statuses()[("InferenceProvider", "llama-a")]
    assert "not valid Prometheus" in status.last_metrics_scrape.message  # type: ignore[union-attr]
    assert overlay_of(a)["overlay"]["candidates"]  # still routable, as not fresh


def test_missing_credentials_make_a_provider_unavailable() -> None:
    a = engine(
        "site-a",
        [provider("llama-a", "site-a", token=True), provider("qwen-a", "site-a", models=["qwen"])],
    )
    assert a.credential_refs() == {"llama-a": ("grid", "llama-a-token", "token")}
    a.observe_credentials("llama-a", CredentialState.SECRET_NOT_FOUND)
    result = a.refresh(T0)
    assert routes(a) == [("qwen", "site-a", "qwen-a")]
    assert any(
        e.name == "llama-a" and e.event.reason == "CredentialsInvalid" for e in result.events
    )


# --- membership and eviction -----------------------------------------------------------


@pytest.mark.parametrize("gone", ["member_down", "member_left"])
def test_a_site_that_goes_away_leaves_every_overlay(gone: str) -> None:
    engines = [engine(n, [provider(f"llama-{n[-1]}", n)]) for n in ("site-a", "site-b", "site-c")]
    a, b, _ = engines
    connect(engines, T0)
    exchange(engines, T0)
    assert {r[1] for r in routes(a)} == {"site-a", "site-b", "site-c"}
    later = T0 + timedelta(seconds=3)
    for survivor in (a, b):
        getattr(survivor, gone)("site-c", "site-c:7946", 1, later)
        survivor.refresh(later)
    assert {r[1] for r in routes(a)} == {"site-a", "site-b"}
    assert {r[1] for r in routes(b)} == {"site-a", "site-b"}
    # A site that left is forgotten at once; one declared down only once it goes stale.
    assert ("site-c" in a.state.sites()) is (gone == "member_down")
    a.refresh(later + timedelta(seconds=61))
    assert "site-c" not in a.state.sites()


def test_a_site_declared_down_by_mistake_comes_back_without_resending() -> None:
    a, b = engine("site-a", []), engine("site-b", [provider("llama-b", "site-b")])
    connect([a, b], T0)
    exchange([a, b], T0)
    a.member_down("site-b", "b:7946", 1, T0 + timedelta(seconds=1))
    a.refresh(T0 + timedelta(seconds=1))
    assert a.overlays[GATEWAY].message  # nothing left to route: the old overlay stays
    a.member_up("site-b", "b:7946", 2, T0 + timedelta(seconds=2))
    a.refresh(T0 + timedelta(seconds=2))
    assert routes(a) == [(LLAMA, "site-b", "site-site-b")]
    assert not a.overlays[GATEWAY].message


def test_a_reset_state_publishes_everything_again_under_higher_versions() -> None:
    a = engine("site-a", [provider("llama-a", "site-a")])
    before = {i.key: i.version for i in a.refresh(T0).items}
    a.reset_state()
    after = {i.key: i.version for i in a.refresh(T0 + timedelta(seconds=1)).items}
    assert after.keys() == before.keys()
    assert all(after[key] > before[key] for key in before)


def test_a_late_down_of_an_older_generation_is_ignored() -> None:
    a, b = engine("site-a", []), engine("site-b", [provider("llama-b", "site-b")])
    connect([a, b], T0)
    a.member_up("site-b", "b:7946", 2, T0)
    exchange([a, b], T0)
    a.member_down("site-b", "b:7946", 1, T0)
    a.refresh(T0)
    assert routes(a) == [(LLAMA, "site-b", "site-site-b")]


def test_state_from_a_site_that_is_no_member_goes_stale() -> None:
    a, b = (
        engine("site-a", [provider("llama-a", "site-a")]),
        engine("site-b", [provider("llama-b", "site-b")]),
    )
    for item in b.refresh(T0).items:
        a.receive_item("site-b", item.lane, item.key, item.version, item.payload, T0)
    a.refresh(T0 + timedelta(seconds=59))
    assert "site-b" in a.state.sites()
    a.refresh(T0 + timedelta(seconds=61))
    assert "site-b" not in a.state.sites()


def test_a_suspect_site_stays_but_is_not_fresh() -> None:
    a, b = engine("site-a", []), engine("site-b", [provider("llama-b", "site-b")])
    connect([a, b], T0)
    exchange([a, b], T0)
    a.member_suspect("site-b", "b:7946", 1, T0)
    a.refresh(T0)
    (candidate,) = overlay_of(a)["overlay"]["candidates"]
    assert (candidate["site"], candidate["fresh"]) == ("site-b", False)


# --- refused inputs --------------------------------------------------------------------


def test_malformed_and_forged_items_are_refused_and_counted() -> None:
    a, b = (
        engine("site-a", [provider("llama-a", "site-a")]),
        engine("site-b", [provider("llama-b", "site-b")]),
    )
    connect([a, b], T0)
    exchange([a, b], T0)
    revision = a.overlays[GATEWAY].revision
    item = next(i for i in b.state.all_items() if i.lane == STATE_LANE)
    assert (
        a.receive_item("site-b", STATE_LANE, item.key, item.version + 1, b"\x01{garbage", T0)
        is ItemOutcome.REFUSED
    )
    assert (
        a.receive_item("site-c", STATE_LANE, item.key, item.version, item.payload, T0)
        is ItemOutcome.REFUSED
    )
    assert (
        a.receive_item("site-b", item.lane, item.key, item.version, item.payload, T0)
        is ItemOutcome.UNCHANGED
    )
    assert dict(a.refused_items) == {"malformed": 1, "forged": 1}
    a.refresh(T0)
    assert a.overlays[GATEWAY].revision == revision


def test_no_candidate_keeps_the_previous_overlay_and_says_why() -> None:
    a = engine("site-a", [provider("llama-a", "site-a", health=True)])
    a.refresh(T0)
    revision = a.overlays[GATEWAY].revision
    changes = []
    for second in (1, 2, 3):
        a.observe_health(
            "llama-a",
            HealthObservation(False, None, 0.1, "timed out"),
            T0 + timedelta(seconds=second),
        )
        changes.append(bool(a.refresh(T0 + timedelta(seconds=second)).changed))
    current = a.overlays[GATEWAY]
    assert current.revision == revision
    assert "no candidate" in current.message and "unhealthy" in current.message
    status = a.statuses()[("GridNetwork", NETWORK)]
    assert status.phase is GridNetworkPhase.DEGRADED  # type: ignore[union-attr]
    assert status.gateways[0].message == current.message  # type: ignore[union-attr]
    assert changes == [False, True, False]  # degraded first; the refusal is reported once


def test_a_config_error_keeps_serving_and_degrades_the_network() -> None:
    a = engine("site-a", [provider("llama-a", "site-a")])
    a.refresh(T0)
    a.set_config_error("00-network.yaml, document 0: spec.swim.probeInterval: must be a duration")
    a.refresh(T0 + timedelta(seconds=1))
    status = a.statuses()[("GridNetwork", NETWORK)]
    assert status.phase is GridNetworkPhase.DEGRADED  # type: ignore[union-attr]
    assert routes(a) == [(LLAMA, "site-a", "llama-a")]


def test_an_engine_refuses_resources_of_another_network() -> None:
    a = engine(
        "site-a", [provider("llama-a", "site-a"), provider("other", "site-a", network_name="other")]
    )
    a.refresh(T0)
    assert routes(a) == [(LLAMA, "site-a", "llama-a")]
    with pytest.raises(ConfigError):
        a.set_resources(network(name="other"), [], [])


def test_two_networks_on_one_site_stay_separate() -> None:
    first = engine("site-a", [provider("llama-a", "site-a")])
    second_sites = [site("site-a", network_name="other"), site("site-b", network_name="other")]
    second = engine(
        "site-a",
        [provider("qwen-a", "site-a", network_name="other", models=["qwen"])],
        net=network(name="other"),
        sites=second_sites,
    )
    first.refresh(T0)
    second.refresh(T0)
    assert routes(first) == [(LLAMA, "site-a", "llama-a")]
    assert routes(second) == [("qwen", "site-a", "qwen-a")]
    assert overlay_of(second)["scope"]["network"] == "other"


# --- probes, grid id, secrets ----------------------------------------------------------


def test_probes_are_due_at_start_on_join_and_after_the_interval() -> None:
    a = engine("site-a", [], probe_interval_s=10)
    assert [t.site for t in a.take_due_probes(T0)] == ["site-a", "site-b", "site-c"]
    assert a.take_due_probes(T0 + timedelta(seconds=1)) == ()
    a.member_up("site-b", "b:7946", 1, T0 + timedelta(seconds=2))
    (target,) = a.take_due_probes(T0 + timedelta(seconds=2))
    assert (target.site, target.address, target.tls_mode.value) == (
        "site-b",
        "site-b.test:8443",
        "mutual_tls",
    )
    assert len(a.take_due_probes(T0 + timedelta(seconds=12))) == 3


def test_sites_without_a_grid_id_converge_on_the_smallest() -> None:
    a = engine("site-a", [], grid_id="b-grid")
    b = engine("site-b", [], grid_id="a-grid")
    connect([a, b], T0)
    exchange([a, b], T0)
    exchange([a, b], T0)
    assert a.grid_id == b.grid_id == "a-grid"
    pinned = engine("site-c", [], grid_id="z", net=network(gridId="fixed"))
    assert pinned.grid_id == "fixed"


def test_no_status_repr_or_item_holds_anything_but_a_secret_reference() -> None:
    a = engine("site-a", [provider("llama-a", "site-a", token=True)])
    a.observe_credentials("llama-a", CredentialState.VALID)
    result = a.refresh(T0)
    payloads = b"".join(item.payload for item in result.items)
    assert b'"name":"llama-a-token"' in payloads
    texts = [repr(a), payloads.decode()] + [
        json.dumps(status.model_dump(mode="json")) for status in a.statuses().values()
    ]
    for text in texts:
        assert "secret-value" not in text
    assert overlay_of(a)["overlay"]["candidates"][0]["credential"]["strategy"] == "bearer_token"


def test_an_advertised_certificate_with_a_private_key_marker_is_discarded() -> None:
    cert = self_signed_certificate("site-b", now=T0)
    a, b = engine("site-a", []), engine("site-b", [])
    b.set_certificate(cert.certificate_pem, T0)
    item = next(i for i in b.refresh(T0).items if i.lane == CERT_LANE)
    body = json.loads(item.payload[1:])
    body["pem"] = body["pem"].replace("CERTIFICATE", "PRIVATE KEY")
    forged = item.payload[:1] + json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    outcome = a.receive_item("site-b", item.lane, item.key, item.version, forged, T0)
    assert outcome is ItemOutcome.REFUSED
    assert a.state.cert_pem("site-b") is None
    a.receive_item("site-b", item.lane, item.key, item.version, item.payload, T0)
    a.member_up("site-b", "b:7946", 1, T0)
    a.refresh(T0)
    advertised = next(
        c
        for c in a.statuses()[("GridSite", "site-b")].conditions
        if c.type == "CertificateAdvertised"
    )
    # Pinned to FINGERPRINTS["site-b"], not to this certificate: seen, and reported as such.
    assert (advertised.status, advertised.reason) == ("False", "AdvertisedNotPinned")
    assert cert.fingerprint in advertised.message


# --- staleness and forgetting ----------------------------------------------------------

TTL = timedelta(seconds=60)


def test_a_quiet_provider_is_written_again_before_peers_could_call_it_stale() -> None:
    b = engine("site-b", [provider("llama-b", "site-b")])
    items = b.refresh(T0).items
    assert {"provider/llama-b", "signals-page/0"} <= {i.key for i in items}
    first = paged(items, "site-b")["llama-b"].version
    assert not b.refresh(T0 + TTL / 3 - timedelta(seconds=1)).items
    # Only the small signals page goes out again: it alone keeps the provider fresh.
    items = b.refresh(T0 + TTL / 3 + timedelta(seconds=1)).items
    assert {i.key for i in items} == {"signals-page/0"}
    assert paged(items, "site-b")["llama-b"].version > first
    a = engine("site-a", [], sites=[site("site-a"), site("site-b")])
    for item in b.state.all_items():
        a.receive_item("site-b", item.lane, item.key, item.version, item.payload, T0)
    entry = a.state.provider("site-b", "llama-b")
    assert entry is not None
    assert entry.updated_at == (T0 + TTL / 3 + timedelta(seconds=1)).timestamp()


def test_a_live_site_silent_past_the_ttl_leaves_the_overlay_as_grid_render_predicts() -> None:
    from grid.models.resources import LoadedResources
    from grid.render.whatif import MetricsReport, ProviderReport, build_what_if
    from grid.scoring.ranking import rank_candidates

    providers = [provider("llama-a", "site-a"), provider("llama-b", "site-b")]
    a = engine("site-a", providers[:1])
    b = engine("site-b", providers[1:])
    connect([a, b], T0)
    exchange([a, b], T0)
    # site-b stays alive in SWIM but publishes nothing more (a wedged engine).
    resources = LoadedResources((network(), *SITES, *providers))
    metrics = MetricsReport(providers={"llama-b": ProviderReport(updated_at=T0)})
    for now, routed in (
        (T0 + TTL - timedelta(seconds=1), {"site-a", "site-b"}),
        (T0 + TTL + timedelta(seconds=1), {"site-a"}),
    ):
        a.refresh(now)
        candidates = overlay_of(a)["overlay"]["candidates"]
        engine_view = [(c["name"], c["site"], c["fresh"]) for c in candidates]
        what_if = build_what_if(resources, site="site-a", gateway=GATEWAY[1], metrics=metrics)
        ranking = rank_candidates(
            what_if.candidates,
            what_if.consumer,
            what_if.network.spec.scoring,
            now,
            stale_after_seconds=what_if.network.spec.stale_candidate_ttl_seconds,
        )
        predicted = [(r.candidate.model, r.candidate.site, r.fresh) for r in ranking.candidates]
        assert engine_view == predicted, now
        assert {site for _, site, _ in engine_view} == routed
    # Left out of the overlay, not forgotten: the next write from site-b brings it back.
    assert "site-b" in a.state.sites()


def test_down_then_stale_counts_from_the_down_and_tells_the_transport() -> None:
    a, b = engine("site-a", []), engine("site-b", [provider("llama-b", "site-b")])
    connect([a, b], T0)
    exchange([a, b], T0)
    down = T0 + 2 * TTL  # its last item is already older than the TTL
    a.member_down("site-b", "b:7946", 1, down)
    result = a.refresh(down + timedelta(seconds=1))
    assert "site-b" in a.state.sites() and not result.forgotten
    result = a.refresh(down + TTL + timedelta(seconds=1))
    assert "site-b" not in a.state.sites()
    ((site, items),) = result.forgotten
    assert site == "site-b" and ("state", "provider/llama-b") in items
    assert not any(key.startswith("budget/") for _, key in items)


def test_records_arriving_after_a_leave_are_forgotten_at_the_next_refresh() -> None:
    a, b = engine("site-a", []), engine("site-b", [provider("llama-b", "site-b")])
    connect([a, b], T0)
    items = b.refresh(T0).items
    a.member_left("site-b", "b:7946", 1, T0)
    assert "site-b" not in a.state.sites()
    for item in items:  # a late copy, relayed by a peer that had not heard of the leave
        a.receive_item("site-b", item.lane, item.key, item.version, item.payload, T0)
    assert "site-b" in a.state.sites()
    result = a.refresh(T0 + timedelta(seconds=1))
    assert "site-b" not in a.state.sites()
    assert [site for site, _ in result.forgotten] == ["site-b"]


def _forget_settled(e: SiteEngine) -> None:
    """Make ``e`` evaluate every status afresh on its next pass, as before statuses were
    settled."""
    e._trust._settled.clear()
    for evaluated in e._phases._evaluated.values():
        evaluated.settled = None


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_settled_statuses_are_those_evaluating_afresh_gives(seed: int) -> None:
    """A pass skips evaluating a status whose inputs did not change since an evaluation
    that took no transition. Pass after pass of random health checks, scrapes, credential
    findings, membership changes and probes, with time moving, an engine doing so holds
    the statuses, and posts the events, of one that evaluates everything every pass."""
    rng = random.Random(seed)
    providers = [
        provider("llama-a", "site-a", health=True, metrics=True),
        provider("qwen-a", "site-a", models=["qwen"], token=True),
    ]
    settling, afresh = engine("site-a", providers), engine("site-a", providers)
    moment = T0
    for _ in range(30):
        moment += timedelta(seconds=rng.choice((0, 1, 1, 5, 120)))
        action = rng.choice(("health", "health", "scrape", "credentials", "member", "probe"))
        peer = rng.choice(("site-b", "site-c"))
        passed = rng.random() < 0.6
        health = HealthObservation(passed, 200 if passed else 500, 0.001, "boom")
        scraped = rng.choice((scrape(queue=3, kv=0.2), ScrapeResult(None, 0.5, "refused")))
        credentials = rng.choice(list(CredentialState))
        change = rng.choice(("member_up", "member_suspect", "member_down"))
        fingerprint = rng.choice((FINGERPRINTS[peer], "dd" * 32, None))
        probe = ProbeResult(True, fingerprint, None, 0.001)
        if fingerprint is None:
            probe = ProbeResult(False, None, "connection refused", 0.001)
        for e in (settling, afresh):
            if action == "health":
                e.observe_health("llama-a", health, moment)
            elif action == "scrape":
                e.observe_scrape("llama-a", scraped, moment)
            elif action == "credentials":
                e.observe_credentials("qwen-a", credentials)
            elif action == "member":
                getattr(e, change)(peer, f"{peer}:7946", 1, moment)
            else:
                e.observe_probe(peer, probe, moment)
        _forget_settled(afresh)
        got, expected = settling.refresh(moment), afresh.refresh(moment)
        assert got.events == expected.events
        assert settling.statuses() == afresh.statuses()


def test_removing_the_last_gateway_drops_its_overlay_and_its_status() -> None:
    llama = provider("llama-a", "site-a")
    a = engine("site-a", [llama])
    a.refresh(T0)
    assert list(a.overlays) == [GATEWAY]
    a.set_resources(network(gatewayRefs=[]), SITES, [llama])
    a.refresh(T0 + timedelta(seconds=1))
    assert a.overlays == {}
    assert a.statuses()[("GridNetwork", NETWORK)].gateways == []
