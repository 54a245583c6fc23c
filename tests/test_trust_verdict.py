"""The pure trust verdict: Active only on a fingerprint match over an established session."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from grid.trust import PinSlot, ProbeResult, TrustPins, TrustStatus, decide_site_trust

PINNED = "a" * 64
PREVIOUS = "b" * 64
OTHER = "c" * 64


def probe(
    *, reachable: bool = True, fingerprint: str | None = PINNED, error: str | None = None
) -> ProbeResult:
    return ProbeResult(reachable=reachable, fingerprint=fingerprint, error=error, latency_s=0.01)


def test_a_match_over_an_established_session_is_trusted() -> None:
    verdict = decide_site_trust(probe(), TrustPins(PINNED))
    assert verdict.trusted
    assert verdict.status is TrustStatus.TRUSTED
    assert verdict.matched is PinSlot.PRIMARY
    assert verdict.reason == "the certificate matches the pinned fingerprint"


def test_without_pins_nothing_is_trusted() -> None:
    verdict = decide_site_trust(probe(), None)
    assert verdict.status is TrustStatus.NOT_PINNED
    assert not verdict.trusted


def test_an_unreachable_site_says_why() -> None:
    verdict = decide_site_trust(
        probe(reachable=False, fingerprint=None, error="connection refused"), TrustPins(PINNED)
    )
    assert verdict.status is TrustStatus.UNREACHABLE
    assert verdict.reason == "site unreachable: connection refused"


def test_a_handshake_that_never_showed_a_certificate_fails() -> None:
    verdict = decide_site_trust(
        probe(fingerprint=None, error="TLS handshake failed: wrong version number"),
        TrustPins(PINNED),
    )
    assert verdict.status is TrustStatus.HANDSHAKE_FAILED
    assert "wrong version number" in verdict.reason


def test_a_mismatch_outranks_a_later_session_error() -> None:
    verdict = decide_site_trust(
        probe(fingerprint=OTHER, error="the peer refused the TLS session"),
        TrustPins(PINNED, previous=PREVIOUS),
    )
    assert verdict.status is TrustStatus.FINGERPRINT_MISMATCH
    assert OTHER in verdict.reason
    assert "or the previous pin" in verdict.reason


def test_a_match_with_a_refused_session_is_not_trusted() -> None:
    verdict = decide_site_trust(
        probe(error="the peer refused the TLS session: certificate required"),
        TrustPins(PINNED),
    )
    assert verdict.status is TrustStatus.HANDSHAKE_FAILED
    assert verdict.matched is PinSlot.PRIMARY
    assert "certificate required" in verdict.reason


def test_the_previous_pin_is_trusted_and_says_so() -> None:
    verdict = decide_site_trust(probe(fingerprint=PREVIOUS), TrustPins(PINNED, previous=PREVIOUS))
    assert verdict.trusted
    assert verdict.matched is PinSlot.PREVIOUS
    assert "rotation" in verdict.reason


fingerprints = st.sampled_from([PINNED, PREVIOUS, OTHER, None])


@given(
    reachable=st.booleans(),
    fingerprint=fingerprints,
    error=st.sampled_from([None, "boom"]),
    previous=st.sampled_from([None, PREVIOUS]),
    pinned=st.booleans(),
)
def test_trusted_exactly_when_an_established_session_matches_a_pin(
    reachable: bool, fingerprint: str | None, error: str | None, previous: str | None, pinned: bool
) -> None:
    pins = TrustPins(PINNED, previous=previous) if pinned else None
    verdict = decide_site_trust(
        probe(reachable=reachable, fingerprint=fingerprint, error=error), pins
    )
    expected = (
        pins is not None
        and reachable
        and error is None
        and fingerprint is not None
        and fingerprint in {pins.primary, pins.previous}
    )
    assert verdict.trusted == expected
    assert verdict.reason
