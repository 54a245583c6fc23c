"""A small X.509 certificate authority for site certificates.

``grid demo`` and the tests use it to mint a CA and per-site certificates (server and client
use, with DNS and IP subject alternative names). Keys are ECDSA P-256. Private keys stay
inside these objects until written to a file readable by its owner only; they appear in no
repr, message or log.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from grid.errors import TrustConfigError
from grid.fsutil import PRIVATE_FILE_MODE, PUBLIC_FILE_MODE, write_atomically

# Certificates start a little in the past, so a peer whose clock runs slightly behind
# still accepts a certificate minted a moment ago.
CLOCK_SKEW_ALLOWANCE = timedelta(minutes=5)
DEFAULT_CA_LIFETIME = timedelta(days=365)
DEFAULT_SITE_LIFETIME = timedelta(days=90)


@dataclass(frozen=True, slots=True)
class PemFiles:
    """Where a certificate and its private key were written."""

    certificate: Path
    private_key: Path


class IssuedCertificate:
    """A certificate and its private key."""

    __slots__ = ("_certificate", "_private_key")

    def __init__(self, certificate: x509.Certificate, private_key: ec.EllipticCurvePrivateKey):
        self._certificate = certificate
        self._private_key = private_key

    @property
    def certificate(self) -> x509.Certificate:
        return self._certificate

    @property
    def certificate_pem(self) -> str:
        return self._certificate.public_bytes(serialization.Encoding.PEM).decode("ascii")

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the certificate's DER: the value a GridSite's trust field pins."""
        return self._certificate.fingerprint(hashes.SHA256()).hex()

    @property
    def common_name(self) -> str:
        names = self._certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        return str(names[0].value) if names else ""

    def private_key_pem(self) -> bytes:
        """The unencrypted PKCS#8 private key. Handle as a secret."""
        return self._private_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def write(self, directory: Path, name: str) -> PemFiles:
        """Write ``<name>.crt`` (mode 0644) and ``<name>.key`` (mode 0600) into
        ``directory``, each atomically (temporary file, fsync, rename)."""
        directory.mkdir(parents=True, exist_ok=True)
        files = PemFiles(directory / f"{name}.crt", directory / f"{name}.key")
        write_atomically(files.private_key, self.private_key_pem(), PRIVATE_FILE_MODE)
        write_atomically(files.certificate, self.certificate_pem.encode(), PUBLIC_FILE_MODE)
        return files

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(common_name={self.common_name!r}, "
            f"fingerprint={self.fingerprint!r})"
        )


class CertificateAuthority(IssuedCertificate):
    """A self-signed CA certificate with its key, able to issue site certificates."""

    __slots__ = ()

    @classmethod
    def generate(
        cls,
        common_name: str = "Grid CA",
        *,
        now: datetime,
        valid_for: timedelta = DEFAULT_CA_LIFETIME,
    ) -> CertificateAuthority:
        """A fresh CA whose certificate is valid from ``now`` for ``valid_for``."""
        key = ec.generate_private_key(ec.SECP256R1())
        name = _name(common_name)
        builder = (
            _base_builder(name, name, key.public_key(), now, valid_for)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()),
                critical=False,
            )
        )
        return cls(builder.sign(key, hashes.SHA256()), key)

    def issue(
        self,
        common_name: str,
        *,
        now: datetime,
        dns_names: Iterable[str] = (),
        ip_addresses: Iterable[str] = ("127.0.0.1",),
        valid_for: timedelta = DEFAULT_SITE_LIFETIME,
    ) -> IssuedCertificate:
        """A site certificate signed by this CA, usable as TLS server and client
        certificate, with ``common_name`` and the given names as subject alternative
        names."""
        key = ec.generate_private_key(ec.SECP256R1())
        builder = _leaf_builder(
            _name(common_name),
            self.certificate.subject,
            key,
            now=now,
            valid_for=valid_for,
            alternative_names=_alternative_names(common_name, dns_names, ip_addresses),
        ).add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(self._private_key.public_key()),
            critical=False,
        )
        return IssuedCertificate(builder.sign(self._private_key, hashes.SHA256()), key)


def self_signed_certificate(
    common_name: str,
    *,
    now: datetime,
    dns_names: Iterable[str] = (),
    ip_addresses: Iterable[str] = ("127.0.0.1",),
    valid_for: timedelta = DEFAULT_SITE_LIFETIME,
) -> IssuedCertificate:
    """A self-signed site certificate: with fingerprint pinning no CA is needed."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name)
    builder = _leaf_builder(
        name,
        name,
        key,
        now=now,
        valid_for=valid_for,
        alternative_names=_alternative_names(common_name, dns_names, ip_addresses),
    )
    return IssuedCertificate(builder.sign(key, hashes.SHA256()), key)


def _name(common_name: str) -> x509.Name:
    if not common_name or len(common_name) > 64:
        raise TrustConfigError("a certificate common name must be 1 to 64 characters")
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _alternative_names(
    common_name: str, dns_names: Iterable[str], ip_addresses: Iterable[str]
) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = [x509.DNSName(common_name)]
    entries += [x509.DNSName(name) for name in dns_names if name != common_name]
    for address in ip_addresses:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(address)))
        except ValueError:
            raise TrustConfigError(f"{address!r} is not an IP address") from None
    return x509.SubjectAlternativeName(entries)


def _base_builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    now: datetime,
    valid_for: timedelta,
) -> x509.CertificateBuilder:
    if now.tzinfo is None:
        raise TrustConfigError("now must be a timezone-aware datetime")
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW_ALLOWANCE)
        .not_valid_after(now + valid_for)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )


def _leaf_builder(
    subject: x509.Name,
    issuer: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    *,
    now: datetime,
    valid_for: timedelta,
    alternative_names: x509.SubjectAlternativeName,
) -> x509.CertificateBuilder:
    return (
        _base_builder(subject, issuer, key.public_key(), now, valid_for)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(alternative_names, critical=False)
    )
