"""The advertised-certificate room on its own: the verdict on what a peer advertises on
the cert lane, kept until the certificate changes or time alone may change it, and the
``CertificateAdvertised`` condition it gives the peer's GridSite."""

from __future__ import annotations

from datetime import datetime, timedelta

from grid.crdt.state import GridState
from grid.engine.advertised import AdvertisedCert, AdvertisedCerts, advertised_condition
from grid.models.conditions import Condition, ConditionStatus, find_condition
from grid.trust import check_public_cert_pem, self_signed_certificate
from test_engine import FINGERPRINTS, T0, site
from test_engine_rooms_publishing import deliver

RECHECK = timedelta(seconds=10)
UNPARSABLE = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"


class CertLane:
    """site-a's replicated state, and site-b advertising certificates into it."""

    def __init__(self) -> None:
        self.peer = GridState("site-b")
        self.state = GridState("site-a")

    def advertise(self, pem: str, now: datetime) -> None:
        """site-b advertises ``pem``, and site-a receives all site-b's items."""
        self.peer.set_cert(pem, now.timestamp())
        deliver(self.peer, self.state, now)


def advertising(pem: str) -> CertLane:
    lane = CertLane()
    lane.advertise(pem, T0)
    return lane


def test_a_site_that_advertises_nothing_has_no_verdict() -> None:
    assert AdvertisedCerts(RECHECK).verdict("site-b", GridState("site-a"), T0) is None


def test_a_valid_certificate_gets_its_fingerprint_and_no_problem() -> None:
    cert = self_signed_certificate("site-b", now=T0)
    verdict = AdvertisedCerts(RECHECK).verdict(
        "site-b", advertising(cert.certificate_pem).state, T0
    )
    leaf = check_public_cert_pem(cert.certificate_pem, T0)
    assert verdict == AdvertisedCert(
        cert.certificate_pem, cert.fingerprint, None, T0, T0 + RECHECK, leaf, ca_signed=False
    )


def test_an_unparsable_certificate_is_discarded_with_the_reason() -> None:
    verdict = AdvertisedCerts(RECHECK).verdict("site-b", advertising(UNPARSABLE).state, T0)
    assert verdict is not None
    assert verdict.fingerprint is None
    assert verdict.problem is not None
    assert verdict.problem.startswith("the advertised certificate was discarded: ")
    assert "parsable" in verdict.problem
    assert verdict.recheck_at == T0 + RECHECK


def test_an_expired_certificate_is_discarded() -> None:
    old = self_signed_certificate("site-b", now=T0 - timedelta(days=2), valid_for=timedelta(days=1))
    verdict = AdvertisedCerts(RECHECK).verdict("site-b", advertising(old.certificate_pem).state, T0)
    assert verdict is not None and verdict.problem is not None
    assert "expired" in verdict.problem


def test_the_verdict_is_kept_until_the_recheck_interval_is_over() -> None:
    cert = self_signed_certificate("site-b", now=T0)
    state = advertising(cert.certificate_pem).state
    certs = AdvertisedCerts(RECHECK)
    first = certs.verdict("site-b", state, T0)
    assert certs.verdict("site-b", state, T0 + RECHECK - timedelta(microseconds=1)) is first
    again = certs.verdict("site-b", state, T0 + RECHECK)
    assert again is not first
    assert again is not None
    assert (again.checked_at, again.recheck_at) == (T0 + RECHECK, T0 + 2 * RECHECK)


def test_a_clock_that_went_back_checks_again() -> None:
    cert = self_signed_certificate("site-b", now=T0 - timedelta(hours=1))
    state = advertising(cert.certificate_pem).state
    certs = AdvertisedCerts(RECHECK)
    first = certs.verdict("site-b", state, T0)
    earlier = T0 - timedelta(seconds=1)
    again = certs.verdict("site-b", state, earlier)
    assert again is not first
    assert again is not None and again.checked_at == earlier


def test_the_verdict_is_checked_again_at_the_leafs_expiry_when_that_comes_first() -> None:
    cert = self_signed_certificate("site-b", now=T0, valid_for=timedelta(hours=1))
    expiry = check_public_cert_pem(cert.certificate_pem, T0).not_after
    state = advertising(cert.certificate_pem).state
    certs = AdvertisedCerts(timedelta(days=1))
    first = certs.verdict("site-b", state, T0)
    assert first is not None
    assert first.recheck_at == expiry + timedelta(microseconds=1)
    assert certs.verdict("site-b", state, expiry) is first
    after = certs.verdict("site-b", state, first.recheck_at)
    assert after is not None and after.problem is not None and "expired" in after.problem


def test_a_new_certificate_is_checked_at_once() -> None:
    first = self_signed_certificate("site-b", now=T0)
    lane = advertising(first.certificate_pem)
    certs = AdvertisedCerts(RECHECK)
    assert certs.verdict("site-b", lane.state, T0) is not None
    rotated = self_signed_certificate("site-b", now=T0)
    lane.advertise(rotated.certificate_pem, T0 + timedelta(seconds=1))
    verdict = certs.verdict("site-b", lane.state, T0 + timedelta(seconds=1))
    assert verdict is not None
    assert (verdict.pem, verdict.fingerprint) == (rotated.certificate_pem, rotated.fingerprint)


def test_the_verdict_is_dropped_when_the_site_stops_advertising() -> None:
    cert = self_signed_certificate("site-b", now=T0)
    lane = advertising(cert.certificate_pem)
    certs = AdvertisedCerts(RECHECK)
    first = certs.verdict("site-b", lane.state, T0)
    lane.state.forget_site("site-b")
    assert certs.verdict("site-b", lane.state, T0 + timedelta(seconds=1)) is None
    # Advertised again within the interval: checked anew, not the verdict held before.
    lane.advertise(cert.certificate_pem, T0 + timedelta(seconds=2))
    again = certs.verdict("site-b", lane.state, T0 + timedelta(seconds=2))
    assert again is not first
    assert again is not None and again.checked_at == T0 + timedelta(seconds=2)


def test_forget_and_clear_drop_held_verdicts() -> None:
    cert = self_signed_certificate("site-b", now=T0)
    state = advertising(cert.certificate_pem).state
    certs = AdvertisedCerts(RECHECK)
    first = certs.verdict("site-b", state, T0)
    certs.forget("site-b")
    second = certs.verdict("site-b", state, T0)
    assert second is not first
    certs.clear()
    assert certs.verdict("site-b", state, T0) is not second


# --- the condition ---------------------------------------------------------------------


def condition(conditions: list[Condition]) -> tuple[ConditionStatus, str, str]:
    found = find_condition(conditions, "CertificateAdvertised")
    assert found is not None
    return (found.status, found.reason, found.message)


def verdict_for(fingerprint: str | None, problem: str | None = None) -> AdvertisedCert:
    return AdvertisedCert("pem", fingerprint, problem, T0, T0 + RECHECK)


def test_nothing_advertised_is_unknown() -> None:
    conditions = advertised_condition([], site("site-b"), None, T0)
    assert condition(conditions) == (
        ConditionStatus.UNKNOWN,
        "NotAdvertised",
        "no certificate received on the cert lane",
    )


def test_a_discarded_certificate_is_false_with_the_problem() -> None:
    verdict = verdict_for(None, "the advertised certificate was discarded: expired")
    conditions = advertised_condition([], site("site-b"), verdict, T0)
    assert condition(conditions) == (
        ConditionStatus.FALSE,
        "CertificateDiscarded",
        "the advertised certificate was discarded: expired",
    )


def test_a_certificate_matching_a_pin_is_true() -> None:
    conditions = advertised_condition([], site("site-b"), verdict_for(FINGERPRINTS["site-b"]), T0)
    assert condition(conditions)[:2] == (ConditionStatus.TRUE, "AdvertisedPinned")


def test_a_certificate_matching_no_pin_is_false_and_names_its_fingerprint() -> None:
    other = "dd" * 32
    status, reason, message = condition(
        advertised_condition([], site("site-b"), verdict_for(other), T0)
    )
    assert (status, reason) == (ConditionStatus.FALSE, "AdvertisedNotPinned")
    assert other in message


def test_the_condition_replaces_the_previous_one_and_keeps_the_others() -> None:
    pinned = advertised_condition([], site("site-b"), verdict_for(FINGERPRINTS["site-b"]), T0)
    pinned.append(pinned[0].model_copy(update={"type": "Trusted"}))
    later = T0 + timedelta(seconds=5)
    updated = advertised_condition(pinned, site("site-b"), None, later)
    assert [c.type for c in updated] == ["CertificateAdvertised", "Trusted"]
    assert updated[0].status is ConditionStatus.UNKNOWN
    assert updated[0].last_transition_time == later
    assert updated[1] == pinned[1]
