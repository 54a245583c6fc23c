"""Certificate fingerprints and pins.

A GridSite's ``trust.certFingerprint`` pins the SHA-256 of the DER encoding of the leaf
certificate the site presents, written as 64 lowercase hex digits. Pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from enum import StrEnum

from cryptography import x509

from grid.errors import CertificateRejected, TrustConfigError
from grid.trust.pem import certificate_ders

FINGERPRINT_HEX_DIGITS = 64

# Spellings tools print in front of a SHA-256 fingerprint (`openssl x509 -fingerprint`
# prints "SHA256 Fingerprint=").
_PREFIX = re.compile(r"^(?:sha-?256(?:\s+fingerprint)?\s*[:=]\s*)", re.IGNORECASE)
_PLAIN = re.compile(r"^[0-9a-f]{64}$")
_COLON_PAIRS = re.compile(r"^[0-9a-f]{2}(?::[0-9a-f]{2}){31}$")


def fingerprint(certificate: str | bytes) -> str:
    """SHA-256 of the leaf certificate's DER, as 64 lowercase hex digits.

    ``certificate`` is PEM (text or bytes; the first CERTIFICATE block is the leaf) or DER
    bytes. Raises :class:`~grid.errors.CertificateRejected` when it holds no parsable
    certificate, so a typo can never produce a plausible-looking pin.
    """
    der = _leaf_der(certificate)
    try:
        x509.load_der_x509_certificate(der)
    except ValueError:
        raise CertificateRejected("malformed", "the data is not a DER X.509 certificate") from None
    return hashlib.sha256(der).hexdigest()


def _leaf_der(certificate: str | bytes) -> bytes:
    if isinstance(certificate, bytes) and not certificate.lstrip().startswith(b"-----BEGIN"):
        return certificate
    text = (
        certificate.decode("ascii", errors="replace")
        if isinstance(certificate, bytes)
        else certificate
    )
    ders = certificate_ders(text)
    if not ders:
        raise CertificateRejected("not_pem", "no CERTIFICATE block found")
    return ders[0]


def normalize_fingerprint(text: str) -> str:
    """Canonical form of a SHA-256 fingerprint: 64 lowercase hex digits.

    Accepts upper or lower case, colon-separated pairs and a leading ``sha256:`` or
    ``SHA256 Fingerprint=``. Raises :class:`~grid.errors.TrustConfigError` otherwise; the
    message gives the shape that was expected, never the text itself.
    """
    candidate = _PREFIX.sub("", text.strip()).lower()
    if _PLAIN.match(candidate):
        return candidate
    if _COLON_PAIRS.match(candidate):
        return candidate.replace(":", "")
    raise TrustConfigError(
        "a certificate fingerprint must be a SHA-256 digest: 64 hex digits, optionally as "
        f"colon-separated pairs (got {len(text)} characters)"
    )


def fingerprints_equal(left: str, right: str) -> bool:
    """Whether two fingerprints (any accepted spelling) name the same certificate.

    Compares in constant time.
    """
    return hmac.compare_digest(normalize_fingerprint(left), normalize_fingerprint(right))


class PinSlot(StrEnum):
    """Which pin a presented certificate matched."""

    PRIMARY = "primary"
    PREVIOUS = "previous"


@dataclass(frozen=True, slots=True)
class TrustPins:
    """A site's pinned fingerprints: the current one and, while a certificate rotation is
    under way, the one it replaces. Both are normalized on construction."""

    primary: str
    previous: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "primary", normalize_fingerprint(self.primary))
        if self.previous is not None:
            object.__setattr__(self, "previous", normalize_fingerprint(self.previous))


def matches_pin(observed: str, pins: TrustPins) -> PinSlot | None:
    """Which pin ``observed`` matches, or ``None``.

    Both pins are always compared (in constant time), so the timing tells nothing about
    which one matched.
    """
    presented = normalize_fingerprint(observed)
    primary = hmac.compare_digest(presented, pins.primary)
    previous = pins.previous is not None and hmac.compare_digest(presented, pins.previous)
    if primary:
        return PinSlot.PRIMARY
    if previous:
        return PinSlot.PREVIOUS
    return None
