"""The encrypted frame, checked against an independent AES-GCM (pyca/cryptography)."""

from __future__ import annotations

import os

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from grid import _native
from grid.errors import FrameDropped, InvalidKeyError

MAGIC_VERSION = b"GRID\x01"


def python_seal(key: bytes, plaintext: bytes, nonce: bytes | None = None) -> bytes:
    nonce = nonce or os.urandom(12)
    return MAGIC_VERSION + nonce + AESGCM(key).encrypt(nonce, plaintext, MAGIC_VERSION)


def python_open(key: bytes, frame: bytes) -> bytes:
    assert frame[:5] == MAGIC_VERSION
    return AESGCM(key).decrypt(frame[5:17], frame[17:], MAGIC_VERSION)


def test_overhead_constants() -> None:
    assert _native.FRAME_OVERHEAD == 33
    assert _native.KEY_LEN == 32


@pytest.mark.parametrize("size", [0, 1, 256, 1367])
def test_rust_sealed_frames_open_in_python(size: int) -> None:
    key = os.urandom(32)
    payload = os.urandom(size)
    frame = _native.Keyring(key).seal(payload)
    assert len(frame) == size + 33
    assert frame[:5] == MAGIC_VERSION
    assert python_open(key, frame) == payload


@pytest.mark.parametrize("size", [0, 1, 256, 1367])
def test_python_sealed_frames_open_in_rust(size: int) -> None:
    key = os.urandom(32)
    payload = os.urandom(size)
    assert _native.Keyring(key).open(python_seal(key, payload)) == payload


# key = 00..1f, nonce = 00..0b, plaintext = b"grid test vector", AAD = b"GRID\x01"
FIXED_VECTOR = bytes.fromhex(
    "4752494401000102030405060708090a0b"
    "2070bf7fe591a768f961e1eed29d171f"
    "a646f5d68df75fe782b9e7a1940e041f"
)


def test_fixed_vector() -> None:
    key = bytes(range(32))
    assert python_seal(key, b"grid test vector", bytes(range(12))) == FIXED_VECTOR
    assert _native.Keyring(key).open(FIXED_VECTOR) == b"grid test vector"


@pytest.mark.parametrize(
    ("mangle", "reason"),
    [
        (lambda f: f[:32], "too_short"),
        (lambda f: b"GRIX" + f[4:], "bad_magic"),
        (lambda f: f[:4] + b"\x02" + f[5:], "unknown_version"),
        (lambda f: f[:-1] + bytes([f[-1] ^ 1]), "auth_failed"),
        (lambda f: f[:20] + bytes([f[20] ^ 0x80]) + f[21:], "auth_failed"),
    ],
)
def test_refused_frames_name_their_reason(mangle, reason: str) -> None:  # type: ignore[no-untyped-def]
    ring = _native.Keyring(os.urandom(32))
    with pytest.raises(FrameDropped) as err:
        ring.open(mangle(ring.seal(b"some payload")))
    assert err.value.reason == reason


def test_wrong_key_is_an_auth_failure() -> None:
    frame = _native.Keyring(os.urandom(32)).seal(b"x")
    with pytest.raises(FrameDropped, match="auth_failed"):
        _native.Keyring(os.urandom(32)).open(frame)


def test_rotation_keeps_every_frame_readable() -> None:
    old, new = os.urandom(32), os.urandom(32)
    a, b = _native.Keyring(old), _native.Keyring(old)
    for ring in (a, b):
        ring.install(new)
    assert b.open(a.seal(b"1")) == b"1"
    a.use_key(new)
    assert b.open(a.seal(b"2")) == b"2"  # b still seals with old, opens new
    assert a.open(b.seal(b"3")) == b"3"
    b.use_key(new)
    for ring in (a, b):
        ring.remove(old)
    assert a.open(b.seal(b"4")) == b"4"
    assert len(a.key_ids()) == 1


@pytest.mark.parametrize("bad", [b"", b"x" * 31, b"x" * 33])
def test_bad_key_lengths_are_refused(bad: bytes) -> None:
    with pytest.raises(InvalidKeyError, match="32 bytes"):
        _native.Keyring(bad)


def test_primary_cannot_be_removed() -> None:
    key = os.urandom(32)
    with pytest.raises(InvalidKeyError, match="primary"):
        _native.Keyring(key).remove(key)


def test_repr_names_keys_by_id_only() -> None:
    key = bytes.fromhex("c0ffee" * 10 + "c0ff")
    text = repr(_native.Keyring(key))
    assert "c0ffee" not in text
    assert key.hex() not in text
