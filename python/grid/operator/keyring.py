"""The SWIM keyring held in a Secret: the entry named by ``spec.tls.swimKeyRef`` is either 32
raw bytes (``kubectl create secret generic --from-file=swim.key=swim.key``) or text with one
base64 key per line, the first sealing and every one opening.

Rotation is three edits of that entry, each applied by every cluster of the mesh before the
next: add the new key on a second line (everyone can open it), swap the two lines (the new
key seals), delete the old line (it is forgotten). Pure: bytes in, keys or an error out.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from grid.errors import SecretMaterialError

KEY_BYTES = 32
MAX_KEYS = 8
MAX_ENTRY_BYTES = 4096
_TEXT_BYTES = frozenset(range(0x20, 0x7F)) | frozenset(b"\t\r\n")


@dataclass(frozen=True, slots=True)
class Keyring:
    """SWIM keys, primary (sealing) first. Never printed: the repr gives the count only."""

    keys: tuple[bytes, ...]

    def __repr__(self) -> str:
        return f"Keyring(keys={len(self.keys)})"

    @property
    def primary(self) -> bytes:
        return self.keys[0]


def parse_keyring(entry: bytes, where: str) -> Keyring:
    """The keys held by one Secret entry. ``where`` names the entry in messages
    (``Secret grid-system/swim-key, key swim.key``); a message never quotes the bytes.
    Raises :class:`~grid.errors.SecretMaterialError`."""
    if len(entry) == KEY_BYTES:
        return Keyring((entry,))
    if not entry:
        raise SecretMaterialError(f"{where} is empty; it must hold a {KEY_BYTES}-byte SWIM key")
    if len(entry) > MAX_ENTRY_BYTES:
        raise SecretMaterialError(f"{where} is larger than {MAX_ENTRY_BYTES} bytes")
    if not all(byte in _TEXT_BYTES for byte in entry):
        raise SecretMaterialError(
            f"{where} holds {len(entry)} bytes that are not text: a SWIM key is exactly "
            f"{KEY_BYTES} raw bytes (AES-256), or base64 text with one {KEY_BYTES}-byte key "
            "per line"
        )
    text = entry.decode("ascii")
    keys: list[bytes] = []
    for number, line in enumerate(text.splitlines(), start=1):
        token = line.strip()
        if not token or token.startswith("#"):
            continue
        try:
            key = base64.b64decode(token, validate=True)
        except (binascii.Error, ValueError):
            raise SecretMaterialError(
                f"{where}, line {number}: not base64 (and the entry is not {KEY_BYTES} raw "
                "bytes either)"
            ) from None
        if len(key) != KEY_BYTES:
            raise SecretMaterialError(
                f"{where}, line {number}: decodes to {len(key)} bytes; a SWIM key is "
                f"{KEY_BYTES} bytes (AES-256)"
            )
        if key in keys:
            raise SecretMaterialError(f"{where}, line {number}: the same key twice")
        keys.append(key)
    if not keys:
        raise SecretMaterialError(f"{where} holds no key")
    if len(keys) > MAX_KEYS:
        raise SecretMaterialError(f"{where} holds more than {MAX_KEYS} keys")
    return Keyring(tuple(keys))
