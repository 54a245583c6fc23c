"""The probes room on its own: which sites are due a probe of their egress (never probed,
the interval over, or asked for at once), and what one probe's result says to the site's
phase machine and status."""

from __future__ import annotations

from datetime import timedelta

from grid.engine.events import MAX_MESSAGE
from grid.engine.probes import Probe, Probes
from grid.engine.targets import ProbeTarget
from grid.models.phases import ProbeObservation
from grid.models.site import EgressTlsMode
from grid.render.consumer import ClusterEndpoint
from grid.trust.site import ProbeResult
from test_engine import FINGERPRINTS, T0

INTERVAL_S = 10.0
ENDPOINTS = {
    "site-a": ClusterEndpoint("a.test:8443", EgressTlsMode.MUTUAL_TLS),
    "site-b": ClusterEndpoint("b.test:8443", EgressTlsMode.TLS, "b.example"),
    "site-c": ClusterEndpoint("c.test:8080", EgressTlsMode.PLAINTEXT),
}
SITES = ("site-c", "site-a", "site-b")
"""Deliberately not in name order: the order given is the order kept."""


def egress(site: str) -> ClusterEndpoint | None:
    return ENDPOINTS.get(site)


def due(probes: Probes, seconds: float, sites: tuple[str, ...] = SITES) -> list[str]:
    return [
        target.site for target in probes.take_due(sites, egress, T0 + timedelta(seconds=seconds))
    ]


def test_every_site_is_due_at_first_in_the_order_given_with_its_egress() -> None:
    probes = Probes(INTERVAL_S)
    targets = probes.take_due(SITES, egress, T0)
    assert targets == (
        ProbeTarget("site-c", "c.test:8080", EgressTlsMode.PLAINTEXT, None),
        ProbeTarget("site-a", "a.test:8443", EgressTlsMode.MUTUAL_TLS, None),
        ProbeTarget("site-b", "b.test:8443", EgressTlsMode.TLS, "b.example"),
    )


def test_a_site_is_due_again_only_once_the_interval_is_over() -> None:
    probes = Probes(INTERVAL_S)
    assert due(probes, 0) == list(SITES)
    assert due(probes, 0) == []
    assert due(probes, INTERVAL_S - 0.001) == []
    assert due(probes, INTERVAL_S) == list(SITES)
    assert due(probes, INTERVAL_S + 1) == []


def test_the_interval_counts_from_each_sites_own_request() -> None:
    probes = Probes(INTERVAL_S)
    assert due(probes, 0, ("site-a",)) == ["site-a"]
    assert due(probes, 5) == ["site-c", "site-b"]
    assert due(probes, 10) == ["site-a"]
    assert due(probes, 15) == ["site-c", "site-b"]


def test_soon_forces_a_probe_once_whatever_the_interval() -> None:
    probes = Probes(INTERVAL_S)
    due(probes, 0)
    probes.soon(["site-b"])
    assert due(probes, 1) == ["site-b"]
    assert due(probes, 2) == []
    # The forced probe restarts the site's interval.
    assert due(probes, 10) == ["site-c", "site-a"]
    assert due(probes, 11) == ["site-b"]


def test_sites_without_an_egress_are_skipped_and_not_marked_requested() -> None:
    probes = Probes(INTERVAL_S)
    known = dict(ENDPOINTS)
    assert due(probes, 0, ("site-x", "site-a")) == ["site-a"]
    known["site-x"] = ClusterEndpoint("x.test:8443", EgressTlsMode.TLS)
    later = T0 + timedelta(seconds=1)
    assert [t.site for t in probes.take_due(("site-x", "site-a"), known.get, later)] == ["site-x"]


def test_a_soon_request_waits_for_the_site_to_have_an_egress_again() -> None:
    probes = Probes(INTERVAL_S)
    known = dict(ENDPOINTS)
    assert probes.take_due(("site-b",), known.get, T0)
    probes.soon(["site-b"])
    del known["site-b"]
    assert probes.take_due(("site-b",), known.get, T0 + timedelta(seconds=1)) == ()
    known["site-b"] = ENDPOINTS["site-b"]
    (target,) = probes.take_due(("site-b",), known.get, T0 + timedelta(seconds=2))
    assert target.site == "site-b"


def test_the_last_observed_probe_of_each_site_is_kept() -> None:
    probes = Probes(INTERVAL_S)
    first = ProbeResult(True, FINGERPRINTS["site-b"], None, 0.001)
    second = ProbeResult(False, None, "connection refused", 0.002)
    probes.observe("site-b", first, T0, EgressTlsMode.TLS)
    probes.observe("site-b", second, T0 + timedelta(seconds=1), EgressTlsMode.TLS)
    assert probes.get("site-b") == Probe(second, T0 + timedelta(seconds=1), EgressTlsMode.TLS)
    assert probes.get("site-c") is None


# --- one probe, as the phase machine and the status read it -------------------------------


def test_a_tls_probe_that_read_a_certificate_presents_its_fingerprint() -> None:
    result = ProbeResult(True, FINGERPRINTS["site-b"], None, 0.0123456)
    observation = Probe(result, T0, EgressTlsMode.MUTUAL_TLS).observation("ff" * 32)
    assert observation == ProbeObservation(T0, True, FINGERPRINTS["site-b"], 12.346)


def test_a_failed_tls_probe_presents_nothing_and_says_why() -> None:
    refused = ProbeResult(True, FINGERPRINTS["site-b"], "the peer refused the TLS session", 0.001)
    observation = Probe(refused, T0, EgressTlsMode.TLS).observation("ff" * 32)
    assert observation == ProbeObservation(T0, False, None, 1.0, "the peer refused the TLS session")


def test_a_tls_probe_without_a_certificate_or_error_says_probe_failed() -> None:
    silent = ProbeResult(True, None, None, 0.001)
    observation = Probe(silent, T0, EgressTlsMode.TLS).observation(None)
    assert (observation.reachable, observation.presented_fingerprint, observation.error) == (
        False,
        None,
        "probe failed",
    )


def test_a_plaintext_probe_presents_the_advertised_fingerprint() -> None:
    advertised = "ee" * 32
    connected = Probe(ProbeResult(True, None, None, 0.002), T0, EgressTlsMode.PLAINTEXT)
    # The fingerprint is the advertised one (None: not arrived yet), and says so.
    assert connected.observation(advertised) == ProbeObservation(
        T0, True, advertised, 2.0, "", advertised=True
    )
    assert connected.observation(None) == ProbeObservation(T0, True, None, 2.0, "", advertised=True)


def test_a_failed_plaintext_connect_is_unreachable_with_its_error() -> None:
    refused = ProbeResult(False, None, "connection refused", 0.002)
    observation = Probe(refused, T0, EgressTlsMode.PLAINTEXT).observation("ee" * 32)
    assert (observation.reachable, observation.error) == (False, "connection refused")
    # A connect that reached the port but still reported an error is not reachable either.
    odd = ProbeResult(True, None, "reset by peer", 0.002)
    assert not Probe(odd, T0, EgressTlsMode.PLAINTEXT).observation("ee" * 32).reachable


def test_the_status_shows_the_probe_with_its_message_clipped() -> None:
    long_error = "x" * (MAX_MESSAGE + 50)
    status = Probe(ProbeResult(False, None, long_error, 0.0015), T0, EgressTlsMode.TLS).status()
    assert (status.at, status.reachable, status.latency_ms) == (T0, False, 1.5)
    assert len(status.message) == MAX_MESSAGE
    assert status.message.endswith("…")
    ok = Probe(ProbeResult(True, FINGERPRINTS["site-b"], None, 0.001), T0, EgressTlsMode.TLS)
    assert (ok.status().reachable, ok.status().message) == (True, "")
