"""What a site holds of each site's records (:class:`SiteRecords`), a provider as read from
them (:class:`ProviderEntry`), and how a received fragment merges into them.

Held apart from :class:`~grid.crdt.state.GridState`, which keeps one :class:`SiteRecords`
per site and decides what to merge, because these are plain functions of the records: no
clock, no publishing, no budgets.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from grid.crdt.lww import LWWRegister
from grid.crdt.records import GatewayRecord, ProviderRecord, SiteMetadata
from grid.crdt.signals import SignalsState
from grid.crdt.snapshot import CertChunk, CertChunkUpdate, ProviderState, assemble_cert
from grid.errors import CrdtDecodeError, CrdtLimitError, CrdtValueError

R = TypeVar("R", LWWRegister[GatewayRecord], LWWRegister[SiteMetadata])

MAX_PROVIDERS_PER_SITE = 4096
"""Most provider catalogues (tombstones included), and as many signals registers, held per
site."""

_CHANGES_SLACK = 64
_STAMPS = itertools.count(1)
"""Stamps of sites' provider sets, unique in the process: a site dropped and heard from
again never gets back a stamp a reader may still hold."""


@dataclass(frozen=True, slots=True)
class ProviderEntry:
    """One provider in the merged view."""

    site: str
    record: ProviderRecord
    updated_at: float
    """The writer's clock (seconds) at the latest change of the provider's catalogue or
    signals."""
    received_at: float
    """This site's clock (seconds) when that change arrived, or was written here: what
    staleness is judged by."""


@dataclass(slots=True)
class SiteRecords:
    """Everything held of one site: its catalogues and signals, its gateway, metadata and
    certificate, and what readers of its providers cache by."""

    providers: dict[str, ProviderState] = field(default_factory=dict)
    received_at: dict[str, float] = field(default_factory=dict)
    signals: dict[str, SignalsState] = field(default_factory=dict)
    signals_received_at: dict[str, float] = field(default_factory=dict)
    entries: dict[str, ProviderEntry | None] = field(default_factory=dict)
    """Providers as last read, dropped on every change of their catalogue or signals."""
    stamp: int = field(default_factory=lambda: next(_STAMPS))
    """Renewed on every change of any of the site's providers, never reused."""
    since: int = 0
    """The oldest stamp :attr:`changes` answers for: ``stamp`` when created or compacted."""
    changes: dict[str, int] = field(default_factory=dict)
    """Provider names in the order of their latest change, with the stamp it got: what a
    reader holding an older stamp has to read again."""
    live: set[str] = field(default_factory=set)
    """Names of the providers :meth:`GridState.providers` reads, as of the last call of
    :meth:`GridState.provider_names`, but for those in ``unchecked``."""
    unchecked: set[str] = field(default_factory=set)
    """Providers whose liveness may have changed since: checked again when next asked."""
    gateway: LWWRegister[GatewayRecord] | None = None
    metadata: LWWRegister[SiteMetadata] | None = None
    cert_chunks: dict[int, LWWRegister[CertChunk]] = field(default_factory=dict)
    cert_pem: str | None = None
    """The latest complete certificate: kept while a newer one is still arriving."""
    pages: dict[int, tuple[int, bytes]] = field(default_factory=dict)
    """The latest version and payload of each signals page received."""
    singles: set[str] = field(default_factory=set)
    """Providers whose signals came as items of their own (the layout before pages)."""
    last_received_at: float | None = None

    def __post_init__(self) -> None:
        self.since = self.stamp


def check_room(held: dict[str, ProviderState] | dict[str, SignalsState], site: str) -> None:
    """Refuse one more provider record of ``site`` past :data:`MAX_PROVIDERS_PER_SITE`."""
    if len(held) >= MAX_PROVIDERS_PER_SITE:
        raise CrdtLimitError(
            f"site {site!r} already holds {MAX_PROVIDERS_PER_SITE} provider records"
        )


def check_page_room(
    held: dict[str, SignalsState], states: Iterable[SignalsState], site: str
) -> None:
    """Refuse a page that would make ``site`` hold over :data:`MAX_PROVIDERS_PER_SITE`
    signals registers."""
    if len(held) + sum(s.name not in held for s in states) > MAX_PROVIDERS_PER_SITE:
        raise CrdtLimitError(
            f"site {site!r} already holds {MAX_PROVIDERS_PER_SITE} provider records"
        )


def merged_provider(
    records: SiteRecords, site: str, incoming: ProviderState
) -> ProviderState | None:
    """The merge of ``incoming`` into ``records``, or None if it changes nothing."""
    current = records.providers.get(incoming.name)
    if current is None:
        check_room(records.providers, site)
        return incoming
    merged = current.merge(incoming)
    return None if merged == current else merged


def merge_signals(records: SiteRecords, site: str, incoming: SignalsState, now: float) -> bool:
    """Merge ``incoming`` into ``records``; whether it changed them."""
    name = incoming.name
    current = records.signals.get(name)
    if current is None:
        check_room(records.signals, site)
    elif current.merge(incoming) is current:
        return False
    records.signals[name] = incoming
    records.signals_received_at[name] = now
    # New values of signals that were readable already leave the provider live or not as
    # it was: the common case, hundreds a second.
    still_readable = current is not None and current.readable and incoming.readable
    provider_changed(records, name, liveness=not still_readable)
    return True


def merged_register(current: R | None, incoming: R) -> R | None:
    """The merge of ``incoming`` into ``current``, or None if it changes nothing."""
    if current is None:
        return incoming
    merged = current.merge(incoming)
    return None if merged == current else merged


def merge_cert_chunk(records: SiteRecords, update: CertChunkUpdate) -> bool:
    index = update.register.value.index
    current = records.cert_chunks.get(index)
    merged = update.register if current is None else current.merge(update.register)
    if merged == current:
        return False
    chunks = {**records.cert_chunks, index: merged}
    try:
        pem = assemble_cert(chunks)
    except CrdtValueError as exc:
        # A marker split across chunks shows only once they are put together.
        raise CrdtDecodeError(str(exc)) from None
    records.cert_chunks[index] = merged
    if pem is not None:
        records.cert_pem = pem
    return True


def assembled_or_none(chunks: dict[int, LWWRegister[CertChunk]]) -> str | None:
    try:
        return assemble_cert(chunks)
    except CrdtValueError:
        return None


def provider_changed(records: SiteRecords, name: str, *, liveness: bool = True) -> None:
    """Note that provider ``name`` reads differently; ``liveness``: whether it may have
    become live or stopped being (see :meth:`GridState.provider_names`)."""
    records.entries.pop(name, None)
    if liveness:
        records.unchecked.add(name)
    stamp = records.stamp = next(_STAMPS)
    changes = records.changes
    changes.pop(name, None)
    changes[name] = stamp
    if len(changes) > 2 * len(records.providers) + _CHANGES_SLACK:
        # Names dropped long ago (pruned tombstones) would pile up: start afresh, and every
        # reader of an older stamp reads the site whole once.
        records.changes = {n: stamp for n in records.providers}
        records.since = stamp


def provider_entry(site: str, name: str, records: SiteRecords) -> ProviderEntry | None:
    if name in records.entries:
        return records.entries[name]
    state = records.providers[name]
    signals = records.signals.get(name)
    record = state.record(signals)
    entry = None
    if record is not None and signals is not None:
        entry = ProviderEntry(
            site,
            record,
            max(state.header.value, signals.at_ms) / 1000,
            max(records.received_at[name], records.signals_received_at[name]),
        )
    records.entries[name] = entry
    return entry


def provider_entries(site: str, records: SiteRecords) -> Iterable[ProviderEntry]:
    for name in sorted(records.providers):
        entry = provider_entry(site, name, records)
        if entry is not None:
            yield entry
