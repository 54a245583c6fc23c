"""Writing files so that a reader never sees half of one.

A gateway reads its overlay from a mounted file while Grid replaces it, and a private key
must never be readable by others even for a moment, so every file Grid writes goes through
:func:`write_atomically`: a temporary file with the final mode, fsync, rename over the old
file, fsync of the directory. Files that Grid writes again by itself within seconds (status
files) may skip the two fsyncs, which cost more than the rest of the write: the rename alone
keeps a reader from seeing half a file.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

PUBLIC_FILE_MODE = 0o644
PRIVATE_FILE_MODE = 0o600


def write_atomically(
    path: Path, data: bytes, mode: int = PUBLIC_FILE_MODE, *, durable: bool = True
) -> None:
    """Replace ``path`` with ``data`` in one step: readers see the old content or the new,
    never a mix. The file gets ``mode`` whatever the process umask says. ``durable``: the
    data and the rename are on disk when this returns (else a crash may leave the old
    content, or an empty file, behind). Raises :class:`OSError` (and leaves no temporary
    file behind) when the write fails."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    # Created with its final mode, so a private file is never readable by others.
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(temporary, mode)  # the process umask may have narrowed it
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    if durable:
        _sync_directory(path.parent)


def _sync_directory(directory: Path) -> None:
    # The rename is durable only once the directory entry is on disk too.
    try:
        descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass  # some file systems cannot sync a directory; the data itself is synced
    finally:
        os.close(descriptor)
