"""SWIM key files: 32 raw bytes (``head -c 32 /dev/urandom > swim.key``), or text with one
base64 key per line, the first sealing and all opening. Editing the file rotates the
keyring: add the new key on a second line (every site can open it), move it to the first
line (it seals), then delete the old line (it is forgotten)."""

from __future__ import annotations

import base64
import binascii
import stat
from dataclasses import dataclass
from pathlib import Path

from grid.errors import KeyFileError

KEY_BYTES = 32
MAX_KEYS = 8
_MAX_FILE_BYTES = 4096


@dataclass(frozen=True, slots=True)
class KeyFile:
    """The keys read from one file, primary first. Never printed: the repr names the file
    and the number of keys only."""

    path: Path
    keys: tuple[bytes, ...]
    readable_by_others: bool

    def __repr__(self) -> str:
        return f"KeyFile(path={str(self.path)!r}, keys={len(self.keys)})"


def read_key_file(path: Path) -> KeyFile:
    """The keys in ``path``. Raises :class:`~grid.errors.KeyFileError` naming the file (and
    the line) when it cannot be read or holds anything but 32-byte keys."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise KeyFileError(f"key file {path} is not a regular file")
        if info.st_size > _MAX_FILE_BYTES:
            raise KeyFileError(f"key file {path} is larger than {_MAX_FILE_BYTES} bytes")
        data = path.read_bytes()
    except OSError as error:
        raise KeyFileError(f"cannot read key file {path}: {error.strerror}") from None
    others = bool(info.st_mode & (stat.S_IRWXG | stat.S_IRWXO))
    if len(data) == KEY_BYTES:
        return KeyFile(path, (data,), others)
    return KeyFile(path, _base64_keys(path, data), others)


def _base64_keys(path: Path, data: bytes) -> tuple[bytes, ...]:
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise KeyFileError(
            f"key file {path} is neither {KEY_BYTES} raw bytes nor base64 text"
        ) from None
    keys: list[bytes] = []
    for number, line in enumerate(text.splitlines(), start=1):
        entry = line.strip()
        if not entry or entry.startswith("#"):
            continue
        try:
            key = base64.b64decode(entry, validate=True)
        except (binascii.Error, ValueError):
            raise KeyFileError(f"key file {path}, line {number}: not base64") from None
        if len(key) != KEY_BYTES:
            raise KeyFileError(
                f"key file {path}, line {number}: decodes to {len(key)} bytes, not {KEY_BYTES}"
            )
        if key in keys:
            raise KeyFileError(f"key file {path}, line {number}: the same key twice")
        keys.append(key)
    if not keys:
        raise KeyFileError(f"key file {path} holds no key")
    if len(keys) > MAX_KEYS:
        raise KeyFileError(f"key file {path} holds more than {MAX_KEYS} keys")
    return tuple(keys)


def merge_keys(files: list[KeyFile]) -> tuple[bytes, ...]:
    """The keyring of several files: the first file's first key seals, every key opens."""
    keys: list[bytes] = []
    for file in files:
        keys += [key for key in file.keys if key not in keys]
    return tuple(keys)
