"""Structural checks for certificate PEMs that travel between sites.

A site advertises its public certificate on the cert lane; a peer accepts the message only
if it is a small, well-formed bundle of X.509 certificates and nothing else. Anything that
looks like private key material is refused outright, whatever else the message holds.
Pure: no I/O; validity is judged against the ``now`` the caller passes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from cryptography import x509

from grid.errors import CertificateRejected, TrustConfigError

MAX_PEM_BYTES = 16 * 1024
MAX_PEM_BLOCKS = 4

_CERTIFICATE_LABEL = "CERTIFICATE"
# Any spelling of a private key marker: "PRIVATE KEY" in PKCS#8, RSA, EC, DSA, ENCRYPTED and
# OPENSSH armour, in any case and with any separator between the two words.
_PRIVATE_KEY_TEXT = re.compile(r"PRIVATE[\s_-]*KEY", re.IGNORECASE)
_PRIVATE_KEY_BYTES = re.compile(rb"PRIVATE[\s_-]*KEY", re.IGNORECASE)
_BLOCK = re.compile(
    r"-----BEGIN (?P<label>[A-Z0-9 ]{1,64})-----(?P<body>[A-Za-z0-9+/=\s]*?)"
    r"-----END (?P<end>[A-Z0-9 ]{1,64})-----"
)


@dataclass(frozen=True, slots=True)
class CertificateInfo:
    """What a peer learns from an accepted certificate PEM (all of it public)."""

    fingerprint: str
    subject: str
    issuer: str
    not_before: datetime
    not_after: datetime
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...]
    is_ca: bool
    chain_length: int


def check_public_cert_pem(
    pem: str | bytes,
    now: datetime,
    *,
    max_bytes: int = MAX_PEM_BYTES,
    max_blocks: int = MAX_PEM_BLOCKS,
) -> CertificateInfo:
    """Accept a bundle of public certificates (leaf first) or raise
    :class:`~grid.errors.CertificateRejected` saying why.

    Refused: input over ``max_bytes``, anything containing a private key marker, non-ASCII
    bytes, text outside PEM blocks, more than ``max_blocks`` blocks, blocks that are not
    CERTIFICATE, undecodable base64 or DER, and certificates outside their validity window
    at ``now`` (timezone-aware). Messages never quote the input.
    """
    if now.tzinfo is None:
        raise TrustConfigError("now must be a timezone-aware datetime")
    chain = read_public_cert_pem(pem, max_bytes=max_bytes, max_blocks=max_blocks)
    check_validity(chain, now)
    return chain[0]


def read_public_cert_pem(
    pem: str | bytes, *, max_bytes: int = MAX_PEM_BYTES, max_blocks: int = MAX_PEM_BLOCKS
) -> tuple[CertificateInfo, ...]:
    """The chain (leaf first) of a bundle that passes every check of
    :func:`check_public_cert_pem` but validity: what a certificate says about itself, for
    reporting when one expires (or expired) even while it is refused."""
    text = _bounded_ascii(pem, max_bytes)
    ders = list(_certificate_blocks(text, max_blocks))
    return tuple(
        _describe(der, _position(index, len(ders)), len(ders)) for index, der in enumerate(ders)
    )


def check_validity(chain: tuple[CertificateInfo, ...], now: datetime) -> None:
    """Raise :class:`~grid.errors.CertificateRejected` (``expired``, ``not_yet_valid``) for
    the first certificate of ``chain`` outside its validity at ``now``."""
    for index, info in enumerate(chain):
        _check_validity(info, now, _position(index, len(chain)))


def certificate_ders(text: str) -> list[bytes]:
    """DER of every CERTIFICATE block in ``text``, in order; other blocks are skipped.

    Lenient where :func:`check_public_cert_pem` is strict: it serves fingerprinting local
    files, which may bundle a certificate with its key.
    """
    return [
        _decode_body(match["body"], index)
        for index, match in enumerate(_BLOCK.finditer(text))
        if match["label"] == _CERTIFICATE_LABEL
    ]


def _bounded_ascii(pem: str | bytes, max_bytes: int) -> str:
    if len(pem) > max_bytes:
        raise CertificateRejected(
            "too_large", f"a certificate PEM may hold at most {max_bytes} bytes"
        )
    has_key = (
        _PRIVATE_KEY_TEXT.search(pem) if isinstance(pem, str) else _PRIVATE_KEY_BYTES.search(pem)
    )
    if has_key:
        raise CertificateRejected(
            "private_key", "the message contains a private key marker and is discarded"
        )
    if not pem.isascii():
        raise CertificateRejected("not_text", "a certificate PEM must be ASCII text")
    text = pem if isinstance(pem, str) else pem.decode("ascii")
    if not text.strip():
        raise CertificateRejected("empty", "the certificate PEM is empty")
    return text


def _certificate_blocks(text: str, max_blocks: int) -> Iterator[bytes]:
    position = 0
    for count, match in enumerate(_BLOCK.finditer(text), start=1):
        if text[position : match.start()].strip():
            raise _outside_blocks()
        if count > max_blocks:
            raise CertificateRejected(
                "too_many_blocks", f"a certificate PEM may hold at most {max_blocks} blocks"
            )
        if match["label"] != match["end"]:
            raise CertificateRejected(
                "not_pem", f"block {count} ends with a different label than it begins"
            )
        if match["label"] != _CERTIFICATE_LABEL:
            raise CertificateRejected(
                "not_certificate",
                f"block {count} is not a CERTIFICATE block, and only those are accepted",
            )
        yield _decode_body(match["body"], count - 1)
        position = match.end()
    if text[position:].strip():
        raise _outside_blocks()


def _outside_blocks() -> CertificateRejected:
    return CertificateRejected(
        "not_pem", "the PEM holds text outside BEGIN/END blocks or an unterminated block"
    )


def _decode_body(body: str, index: int) -> bytes:
    try:
        der = base64.b64decode("".join(body.split()), validate=True)
    except (binascii.Error, ValueError):
        raise CertificateRejected("malformed", f"block {index + 1} is not valid base64") from None
    if not der:
        raise CertificateRejected("malformed", f"block {index + 1} is empty")
    return der


def _position(index: int, total: int) -> str:
    if total == 1:
        return "the certificate"
    role = "leaf" if index == 0 else "chain"
    return f"certificate {index + 1} of {total} ({role})"


def _check_validity(info: CertificateInfo, now: datetime, position: str) -> None:
    if now < info.not_before:
        raise CertificateRejected(
            "not_yet_valid",
            f"{position} is not valid before {info.not_before.isoformat()} "
            f"(now is {now.isoformat()})",
        )
    if now > info.not_after:
        raise CertificateRejected(
            "expired",
            f"{position} expired at {info.not_after.isoformat()} (now is {now.isoformat()})",
        )


def _describe(der: bytes, position: str, chain_length: int) -> CertificateInfo:
    # cryptography decodes most fields lazily, so every field is read inside the guard: a
    # malformed name or extension is refused here, not in whoever reads the info later.
    try:
        certificate = x509.load_der_x509_certificate(der)
        extensions = certificate.extensions
        try:
            names = extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            dns_names = tuple(names.get_values_for_type(x509.DNSName))
            ip_addresses = tuple(str(ip) for ip in names.get_values_for_type(x509.IPAddress))
        except x509.ExtensionNotFound:
            dns_names, ip_addresses = (), ()
        try:
            is_ca = extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            is_ca = False
        return CertificateInfo(
            fingerprint=hashlib.sha256(der).hexdigest(),
            subject=certificate.subject.rfc4514_string(),
            issuer=certificate.issuer.rfc4514_string(),
            not_before=certificate.not_valid_before_utc,
            not_after=certificate.not_valid_after_utc,
            dns_names=dns_names,
            ip_addresses=ip_addresses,
            is_ca=is_ca,
            chain_length=chain_length,
        )
    except Exception:
        raise CertificateRejected(
            "malformed", f"{position} is not a parsable DER X.509 certificate"
        ) from None
