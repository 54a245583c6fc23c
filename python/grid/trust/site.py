"""Deciding whether a site is trusted, from what a TLS probe saw and what the GridSite pins.

A GridSite becomes Active only when its probe reached it, completed a TLS session, and the
leaf certificate it presented matches the pinned fingerprint (or, during a rotation, the
previous pin). Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from grid.trust.fingerprint import PinSlot, TrustPins, matches_pin


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """The outcome of one TLS probe of a site's egress address.

    ``reachable``: a TCP connection was established. ``fingerprint``: SHA-256 of the leaf
    certificate the site presented (``None`` when the handshake never got that far).
    ``error``: why the probe did not end in an established TLS session, or ``None`` if it
    did. ``latency_s``: time to connect and complete the handshake.
    """

    reachable: bool
    fingerprint: str | None
    error: str | None
    latency_s: float

    @property
    def ok(self) -> bool:
        """A TLS session was established and the peer's certificate was read."""
        return self.error is None and self.fingerprint is not None


class TrustStatus(StrEnum):
    """The verdict's kind; the values read as condition reasons."""

    TRUSTED = "Trusted"
    NOT_PINNED = "NotPinned"
    UNREACHABLE = "Unreachable"
    HANDSHAKE_FAILED = "HandshakeFailed"
    FINGERPRINT_MISMATCH = "FingerprintMismatch"


@dataclass(frozen=True, slots=True)
class TrustVerdict:
    """Whether a site may be Active, and a sentence saying why."""

    status: TrustStatus
    reason: str
    matched: PinSlot | None = None

    @property
    def trusted(self) -> bool:
        return self.status is TrustStatus.TRUSTED


def decide_site_trust(probe: ProbeResult, pins: TrustPins | None) -> TrustVerdict:
    """Judge a probe against a site's pins.

    A fingerprint mismatch is reported ahead of any later handshake error, because it is
    the finding an operator must act on.
    """
    if pins is None:
        return TrustVerdict(
            TrustStatus.NOT_PINNED,
            "no trust fingerprint is configured for this site, so it cannot become Active",
        )
    if not probe.reachable:
        return TrustVerdict(TrustStatus.UNREACHABLE, f"site unreachable: {probe.error}")
    if probe.fingerprint is None:
        return TrustVerdict(TrustStatus.HANDSHAKE_FAILED, f"TLS handshake failed: {probe.error}")
    matched = matches_pin(probe.fingerprint, pins)
    if matched is None:
        pinned = "the pinned fingerprint" + (" or the previous pin" if pins.previous else "")
        return TrustVerdict(
            TrustStatus.FINGERPRINT_MISMATCH,
            f"the site presented a certificate with SHA-256 {probe.fingerprint}, "
            f"which does not match {pinned}",
        )
    if probe.error is not None:
        return TrustVerdict(
            TrustStatus.HANDSHAKE_FAILED,
            f"the certificate matches the {matched} pin, but the TLS session failed: {probe.error}",
            matched,
        )
    if matched is PinSlot.PREVIOUS:
        reason = "the certificate matches the previous pin (certificate rotation in progress)"
    else:
        reason = "the certificate matches the pinned fingerprint"
    return TrustVerdict(TrustStatus.TRUSTED, reason, matched)
