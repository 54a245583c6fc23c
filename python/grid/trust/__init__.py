"""Site trust: certificate fingerprints and pins, structural checks on certificate PEMs,
a small certificate authority, the TLS probe of a site, and the trust verdict.

``fingerprint``, ``pem`` and ``site`` are pure; ``authority`` writes files when asked and
``probe`` does network I/O.
"""

from grid.trust.authority import (
    CertificateAuthority,
    IssuedCertificate,
    PemFiles,
    self_signed_certificate,
)
from grid.trust.fingerprint import (
    PinSlot,
    TrustPins,
    fingerprint,
    fingerprints_equal,
    matches_pin,
    normalize_fingerprint,
)
from grid.trust.pem import (
    MAX_PEM_BLOCKS,
    MAX_PEM_BYTES,
    CertificateInfo,
    check_public_cert_pem,
)
from grid.trust.probe import build_client_context, parse_address, probe_site
from grid.trust.site import ProbeResult, TrustStatus, TrustVerdict, decide_site_trust

__all__ = [
    "MAX_PEM_BLOCKS",
    "MAX_PEM_BYTES",
    "CertificateAuthority",
    "CertificateInfo",
    "IssuedCertificate",
    "PemFiles",
    "PinSlot",
    "ProbeResult",
    "TrustPins",
    "TrustStatus",
    "TrustVerdict",
    "build_client_context",
    "check_public_cert_pem",
    "decide_site_trust",
    "fingerprint",
    "fingerprints_equal",
    "matches_pin",
    "normalize_fingerprint",
    "parse_address",
    "probe_site",
    "self_signed_certificate",
]
