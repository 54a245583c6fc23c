"""Fingerprints, their spellings, and pin matching."""

from __future__ import annotations

import hashlib
import ssl
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grid.errors import CertificateRejected, TrustConfigError
from grid.trust import (
    CertificateAuthority,
    IssuedCertificate,
    PinSlot,
    TrustPins,
    fingerprint,
    fingerprints_equal,
    matches_pin,
    normalize_fingerprint,
    self_signed_certificate,
)

NOW = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority.generate(now=NOW)


@pytest.fixture(scope="module")
def leaf(ca: CertificateAuthority) -> IssuedCertificate:
    return ca.issue("site-a", now=NOW)


def colon_pairs(hex_digits: str) -> str:
    return ":".join(hex_digits[i : i + 2] for i in range(0, len(hex_digits), 2))


def test_fingerprint_is_the_sha256_of_the_der(leaf: IssuedCertificate) -> None:
    der = ssl.PEM_cert_to_DER_cert(leaf.certificate_pem)
    expected = hashlib.sha256(der).hexdigest()
    assert fingerprint(leaf.certificate_pem) == expected
    assert fingerprint(leaf.certificate_pem.encode()) == expected
    assert fingerprint(der) == expected
    assert leaf.fingerprint == expected
    assert len(expected) == 64


def test_fingerprint_of_a_chain_is_the_leafs(
    leaf: IssuedCertificate, ca: CertificateAuthority
) -> None:
    assert fingerprint(leaf.certificate_pem + ca.certificate_pem) == leaf.fingerprint
    assert fingerprint(ca.certificate_pem + leaf.certificate_pem) == ca.fingerprint


def test_fingerprint_of_a_combined_file_uses_its_certificate(leaf: IssuedCertificate) -> None:
    combined = leaf.private_key_pem().decode() + leaf.certificate_pem
    assert fingerprint(combined) == leaf.fingerprint


@pytest.mark.parametrize(
    "data",
    [
        b"definitely not DER",
        b"",
        "",
        "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
        "-----BEGIN CERTIFICATE-----\nQUJD\n-----END CERTIFICATE-----\n",
        "-----BEGIN CERTIFICATE-----\nQUJ\n-----END CERTIFICATE-----\n",
    ],
)
def test_fingerprint_refuses_what_is_not_a_certificate(data: str | bytes) -> None:
    with pytest.raises(CertificateRejected):
        fingerprint(data)


@pytest.mark.parametrize(
    "spelling",
    [
        lambda fp: fp,
        lambda fp: fp.upper(),
        colon_pairs,
        lambda fp: colon_pairs(fp).upper(),
        lambda fp: f"sha256:{fp}",
        lambda fp: f"SHA256 Fingerprint={colon_pairs(fp).upper()}",
        lambda fp: f"  sha-256={fp}\n",
    ],
)
def test_normalize_accepts_common_spellings(spelling, leaf: IssuedCertificate) -> None:
    assert normalize_fingerprint(spelling(leaf.fingerprint)) == leaf.fingerprint


@pytest.mark.parametrize(
    "text",
    [
        "",
        "abc",
        "0" * 63,
        "0" * 65,
        "g" * 64,
        "0" * 62 + ":0",
        "0:" + "0" * 63,
        "sha1:" + "0" * 64,
        "zz-topsecret-" + "0" * 51,
    ],
)
def test_normalize_refuses_other_text_without_quoting_it(text: str) -> None:
    with pytest.raises(TrustConfigError) as raised:
        normalize_fingerprint(text)
    assert "64 hex digits" in str(raised.value)
    if text:
        assert text not in str(raised.value)


@given(st.binary(min_size=32, max_size=32))
def test_every_spelling_of_a_digest_normalizes_to_its_hex(digest: bytes) -> None:
    hex_digits = digest.hex()
    assert normalize_fingerprint(colon_pairs(hex_digits).upper()) == hex_digits
    assert fingerprints_equal(hex_digits, colon_pairs(hex_digits))


def test_fingerprints_equal_tells_certificates_apart(
    leaf: IssuedCertificate, ca: CertificateAuthority
) -> None:
    assert fingerprints_equal(leaf.fingerprint.upper(), leaf.fingerprint)
    assert not fingerprints_equal(leaf.fingerprint, ca.fingerprint)


def test_pins_are_normalized_and_validated(leaf: IssuedCertificate) -> None:
    pins = TrustPins(colon_pairs(leaf.fingerprint).upper(), previous=f"sha256:{leaf.fingerprint}")
    assert pins.primary == leaf.fingerprint
    assert pins.previous == leaf.fingerprint
    with pytest.raises(TrustConfigError):
        TrustPins("not a fingerprint")
    with pytest.raises(TrustConfigError):
        TrustPins(leaf.fingerprint, previous="nope")


def test_matches_pin_names_the_slot(leaf: IssuedCertificate, ca: CertificateAuthority) -> None:
    other = self_signed_certificate("elsewhere", now=NOW)
    assert matches_pin(leaf.fingerprint, TrustPins(leaf.fingerprint)) is PinSlot.PRIMARY
    rotating = TrustPins(ca.fingerprint, previous=leaf.fingerprint)
    assert matches_pin(leaf.fingerprint, rotating) is PinSlot.PREVIOUS
    assert matches_pin(ca.fingerprint, rotating) is PinSlot.PRIMARY
    assert matches_pin(other.fingerprint, rotating) is None
    assert matches_pin(other.fingerprint, TrustPins(leaf.fingerprint)) is None
