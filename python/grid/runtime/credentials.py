"""A site's SWIM credentials from the PEM the shells hold: the site certificate and key
(the agent's ``--tls-dir``, the operator's site TLS Secret), the network CA, and the pins
of the GridSites. Pure: text in, DER out, or an error that never quotes key material.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from grid.errors import CertificateRejected, SiteCredentialsError, TrustConfigError
from grid.membership import SwimCredentials
from grid.models.network import GridNetwork
from grid.trust.fingerprint import normalize_fingerprint
from grid.trust.pem import certificate_ders


def swim_credentials(
    certificate_pem: str | None,
    private_key_pem: str | None,
    ca_pem: str | None,
    pins: Mapping[str, Iterable[str]] | None = None,
) -> SwimCredentials:
    """The credentials of a SWIM node. The certificate and key are required: every message
    a site sends is signed with that key. ``pins`` map site names to the fingerprints their
    GridSites pin (64 hex digits, any spelling :func:`normalize_fingerprint` reads)."""
    if certificate_pem is None or private_key_pem is None:
        raise SiteCredentialsError(
            "SWIM needs the site certificate and its private key: every message and item a "
            "site sends is signed with it"
        )
    try:
        chain = tuple(certificate_ders(certificate_pem))
    except CertificateRejected as error:
        raise SiteCredentialsError(f"the site certificate is unusable: {error}") from None
    if not chain:
        raise SiteCredentialsError("the site certificate holds no CERTIFICATE block")
    anchors: tuple[bytes, ...] = ()
    if ca_pem is not None:
        try:
            anchors = tuple(certificate_ders(ca_pem))
        except CertificateRejected as error:
            raise SiteCredentialsError(f"the CA certificate is unusable: {error}") from None
    return SwimCredentials(
        certificate_chain=chain,
        private_key=_pkcs8(private_key_pem),
        trust_anchors=anchors,
        pins=swim_pins(pins or {}),
    )


def revoked_fingerprints(network: GridNetwork) -> tuple[bytes, ...]:
    """The SHA-256 digests of the certificates ``network`` revoked, as a SWIM node compares
    them (the model stored them as 64 lowercase hex digits)."""
    tls = network.spec.tls
    return tuple(bytes.fromhex(f) for f in tls.revoked_certificates) if tls else ()


def swim_pins(pins: Mapping[str, Iterable[str]]) -> dict[str, tuple[bytes, ...]]:
    """Fingerprint texts as the 32-byte digests a SWIM node compares."""
    out: dict[str, tuple[bytes, ...]] = {}
    for site, fingerprints in pins.items():
        try:
            out[site] = tuple(bytes.fromhex(normalize_fingerprint(f)) for f in fingerprints)
        except TrustConfigError as error:
            raise SiteCredentialsError(f"the pin of site {site!r}: {error}") from None
    return out


def _pkcs8(private_key_pem: str) -> bytes:
    try:
        key = serialization.load_pem_private_key(private_key_pem.encode("ascii"), None)
    except (ValueError, TypeError, UnicodeEncodeError):
        # The parser's message may quote the input; say only what kind of thing is wrong.
        raise SiteCredentialsError(
            "the site private key is not an unencrypted PEM private key"
        ) from None
    usable = isinstance(key, ed25519.Ed25519PrivateKey) or (
        isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP256R1)
    )
    if not usable:
        raise SiteCredentialsError(
            "the site private key must be ECDSA P-256 or Ed25519 (SWIM signatures are 64 bytes)"
        )
    return key.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
