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
from pathlib import Path

from grid.engine import EscrowCheckpoint, SpendCheckpoint
from grid.engine.spend_checkpoint import own_checkpoint
from grid.fsutil import PRIVATE_FILE_MODE, write_atomically

_log = logging.getLogger("grid.agent")


class SpendStore:
    """One network's checkpoint file."""

    def __init__(self, state_dir: Path, network: str, site: str) -> None:
        self.path = state_dir / "spend" / f"{network}.json"
        self._site = site
        self._written: bytes | None = None
        self.failures = 0
        """Writes that failed (each one logged; the spend they held is counted later)."""

    def load(self) -> SpendCheckpoint | None:
        """The checkpoint of this site's previous life, if there is a usable one. One that
        cannot be read is set aside (``.unreadable``) and spend counts from the first
        scrape, as on a first start."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            _log.error("cannot read %s: %s", self.path, error.strerror or type(error).__name__)
            return None
        try:
            checkpoint = own_checkpoint(data, self._site)
        except ValueError as problem:
            _log.error("%s not used (spend counts from the first scrape): %s", self.path, problem)
            with contextlib.suppress(OSError):
                self.path.replace(self.path.with_name(self.path.name + ".unreadable"))
            return None
        self._written = data
        return checkpoint

    def keep(self, checkpoint: SpendCheckpoint) -> bool:
        """Write ``checkpoint`` durably (unless the file holds it already); whether it is
        on disk."""
        data = checkpoint.to_json()
        if data == self._written:
            return True
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self.path, data, PRIVATE_FILE_MODE)
        except OSError as error:
            self.failures += 1
            _log.error("cannot write %s: %s", self.path, error.strerror or type(error).__name__)
            return False
        self._written = data
        return True


class EscrowStore:
    """One network's escrow holder file."""

    def __init__(self, state_dir: Path, network: str, site: str) -> None:
        self.path = state_dir / "spend" / f"{network}.escrow.json"
        self._site = site
        self.failures = 0
        """Writes that failed (each one logged; what they held was not published)."""

    def load(self) -> EscrowCheckpoint | None:
        """The holder of this site's previous life, if the file is usable. One that cannot
        be read is set aside (``.unreadable``): this life takes a holder of its own, and
        the earlier one's allowance stays where it is until the window ends."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            _log.error("cannot read %s: %s", self.path, error.strerror or type(error).__name__)
            return None
        try:
            return EscrowCheckpoint.from_json(data, self._site)
        except ValueError as problem:
            _log.error("%s not used (a new escrow holder starts): %s", self.path, problem)
            with contextlib.suppress(OSError):
                self.path.replace(self.path.with_name(self.path.name + ".unreadable"))
            return None

    def keep(self, checkpoint: EscrowCheckpoint) -> bool:
        """Write ``checkpoint`` durably; whether it is on disk."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self.path, checkpoint.to_json(), PRIVATE_FILE_MODE)
        except OSError as error:
            self.failures += 1
            _log.error("cannot write %s: %s", self.path, error.strerror or type(error).__name__)
            return False
        return True
