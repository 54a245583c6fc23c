"""The budget part of a site's replicated view: this life's spend slots and escrow
holder, what peers published of theirs, and which budget windows are closed.

Held apart from the provider records of :class:`~grid.crdt.state.GridState`, which
inherits it: budgets share the site's revision clock and its queue of items to publish,
and nothing else. Receiving a peer's spend or escrow item stays in ``GridState.apply_item``
(one entry point for every item); what it records is kept here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING

from grid.crdt.budget import BudgetHorizon, BudgetLedger, BudgetStatus, slot_id
from grid.crdt.escrow import EscrowBook, EscrowRecord, encode_escrow
from grid.crdt.snapshot import STATE_LANE, Item, SpendSlot, encode_spend
from grid.errors import CrdtValueError

if TYPE_CHECKING:
    from grid.crdt.clock import RevisionClock


class BudgetRecords:
    """Spend and escrow of every budget this site has heard of (see
    :class:`~grid.crdt.state.GridState`, which writes and reads them through these
    methods)."""

    if TYPE_CHECKING:
        # What the host (GridState) holds: the site, its revision clock and its items.
        _site: str
        _clock: RevisionClock
        _own_items: dict[tuple[str, str], Item]
        _dirty: set[tuple[str, str]]

        def _publish(self, item: Item) -> None: ...

    def __init__(self) -> None:
        self._ledger = BudgetLedger()
        self._escrow = EscrowBook()
        self._escrow_epoch: int | None = None
        self._epoch: int | None = None
        self._spend_windows: dict[tuple[str, str], tuple[str, str]] = {}
        """The (tenant, window) of each of this site's spend and escrow items."""
        self._peer_spend: dict[tuple[str, str], set[tuple[str, str]]] = {}
        """The (origin, key) of peers' spend and escrow items, by (tenant, window)."""
        self._spend_heard: dict[tuple[str, str], dict[str, tuple[int, float]]] = {}
        """Per (tenant, window), per peer: the highest version of its spend items received
        and when it arrived (this site's clock). A newer version, spend or heartbeat, is
        news from the peer; an old one relayed late is not."""
        self._spend_published_at: dict[tuple[str, str], float] = {}
        """When this site last published its slot of each (tenant, window)."""
        self._horizon: BudgetHorizon | None = None
        """Which budget windows are closed: their items are no longer merged."""

    # -- spend ------------------------------------------------------------------------------

    def add_spend(self, tenant: str, window: str, amount: int, now: float) -> int:
        """Count ``amount`` micro-USD of ``tenant``'s spend in ``window`` at this site;
        returns the tenant's known spend (a lower bound of the global spend)."""
        epoch = self.take_spend_epoch(now)
        before = self._ledger.slot(tenant, window, self._site, epoch)
        counted = self._ledger.increment(tenant, window, self._site, epoch, amount)
        if counted != before:
            self._publish_spend(tenant, window, counted, now)
        return self._ledger.spend(tenant, window)

    @property
    def spend_epoch(self) -> int | None:
        """The epoch of this life's spend slots (None before it counted any)."""
        return self._epoch

    def take_spend_epoch(self, now: float) -> int:
        """The epoch of this life's spend slots, taken now if this life has none yet."""
        if self._epoch is None:
            # This life's slot: above every revision this site issued or recovered so far.
            self._epoch = self._clock.tick(now)
        return self._epoch

    def own_spend_slots(self) -> tuple[tuple[str, str, int], ...]:
        """(tenant, window, value) of every slot of this life's epoch that counted spend."""
        return () if self._epoch is None else self._ledger.slots_of(self._site, self._epoch)

    def resume_spend(self, epoch: int, slots: Iterable[tuple[str, str, int]], now: float) -> None:
        """Count on in the slots of an earlier life, ``epoch``, whose values a durable
        checkpoint holds: they are merged (per-slot maximum) and published again under new
        versions, and later spend adds to them. Only before this life counted in an epoch of
        its own; safe as long as no peer holds more of those slots than the checkpoint, so
        the checkpoint must be written before the spend it holds is published."""
        if self._epoch not in (None, epoch):
            raise CrdtValueError("this life already counts spend in an epoch of its own")
        self._clock.observe(epoch)
        self._epoch = epoch
        for tenant, window, value in slots:
            self._ledger.merge_slot(tenant, window, self._site, epoch, value)
            held = self._ledger.slot(tenant, window, self._site, epoch)
            if held:
                self._publish_spend(tenant, window, held, now)

    def heartbeat_spend(self, tenant: str, window: str, now: float, every: float) -> bool:
        """Publish this life's slot of ``tenant``'s ``window`` again, 0 included, unless it
        was published less than ``every`` seconds ago: peers then know they hold all this
        site counted there as of now (grid.engine.budgets). Whether it was published."""
        at = self._spend_published_at.get((tenant, window))
        if at is not None and now - at < every:
            return False
        epoch = self.take_spend_epoch(now)
        self._publish_spend(
            tenant, window, self._ledger.slot(tenant, window, self._site, epoch), now
        )
        return True

    def spend_heard_in(self, tenant: str, window: str) -> Mapping[str, float]:
        """Per peer, when (this site's clock) its newest spend item of ``tenant``'s
        ``window`` arrived, of any of its lives."""
        heard = self._spend_heard.get((tenant, window))
        return {} if heard is None else {site: at for site, (_, at) in heard.items()}

    def spend_heard(self) -> Iterator[tuple[str, str, Mapping[str, float]]]:
        """(tenant, window, per peer when its newest spend item of it arrived) of every
        counter a peer published spend items of."""
        for (tenant, window), heard in self._spend_heard.items():
            yield tenant, window, {site: at for site, (_, at) in heard.items()}

    def _publish_spend(self, tenant: str, window: str, value: int, now: float) -> None:
        assert self._epoch is not None
        slot = SpendSlot(tenant, window, self._epoch, value, self._clock.tick(now))
        item = encode_spend(self._site, slot)
        self._spend_windows[(item.lane, item.key)] = (tenant, window)
        self._spend_published_at[(tenant, window)] = now
        self._publish(item)

    # -- escrowed budgets (grid.crdt.escrow) ----------------------------------------------

    @property
    def escrow(self) -> EscrowBook:
        """Every escrow holder's record heard of, this site's included (read only: write
        with :meth:`write_escrow`)."""
        return self._escrow

    @property
    def escrow_epoch(self) -> int | None:
        """The epoch of this life's escrow holder, ``site#epoch`` (None before taken)."""
        return self._escrow_epoch

    def take_escrow_epoch(self, now: float) -> int:
        """The epoch of this life's escrow holder, taken now if not yet: above every
        revision this site issued or recovered so far, so never an earlier life's. It is
        never resumed from a checkpoint: what an earlier life granted or gave away is known
        only from its items, which a new life may not have yet."""
        if self._escrow_epoch is None:
            self._escrow_epoch = self._clock.tick(now)
        return self._escrow_epoch

    def own_escrow(self) -> tuple[EscrowRecord, ...]:
        """Every record of this life's holder (what a shell keeps, see
        grid.engine.escrow_checkpoint), sorted by tenant and window."""
        if self._escrow_epoch is None:
            return ()
        holder = slot_id(self._site, self._escrow_epoch)
        found = (self._escrow.record(t, w, holder) for t, w in self._escrow.windows())
        return tuple(record for record in found if record is not None)

    def resume_escrow(self, epoch: int, records: Iterable[EscrowRecord], now: float) -> None:
        """Go on as the holder of an earlier life, ``epoch``, whose records a durable
        checkpoint holds (written before any of them was published, so no peer holds a
        newer version): they are merged and published again under new versions, and this
        life grants, gives and claims as that holder. Only before this life took a holder
        of its own."""
        if self._escrow_epoch not in (None, epoch):
            raise CrdtValueError("this life already holds escrow under an epoch of its own")
        self._clock.observe(epoch)
        self._escrow_epoch = epoch
        for record in records:
            if record.epoch != epoch:
                raise CrdtValueError("an escrow record of another holder cannot be resumed")
            if self._horizon is not None and self._horizon.closes(record.tenant, record.window):
                continue
            self._clock.observe(record.revision)
            self._escrow.merge(self._site, record)
            held = self._escrow.record(record.tenant, record.window, slot_id(self._site, epoch))
            assert held is not None
            item = encode_escrow(self._site, replace(held, revision=self._clock.tick(now)))
            self._escrow.merge(self._site, replace(held, revision=item.version))
            self._spend_windows[(item.lane, item.key)] = (record.tenant, record.window)
            self._publish(item)

    def write_escrow(
        self,
        tenant: str,
        window: str,
        now: float,
        *,
        claim: tuple[int, int] | None = None,
        grant: int = 0,
        send: Mapping[str, int] = MappingProxyType({}),
        ask: Mapping[str, int] = MappingProxyType({}),
        rate: int | None = None,
    ) -> EscrowRecord:
        """Change this life's escrow record of ``tenant``'s ``window`` and publish it;
        refused (changing nothing) past what the holder may grant or give away
        (:meth:`grid.crdt.escrow.EscrowBook.write`)."""
        epoch = self.take_escrow_epoch(now)
        record = self._escrow.write(
            self._site,
            tenant,
            window,
            epoch,
            claim=claim,
            grant=grant,
            send=send,
            ask=ask,
            rate=rate,
            revision=self._clock.tick(now),
        )
        item = encode_escrow(self._site, record)
        self._escrow.merge(self._site, record)
        self._spend_windows[(item.lane, item.key)] = (tenant, window)
        self._publish(item)
        return record

    def _closed(self, slot: SpendSlot) -> bool:
        # A window closed everywhere: its late items (relayed, resent by a site that
        # restarted, or kept by a peer that never forgets) must not bring it back.
        return self._horizon is not None and self._horizon.closes(slot.tenant, slot.window)

    def budget_counters(self) -> tuple[tuple[str, str], ...]:
        """The (tenant, window) of every budget counter held, sorted."""
        return self._ledger.counters()

    def budget_spend(self, tenant: str, window: str) -> int:
        """A tenant's known spend in ``window`` (micro-USD; a lower bound)."""
        return self._ledger.spend(tenant, window)

    def site_spend(self, tenant: str, window: str, site: str) -> int:
        """What every life of ``site`` counted of ``tenant``'s spend in ``window``, as far
        as this site has heard."""
        return self._ledger.site_spend(tenant, window, site)

    def own_spend(self, tenant: str, window: str) -> int:
        """What this life counted of ``tenant``'s spend in ``window``."""
        if self._epoch is None:
            return 0
        return self._ledger.slot(tenant, window, self._site, self._epoch)

    def budget_status(self, tenant: str, window: str, cap: int) -> BudgetStatus:
        """A tenant's known spend in ``window`` against ``cap`` (micro-USD)."""
        return self._ledger.status(tenant, window, cap)

    def forget_budget_window(self, window: str) -> int:
        """Stop tracking an ended budget window (every tenant's counter and this site's
        items for it); how many counters were dropped."""
        for key in [key for key, held in self._spend_windows.items() if held[1] == window]:
            self._drop_own_item(key)
        for counter in [counter for counter in self._peer_spend if counter[1] == window]:
            del self._peer_spend[counter]
        for counter in [counter for counter in self._spend_heard if counter[1] == window]:
            del self._spend_heard[counter]
        return self._ledger.forget_window(window)

    def close_budget_windows(
        self, horizon: BudgetHorizon
    ) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
        """Forget the budget windows ``horizon`` closes (every site's counter and this
        site's items for them) and merge no item of them from now on; returns, per peer,
        the ``(lane, key)`` of its items for them, for the transport to forget too."""
        self._horizon = horizon
        closed = set(self._ledger.close(horizon)) | set(self._escrow.close(horizon))
        if not closed:
            return ()
        for own in [own for own, held in self._spend_windows.items() if held in closed]:
            self._drop_own_item(own)
        by_site: dict[str, list[tuple[str, str]]] = {}
        for counter in closed:
            self._spend_heard.pop(counter, None)
            for site, key in sorted(self._peer_spend.pop(counter, ())):
                by_site.setdefault(site, []).append((STATE_LANE, key))
        return tuple((site, tuple(keys)) for site, keys in sorted(by_site.items()))

    def _drop_own_item(self, key: tuple[str, str]) -> None:
        self._spend_published_at.pop(self._spend_windows[key], None)
        del self._spend_windows[key]
        del self._own_items[key]
        self._dirty.discard(key)
