"""A provider's fast signals as their own small item, and when they are worth publishing.

A provider's catalogue (spec, models, tools, agents) changes rarely; its phase, health and
load change with every scrape. So they travel apart: the catalogue as ``provider/<name>``,
the signals as ``signals/<name>``, one last-writer-wins register whose stamp is the item's
version (every signals item has one writer, its origin, so the stamp needs no writer id).

The payload is the format byte ``2`` and a canonical JSON array, at most 99 bytes::

    [rev, site tag, at offset, phase, healthy, queue, kv, prefix, p99]

``rev`` is the item version; the site tag binds the item to its origin (the first four
bytes of the SHA-256 of the site id, as an integer) without spelling the site; ``at`` is the
writer's clock in milliseconds, written as an offset below ``rev``; the phase is an index
into :data:`~grid.crdt.records.PHASES`; ``healthy`` is ``true``, ``false`` or ``null``; the
load signals are fixed-point integers or ``null`` (not reported). A removed provider's
signals item is void: ``[rev, site tag, at offset]``.

Receiving is the hot path of a large mesh, so the reader is a grammar that admits only the
canonical encoding (no whitespace, no leading zeros, no floats, no other literal), followed
by range checks; a payload the grammar refuses goes through the generic JSON reader only to
say precisely what is wrong with it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple, NoReturn, TypeAlias

from grid.crdt.codec import (
    MAX_SAFE_INT,
    PROVIDER_FORMAT_VERSION,
    fail,
    read_bool,
    read_int,
    read_list,
    unframe,
)
from grid.crdt.records import MAX_AMOUNT, MAX_RATIO_PPM, PHASES, ProviderMetrics
from grid.errors import CrdtDecodeError, CrdtForgedItemError, CrdtValueError

MAX_SITE_TAG = 2**32 - 1

_PHASE_INDEX = {phase: index for index, phase in enumerate(PHASES)}
_NUMBER = rb"(null|0|[1-9][0-9]{0,%d})"
_SIGNALS_PAYLOAD = re.compile(
    b"\\x%02x" % PROVIDER_FORMAT_VERSION
    + rb"\[(0|[1-9][0-9]{0,15}),(0|[1-9][0-9]{0,9}),(0|[1-9][0-9]{0,15})"
    + rb"(?:,([0-3]),(null|true|false),"
    + b",".join((_NUMBER % 12, _NUMBER % 6, _NUMBER % 6, _NUMBER % 12))
    + rb")?\]"
)
_HEALTHY = {b"null": None, b"true": True, b"false": False}

Load: TypeAlias = tuple[bool | None, int | None, int | None, int | None, int | None]
"""Healthy, queue depth (thousandths), KV-cache utilization and prefix-cache hit ratio
(parts per million), P99 latency (microseconds); None where not reported."""
_HEALTHY_WIRE = {None: "null", True: "true", False: "false"}


@lru_cache(maxsize=4096)
def site_tag(site: str) -> int:
    """The number a signals item carries instead of its origin's id: the first four bytes
    of the SHA-256 of the id. It binds an item to its origin (an item delivered as coming
    from another site is refused as forged); the transport's signature is what
    authenticates the origin."""
    return int.from_bytes(hashlib.sha256(site.encode()).digest()[:4], "big")


class SignalsState(NamedTuple):
    """The replicated signals of one provider at one site: a last-writer-wins register
    whose stamp is ``version``. ``phase`` and ``load`` are None in the void register a
    removal writes. ``payload`` is the register's canonical encoding, which also breaks
    ties between two values under one version (the greater bytes win, as in
    :class:`~grid.crdt.lww.LWWRegister`)."""

    name: str
    version: int
    at_ms: int
    """The writer's clock (milliseconds) when the signals were written."""
    phase: str | None
    load: Load | None
    """The fields of the :attr:`metrics`, kept as plain values: receiving is the hot path,
    and most received signals are superseded before anyone reads them."""
    payload: bytes

    @property
    def void(self) -> bool:
        """Whether this is the signals register of a removed provider."""
        return self.phase is None

    @property
    def readable(self) -> bool:
        """Whether a provider can be read with these signals: they have a phase and a
        load (checked without building :attr:`metrics`)."""
        return self.phase is not None and self.load is not None

    @property
    def metrics(self) -> ProviderMetrics | None:
        """The health and load signals; None when void."""
        return None if self.load is None else ProviderMetrics.from_checked(*self.load)

    @classmethod
    def written(  # noqa: PLR0917 - one register's fields
        cls,
        site: str,
        name: str,
        version: int,
        at_ms: int,
        phase: str | None,
        metrics: ProviderMetrics | None,
    ) -> SignalsState:
        """The register ``site`` writes under ``version`` (void when ``phase`` is None)."""
        if not 0 <= at_ms <= version <= MAX_SAFE_INT:
            raise CrdtValueError("a signals write needs 0 <= at <= version <= 2**53 - 1")
        head = f"{version},{site_tag(site)},{version - at_ms}"
        if phase is None or metrics is None:
            return cls(name, version, at_ms, None, None, _framed(head))
        if phase not in _PHASE_INDEX:
            raise CrdtValueError(f"provider phase must be one of {', '.join(PHASES)}")
        if not isinstance(metrics, ProviderMetrics):
            raise CrdtValueError("provider metrics must be ProviderMetrics")
        body = ",".join(
            (
                head,
                str(_PHASE_INDEX[phase]),
                _HEALTHY_WIRE[metrics.healthy],
                _number(metrics.queue_depth_milli),
                _number(metrics.kv_cache_utilization_ppm),
                _number(metrics.prefix_cache_hit_ppm),
                _number(metrics.p99_latency_us),
            )
        )
        load = (
            metrics.healthy,
            metrics.queue_depth_milli,
            metrics.kv_cache_utilization_ppm,
            metrics.prefix_cache_hit_ppm,
            metrics.p99_latency_us,
        )
        return cls(name, version, at_ms, phase, load, _framed(body))

    def merge(self, other: SignalsState) -> SignalsState:
        """The join of two registers of the same provider: the later write."""
        if other.version != self.version:
            return other if other.version > self.version else self
        return other if other.payload > self.payload else self


def _framed(body: str) -> bytes:
    return bytes((PROVIDER_FORMAT_VERSION,)) + f"[{body}]".encode("ascii")


def _number(value: int | None) -> str:
    return "null" if value is None else str(value)


def decode_signals(origin: str, name: str, version: int, payload: object) -> SignalsState:
    """The signals register a payload holds, fully checked. ``origin`` and ``name`` must
    have been checked by the caller; ``version`` is checked here (against the payload's
    ``rev``). Raises :class:`~grid.errors.CrdtDecodeError` (or
    :class:`~grid.errors.CrdtForgedItemError` for another site's item)."""
    if type(payload) is not bytes:
        raise CrdtDecodeError("payload must be bytes")
    match = _SIGNALS_PAYLOAD.fullmatch(payload)
    if match is None:
        _explain(origin, payload)
    raw_rev, raw_tag, raw_offset, raw_phase, raw_healthy, *raw_load = match.groups()
    rev = int(raw_rev)
    if type(version) is not int or rev != version:
        read_int(version, "version", 1)
        fail("rev", "differs from the item version")
    if rev > MAX_SAFE_INT:
        fail("rev", f"must be between 1 and {MAX_SAFE_INT}")
    if int(raw_tag) != site_tag(origin):
        raise CrdtForgedItemError(f"a signals item sent by {origin!r} carries another site's tag")
    at_ms = rev - int(raw_offset)
    if at_ms < 0:
        fail("at offset", f"must be between 0 and {rev}")
    if raw_phase is None:
        return SignalsState(name, rev, at_ms, None, None, payload)
    raw_queue, raw_kv, raw_prefix, raw_p99 = raw_load
    queue = None if raw_queue == b"null" else int(raw_queue)
    kv = None if raw_kv == b"null" else int(raw_kv)
    prefix = None if raw_prefix == b"null" else int(raw_prefix)
    p99 = None if raw_p99 == b"null" else int(raw_p99)
    # The grammar bounds the digits; only the longest numbers can exceed a bound.
    if len(raw_queue) == 13 or len(raw_kv) == 7 or len(raw_prefix) == 7 or len(raw_p99) == 13:
        for value, high, where in (
            (queue, MAX_AMOUNT, "queue"),
            (kv, MAX_RATIO_PPM, "kv"),
            (prefix, MAX_RATIO_PPM, "prefix"),
            (p99, MAX_AMOUNT, "p99"),
        ):
            if value is not None and value > high:
                fail(where, f"must be between 0 and {high}")
    load = (_HEALTHY[raw_healthy], queue, kv, prefix, p99)
    return SignalsState(name, rev, at_ms, PHASES[int(raw_phase)], load, payload)


_FIELDS = ("rev", "site tag", "at offset", "phase", "healthy", "queue", "kv", "prefix", "p99")
_HIGHS: tuple[int, ...] = (MAX_SAFE_INT, MAX_SITE_TAG, MAX_SAFE_INT, len(PHASES) - 1, 1)
_HIGHS += (MAX_AMOUNT, MAX_RATIO_PPM, MAX_RATIO_PPM, MAX_AMOUNT)


def _explain(origin: str, payload: object) -> NoReturn:
    """Raise the error that says what is wrong with a payload the grammar refused."""
    entries = read_list(unframe(payload, PROVIDER_FORMAT_VERSION), "signals item")
    if len(entries) not in (3, len(_FIELDS)):
        fail("signals item", f"must have 3 or {len(_FIELDS)} entries")
    for index, (entry, where) in enumerate(zip(entries, _FIELDS, strict=False)):
        if index == 4:
            if entry is not None:
                read_bool(entry, where)
        elif index < 4 or entry is not None:
            read_int(entry, where, 1 if index == 0 else 0, _HIGHS[index])
    if entries[1] != site_tag(origin):
        raise CrdtForgedItemError(f"a signals item sent by {origin!r} carries another site's tag")
    raise CrdtDecodeError("payload is not in canonical form")


@dataclass(frozen=True, slots=True)
class SignalThresholds:
    """When a provider's new signals are worth publishing, given the ones last published.

    Always on a change of phase or health, on a signal appearing or disappearing, and when
    the queue depth or the KV-cache utilization crosses a level admission compares it with
    (its side of the level changes: admission tests ``value > level``). Otherwise only when a
    load signal moved by at least its step since it was last published: a smaller move
    changes a score by less than scoring is told to care about. Steps are in the wire's
    fixed-point units; a step of 0 publishes every change.
    """

    queue_depth_milli: int
    kv_cache_ppm: int
    prefix_cache_ppm: int
    p99_latency_us: int
    queue_capacity: float = 1.0
    """The queue depth admission divides by before comparing with ``queue_levels``."""
    queue_levels: tuple[float, ...] = ()
    """Queue utilization levels admission decides at (queue depth / capacity)."""
    kv_levels: tuple[float, ...] = ()
    """KV-cache utilization levels admission decides at (0..1)."""

    def __post_init__(self) -> None:
        for step in (
            self.queue_depth_milli,
            self.kv_cache_ppm,
            self.prefix_cache_ppm,
            self.p99_latency_us,
        ):
            if isinstance(step, bool) or not isinstance(step, int) or step < 0:
                raise CrdtValueError("signal publishing steps must be integers >= 0")
        if not self.queue_capacity > 0:
            raise CrdtValueError("the queue capacity must be positive")

    def worth_publishing(self, published: ProviderMetrics, current: ProviderMetrics) -> bool:
        """Whether ``current`` differs from ``published`` enough to send."""
        if published.healthy != current.healthy:
            return True
        old_queue, new_queue = published.queue_depth_milli, current.queue_depth_milli
        old_kv, new_kv = published.kv_cache_utilization_ppm, current.kv_cache_utilization_ppm
        if _moved(old_queue, new_queue, self.queue_depth_milli) or _moved(
            old_kv, new_kv, self.kv_cache_ppm
        ):
            return True
        if _moved(
            published.prefix_cache_hit_ppm, current.prefix_cache_hit_ppm, self.prefix_cache_ppm
        ):
            return True
        if _moved(published.p99_latency_us, current.p99_latency_us, self.p99_latency_us):
            return True
        # Here both are reported or both are not (a change of presence counts as moved).
        if old_queue is not None and new_queue is not None:
            # The very expressions admission evaluates, so the sides agree to the last bit.
            capacity = self.queue_capacity
            old_share, new_share = old_queue / 1000 / capacity, new_queue / 1000 / capacity
            if _crosses(old_share, new_share, self.queue_levels):
                return True
        if old_kv is not None and new_kv is not None:
            return _crosses(old_kv / MAX_RATIO_PPM, new_kv / MAX_RATIO_PPM, self.kv_levels)
        return False


def _moved(old: int | None, new: int | None, step: int) -> bool:
    if old is None or new is None:
        return old is not new
    return abs(new - old) >= step if step else new != old


def _crosses(old: float, new: float, levels: tuple[float, ...]) -> bool:
    return any((old > level) != (new > level) for level in levels)
