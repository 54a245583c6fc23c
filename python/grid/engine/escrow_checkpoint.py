"""This life's escrow holder as a shell keeps it on disk: the holder's epoch and each of its
records, as the items that publish them. A shell writes it durably before it publishes any
of those items (or a budget document that grants from them), so no peer ever holds a newer
version of this holder than the file; a restarted site reads it back and goes on as the same
holder (grid.crdt.state.GridState.resume_escrow), keeping its allowance: the file holds
everything the holder ever granted or gave away (docs/crdt.md, "Escrow", restarts). Pure."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from dataclasses import dataclass

from grid.crdt.escrow import ESCROW_PREFIX, EscrowRecord, decode_escrow, encode_escrow
from grid.crdt.snapshot import Item
from grid.errors import CrdtDecodeError

FORMAT = 1
MAX_RECORDS = 4096
"""Most records one checkpoint holds (the escrowed windows one state tracks)."""


@dataclass(frozen=True, slots=True)
class EscrowCheckpoint:
    """One site's escrow holder (``site#epoch``) and its records, at one moment."""

    site: str
    epoch: int
    records: tuple[EscrowRecord, ...] = ()

    def to_json(self) -> bytes:
        """The checkpoint as the file holds it: each record as its signed-free item payload,
        which :meth:`from_json` checks in full again."""
        items = [encode_escrow(self.site, record) for record in self.records]
        document = {
            "format": FORMAT,
            "site": self.site,
            "epoch": self.epoch,
            "records": [
                [item.key, item.version, base64.b64encode(item.payload).decode()] for item in items
            ],
        }
        return json.dumps(document, separators=(",", ":")).encode() + b"\n"

    @classmethod
    def from_json(cls, data: bytes, site: str) -> EscrowCheckpoint:
        """Reads :meth:`to_json`'s form of ``site``'s holder; :class:`ValueError` saying
        what is wrong (another site's, another format, a record that does not decode or is
        not of the holder's epoch)."""
        try:
            document = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"not JSON: {error}") from None
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise ValueError(f"not an escrow checkpoint of format {FORMAT}")
        if document.get("site") != site:
            raise ValueError(f"the escrow checkpoint is site {document.get('site')!r}'s")
        epoch, entries = document.get("epoch"), document.get("records")
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1:
            raise ValueError("epoch must be an integer >= 1")
        if not isinstance(entries, list) or len(entries) > MAX_RECORDS:
            raise ValueError(f"records must be a list of at most {MAX_RECORDS}")
        records = []
        for index, entry in enumerate(entries):
            if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[2], str)):
                raise ValueError(f"records[{index}] must be [key, version, payload]")
            key, version, payload = entry
            try:
                record = decode_escrow(site, key, version, base64.b64decode(payload, validate=True))
            except (CrdtDecodeError, binascii.Error, TypeError) as error:
                raise ValueError(f"records[{index}]: {error}") from None
            if record.epoch != epoch:
                raise ValueError(f"records[{index}] is of holder epoch {record.epoch}, not {epoch}")
            records.append(record)
        return cls(site, epoch, tuple(records))


def items_to_send(
    items: Iterable[Item], own: Iterable[Item], *, kept: bool, withheld: bool
) -> tuple[Item, ...]:
    """What a shell publishes of a refresh's ``items`` once it tried to keep the escrow
    holder: without the escrow items while it could not (``kept`` False); with every one
    of this site's escrow items (``own``: all its current items) again once it could after
    a pass that held them back (``withheld``), since those passes' versions never went
    out; else the items as they are."""
    if not kept:
        return tuple(item for item in items if not item.key.startswith(ESCROW_PREFIX))
    if not withheld:
        return tuple(items)
    again = [item for item in own if item.key.startswith(ESCROW_PREFIX)]
    sent = {(item.lane, item.key) for item in again}
    return (*again, *(item for item in items if (item.lane, item.key) not in sent))
