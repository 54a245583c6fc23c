"""The certificates a site knows (``grid.engine.certificates``): its own and the one each
peer advertises, with the fingerprint, the expiry and what vouches for it (the network CA,
only a pin, or nothing now), in the engine and in each GridSite's
``status.certificateNotAfter``; a forgotten peer's goes at once. Pure: every step takes
``now``."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from grid.engine import SiteEngine
from grid.engine.advertised import AdvertisedCert, AdvertisedCerts
from grid.engine.certificates import CertificateAnchor, SiteCertificate, site_certificate
from grid.models import GridSite
from grid.models.site import SiteTrust
from grid.trust import CertificateAuthority, IssuedCertificate, self_signed_certificate
from grid.trust.chain import NetworkCa
from grid.trust.pem import certificate_ders
from test_engine import T0, engine, exchange, site

RECHECK = timedelta(seconds=10)
MESH_CA = CertificateAuthority.generate("mesh CA", now=T0)
OTHER_CA = CertificateAuthority.generate("another CA", now=T0)


def network_ca(authority: CertificateAuthority = MESH_CA) -> NetworkCa:
    return NetworkCa(tuple(certificate_ders(authority.certificate_pem)))


def issued(name: str, *, now: datetime = T0) -> IssuedCertificate:
    return MESH_CA.issue(name, now=now)


def not_after(certificate: IssuedCertificate) -> datetime:
    return certificate.certificate.not_valid_after_utc


def unpinned(name: str) -> GridSite:
    resource = site(name).model_copy(deep=True)
    resource.spec.trust = SiteTrust()
    return resource


def verdict(
    certificate: IssuedCertificate | str, name: str, now: datetime = T0, ca: NetworkCa | None = None
) -> AdvertisedCert | None:
    certs = AdvertisedCerts(RECHECK)
    certs.ca = network_ca() if ca is None else ca
    pem = certificate if isinstance(certificate, str) else certificate.certificate_pem
    return certs.check(name, pem, now)


# --- what vouches for a certificate ------------------------------------------------------

SITE_B = issued("site-b")
SELF_SIGNED_B = self_signed_certificate("site-b", now=T0)
OTHER_CA_B = OTHER_CA.issue("site-b", now=T0)


@pytest.mark.parametrize(
    ("certificate", "resource", "ca", "anchor"),
    [
        (SITE_B, site("site-b", pin=SITE_B.fingerprint), network_ca(), CertificateAnchor.CA),
        (SITE_B, unpinned("site-b"), network_ca(), CertificateAnchor.CA),
        (SITE_B, None, network_ca(), CertificateAnchor.CA),
        # Where a site has pins one must match, CA or not (as the SWIM node decides).
        (SITE_B, site("site-b", pin="dd" * 32), network_ca(), None),
        (SITE_B, site("site-b", pin=SITE_B.fingerprint), NetworkCa(), CertificateAnchor.PIN),
        (SITE_B, None, NetworkCa(), None),
        (
            SELF_SIGNED_B,
            site("site-b", pin=SELF_SIGNED_B.fingerprint),
            network_ca(),
            CertificateAnchor.PIN,
        ),
        (SELF_SIGNED_B, unpinned("site-b"), network_ca(), None),
        (OTHER_CA_B, None, network_ca(), None),
        (OTHER_CA_B, None, network_ca(OTHER_CA), CertificateAnchor.CA),
    ],
    ids=[
        "ca-and-pin",
        "ca-no-pins",
        "ca-no-gridsite",
        "ca-but-pin-mismatch",
        "pin-no-ca-known",
        "no-ca-no-gridsite",
        "self-signed-pinned",
        "self-signed-unpinned",
        "another-ca",
        "that-ca-known",
    ],
)
def test_the_anchor_is_the_ca_where_it_vouches_else_a_matching_pin(
    certificate: IssuedCertificate,
    resource: GridSite | None,
    ca: NetworkCa,
    anchor: CertificateAnchor | None,
) -> None:
    known = site_certificate("site-b", verdict(certificate, "site-b", ca=ca), resource)
    assert known == SiteCertificate(
        "site-b", certificate.fingerprint, not_after(certificate), anchor, None
    )


def test_the_ca_vouches_only_for_the_site_its_certificate_names() -> None:
    advertised_as_c = verdict(SITE_B, "site-c")
    assert advertised_as_c is not None and not advertised_as_c.ca_signed
    known = site_certificate("site-c", advertised_as_c, site("site-c", pin=SITE_B.fingerprint))
    assert known is not None and known.anchor is CertificateAnchor.PIN


def test_an_expired_certificate_keeps_its_expiry_and_fingerprint_and_has_no_anchor() -> None:
    old = issued("site-b", now=T0 - timedelta(days=100))
    assert not_after(old) < T0
    known = site_certificate("site-b", verdict(old, "site-b"), site("site-b", pin=old.fingerprint))
    assert known is not None
    assert (known.fingerprint, known.not_after, known.anchor) == (
        old.fingerprint,
        not_after(old),
        None,
    )
    assert known.problem is not None and "expired" in known.problem


def test_an_unreadable_or_missing_certificate_is_not_known() -> None:
    unreadable = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
    assert site_certificate("site-b", verdict(unreadable, "site-b"), site("site-b")) is None
    assert site_certificate("site-b", None, site("site-b")) is None


def test_a_new_network_ca_makes_every_verdict_again() -> None:
    certs = AdvertisedCerts(RECHECK)
    before = certs.check("site-b", SITE_B.certificate_pem, T0)
    assert before is not None and not before.ca_signed
    certs.ca = network_ca()
    after = certs.check("site-b", SITE_B.certificate_pem, T0)
    assert after is not None and after.ca_signed
    certs.ca = network_ca()  # the same CA again: the verdict holds
    assert certs.check("site-b", SITE_B.certificate_pem, T0) is after


# --- the engine ----------------------------------------------------------------------------


class Pair:
    """site-a and site-b, each with a certificate of the mesh CA pinned by both, items
    exchanged at ``T0``."""

    def __init__(self, *, b_certificate: IssuedCertificate | None = None) -> None:
        self.a_cert = issued("site-a")
        self.b_cert = b_certificate or issued("site-b")
        sites = [
            site("site-a", pin=self.a_cert.fingerprint),
            site("site-b", pin=self.b_cert.fingerprint),
        ]
        self.a = engine("site-a", [], sites=sites)
        self.b = engine("site-b", [], sites=sites)
        for e, certificate in ((self.a, self.a_cert), (self.b, self.b_cert)):
            e.set_certificate(certificate.certificate_pem, T0)
            e.set_network_ca(network_ca())
        self.a.member_up("site-b", "site-b:7946", 1, T0)
        exchange([self.a, self.b], T0)


def expiry_in_status(e: SiteEngine, name: str) -> datetime | None:
    status = e.statuses()[("GridSite", name)]
    return status.certificate_not_after  # type: ignore[union-attr]


def test_a_site_knows_its_own_certificate_and_each_peers_advertised_one() -> None:
    pair = Pair()
    assert dict(pair.a.certificates) == {
        "site-a": SiteCertificate(
            "site-a", pair.a_cert.fingerprint, not_after(pair.a_cert), CertificateAnchor.CA, None
        ),
        "site-b": SiteCertificate(
            "site-b", pair.b_cert.fingerprint, not_after(pair.b_cert), CertificateAnchor.CA, None
        ),
    }
    assert expiry_in_status(pair.a, "site-a") == not_after(pair.a_cert)
    assert expiry_in_status(pair.a, "site-b") == not_after(pair.b_cert)


def test_without_the_network_ca_only_the_pins_vouch() -> None:
    certificate = issued("site-a")
    e = engine("site-a", [], sites=[site("site-a", pin=certificate.fingerprint)])
    e.set_certificate(certificate.certificate_pem, T0)
    e.refresh(T0)
    assert e.certificates["site-a"].anchor is CertificateAnchor.PIN
    e.set_network_ca(network_ca())
    e.refresh(T0)
    assert e.certificates["site-a"].anchor is CertificateAnchor.CA


def test_a_peer_that_leaves_takes_its_certificate_at_once() -> None:
    pair = Pair()
    pair.a.member_left("site-b", "site-b:7946", 1, T0 + timedelta(seconds=1))
    assert set(pair.a.certificates) == {"site-a"}
    pair.a.refresh(T0 + timedelta(seconds=1))
    assert set(pair.a.certificates) == {"site-a"}
    assert expiry_in_status(pair.a, "site-b") is None


def test_a_stale_peer_is_forgotten_with_its_certificate() -> None:
    pair = Pair()
    pair.a.member_down("site-b", "site-b:7946", 1, T0)
    later = T0 + timedelta(seconds=61)  # past the network's staleCandidateTtlSeconds
    pair.a.refresh(later)
    assert set(pair.a.certificates) == {"site-a"}


def test_a_rotated_certificate_replaces_the_old_one() -> None:
    pair = Pair()
    rotated = issued("site-b", now=T0 + timedelta(days=30))
    later = T0 + timedelta(days=30)
    pair.b.set_certificate(rotated.certificate_pem, later)
    exchange([pair.a, pair.b], later)
    known = pair.a.certificates["site-b"]
    assert (known.fingerprint, known.not_after) == (rotated.fingerprint, not_after(rotated))
    # The GridSite still pins the old one: nothing vouches for the new one yet.
    assert known.anchor is None
    assert expiry_in_status(pair.a, "site-b") == not_after(rotated)


def test_after_its_expiry_a_certificate_is_still_reported_with_its_date() -> None:
    pair = Pair()
    expiry = not_after(pair.b_cert)
    pair.a.refresh(expiry + timedelta(seconds=1))
    known = pair.a.certificates["site-b"]
    assert known.not_after == expiry
    assert known.anchor is None and known.problem is not None and "expired" in known.problem
    assert expiry_in_status(pair.a, "site-b") == expiry
    own = pair.a.certificates["site-a"]
    assert own.not_after == not_after(pair.a_cert) and own.problem is not None
