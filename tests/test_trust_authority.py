"""The certificate authority used by the demo and the tests."""

from __future__ import annotations

import ipaddress
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from grid.errors import TrustConfigError
from grid.trust import CertificateAuthority, check_public_cert_pem, self_signed_certificate
from grid.trust.authority import CLOCK_SKEW_ALLOWANCE, DEFAULT_SITE_LIFETIME

NOW = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority.generate("Test CA", now=NOW)


def extension(certificate: x509.Certificate, kind: type) -> object:
    return certificate.extensions.get_extension_for_class(kind).value


def test_the_ca_is_a_self_signed_authority(ca: CertificateAuthority) -> None:
    certificate = ca.certificate
    certificate.verify_directly_issued_by(certificate)
    assert extension(certificate, x509.BasicConstraints).ca
    assert extension(certificate, x509.KeyUsage).key_cert_sign
    assert check_public_cert_pem(ca.certificate_pem, NOW).is_ca


def test_a_site_certificate_is_signed_by_the_ca_for_both_tls_roles(
    ca: CertificateAuthority,
) -> None:
    site = ca.issue("site-a", now=NOW, dns_names=("site-a.grid.test", "localhost"))
    certificate = site.certificate
    certificate.verify_directly_issued_by(ca.certificate)
    names = extension(certificate, x509.SubjectAlternativeName)
    assert names.get_values_for_type(x509.DNSName) == ["site-a", "site-a.grid.test", "localhost"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    usages = extension(certificate, x509.ExtendedKeyUsage)
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert not extension(certificate, x509.BasicConstraints).ca
    assert certificate.not_valid_before_utc == NOW - CLOCK_SKEW_ALLOWANCE
    assert certificate.not_valid_after_utc == NOW + DEFAULT_SITE_LIFETIME
    assert site.common_name == "site-a"


def test_self_signed_certificates_need_no_ca() -> None:
    site = self_signed_certificate("lonely", now=NOW, ip_addresses=("127.0.0.1", "::1"))
    site.certificate.verify_directly_issued_by(site.certificate)
    names = extension(site.certificate, x509.SubjectAlternativeName)
    assert len(names.get_values_for_type(x509.IPAddress)) == 2


def test_files_are_written_with_owner_only_keys(ca: CertificateAuthority, tmp_path: Path) -> None:
    site = ca.issue("site-a", now=NOW)
    files = site.write(tmp_path / "certs", "site-a")
    assert stat.S_IMODE(files.private_key.stat().st_mode) == 0o600
    assert stat.S_IMODE(files.certificate.stat().st_mode) == 0o644
    assert files.certificate.read_text() == site.certificate_pem
    key = serialization.load_pem_private_key(files.private_key.read_bytes(), password=None)
    assert key.public_key() == site.certificate.public_key()
    assert sorted(p.name for p in files.private_key.parent.iterdir()) == [
        "site-a.crt",
        "site-a.key",
    ]


def test_rewriting_a_loose_key_file_tightens_it(ca: CertificateAuthority, tmp_path: Path) -> None:
    loose = tmp_path / "site-a.key"
    loose.write_text("old")
    loose.chmod(0o644)
    files = ca.issue("site-a", now=NOW).write(tmp_path, "site-a")
    assert stat.S_IMODE(files.private_key.stat().st_mode) == 0o600
    assert files.private_key.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")


def test_a_failed_write_leaves_no_temporary_file(ca: CertificateAuthority, tmp_path: Path) -> None:
    (tmp_path / "site-a.key").mkdir()  # a directory where the key should go
    with pytest.raises(OSError):
        ca.issue("site-a", now=NOW).write(tmp_path, "site-a")
    assert [p.name for p in tmp_path.iterdir()] == ["site-a.key"]


def test_reprs_show_identity_not_keys(ca: CertificateAuthority) -> None:
    site = ca.issue("site-a", now=NOW)
    for item in (ca, site):
        key_body = item.private_key_pem().decode().splitlines()[1]
        assert key_body not in repr(item)
        assert key_body not in str(item)
        assert item.fingerprint in repr(item)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"common_name": ""}, "common name"),
        ({"common_name": "x" * 65}, "common name"),
        ({"common_name": "ok", "ip_addresses": ("not-an-ip",)}, "not an IP address"),
    ],
)
def test_bad_names_are_refused(ca: CertificateAuthority, kwargs: dict, message: str) -> None:
    with pytest.raises(TrustConfigError, match=message):
        ca.issue(now=NOW, **kwargs)


def test_now_must_carry_a_timezone() -> None:
    with pytest.raises(TrustConfigError):
        CertificateAuthority.generate(now=datetime(2030, 1, 1))


def test_validity_follows_the_requested_lifetime(ca: CertificateAuthority) -> None:
    short = ca.issue("short", now=NOW, valid_for=timedelta(hours=1))
    assert short.certificate.not_valid_after_utc == NOW + timedelta(hours=1)
