"""Structural checks on certificate PEMs received from peers (the cert lane)."""

from __future__ import annotations

import base64
import os
from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

from grid.errors import CertificateRejected, TrustConfigError
from grid.trust import (
    MAX_PEM_BLOCKS,
    MAX_PEM_BYTES,
    CertificateAuthority,
    IssuedCertificate,
    check_public_cert_pem,
)

NOW = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority.generate(now=NOW)


@pytest.fixture(scope="module")
def leaf(ca: CertificateAuthority) -> IssuedCertificate:
    return ca.issue("site-a", now=NOW, dns_names=("localhost",))


def rejected(pem: str | bytes, now: datetime = NOW) -> CertificateRejected:
    with pytest.raises(CertificateRejected) as raised:
        check_public_cert_pem(pem, now)
    return raised.value


# --- accepted -------------------------------------------------------------------------


def test_a_public_certificate_is_accepted_and_described(leaf: IssuedCertificate) -> None:
    info = check_public_cert_pem(leaf.certificate_pem, NOW)
    assert info.fingerprint == leaf.fingerprint
    assert info.subject == "CN=site-a"
    assert info.issuer == "CN=Grid CA"
    assert info.dns_names == ("site-a", "localhost")
    assert info.ip_addresses == ("127.0.0.1",)
    assert not info.is_ca
    assert info.chain_length == 1
    assert info.not_before <= NOW <= info.not_after


def test_a_chain_and_other_encodings_are_accepted(
    leaf: IssuedCertificate, ca: CertificateAuthority
) -> None:
    chain = leaf.certificate_pem + ca.certificate_pem
    info = check_public_cert_pem(chain, NOW)
    assert info.chain_length == 2
    assert info.fingerprint == leaf.fingerprint
    assert check_public_cert_pem(chain.encode(), NOW).chain_length == 2
    assert check_public_cert_pem(chain.replace("\n", "\r\n"), NOW).chain_length == 2
    assert check_public_cert_pem(ca.certificate_pem, NOW).is_ca


# --- private keys -----------------------------------------------------------------------


def key_pems() -> dict[str, bytes]:
    ec_key = ec.generate_private_key(ec.SECP256R1())
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ed_key = ed25519.Ed25519PrivateKey.generate()
    pem = serialization.Encoding.PEM
    none = serialization.NoEncryption()
    return {
        "pkcs8": ec_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, none),
        "ec": ec_key.private_bytes(pem, serialization.PrivateFormat.TraditionalOpenSSL, none),
        "rsa": rsa_key.private_bytes(pem, serialization.PrivateFormat.TraditionalOpenSSL, none),
        "encrypted": ec_key.private_bytes(
            pem,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        ),
        "openssh": ed_key.private_bytes(pem, serialization.PrivateFormat.OpenSSH, none),
    }


KEYS = key_pems()

MARKERS = [
    "-----BEGIN PRIVATE KEY-----",
    "-----END PRIVATE KEY-----",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----BEGIN EC PRIVATE KEY-----",
    "-----BEGIN DSA PRIVATE KEY-----",
    "-----BEGIN ENCRYPTED PRIVATE KEY-----",
    "-----BEGIN OPENSSH PRIVATE KEY-----",
    "PRIVATE KEY",
    "private key",
    "Private Key",
    "PRIVATE  KEY",
    "PRIVATE\tKEY",
    "PRIVATE\nKEY",
    "PRIVATE_KEY",
    "PRIVATE-KEY",
    "privatekey",
]


@pytest.mark.parametrize("kind", sorted(KEYS))
def test_every_kind_of_private_key_is_refused(kind: str, leaf: IssuedCertificate) -> None:
    key = KEYS[kind]
    assert rejected(key).reason == "private_key"
    assert rejected(key.decode()).reason == "private_key"
    assert rejected(leaf.certificate_pem + key.decode()).reason == "private_key"
    assert rejected(key.decode() + leaf.certificate_pem).reason == "private_key"


@pytest.mark.parametrize("marker", MARKERS)
def test_every_spelling_of_the_marker_is_refused(marker: str, leaf: IssuedCertificate) -> None:
    assert rejected(leaf.certificate_pem + marker + "\n").reason == "private_key"
    assert rejected(marker.encode()).reason == "private_key"


@settings(max_examples=200)
@given(marker=st.sampled_from(MARKERS), position=st.floats(min_value=0, max_value=1))
def test_a_marker_anywhere_in_a_valid_certificate_is_refused(
    marker: str, position: float, leaf: IssuedCertificate
) -> None:
    pem = leaf.certificate_pem
    at = int(position * len(pem))
    assert rejected(pem[:at] + marker + pem[at:]).reason == "private_key"


# --- other refusals ------------------------------------------------------------------


def test_oversized_input_is_refused(leaf: IssuedCertificate) -> None:
    padded = leaf.certificate_pem + " " * (MAX_PEM_BYTES - len(leaf.certificate_pem) + 1)
    assert rejected(padded).reason == "too_large"
    assert rejected(padded.encode()).reason == "too_large"
    small = check_public_cert_pem(padded[:MAX_PEM_BYTES], NOW)
    assert small.fingerprint == leaf.fingerprint


def test_too_many_blocks_are_refused(leaf: IssuedCertificate) -> None:
    assert check_public_cert_pem(leaf.certificate_pem * MAX_PEM_BLOCKS, NOW)
    assert rejected(leaf.certificate_pem * (MAX_PEM_BLOCKS + 1)).reason == "too_many_blocks"


def csr_pem() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "x")]))
        .sign(key, hashes.SHA256())
    )
    return request.public_bytes(serialization.Encoding.PEM).decode()


def public_key_pem() -> str:
    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


@pytest.mark.parametrize("make", [csr_pem, public_key_pem], ids=["csr", "public-key"])
def test_blocks_other_than_certificates_are_refused(make, leaf: IssuedCertificate) -> None:
    assert rejected(make()).reason == "not_certificate"
    assert rejected(leaf.certificate_pem + make()).reason == "not_certificate"


def test_text_outside_blocks_is_refused(leaf: IssuedCertificate) -> None:
    pem = leaf.certificate_pem
    assert rejected("subject=CN=site-a\n" + pem).reason == "not_pem"
    assert rejected(pem + "trailing words\n").reason == "not_pem"
    assert rejected(pem.rsplit("-----END", 1)[0]).reason == "not_pem"
    assert rejected("just some text").reason == "not_pem"
    mismatched = pem.replace("END CERTIFICATE", "END X509 CRL")
    assert rejected(mismatched).reason == "not_pem"


def armour(body: bytes | str, label: str = "CERTIFICATE") -> str:
    text = body if isinstance(body, str) else base64.b64encode(body).decode()
    return f"-----BEGIN {label}-----\n{text}\n-----END {label}-----\n"


@pytest.mark.parametrize(
    "pem",
    [
        armour(b"\x30\x03\x02\x01\x01"),
        armour(os.urandom(300)),
        armour("QUJ"),
        armour(""),
    ],
    ids=["tiny-der", "random-der", "bad-base64", "empty-body"],
)
def test_undecodable_certificates_are_refused(pem: str) -> None:
    assert rejected(pem).reason == "malformed"


def test_a_damaged_certificate_is_refused(leaf: IssuedCertificate) -> None:
    der = bytearray(leaf.certificate.public_bytes(serialization.Encoding.DER))
    truncated = armour(bytes(der[: len(der) // 2]))
    assert rejected(truncated).reason == "malformed"


@pytest.mark.parametrize("pem", ["", "   \n\t\n", b""])
def test_empty_input_is_refused(pem: str | bytes) -> None:
    assert rejected(pem).reason == "empty"


def test_non_ascii_is_refused(leaf: IssuedCertificate) -> None:
    assert rejected(leaf.certificate_pem + "é").reason == "not_text"
    assert rejected(leaf.certificate_pem.encode() + b"\xff").reason == "not_text"


def test_certificates_outside_their_validity_are_refused(ca: CertificateAuthority) -> None:
    old = ca.issue("old-site", now=NOW - timedelta(days=400), valid_for=timedelta(days=30))
    error = rejected(old.certificate_pem)
    assert error.reason == "expired"
    assert "expired at" in str(error)
    assert NOW.isoformat() in str(error)

    future = ca.issue("future-site", now=NOW + timedelta(days=10))
    error = rejected(future.certificate_pem)
    assert error.reason == "not_yet_valid"
    assert check_public_cert_pem(future.certificate_pem, NOW + timedelta(days=10))


def test_an_expired_chain_member_is_named(leaf: IssuedCertificate) -> None:
    old_ca = CertificateAuthority.generate(
        now=NOW - timedelta(days=400), valid_for=timedelta(days=1)
    )
    error = rejected(leaf.certificate_pem + old_ca.certificate_pem)
    assert error.reason == "expired"
    assert "certificate 2 of 2" in str(error)


def test_now_must_carry_a_timezone(leaf: IssuedCertificate) -> None:
    with pytest.raises(TrustConfigError):
        check_public_cert_pem(leaf.certificate_pem, datetime(2030, 1, 1))


def test_the_rejection_reads_as_a_sentence(leaf: IssuedCertificate) -> None:
    error = rejected(leaf.certificate_pem + KEYS["pkcs8"].decode())
    assert str(error) == "the message contains a private key marker and is discarded"
    assert error.args == ("private_key", str(error))


# --- fuzzing ---------------------------------------------------------------------------


@settings(max_examples=300)
@given(st.one_of(st.text(max_size=2000), st.binary(max_size=2000)))
def test_arbitrary_input_is_refused_cleanly(data: str | bytes) -> None:
    with pytest.raises(CertificateRejected):
        check_public_cert_pem(data, NOW)


@settings(max_examples=200)
@given(data=st.data())
def test_a_corrupted_certificate_never_breaks_the_check(
    data: st.DataObject, leaf: IssuedCertificate
) -> None:
    pem = bytearray(leaf.certificate_pem.encode())
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(pem) - 1))
        pem[index] = data.draw(st.integers(0, 255))
    try:
        info = check_public_cert_pem(bytes(pem), NOW)
    except CertificateRejected as error:
        assert error.reason in {
            "not_text",
            "not_pem",
            "malformed",
            "private_key",
            "not_certificate",
        }
    else:
        assert len(info.fingerprint) == 64
