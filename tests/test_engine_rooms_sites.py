"""The site-trust room on its own: where each site is reached, each GridSite's phase fed
by membership, the probe of its egress and the certificate it advertises, and the sites
made routable (Active ones, never this site)."""

from __future__ import annotations

from datetime import datetime, timedelta

from grid.crdt.records import GatewayRecord
from grid.crdt.state import GridState
from grid.engine.advertised import AdvertisedCerts
from grid.engine.certificates import KnownCertificates
from grid.engine.events import EventLog
from grid.engine.inputs import SiteInputs
from grid.engine.members import Members
from grid.engine.probes import Probes
from grid.engine.sites import SiteTrust, site_egress
from grid.models.conditions import ConditionStatus, find_condition
from grid.models.phases import MemberState
from grid.models.site import EgressTlsMode, GridSite, GridSitePhase, GridSiteStatus, TrustPin
from grid.render.consumer import ClusterEndpoint
from grid.trust import self_signed_certificate
from grid.trust.site import ProbeResult
from test_engine import FINGERPRINTS, SITES, T0, network, site
from test_engine_rooms_publishing import deliver


def without_egress(name: str) -> GridSite:
    resource = site(name).model_copy(deep=True)
    resource.spec.egress = None
    return resource


def advertising_gateway(state: GridState, peer: str, tls_mode: str) -> None:
    """``peer`` advertises a gateway at ``<peer>.advertised:9443``, received by ``state``."""
    published = GridState(peer)
    published.set_gateway(GatewayRecord(f"{peer}.advertised:9443", tls_mode, None), T0.timestamp())
    deliver(published, state, T0)


class Trust:
    """site-a's trust in the sites, and the rooms it reads."""

    def __init__(self, sites: list[GridSite] = SITES) -> None:
        self.inputs = SiteInputs(network(), "site-a")
        self.inputs.set_resources(network(), sites, [])
        self.inputs.membership_running = True
        self.state = GridState("site-a")
        self.members = Members("site-a")
        self.probes = Probes(10.0)
        self.advertised = AdvertisedCerts(timedelta(seconds=10))
        self.certificates = KnownCertificates("site-a")
        self.events = EventLog()
        self.trust = SiteTrust("site-a")

    def probed(self, name: str, fingerprint: str | None, error: str | None = None) -> None:
        """``name`` alive, and a probe of its egress at T0 that read ``fingerprint``."""
        self.members.up(name, f"{name}:7946", 1, T0)
        mode = EgressTlsMode.MUTUAL_TLS
        endpoint = site_egress(self.inputs, self.state, name)
        if endpoint is not None:
            mode = endpoint.tls_mode
        self.probes.observe(name, ProbeResult(True, fingerprint, error, 0.001), T0, mode)

    def evaluate(self, now: datetime = T0) -> bool:
        self.certificates.refresh(self.inputs, self.state, self.advertised, now)
        return self.trust.evaluate(
            self.inputs,
            self.state,
            self.members,
            self.probes,
            self.advertised,
            self.events,
            now,
            certificates=self.certificates.view,
        )

    def status(self, name: str) -> GridSiteStatus:
        return dict(self.trust.statuses())[name]


# --- where a site is reached -----------------------------------------------------------


def test_a_sites_gridsite_egress_comes_before_what_it_advertises() -> None:
    t = Trust()
    advertising_gateway(t.state, "site-b", "tls")
    endpoint = site_egress(t.inputs, t.state, "site-b")
    assert endpoint == ClusterEndpoint("site-b.test:8443", EgressTlsMode.MUTUAL_TLS)


def test_a_site_without_an_egress_is_reached_where_it_advertises() -> None:
    t = Trust([site("site-a"), without_egress("site-b")])
    assert site_egress(t.inputs, t.state, "site-b") is None
    advertising_gateway(t.state, "site-b", "tls")
    advertising_gateway(t.state, "site-d", "plaintext")  # no GridSite at all
    assert site_egress(t.inputs, t.state, "site-b") == ClusterEndpoint(
        "site-b.advertised:9443", EgressTlsMode.TLS
    )
    assert site_egress(t.inputs, t.state, "site-d") == ClusterEndpoint(
        "site-d.advertised:9443", EgressTlsMode.PLAINTEXT
    )


def test_an_advertised_gateway_with_an_unknown_tls_mode_is_not_used() -> None:
    t = Trust([site("site-a"), without_egress("site-b")])
    advertising_gateway(t.state, "site-b", "carrier_pigeon")
    assert site_egress(t.inputs, t.state, "site-b") is None


def test_this_sites_own_advertisement_is_never_its_egress() -> None:
    t = Trust([without_egress("site-a")])
    t.state.set_gateway(GatewayRecord("site-a.advertised:9443", "tls"), T0.timestamp())
    assert site_egress(t.inputs, t.state, "site-a") is None


# --- phases and trust ------------------------------------------------------------------


def test_a_peer_whose_probe_matches_its_pin_is_trusted_and_reported_once() -> None:
    t = Trust()
    t.probed("site-b", FINGERPRINTS["site-b"])
    assert t.evaluate() is True
    assert t.trust.trusted == {"site-b"}
    status = t.status("site-b")
    assert status.phase is GridSitePhase.ACTIVE
    assert (status.observed_fingerprint, status.matched_pin) == (
        FINGERPRINTS["site-b"],
        TrustPin.CURRENT,
    )
    assert (status.egress_address, status.last_seen_alive) == ("site-b.test:8443", T0)
    assert status.last_probe is not None and status.last_probe.reachable
    assert t.evaluate(T0 + timedelta(seconds=1)) is False


def test_a_peer_presenting_another_certificate_is_not_trusted() -> None:
    t = Trust()
    t.probed("site-b", "dd" * 32)
    assert t.evaluate() is False
    assert t.trust.trusted == frozenset()
    status = t.status("site-b")
    assert status.phase is GridSitePhase.CONNECTING
    assert (status.observed_fingerprint, status.matched_pin) == ("dd" * 32, None)


def test_this_site_is_never_among_the_trusted() -> None:
    t = Trust()
    t.probed("site-a", FINGERPRINTS["site-a"])
    t.evaluate()
    own = t.status("site-a")
    assert own.phase is GridSitePhase.ACTIVE
    assert t.trust.trusted == frozenset()
    assert find_condition(own.conditions, "CertificateAdvertised") is None
    peer = t.status("site-b")
    assert find_condition(peer.conditions, "CertificateAdvertised") is not None


def test_a_failed_probe_makes_a_trusted_peer_unreachable_and_untrusted() -> None:
    t = Trust()
    t.probed("site-b", FINGERPRINTS["site-b"])
    t.evaluate()
    later = T0 + timedelta(seconds=10)
    refused = ProbeResult(True, FINGERPRINTS["site-b"], "handshake refused", 0.001)
    t.probes.observe("site-b", refused, later, EgressTlsMode.MUTUAL_TLS)
    assert t.evaluate(later) is True
    assert t.trust.trusted == frozenset()
    assert t.trust.unreachable() == ("site-b",)
    assert t.status("site-b").phase is GridSitePhase.UNREACHABLE
    assert any(e.event.reason == "ProbeFailed" for e in t.events.take())


def test_a_peer_whose_certificate_the_network_revoked_is_no_longer_trusted() -> None:
    t = Trust()
    t.probed("site-b", FINGERPRINTS["site-b"])
    t.evaluate()
    assert t.trust.trusted == {"site-b"}
    revoking = network(tls={"revokedCertificates": [FINGERPRINTS["site-b"]]})
    t.inputs.set_resources(revoking, SITES, [])
    later = T0 + timedelta(seconds=10)
    t.probes.observe(
        "site-b",
        ProbeResult(True, FINGERPRINTS["site-b"], None, 0.001),
        later,
        EgressTlsMode.MUTUAL_TLS,
    )
    assert t.evaluate(later) is True
    assert t.trust.trusted == frozenset()
    status = t.status("site-b")
    assert status.phase is GridSitePhase.CONNECTING
    trusted = find_condition(status.conditions, "Trusted")
    assert trusted is not None and trusted.status is ConditionStatus.FALSE
    assert trusted.reason == "CertificateRevoked"
    assert "spec.tls.revokedCertificates" in trusted.message
    assert any(e.event.reason == "CertificateRevoked" for e in t.events.take())


def test_a_site_removed_from_the_resources_loses_its_status_and_trust() -> None:
    t = Trust()
    t.probed("site-b", FINGERPRINTS["site-b"])
    t.evaluate()
    t.inputs.set_resources(network(), [site("site-a"), site("site-c")], [])
    assert t.evaluate(T0 + timedelta(seconds=1)) is True
    assert t.trust.trusted == frozenset()
    assert [name for name, _ in t.trust.statuses()] == ["site-a", "site-c"]


def test_a_settled_status_still_records_when_an_alive_peer_was_last_seen() -> None:
    t = Trust()
    t.probed("site-b", FINGERPRINTS["site-b"])
    t.probed("site-c", FINGERPRINTS["site-c"])
    for seconds in (0, 1, 2):
        t.evaluate(T0 + timedelta(seconds=seconds))
    assert t.status("site-b").last_seen_alive == T0 + timedelta(seconds=2)
    t.members.gone("site-c", "site-c:7946", 1, MemberState.DOWN, T0 + timedelta(seconds=2))
    for seconds in (3, 4):
        t.evaluate(T0 + timedelta(seconds=seconds))
    assert t.status("site-b").last_seen_alive == T0 + timedelta(seconds=4)
    assert t.status("site-c").last_seen_alive == T0 + timedelta(seconds=2)


def test_a_plaintext_peer_is_pinned_by_the_certificate_it_advertises() -> None:
    cert = self_signed_certificate("site-b", now=T0)
    plaintext = site("site-b", tls_mode="plaintext", pin=cert.fingerprint)
    t = Trust([site("site-a"), plaintext])
    peer = GridState("site-b")
    peer.set_cert(cert.certificate_pem, T0.timestamp())
    deliver(peer, t.state, T0)
    t.probed("site-b", None)
    assert t.evaluate() is True
    assert t.trust.trusted == {"site-b"}
    status = t.status("site-b")
    assert (status.observed_fingerprint, status.matched_pin) == (cert.fingerprint, TrustPin.CURRENT)
    advertised = find_condition(status.conditions, "CertificateAdvertised")
    assert advertised is not None and advertised.status is ConditionStatus.TRUE


def test_a_plaintext_peer_advertising_nothing_is_not_trusted() -> None:
    t = Trust([site("site-a"), site("site-b", tls_mode="plaintext")])
    t.probed("site-b", None)
    assert t.evaluate() is False
    status = t.status("site-b")
    assert (status.phase, status.observed_fingerprint) == (GridSitePhase.CONNECTING, None)
    advertised = find_condition(status.conditions, "CertificateAdvertised")
    assert advertised is not None and advertised.status is ConditionStatus.UNKNOWN
    # Not yet known is not a mismatch: a site that just joined probes the egresses it
    # learned before the certificates that pin them have all arrived.
    trusted = find_condition(status.conditions, "Trusted")
    assert trusted is not None and trusted.status is ConditionStatus.UNKNOWN
    assert trusted.reason == "CertificateNotAdvertised"


def test_this_sites_plaintext_egress_is_pinned_by_its_own_certificate() -> None:
    """A plaintext egress presents no certificate, and a site never receives its own
    advertisement: its own certificate is what its pin is checked against, so that the
    site's own GridSite becomes Active (it stayed Connecting, "the site presented no
    certificate", in every plaintext mesh)."""
    cert = self_signed_certificate("site-a", now=T0)
    t = Trust([site("site-a", tls_mode="plaintext", pin=cert.fingerprint), site("site-b")])
    t.inputs.cert_pem = cert.certificate_pem
    t.probed("site-a", None)
    t.evaluate()
    status = t.status("site-a")
    assert (status.phase, status.matched_pin) == (GridSitePhase.ACTIVE, TrustPin.CURRENT)
    assert status.observed_fingerprint == cert.fingerprint
    assert t.trust.trusted == frozenset(), "never among the sites it routes to"
    # Another certificate than the pinned one is no match.
    t = Trust([site("site-a", tls_mode="plaintext"), site("site-b")])
    t.inputs.cert_pem = cert.certificate_pem
    t.probed("site-a", None)
    t.evaluate()
    status = t.status("site-a")
    assert status.phase is GridSitePhase.CONNECTING
    trusted = find_condition(status.conditions, "Trusted")
    assert trusted is not None and trusted.reason == "FingerprintMismatch"
    assert "matches neither" in trusted.message
