"""The verdict on a peer's advertised certificate (cert lane): checked again when the
certificate changes or when time alone can change it (its expiry, or once per probe
interval), not on every pass while the peer's other items keep arriving.

A ``plaintext`` egress is pinned by the certificate its site advertises, so the verdict
decides whether the site routes at all."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

import grid.engine.advertised as advertised_module
from grid.crdt.snapshot import CERT_LANE
from grid.engine import SiteEngine
from grid.trust import check_public_cert_pem, self_signed_certificate
from grid.trust.pem import CertificateInfo, read_public_cert_pem
from grid.trust.site import ProbeResult
from test_engine import T0, engine, exchange, provider, scrape, site

DAY = 86_400.0


class Checks:
    """Counts the checks of one PEM made by the engine (its advertised-certificate room)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, pem: str) -> None:
        self.count = 0

        def counted(text: str) -> tuple[CertificateInfo, ...]:
            if text == pem:
                self.count += 1
            return read_public_cert_pem(text)

        monkeypatch.setattr(advertised_module, "read_public_cert_pem", counted)


def plaintext_pair(pem: str, pin: str, *, probe_interval_s: float) -> tuple[SiteEngine, SiteEngine]:
    """site-a, and site-b behind a plaintext egress pinned to ``pin`` and advertising
    ``pem``; items exchanged and site-b probed (a TCP connect) at ``T0``."""
    sites = [site("site-a"), site("site-b", tls_mode="plaintext", pin=pin)]
    a = engine(
        "site-a", [provider("llama-a", "site-a")], sites=sites, probe_interval_s=probe_interval_s
    )
    b = engine("site-b", [provider("llama-b", "site-b", metrics=True)], sites=sites)
    b.set_certificate(pem, T0)
    a.member_up("site-b", "b:7946", 1, T0)
    exchange([a, b], T0)
    a.observe_probe("site-b", ProbeResult(True, None, None, 0.001), T0)
    return a, b


def busy_peer_sends(a: SiteEngine, b: SiteEngine, queue: float, now: datetime) -> None:
    """site-b's load moves: its signals page (not its certificate) reaches site-a, which
    refreshes."""
    b.observe_scrape("llama-b", scrape(queue=queue, kv=0.1), now)
    items = b.refresh(now).items
    assert any(item.key.startswith("signals-page/") for item in items)
    assert not [item for item in items if item.lane == CERT_LANE]
    for item in items:
        a.receive_item("site-b", item.lane, item.key, item.version, item.payload, now)
    a.refresh(now)


def advertised(a: SiteEngine) -> tuple[str, str, str]:
    (condition,) = [
        c
        for c in a.statuses()[("GridSite", "site-b")].conditions
        if c.type == "CertificateAdvertised"
    ]
    return (condition.status.value, condition.reason, condition.message)


def test_a_busy_peer_does_not_have_its_certificate_checked_on_every_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cert = self_signed_certificate("site-b", now=T0)
    checks = Checks(monkeypatch, cert.certificate_pem)
    a, b = plaintext_pair(cert.certificate_pem, cert.fingerprint, probe_interval_s=10)
    a.refresh(T0)
    assert a.trusted_sites == {"site-b"}
    first = checks.count
    assert first >= 1
    # An item every half second for a minute: the certificate is checked again once per
    # probe interval, not on each of the 120 passes: six times at site-a (what site-b
    # advertises) and six at site-b (its own, whose expiry it reports).
    for step in range(1, 121):
        busy_peer_sends(a, b, (5, 60)[step % 2], T0 + timedelta(seconds=step / 2))
    assert checks.count - first == 12
    assert a.trusted_sites == {"site-b"}


def test_an_advertised_certificate_that_expires_is_noticed_at_its_expiry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cert = self_signed_certificate("site-b", now=T0, valid_for=timedelta(hours=1))
    expiry = check_public_cert_pem(cert.certificate_pem, T0).not_after
    checks = Checks(monkeypatch, cert.certificate_pem)
    # Probes so rare that only the expiry itself can make the engine look again.
    a, b = plaintext_pair(cert.certificate_pem, cert.fingerprint, probe_interval_s=DAY)
    a.refresh(T0)
    assert a.trusted_sites == {"site-b"}
    for queue, before in ((5, 2), (60, 1), (5, 0)):
        moment = expiry - timedelta(seconds=before)
        busy_peer_sends(a, b, queue, moment)
        assert a.trusted_sites == {"site-b"}
        assert advertised(a)[:2] == ("True", "AdvertisedPinned")
    checked = checks.count
    # Just past its expiry, with nothing new from the peer: the certificate is discarded,
    # and the plaintext egress it pinned is no longer trusted.
    a.refresh(expiry + timedelta(milliseconds=1))
    assert checks.count == checked + 1
    status, reason, message = advertised(a)
    assert (status, reason) == ("False", "CertificateDiscarded")
    assert "expired" in message
    assert a.trusted_sites == frozenset()


def test_a_new_advertised_certificate_is_checked_at_once() -> None:
    first = self_signed_certificate("site-b", now=T0)
    a, b = plaintext_pair(first.certificate_pem, first.fingerprint, probe_interval_s=DAY)
    a.refresh(T0)
    assert a.trusted_sites == {"site-b"}
    assert advertised(a)[:2] == ("True", "AdvertisedPinned")
    rotated = self_signed_certificate("site-b", now=T0)
    later = T0 + timedelta(seconds=5)
    b.set_certificate(rotated.certificate_pem, later)
    exchange([a, b], later)
    status, reason, message = advertised(a)
    assert (status, reason) == ("False", "AdvertisedNotPinned")
    assert rotated.fingerprint in message
    assert a.trusted_sites == frozenset()
