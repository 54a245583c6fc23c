"""SWIM key files, in the format :mod:`grid.runtime.keyring` reads: editing the file rotates
the keyring (add the new key on a second line, move it to the first, delete the old line)."""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

from grid.errors import KeyFileError
from grid.runtime.keyring import MAX_ENTRY_BYTES, parse_keyring


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
        if info.st_size > MAX_ENTRY_BYTES:
            raise KeyFileError(f"key file {path} is larger than {MAX_ENTRY_BYTES} bytes")
        data = path.read_bytes()
    except OSError as error:
        raise KeyFileError(f"cannot read key file {path}: {error.strerror}") from None
    others = bool(info.st_mode & (stat.S_IRWXG | stat.S_IRWXO))
    keyring = parse_keyring(data, f"key file {path}", error=KeyFileError)
    return KeyFile(path, keyring.keys, others)


def merge_keys(files: list[KeyFile]) -> tuple[bytes, ...]:
    """The keyring of several files: the first file's first key seals, every key opens."""
    keys: list[bytes] = []
    for file in files:
        keys += [key for key in file.keys if key not in keys]
    return tuple(keys)
