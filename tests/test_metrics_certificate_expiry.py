"""``grid_site_certificate_expiry_timestamp_seconds`` as a scrape exposes it: one series per
site whose certificate this site knows (its own and each peer's advertised one), valued at
the leaf's notAfter in Unix seconds, in seconds as OpenMetrics says, and gone with a
forgotten peer."""

from __future__ import annotations

from datetime import timedelta

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from grid.engine import SiteEngine
from grid.runtime.metrics import GridCollector, NetworkView
from test_engine import NETWORK, T0
from test_engine_certificates import Pair, not_after

EXPIRY = "grid_site_certificate_expiry_timestamp_seconds"


def registry(engine: SiteEngine) -> CollectorRegistry:
    scraped = CollectorRegistry()
    view = NetworkView(NETWORK, engine, None, None, lambda overlay: False)
    scraped.register(GridCollector("agent", lambda: [view]))
    return scraped


def expiries(engine: SiteEngine) -> dict[tuple[str, str], float]:
    text = generate_latest(registry(engine)).decode()
    (family,) = [f for f in text_string_to_metric_families(text) if f.name == EXPIRY]
    assert family.type == "gauge"
    return {(s.labels["network"], s.labels["site"]): s.value for s in family.samples}


def test_each_known_certificate_is_a_series_at_its_not_after() -> None:
    pair = Pair()
    assert expiries(pair.a) == {
        (NETWORK, "site-a"): not_after(pair.a_cert).timestamp(),
        (NETWORK, "site-b"): not_after(pair.b_cert).timestamp(),
    }


def test_the_family_is_in_seconds() -> None:
    text = generate_openmetrics(registry(Pair().a)).decode()
    assert f"# UNIT {EXPIRY} seconds" in text


def test_a_forgotten_peers_series_goes() -> None:
    pair = Pair()
    pair.a.member_left("site-b", "site-b:7946", 1, T0 + timedelta(seconds=1))
    assert set(expiries(pair.a)) == {(NETWORK, "site-a")}


def test_an_expired_certificate_stays_at_its_past_not_after() -> None:
    pair = Pair()
    expiry = not_after(pair.b_cert)
    pair.a.refresh(expiry + timedelta(days=1))
    assert expiries(pair.a)[(NETWORK, "site-b")] == expiry.timestamp()
