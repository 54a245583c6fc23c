"""The agent's spend checkpoint: ``<state>/spend/<network>.json``, what one site counted
of its spend sources (:class:`~grid.engine.SpendCheckpoint`). It is written, atomically and
synced to disk, before the spend it holds is counted, so no peer ever holds more of this
site's spend than the file does; a restarted agent reads it back and counts on from there
(docs/crdt.md, "Spend from counters"). Beside it, ``<network>.escrow.json``, this life's
escrow holder (:class:`~grid.engine.EscrowCheckpoint`), written the same way before a
refresh's items and budget documents go out, so a restarted agent goes on as the same
holder with the same allowance (docs/crdt.md, "Escrow")."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from grid.engine import EscrowCheckpoint, SpendCheckpoint
from grid.engine.spend_checkpoint import own_checkpoint
from grid.fsutil import PRIVATE_FILE_MODE, write_atomically

_log = logging.getLogger("grid.agent")
T = TypeVar("T")


class _StateFile:
    """A file of ``<state>/spend``: read back with one that cannot be used set aside
    (``.unreadable``), written atomically, private and synced."""

    def __init__(self, path: Path, site: str) -> None:
        self.path = path
        self._site = site
        self.failures = 0
        """Writes that failed (each one logged)."""

    def _read(self, parse: Callable[[bytes], T], unusable: str) -> tuple[bytes, T] | None:
        """The file's bytes and what ``parse`` makes of them; None when there is no file,
        it cannot be read, or ``parse`` refuses it (set aside, saying ``unusable``)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            _log.error("cannot read %s: %s", self.path, error.strerror or type(error).__name__)
            return None
        try:
            return data, parse(data)
        except ValueError as problem:
            _log.error("%s not used (%s): %s", self.path, unusable, problem)
            with contextlib.suppress(OSError):
                self.path.replace(self.path.with_name(self.path.name + ".unreadable"))
            return None

    def _write(self, data: bytes) -> bool:
        """Write ``data`` durably; whether it is on disk."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self.path, data, PRIVATE_FILE_MODE)
        except OSError as error:
            self.failures += 1
            _log.error("cannot write %s: %s", self.path, error.strerror or type(error).__name__)
            return False
        return True


class SpendStore(_StateFile):
    """One network's checkpoint file (a failed write: the spend it held is counted later)."""

    def __init__(self, state_dir: Path, network: str, site: str) -> None:
        super().__init__(state_dir / "spend" / f"{network}.json", site)
        self._written: bytes | None = None

    def load(self) -> SpendCheckpoint | None:
        """The checkpoint of this site's previous life, if there is a usable one. One that
        cannot be read is set aside (``.unreadable``) and spend counts from the first
        scrape, as on a first start."""
        read = self._read(
            lambda data: own_checkpoint(data, self._site), "spend counts from the first scrape"
        )
        if read is None:
            return None
        self._written, checkpoint = read
        return checkpoint

    def keep(self, checkpoint: SpendCheckpoint) -> bool:
        """Write ``checkpoint`` durably (unless the file holds it already); whether it is
        on disk."""
        data = checkpoint.to_json()
        if data == self._written:
            return True
        if not self._write(data):
            return False
        self._written = data
        return True


class EscrowStore(_StateFile):
    """One network's escrow holder file (a failed write: what it held was not published)."""

    def __init__(self, state_dir: Path, network: str, site: str) -> None:
        super().__init__(state_dir / "spend" / f"{network}.escrow.json", site)

    def load(self) -> EscrowCheckpoint | None:
        """The holder of this site's previous life, if the file is usable. One that cannot
        be read is set aside (``.unreadable``): this life takes a holder of its own, and
        the earlier one's allowance stays where it is until the window ends."""
        read = self._read(
            lambda data: EscrowCheckpoint.from_json(data, self._site),
            "a new escrow holder starts",
        )
        return None if read is None else read[1]

    def keep(self, checkpoint: EscrowCheckpoint) -> bool:
        """Write ``checkpoint`` durably; whether it is on disk."""
        return self._write(checkpoint.to_json())
