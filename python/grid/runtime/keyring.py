"""SWIM keyrings as the shells receive them (a key file, a Secret entry): 32 raw bytes
(``head -c 32 /dev/urandom > swim.key``), or text with one base64 key per line, the first
sealing and every one opening.

Rotation is three edits, each applied by every site before the next: add the new key on a
second line (everyone can open it), swap the two lines (the new key seals), delete the old
line (it is forgotten). Pure: bytes in, keys or an error out.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from grid.errors import ConfigError

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


def parse_keyring(data: bytes, label: str, *, error: type[ConfigError]) -> Keyring:
    """The keys held by ``data``. ``label`` names where they come from in messages (``key
    file /etc/grid/swim.key``, ``Secret grid-system/swim-key, key swim.key``); a message
    never quotes the bytes. Raises ``error``, the shell's own kind of configuration error."""
    if len(data) == KEY_BYTES:
        return Keyring((data,))
    if not data:
        raise error(f"{label} is empty; it must hold a {KEY_BYTES}-byte SWIM key")
    if len(data) > MAX_ENTRY_BYTES:
        raise error(f"{label} is larger than {MAX_ENTRY_BYTES} bytes")
    if not all(byte in _TEXT_BYTES for byte in data):
        raise error(
            f"{label} holds {len(data)} bytes that are not text: it is neither {KEY_BYTES} raw "
            f"bytes nor base64 text with one {KEY_BYTES}-byte key per line (AES-256 keys)"
        )
    keys: list[bytes] = []
    for number, line in enumerate(data.decode("ascii").splitlines(), start=1):
        token = line.strip()
        if not token or token.startswith("#"):
            continue
        try:
            key = base64.b64decode(token, validate=True)
        except (binascii.Error, ValueError):
            raise error(
                f"{label}, line {number}: not base64 (and the whole is not {KEY_BYTES} raw "
                "bytes either)"
            ) from None
        if len(key) != KEY_BYTES:
            raise error(
                f"{label}, line {number}: decodes to {len(key)} bytes; a SWIM key is "
                f"{KEY_BYTES} bytes (AES-256)"
            )
        if key in keys:
            raise error(f"{label}, line {number}: the same key twice")
        keys.append(key)
    if not keys:
        raise error(f"{label} holds no key")
    if len(keys) > MAX_KEYS:
        raise error(f"{label} holds more than {MAX_KEYS} keys")
    return Keyring(tuple(keys))
