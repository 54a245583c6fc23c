"""One site's replicated view of one GridNetwork."""

from __future__ import annotations

from grid.crdt.budget_records import BudgetRecords
from grid.crdt.clock import RevisionClock, wall_millis
from grid.crdt.codec import MAX_ITEM_BYTES, fail, item_bytes
from grid.crdt.escrow import (
    ESCROW_PREFIX,
    decode_escrow,
)
from grid.crdt.lww import LWWRegister, Stamp
from grid.crdt.pages import (
    MAX_PAGES,
    PAGE_PREFIX,
    PageBook,
    SignalsPage,
    decode_page,
    page_key,
    page_number,
)
from grid.crdt.records import GatewayRecord, ProviderRecord, SiteMetadata, check_site_id
from grid.crdt.signals import SignalsState, SignalThresholds, decode_signals
from grid.crdt.site_records import (
    ProviderEntry,
    SiteRecords,
    assembled_or_none,
    check_page_room,
    check_room,
    merge_cert_chunk,
    merge_signals,
    merged_provider,
    merged_register,
    provider_changed,
    provider_entries,
    provider_entry,
)
from grid.crdt.snapshot import (
    CERT_LANE,
    GATEWAY_KEY,
    GATEWAY_LANE,
    METADATA_KEY,
    METADATA_LANE,
    SIGNALS_PREFIX,
    STATE_LANE,
    CertChunk,
    Fragment,
    GatewayUpdate,
    GridStateSnapshot,
    Item,
    MetadataUpdate,
    ProviderState,
    SpendSlot,
    cert_chunks,
    cert_key,
    check_keyed_provider_name,
    decode_item,
    encode_cert_chunk,
    encode_gateway,
    encode_metadata,
    encode_provider,
    provider_key,
    signals_key,
)
from grid.errors import CrdtDecodeError, CrdtLimitError, CrdtValueError

_PLAIN_NOW = 9e12
"""Times (seconds) up to here pass :func:`~grid.crdt.clock.wall_millis`'s checks."""

MAX_SITES = 1024
"""Most sites (this one included) whose records are held."""


class GridState(BudgetRecords):
    """Everything one site knows about one GridNetwork: its own records, which it writes and
    publishes, and every peer's, merged from received items.

    Writers (:meth:`put_provider`, :meth:`remove_provider`, :meth:`set_gateway`,
    :meth:`set_cert`, :meth:`set_metadata`, :meth:`add_spend`) change this site's records
    and queue their items for :meth:`items_to_publish`. :meth:`apply_item` merges a received
    item; every site that received the same items, in any order, with any repeats, holds the
    same state. An item this site published in an earlier life (delivered back by peers)
    is merged into its own records, and its revision clock moves past it, so its next
    versions supersede the old ones in the gossip.

    Pure: time is passed in as ``now`` (seconds). Not thread-safe.
    """

    def __init__(self, site: str) -> None:
        super().__init__()
        self._site = check_site_id(site)
        self._clock = RevisionClock()
        self._sites: dict[str, SiteRecords] = {site: SiteRecords()}
        self._provider_names: frozenset[str] | None = None
        """The union of every site's live providers, None until read again."""
        self._own_items: dict[tuple[str, str], Item] = {}
        self._dirty: set[tuple[str, str]] = set()
        self._pages = PageBook(self._site)
        self._written_at = 0.0
        """The time of the latest write: signals pages are written as of then."""

    def __repr__(self) -> str:
        return (
            f"GridState(site={self._site!r}, sites={len(self._sites)}, "
            f"providers={sum(len(r.providers) for r in self._sites.values())}, "
            f"budget_counters={len(self._ledger)})"
        )

    @property
    def site(self) -> str:
        """This site's id."""
        return self._site

    @property
    def _own(self) -> SiteRecords:
        return self._sites[self._site]

    # -- writing this site's records ------------------------------------------------------

    def put_provider(
        self,
        record: ProviderRecord,
        now: float,
        *,
        refresh_after: float | None = None,
        thresholds: SignalThresholds | None = None,
    ) -> bool:
        """Write one of this site's providers; whether anything was written.

        The catalogue (spec, models, tools, agents) is written when it changed. The signals
        (phase and metrics) are written when the phase changed or, with ``thresholds``,
        when the metrics moved enough to publish (without, on any change); and, whatever
        moved, once ``refresh_after`` seconds have passed since they were last written, so
        peers can tell a live site's quiet provider from a stale one and no published value
        stays behind for longer. Raises :class:`~grid.errors.CrdtLimitError` (changing
        nothing) if the catalogue would not fit one item."""
        if not isinstance(record, ProviderRecord):
            raise CrdtValueError("put_provider takes a ProviderRecord")
        if thresholds is not None and not isinstance(thresholds, SignalThresholds):
            raise CrdtValueError("thresholds must be SignalThresholds")
        wall_millis(now)
        own = self._own
        name = check_keyed_provider_name(record.name)
        current = own.providers.get(name)
        published = own.signals.get(name)
        shown = None if published is None else published.metrics
        new = current is None or current.removed
        write_catalogue = current is None or current.removed or not current.holds(record)
        write_signals = (
            new
            or published is None
            or shown is None
            or published.phase != record.phase
            or (
                shown != record.metrics
                and (thresholds is None or thresholds.worth_publishing(shown, record.metrics))
            )
            or (
                refresh_after is not None
                and now - own.signals_received_at.get(name, now) >= refresh_after
            )
        )
        if not write_catalogue and not write_signals:
            return False
        if current is None:
            check_room(own.providers, self._site)
        if published is None:
            check_room(own.signals, self._site)
        stamp, at_ms = self._stamp(now)
        catalogue = None
        if write_catalogue:
            state = (
                ProviderState.created(record, stamp, at_ms)
                if current is None
                else current.written(record, stamp, at_ms)
            )
            catalogue = (state, encode_provider(self._site, state))
        signals = None
        if write_signals:
            signals = SignalsState.written(
                self._site, name, stamp.revision, at_ms, record.phase, record.metrics
            )
        self._commit(name, catalogue, signals, now)
        return True

    def remove_provider(self, name: str, now: float) -> bool:
        """Remove one of this site's providers (publishing a small tombstone of its
        catalogue and a void signals register); whether it was there."""
        own = self._own
        current = own.providers.get(name)
        if current is None or current.removed:
            return False
        if name not in own.signals:
            check_room(own.signals, self._site)
        stamp, at_ms = self._stamp(now)
        state = current.tombstone(stamp, at_ms)
        void = SignalsState.written(self._site, name, stamp.revision, at_ms, None, None)
        self._commit(name, (state, encode_provider(self._site, state)), void, now)
        return True

    def _commit(
        self,
        name: str,
        catalogue: tuple[ProviderState, Item] | None,
        signals: SignalsState | None,
        now: float,
    ) -> None:
        # Everything was encoded (and so checked) before this: a refusal changes nothing.
        own = self._own
        if catalogue is not None:
            own.providers[name] = catalogue[0]
            own.received_at[name] = now
            self._publish(catalogue[1])
        if signals is not None:
            own.signals[name] = signals
            own.signals_received_at[name] = now
            self._pages.written(name)
        self._written_at = now
        provider_changed(own, name)

    def own_provider_names(self) -> tuple[str, ...]:
        """This site's live providers, including any recovered from an earlier life, so a
        caller can remove those it no longer declares."""
        return tuple(sorted(n for n, s in self._own.providers.items() if not s.removed))

    def set_gateway(self, gateway: GatewayRecord, now: float) -> bool:
        """Set this site's gateway address; whether it changed."""
        if not isinstance(gateway, GatewayRecord):
            raise CrdtValueError("set_gateway takes a GatewayRecord")
        own = self._own
        if own.gateway is not None and own.gateway.value == gateway:
            return False
        register = LWWRegister(gateway, self._stamp(now)[0])
        item = encode_gateway(self._site, register)
        own.gateway = register
        self._publish(item)
        return True

    def set_metadata(self, metadata: SiteMetadata, now: float) -> bool:
        """Set this site's metadata; whether it changed."""
        if not isinstance(metadata, SiteMetadata):
            raise CrdtValueError("set_metadata takes a SiteMetadata")
        own = self._own
        if own.metadata is not None and own.metadata.value == metadata:
            return False
        register = LWWRegister(metadata, self._stamp(now)[0])
        item = encode_metadata(self._site, register)
        own.metadata = register
        self._publish(item)
        return True

    def set_cert(self, pem: str, now: float) -> bool:
        """Set this site's public certificate PEM (published in chunks); whether it changed.
        Refuses anything containing a private key marker, without quoting it."""
        chunks = cert_chunks(pem)
        own = self._own
        if assembled_or_none(own.cert_chunks) == pem:
            return False
        stamp = self._stamp(now)[0]
        first = chunks[0]
        # Chunks left from a longer certificate are overwritten with void ones.
        for index in range(len(chunks), max(own.cert_chunks, default=-1) + 1):
            chunks.append(CertChunk(index, first.count, first.digest, ""))
        registers = {chunk.index: LWWRegister(chunk, stamp) for chunk in chunks}
        items = [encode_cert_chunk(self._site, register) for register in registers.values()]
        own.cert_chunks.update(registers)
        own.cert_pem = pem
        for item in items:
            self._publish(item)
        return True

    def _apply_escrow(
        self, origin: str, key: str, version: int, payload: bytes, now: float
    ) -> bool:
        record = decode_escrow(origin, key, version, payload)
        if self._horizon is not None and self._horizon.closes(record.tenant, record.window):
            return False
        if origin == self._site:
            # An earlier life's holder: its allowance is stranded, but what it granted
            # counts in this site's total. This life's clock moves past it.
            self._clock.observe(version)
            return self._escrow.merge(origin, record)
        records = self._records_of(origin)
        self._peer_spend.setdefault((record.tenant, record.window), set()).add((origin, key))
        changed = self._escrow.merge(origin, record)
        records.last_received_at = now
        return changed

    def items_to_publish(self) -> list[Item]:
        """This site's items that changed since the last call, sorted by lane and key: the
        signals registers written since go out in pages (:mod:`grid.crdt.pages`)."""
        self._write_pages()
        items = [self._own_items[key] for key in sorted(self._dirty)]
        self._dirty.clear()
        return items

    def all_items(self) -> list[Item]:
        """Every current item of this site (for a full re-announcement), sorted."""
        self._write_pages()
        return [self._own_items[key] for key in sorted(self._own_items)]

    def _write_pages(self) -> None:
        if self._pages.pending:
            at = self._written_at
            pages = self._pages.write(self._own.signals, lambda: self._clock.tick(at))
            for number, version, payload in pages:
                self._publish(Item(STATE_LANE, page_key(number), version, payload))

    # -- receiving ------------------------------------------------------------------------

    def apply_item(  # noqa: PLR0917 - the transport's delivery tuple, then the time
        self, origin: str, lane: str, key: str, version: int, payload: bytes, now: float
    ) -> bool:
        """Merge one received item; whether the state changed.

        Raises :class:`~grid.errors.CrdtDecodeError` for a malformed, truncated, oversized
        or inconsistent item (:class:`~grid.errors.CrdtForgedItemError` if it describes a
        site other than ``origin``) and :class:`~grid.errors.CrdtLimitError` past a bound;
        either way nothing changes.
        """
        if type(now) is not float or not 0.0 <= now <= _PLAIN_NOW:
            wall_millis(now)  # the full check, for anything but a plain time
        if lane == STATE_LANE and type(key) is str:
            if key.startswith(PAGE_PREFIX):
                return self._apply_page(origin, key, version, payload, now)
            if key.startswith(SIGNALS_PREFIX):
                return self._apply_signals(origin, key, version, payload, now)
            if key.startswith(ESCROW_PREFIX):
                return self._apply_escrow(origin, key, version, payload, now)
        fragment = decode_item(origin, lane, key, version, payload)
        if origin == self._site:
            self._clock.observe(version)
            if isinstance(fragment, SpendSlot) and self._closed(fragment):
                return False
            return self._recover(fragment, Item(lane, key, version, payload), now)
        records = self._sites.get(origin)
        if records is None:
            if len(self._sites) >= MAX_SITES:
                raise CrdtLimitError(f"records of at most {MAX_SITES} sites are held")
            records = SiteRecords()
        if isinstance(fragment, SpendSlot):
            if self._closed(fragment):
                return False
            counter = (fragment.tenant, fragment.window)
            self._peer_spend.setdefault(counter, set()).add((origin, key))
            heard = self._spend_heard.setdefault(counter, {})
            if version > heard.get(origin, (0, 0.0))[0]:
                heard[origin] = (version, now)
        changed = self._merge(records, origin, fragment, now)
        records.last_received_at = now
        self._sites[origin] = records
        return changed

    def _apply_signals(
        self, origin: str, key: str, version: int, payload: bytes, now: float
    ) -> bool:
        # The hot path of a large mesh: almost every item is a signals item. Origins and
        # names already held were checked when first seen.
        name = key[len(SIGNALS_PREFIX) :]
        records = self._sites.get(origin)
        current = None if records is None else records.signals.get(name)
        if current is None:
            try:
                check_site_id(origin, "origin")
                check_keyed_provider_name(name, "key provider name")
            except CrdtValueError as exc:
                raise CrdtDecodeError(str(exc)) from None
        elif current.payload == payload and current.version == version and type(version) is int:
            # A duplicate (relays deliver items more than once): these very bytes were
            # checked when they arrived, and merging them again changes nothing.
            if origin != self._site:
                records.last_received_at = now  # type: ignore[union-attr]
            return False
        incoming = decode_signals(origin, name, version, payload)
        if origin == self._site:
            self._clock.observe(version)
            return self._recover(incoming, Item(STATE_LANE, key, version, payload), now)
        records = self._records_of(origin)
        changed = merge_signals(records, origin, incoming, now)
        records.singles.add(name)
        records.last_received_at = now
        return changed

    def _apply_page(self, origin: str, key: str, version: int, payload: bytes, now: float) -> bool:
        number = page_number(key)
        records = self._sites.get(origin)
        if records is None:
            try:
                check_site_id(origin, "origin")
            except CrdtValueError as exc:
                raise CrdtDecodeError(str(exc)) from None
        elif records.pages.get(number) == (version, payload) and type(version) is int:
            # A duplicate: these very bytes were checked and merged when they arrived.
            if origin != self._site:
                records.last_received_at = now
            return False
        if isinstance(payload, bytes) and item_bytes(origin, key, payload) > MAX_ITEM_BYTES:
            fail("payload", f"makes an item over the {MAX_ITEM_BYTES}-byte limit")
        held = {} if records is None else records.signals
        page = decode_page(
            origin, number, version, payload, held.__contains__, check_keyed_provider_name
        )
        states = page.states
        if records is not None and number not in records.pages and len(records.pages) >= MAX_PAGES:
            raise CrdtLimitError(f"at most {MAX_PAGES} signals pages are held per site")
        check_page_room(held, states, origin)
        if origin == self._site:
            self._clock.observe(version)
            return self._recover_page(page, Item(STATE_LANE, key, version, payload), now)
        records = self._records_of(origin)
        changed = self._merge(records, origin, page, now)
        if version >= records.pages.get(number, (0, b""))[0]:
            records.pages[number] = (version, payload)
        records.last_received_at = now
        return changed

    def _records_of(self, origin: str) -> SiteRecords:
        """The records held of ``origin``, new ones if none (within :data:`MAX_SITES`)."""
        records = self._sites.get(origin)
        if records is None:
            if len(self._sites) >= MAX_SITES:
                raise CrdtLimitError(f"records of at most {MAX_SITES} sites are held")
            records = self._sites[origin] = SiteRecords()
        return records

    def _recovered_register(self, name: str, now: float) -> None:
        """A register of an earlier life became this site's latest: it goes into a page."""
        self._pages.written(name)
        self._written_at = max(self._written_at, now)

    def _recover_page(self, page: SignalsPage, item: Item, now: float) -> bool:
        # A page this site wrote in an earlier life. A register newer than this life's is
        # taken and published again; if the page is newer than this life's page of that
        # number, what this life put there is published again elsewhere.
        own = self._own
        changed = False
        for state in page.states:
            if merge_signals(own, self._site, state, now):
                self._recovered_register(state.name, now)
                changed = True
        key = (item.lane, item.key)
        held = self._own_items.get(key)
        if (
            held is None
            or held.version < item.version
            or (held.version == item.version and held.payload != item.payload)
        ):
            current = [state for state in page.states if own.signals.get(state.name) == state]
            self._pages.recovered(page.number, page.version, current)
            self._own_items[key] = item
        own.pages[page.number] = (item.version, item.payload)
        return changed

    def _merge(self, records: SiteRecords, origin: str, fragment: Fragment, now: float) -> bool:
        if isinstance(fragment, ProviderState):
            merged = merged_provider(records, origin, fragment)
            if merged is None:
                return False
            records.providers[fragment.name] = merged
            records.received_at[fragment.name] = now
            provider_changed(records, fragment.name)
            return True
        if isinstance(fragment, SignalsState):
            return merge_signals(records, origin, fragment, now)
        if isinstance(fragment, SignalsPage):
            changed = False
            for state in fragment.states:
                changed = merge_signals(records, origin, state, now) or changed
            return changed
        if isinstance(fragment, SpendSlot):
            return self._ledger.merge_slot(
                fragment.tenant, fragment.window, origin, fragment.epoch, fragment.spend
            )
        if isinstance(fragment, GatewayUpdate):
            gateway = merged_register(records.gateway, fragment.register)
            if gateway is None:
                return False
            records.gateway = gateway
            return True
        if isinstance(fragment, MetadataUpdate):
            metadata = merged_register(records.metadata, fragment.register)
            if metadata is None:
                return False
            records.metadata = metadata
            return True
        return merge_cert_chunk(records, fragment)

    def _recover(self, fragment: Fragment, item: Item, now: float) -> bool:
        # An item of this site's own, from an earlier life. Where merging leaves exactly
        # what the item holds, that item (already in the gossip) stays the current one;
        # where it mixes both lives, the mix is published under a new version.
        own = self._own
        key = (item.lane, item.key)
        if isinstance(fragment, ProviderState):
            merged = merged_provider(own, self._site, fragment)
            if merged is None:
                return False
            if merged != fragment:
                stamp, at_ms = self._stamp(now)
                merged = merged.touched(stamp, at_ms)
                item = encode_provider(self._site, merged)
                self._dirty.add(key)
            own.providers[fragment.name] = merged
            own.received_at[fragment.name] = now
            provider_changed(own, fragment.name)
        elif not self._merge(own, self._site, fragment, now):
            return False
        elif isinstance(fragment, SignalsState):
            # A signals item of the layout before pages.
            self._recovered_register(fragment.name, now)
        if isinstance(fragment, SpendSlot):
            self._spend_windows[key] = (fragment.tenant, fragment.window)
        self._own_items[key] = item
        return True

    # -- reading the merged view ----------------------------------------------------------

    def sites(self) -> tuple[str, ...]:
        """Every site with records here, this one included."""
        return tuple(sorted(self._sites))

    def providers(self, site: str | None = None) -> tuple[ProviderEntry, ...]:
        """Live providers of every site (or of ``site``), sorted by site and name. A
        provider is seen whole: once both its catalogue and its signals are held, and not
        after its removal."""
        names = [site] if site is not None else sorted(self._sites)
        entries: list[ProviderEntry] = []
        for name in names:
            records = self._sites.get(name)
            if records is not None:
                entries.extend(provider_entries(name, records))
        return tuple(entries)

    def provider_names(self) -> frozenset[str]:
        """The names of the live providers of every site (those :meth:`providers` reads);
        each site's set is kept until its providers change, and their union until one of
        the sets does (at 100 sites x 100 providers, a union of 10,000 names on every pass
        for a count that seldom moves)."""
        changed = self._provider_names is None
        for records in self._sites.values():
            if not records.unchecked:
                continue
            live = records.live
            for name in records.unchecked:
                state = records.providers.get(name)
                if state is not None and state.readable(records.signals.get(name)):
                    if name not in live:
                        live.add(name)
                        changed = True
                elif name in live:
                    live.discard(name)
                    changed = True
            records.unchecked.clear()
        if changed:
            self._provider_names = frozenset().union(
                *(records.live for records in self._sites.values())
            )
        assert self._provider_names is not None
        return self._provider_names

    def providers_stamp(self, site: str) -> int | None:
        """A number that changes whenever :meth:`providers` of ``site`` may read
        differently (None for a site with no records): what a reader caches by."""
        records = self._sites.get(site)
        return None if records is None else records.stamp

    def provider_changes(self, site: str, since: int | None) -> list[str] | None:
        """The providers of ``site`` that may read differently than they did at ``since``
        (a :meth:`providers_stamp` of this site), most recently changed first; None when
        the reader has to read them all (``since`` is None or too old, or the site's
        records were dropped and built again since)."""
        records = self._sites.get(site)
        if records is None or since is None or since < records.since:
            return None
        changed = []
        for name, stamp in reversed(records.changes.items()):
            if stamp <= since:
                break
            changed.append(name)
        return changed

    def provider(self, site: str, name: str) -> ProviderEntry | None:
        """One live provider whose catalogue and signals are both held, or None."""
        records = self._sites.get(site)
        if records is None or name not in records.providers:
            return None
        return provider_entry(site, name, records)

    def gateway(self, site: str) -> GatewayRecord | None:
        """A site's gateway address, if known."""
        records = self._sites.get(site)
        return None if records is None or records.gateway is None else records.gateway.value

    def metadata(self, site: str) -> SiteMetadata | None:
        """A site's metadata, if known."""
        records = self._sites.get(site)
        return None if records is None or records.metadata is None else records.metadata.value

    def cert_pem(self, site: str) -> str | None:
        """A site's latest complete public certificate PEM, if known."""
        records = self._sites.get(site)
        return None if records is None else records.cert_pem

    def last_received_at(self, site: str) -> float | None:
        """When (local clock) the latest item from ``site`` arrived; None for this site and
        for sites never heard from."""
        records = self._sites.get(site)
        return None if records is None else records.last_received_at

    def snapshot(self, site: str | None = None) -> GridStateSnapshot:
        """What this site holds of ``site``'s published state (default: its own)."""
        name = self._site if site is None else site
        records = self._sites.get(name)
        if records is None:
            return GridStateSnapshot(check_site_id(name))
        return GridStateSnapshot(
            name,
            records.providers,
            records.gateway,
            records.metadata,
            records.cert_chunks,
            records.signals,
        )

    # -- forgetting -----------------------------------------------------------------------

    def forget_site(self, site: str) -> tuple[tuple[str, str], ...]:
        """Drop a departed or stale site's records; the ``(lane, key)`` of every item they
        came from (empty if there were none), so the transport can forget them too.

        Its budget slots stay: spend already counted is real, and dropping it would break
        the lower bound.
        """
        if site == self._site:
            raise CrdtValueError("a site cannot forget its own records")
        records = self._sites.pop(site, None)
        if records is None:
            return ()
        self._provider_names = None
        items = [(STATE_LANE, provider_key(name)) for name in records.providers]
        items += [(STATE_LANE, signals_key(name)) for name in records.singles]
        items += [(STATE_LANE, page_key(number)) for number in records.pages]
        if records.gateway is not None:
            items.append((GATEWAY_LANE, GATEWAY_KEY))
        if records.metadata is not None:
            items.append((METADATA_LANE, METADATA_KEY))
        items += [(CERT_LANE, cert_key(index)) for index in records.cert_chunks]
        return tuple(items)

    def prune_tombstones(self, before: float) -> int:
        """Drop tombstones of providers removed before ``before`` (writer's clock, seconds),
        with their void signals, and signals held without any catalogue that were written
        before then; how many providers were dropped. A tombstone only has to outlive
        stragglers of the record it replaced, so once that many seconds have passed it can
        go."""
        pruned = 0
        for site, records in self._sites.items():
            stale = {
                name
                for name, state in records.providers.items()
                if state.removed and state.updated_at < before
            }
            stale.update(
                name
                for name, signals in records.signals.items()
                if name not in records.providers and signals.at_ms / 1000 < before
            )
            for name in stale:
                records.providers.pop(name, None)
                records.received_at.pop(name, None)
                records.signals.pop(name, None)
                records.signals_received_at.pop(name, None)
                records.singles.discard(name)
                provider_changed(records, name)
                if site == self._site:
                    self._pages.dropped(name)
                    for key in ((STATE_LANE, provider_key(name)), (STATE_LANE, signals_key(name))):
                        self._own_items.pop(key, None)
                        self._dirty.discard(key)
            pruned += len(stale)
        return pruned

    # -- helpers --------------------------------------------------------------------------

    def _stamp(self, now: float) -> tuple[Stamp, int]:
        at_ms = wall_millis(now)
        return Stamp(self._clock.tick(now), self._site), at_ms

    def _publish(self, item: Item) -> None:
        key = (item.lane, item.key)
        self._own_items[key] = item
        self._dirty.add(key)
