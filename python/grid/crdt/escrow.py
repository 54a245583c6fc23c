"""Escrowed budgets: a tenant's cap in one window split into allowances held by sites, so
that the sum of what sites let their gateways grant never exceeds the cap, whatever the
network does (docs/crdt.md, "Escrow").

A **holder** is one life of one site, ``site#epoch`` (the same form as a spend slot). Each
holder publishes one record per (tenant, window), in an item only it writes:

- ``share``: what it took of the cap when the window started (0 for a holder that started
  later: it lives on transfers), and ``of``, how many sites the cap was split among;
- ``granted``: how much of its allowance it let its gateway grant (grows only);
- ``sent``: per receiving holder, how much allowance it gave away (each grows only);
- ``asks``: per donor holder, how much allowance it asked that holder for (each grows
  only: a request is the rise of the counter, answered by sends up to it);
- ``rate``: its recent spend, units per minute (advice for donors, not a counter).

A holder's **allowance** is ``share + received - sent``, where ``received`` sums what every
holder's ``sent`` gives it. Only the holder raises its own ``granted`` and ``sent``, and it
raises them only within ``allowance - granted - sent`` as it sees it; what it sees received
is never more than what was sent to it, so the holders' grants sum to at most the shares,
which sum to at most the cap. Merging keeps each counter's maximum: commutative,
associative, idempotent. Pure: no clocks, no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from grid.crdt.budget import MAX_COUNTERS, BudgetHorizon, slot_id
from grid.crdt.codec import (
    MAX_SAFE_INT,
    Json,
    fail,
    frame,
    read_int,
    read_object,
    read_str,
    require_canonical,
    unframe,
)
from grid.crdt.records import check_site_id, check_tenant, check_window
from grid.crdt.snapshot import STATE_LANE, Item
from grid.errors import CrdtDecodeError, CrdtForgedItemError, CrdtLimitError, CrdtValueError

ESCROW_PREFIX = "escrow/"
MAX_PARTNERS = 6
"""Most holders one holder sends to, and most it asks, in one window: the record has to fit
one item (1,024 bytes) with the longest site names."""
MAX_HOLDERS = 1024
"""Most holders tracked per (tenant, window)."""

_EMPTY: Mapping[str, int] = MappingProxyType({})


def holder_site(holder: str) -> str:
    """The site of a holder id ``site#epoch``."""
    return holder.rpartition("#")[0]


def check_holder(value: object, what: str = "holder") -> str:
    """A holder id: a site id, ``#``, an epoch (decimal, no leading zero)."""
    if not isinstance(value, str):
        raise CrdtValueError(f"{what} must be a string")
    site, separator, epoch = value.rpartition("#")
    if not separator or not epoch.isdigit() or not epoch.isascii() or epoch.startswith("0"):
        raise CrdtValueError(f"{what} must be site#epoch")
    if len(epoch) > 16 or int(epoch) > MAX_SAFE_INT:
        raise CrdtValueError(f"{what}: epoch out of range")
    check_site_id(site, what)
    return value


@dataclass(frozen=True, slots=True)
class EscrowRecord:
    """One holder's record for one tenant's budget window (see the module's docstring)."""

    tenant: str
    window: str
    epoch: int
    share: int = 0
    of: int = 0
    granted: int = 0
    sent: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    asks: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    rate: int = 0
    revision: int = 0

    @property
    def sent_total(self) -> int:
        return sum(self.sent.values())

    def merge(self, other: EscrowRecord) -> EscrowRecord:
        """The join of two versions of the same holder's record: every counter's maximum;
        the share, ``of`` and rate of the newer version (a holder fixes its share once)."""
        newer = other if other.revision > self.revision else self
        return replace(
            newer,
            share=max(self.share, other.share),
            of=max(self.of, other.of),
            granted=max(self.granted, other.granted),
            sent=_max_counters(self.sent, other.sent),
            asks=_max_counters(self.asks, other.asks),
            revision=max(self.revision, other.revision),
        )


def escrow_key(tenant: str, window: str, epoch: int) -> str:
    """The ``state`` lane key of one holder's escrow record."""
    named = f"{check_tenant(tenant)}\n{check_window(window)}".encode()
    return f"{ESCROW_PREFIX}{hashlib.sha256(named).hexdigest()[:32]}/{epoch}"


def encode_escrow(site: str, record: EscrowRecord) -> Item:
    """The item that publishes ``site``'s escrow record (raises
    :class:`~grid.errors.CrdtLimitError` when it would not fit one item)."""
    body: dict[str, Json] = {
        "asks": dict(sorted(record.asks.items())),
        "granted": record.granted,
        "of": record.of,
        "rate": record.rate,
        "rev": record.revision,
        "sent": dict(sorted(record.sent.items())),
        "share": record.share,
        "site": site,
        "tenant": record.tenant,
        "window": record.window,
    }
    key = escrow_key(record.tenant, record.window, record.epoch)
    return Item(STATE_LANE, key, record.revision, frame(body, site, key, "escrow record"))


def decode_escrow(origin: str, key: str, version: int, payload: bytes) -> EscrowRecord:
    """What an escrow item says, fully checked; raises
    :class:`~grid.errors.CrdtDecodeError` (:class:`~grid.errors.CrdtForgedItemError` for a
    record of another site than ``origin``)."""
    try:
        check_site_id(origin, "origin")
        read_int(version, "version", 1)
        if not isinstance(key, str) or not key.startswith(ESCROW_PREFIX):
            fail("key", "an escrow key is escrow/<digest>/<epoch>")
        _, separator, raw_epoch = key[len(ESCROW_PREFIX) :].partition("/")
        if not separator:
            fail("key", "an escrow key is escrow/<digest>/<epoch>")
        epoch = int(check_holder(f"{origin}#{raw_epoch}", "key epoch").rpartition("#")[2])
        fields = ("asks", "granted", "of", "rate", "rev", "sent", "share", "site", "tenant")
        body = read_object(unframe(payload), "escrow item", (*fields, "window"))
        site = check_site_id(read_str(body["site"], "site"), "site")
        if site != origin:
            raise CrdtForgedItemError(f"an item sent by {origin!r} describes site {site!r}")
        if read_int(body["rev"], "rev", 1) != version:
            fail("rev", "differs from the item version")
        record = EscrowRecord(
            tenant=check_tenant(read_str(body["tenant"], "tenant")),
            window=check_window(read_str(body["window"], "window")),
            epoch=epoch,
            share=read_int(body["share"], "share"),
            of=read_int(body["of"], "of"),
            granted=read_int(body["granted"], "granted"),
            sent=_read_counters(body["sent"], "sent", origin),
            asks=_read_counters(body["asks"], "asks", origin),
            rate=read_int(body["rate"], "rate"),
            revision=version,
        )
        encoded = encode_escrow(origin, record)
    except CrdtForgedItemError:
        raise
    except (CrdtValueError, CrdtLimitError) as exc:
        raise CrdtDecodeError(str(exc)) from None
    if encoded.key != key:
        fail("key", "does not match the tenant and window of the payload")
    require_canonical(payload, encoded.payload)
    return record


def _read_counters(value: object, where: str, origin: str) -> Mapping[str, int]:
    if not isinstance(value, dict):
        fail(where, "must be an object")
    if len(value) > MAX_PARTNERS:
        fail(where, f"names more than {MAX_PARTNERS} holders")
    counters = {}
    for holder, amount in value.items():
        check_holder(holder, f"{where} holder")
        if holder_site(holder) == origin:
            fail(where, "names a holder of the item's own site")
        counters[holder] = read_int(amount, f"{where} amount", 1)
    return MappingProxyType(counters)


def _max_counters(first: Mapping[str, int], second: Mapping[str, int]) -> Mapping[str, int]:
    if not second:
        return first
    merged = dict(first)
    for holder, amount in second.items():
        merged[holder] = max(merged.get(holder, 0), amount)
    return MappingProxyType(merged)


class EscrowBook:
    """Every holder's record of every escrowed (tenant, window) this site has heard of, and
    what they add up to. The owner's writes (:meth:`write`) are checked against what this
    book holds, so a holder never gives away or grants allowance it does not see."""

    __slots__ = ("_records",)

    def __init__(self) -> None:
        self._records: dict[tuple[str, str], dict[str, EscrowRecord]] = {}

    def windows(self) -> tuple[tuple[str, str], ...]:
        """The (tenant, window) of every escrowed window held, sorted."""
        return tuple(sorted(self._records))

    def holders(self, tenant: str, window: str) -> Mapping[str, EscrowRecord]:
        """Every holder's record of ``tenant``'s ``window``."""
        return MappingProxyType(self._records.get((tenant, window), {}))

    def record(self, tenant: str, window: str, holder: str) -> EscrowRecord | None:
        return self._records.get((tenant, window), {}).get(holder)

    def received(self, tenant: str, window: str, holder: str) -> int:
        """What holders this site has heard of sent ``holder`` (at most what they sent)."""
        held = self._records.get((tenant, window), {})
        return sum(record.sent.get(holder, 0) for record in held.values())

    def allowance(self, tenant: str, window: str, holder: str) -> int:
        """``share + received - sent`` of ``holder`` as seen here: all it may ever grant."""
        record = self.record(tenant, window, holder)
        if record is None:
            return self.received(tenant, window, holder)
        return record.share + self.received(tenant, window, holder) - record.sent_total

    def available(self, tenant: str, window: str, holder: str) -> int:
        """What ``holder`` may still grant or give away: its allowance less its grants."""
        record = self.record(tenant, window, holder)
        granted = 0 if record is None else record.granted
        return self.allowance(tenant, window, holder) - granted

    def granted_by_site(self, tenant: str, window: str, site: str) -> int:
        """What every known life of ``site`` granted in the window."""
        held = self._records.get((tenant, window), {})
        return sum(r.granted for holder, r in held.items() if holder_site(holder) == site)

    def merge(self, site: str, record: EscrowRecord) -> bool:
        """Merge ``site``'s record; whether it changed anything."""
        key = (record.tenant, record.window)
        held = self._records.get(key)
        if held is None and len(self._records) >= MAX_COUNTERS:
            raise CrdtLimitError(f"at most {MAX_COUNTERS} escrowed budget windows are tracked")
        holder = slot_id(site, record.epoch)
        current = (held or {}).get(holder)
        if current is None and held is not None and len(held) >= MAX_HOLDERS:
            raise CrdtLimitError(f"at most {MAX_HOLDERS} escrow holders are tracked per window")
        merged = record if current is None else current.merge(record)
        if merged == current:
            return False
        self._records.setdefault(key, {})[holder] = merged
        return True

    def write(
        self,
        site: str,
        tenant: str,
        window: str,
        epoch: int,
        *,
        claim: tuple[int, int] | None = None,
        grant: int = 0,
        send: Mapping[str, int] = _EMPTY,
        ask: Mapping[str, int] = _EMPTY,
        rate: int | None = None,
        revision: int,
    ) -> EscrowRecord:
        """The next record of the holder ``site#epoch`` (this site's), not yet merged here:
        ``claim`` (share, of) once, ``grant`` and ``send``
        within what is available, ``ask`` rises, the rate; refused with
        :class:`~grid.errors.CrdtValueError` (changing nothing) past what is available, a
        second claim, or more than :data:`MAX_PARTNERS` partners."""
        holder = slot_id(site, epoch)
        base = self.record(tenant, window, holder) or EscrowRecord(tenant, window, epoch)
        if claim is not None and (base.share or base.of):
            raise CrdtValueError("a holder claims its share once per window")
        amounts = [grant, *send.values(), *ask.values()]
        if any(isinstance(a, bool) or not isinstance(a, int) or a < 0 for a in amounts):
            raise CrdtValueError("escrow amounts are integers >= 0")
        if any(holder_site(check_holder(h)) == site for h in (*send, *ask)):
            raise CrdtValueError("a holder neither sends to nor asks a holder of its own site")
        share, of = claim if claim is not None else (base.share, base.of)
        seen = self.received(tenant, window, holder)
        spendable = share + seen - base.sent_total - base.granted
        if grant + sum(send.values()) > spendable:
            raise CrdtValueError(
                f"{holder} may grant or give away {spendable}, not {grant + sum(send.values())}"
            )
        sent = {**base.sent}
        for target, amount in send.items():
            if amount:
                sent[target] = sent.get(target, 0) + amount
        asks = {**base.asks}
        for donor, amount in ask.items():
            if amount:
                asks[donor] = asks.get(donor, 0) + amount
        if len(sent) > MAX_PARTNERS or len(asks) > MAX_PARTNERS:
            raise CrdtValueError(f"a holder has at most {MAX_PARTNERS} partners a window")
        return replace(
            base,
            share=share,
            of=of,
            granted=base.granted + grant,
            sent=MappingProxyType(sent),
            asks=MappingProxyType(asks),
            rate=base.rate if rate is None else rate,
            revision=revision,
        )

    def close(self, horizon: BudgetHorizon) -> tuple[tuple[str, str], ...]:
        """Forget the windows ``horizon`` closes; their (tenant, window)."""
        closed = tuple(key for key in self._records if horizon.closes(*key))
        for key in closed:
            del self._records[key]
        return closed
