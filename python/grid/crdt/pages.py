"""Signals pages: many providers' signals in one signed item.

Every item costs its origin a signature and every node 64 bytes of it per copy, plus the
item's own name; a signals register is about 60 bytes. So a site publishes its providers'
signals in pages, ``signals-page/<n>`` in the ``state`` lane: one item holding the
registers of several providers, each register with its own version. Receivers merge each
register on its own, last writer wins per provider, exactly as if it had come alone, so a
page adds no semantics: it is only a way of sending registers.

The payload is the format byte ``2`` and a canonical JSON array::

    [rev, site tag, [[name, version, at offset, ...load], ...]]

``rev`` is the item version, the site tag binds the page to its origin (as in a signals
item), and each entry is a signals register as :mod:`grid.crdt.signals` spells it, with the
provider's name in front and without the site tag: ``[name, version, at offset]`` for a
removed provider, or followed by phase, healthy, queue, KV cache, prefix cache and P99.
Entries are sorted by name, each name once, each version at most ``rev``.

A page replaces the previous version of the same page everywhere, syncs included; so the
writer keeps an invariant: the latest version of its pages, together, holds the latest
register of every provider it has. A page rewritten for new registers carries along the
registers it held that nothing newer replaced. :class:`PageBook` decides which page takes
which registers: new registers go to the page that carries least, and a page is added when
every page carries more than :data:`CARRY_SHARE` of its room, so a page written for a few
new registers never resends much of what did not change.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from grid.crdt.codec import (
    ITEM_OVERHEAD_BYTES,
    MAX_ITEM_BYTES,
    MAX_SAFE_INT,
    PROVIDER_FORMAT_VERSION,
    fail,
    read_int,
)
from grid.crdt.signals import SignalsState, decode_signals, site_tag
from grid.errors import CrdtDecodeError, CrdtForgedItemError, CrdtLimitError, CrdtValueError

PAGE_PREFIX = "signals-page/"
MAX_PAGES = 4096
"""Most pages of one site: at most one per provider a site may hold."""
CARRY_SHARE = 0.125
"""A page is added when every page already carries more than this share of its room in
registers that did not change: what a page written for new registers resends at most."""
_HEADER_BYTES = 1 + len("[,,[]]") + 16 + 10
"""Format byte, brackets and commas, the longest rev and the longest site tag."""

_PAGE = re.compile(
    b"\\x%02x" % PROVIDER_FORMAT_VERSION
    + rb"\[(0|[1-9][0-9]{0,15}),(0|[1-9][0-9]{0,9}),\[(?:\[(.*)\])?\]\]",
    re.DOTALL,
)
_ENTRY = re.compile(rb'"([a-z0-9][a-z0-9.-]{0,252})",(0|[1-9][0-9]{0,15}),(.*)', re.DOTALL)
_KEY_NUMBER = re.compile(r"0|[1-9][0-9]{0,3}")


def page_key(number: int) -> str:
    """The ``state`` lane key of page ``number``."""
    return f"{PAGE_PREFIX}{number}"


def page_number(key: str) -> int:
    """The page a ``signals-page/<n>`` key names; raises
    :class:`~grid.errors.CrdtDecodeError` for anything but a canonical number below
    :data:`MAX_PAGES`."""
    digits = key[len(PAGE_PREFIX) :]
    if not _KEY_NUMBER.fullmatch(digits) or int(digits) >= MAX_PAGES:
        fail("key", f"a signals page number must be 0 to {MAX_PAGES - 1}, without leading zeros")
    return int(digits)


def entry_bytes(state: SignalsState) -> bytes:
    """A register as a page entry: its name, then its signals payload without the format
    byte, brackets and site tag."""
    rev, _tag, rest = state.payload[2:-1].split(b",", 2)
    return b'["%s",%s,%s]' % (state.name.encode("ascii"), rev, rest)


def room(site: str, number: int) -> int:
    """Bytes of entries (each with its comma) page ``number`` of ``site`` can hold."""
    key_and_origin = len(site.encode()) + len(page_key(number))
    return MAX_ITEM_BYTES - ITEM_OVERHEAD_BYTES - key_and_origin - _HEADER_BYTES + 1


@dataclass(frozen=True, slots=True)
class SignalsPage:
    """What one received page says: the registers it holds."""

    number: int
    version: int
    states: tuple[SignalsState, ...]


def encode_page(site: str, number: int, version: int, states: Iterable[SignalsState]) -> bytes:
    """The payload that publishes ``states`` (registers ``site`` wrote, of distinct
    providers, none newer than ``version``) as page ``number``. Raises
    :class:`~grid.errors.CrdtValueError` if they do not fit or break those rules."""
    ordered = sorted(states, key=lambda state: state.name)
    if not 1 <= version <= MAX_SAFE_INT:
        raise CrdtValueError(f"a page version must be between 1 and {MAX_SAFE_INT}")
    tag = b"%d" % site_tag(site)
    entries = []
    for before, state in zip([None, *ordered], ordered, strict=False):
        if before is not None and before.name == state.name:
            raise CrdtValueError(f"provider {state.name!r} twice in one page")
        if state.version > version:
            raise CrdtValueError("a page cannot hold a register newer than itself")
        if state.payload.split(b",", 2)[1] != tag:
            raise CrdtValueError(f"a register written by another site in a page of {site!r}")
        entries.append(entry_bytes(state))
    body = b",".join(entries)
    if len(body) + 1 > room(site, number):
        raise CrdtValueError("the registers do not fit one signals page")
    return b"%c[%d,%s,[%s]]" % (PROVIDER_FORMAT_VERSION, version, tag, body)


def decode_page(  # noqa: PLR0917 - the item's fields, then how to check names
    origin: str,
    number: int,
    version: int,
    payload: object,
    known: Callable[[str], bool],
    check_name: Callable[[str], object],
) -> SignalsPage:
    """The registers a page of ``origin`` holds, each fully checked as a signals item of
    its own would be. Names for which ``known`` is false go through ``check_name`` (which
    raises :class:`~grid.errors.CrdtValueError`). Raises
    :class:`~grid.errors.CrdtDecodeError` (or :class:`~grid.errors.CrdtForgedItemError`
    for another site's page)."""
    if type(payload) is not bytes:
        raise CrdtDecodeError("payload must be bytes")
    match = _PAGE.fullmatch(payload)
    if match is None:
        fail("signals page", "must be [rev, site tag, [entry, ...]] in canonical form")
    raw_rev, raw_tag, raw_entries = match.groups()
    rev = int(raw_rev)
    if type(version) is not int or rev != version:
        read_int(version, "version", 1)
        fail("rev", "differs from the item version")
    if not 1 <= rev <= MAX_SAFE_INT:
        fail("rev", f"must be between 1 and {MAX_SAFE_INT}")
    if int(raw_tag) != site_tag(origin):
        raise CrdtForgedItemError(f"a signals page sent by {origin!r} carries another site's tag")
    states: list[SignalsState] = []
    last = ""
    for raw in () if raw_entries is None else raw_entries.split(b"],["):
        entry = _ENTRY.fullmatch(raw)
        if entry is None:
            fail("signals page entry", "must be [name, version, at offset, ...] in canonical form")
        raw_name, raw_version, rest = entry.groups()
        name = raw_name.decode("ascii")
        if name <= last:
            fail("signals page", "entries must be sorted by name, each name once")
        last = name
        if not known(name):
            try:
                check_name(name)
            except CrdtValueError as exc:
                raise CrdtDecodeError(f"signals page entry name: {exc}") from None
        entry_version = int(raw_version)
        if entry_version > rev:
            fail("signals page entry", f"{name}: version above the page's")
        single = b"%c[%s,%s,%s]" % (PROVIDER_FORMAT_VERSION, raw_version, raw_tag, rest)
        states.append(decode_signals(origin, name, entry_version, single))
    return SignalsPage(number, rev, tuple(states))


@dataclass(slots=True)
class _Page:
    version: int = 0
    carried: dict[str, int] = field(default_factory=dict)
    """The providers whose latest register this page's latest version holds, with the
    bytes each takes in it."""
    used: int = 0


class PageBook:
    """Which of one site's pages holds each of its providers' latest registers, and the
    pages to write when some changed. Pure; not thread-safe."""

    def __init__(self, site: str) -> None:
        self._site = site
        self._pages: list[_Page] = []
        self._home: dict[str, int] = {}
        self._unpaged: set[str] = set()
        self._stale: set[int] = set()
        """Pages that still carry a dropped register."""
        self._left: dict[str, int] = {}
        """The page each register waiting for a page was in last: the mesh's copy of that
        page still carries its earlier version until the register lands in a page again,
        or, if it is dropped first, that page is written again without it."""

    @property
    def pending(self) -> bool:
        """Whether some register is in no page yet, or some page still carries a dropped
        one."""
        return bool(self._unpaged or self._stale)

    def written(self, name: str) -> None:
        """``name`` has a new register: it goes into the next pages written."""
        number = self._leave(name)
        if number is not None:
            self._left[name] = number
        self._unpaged.add(name)

    def dropped(self, name: str) -> None:
        """``name``'s register is gone (a pruned tombstone): the page it is in, or the one
        it was in while it waits for a page, is written again without it."""
        number = self._leave(name)
        if number is None:
            number = self._left.get(name)
        if number is not None:
            self._stale.add(number)
        self._left.pop(name, None)
        self._unpaged.discard(name)

    def recovered(self, number: int, version: int, current: Iterable[SignalsState]) -> None:
        """Page ``number`` of this site was published in an earlier life at ``version``, at
        least this life's version of it (an equal version with other bytes included: which
        of the two a node holds depends on which reached it first), holding ``current``,
        the registers in it that are this site's latest. It is the mesh's copy of the page
        now: it carries those registers, and those this life put in the page go into the
        next pages written."""
        while len(self._pages) <= number:
            self._pages.append(_Page())
        page = self._pages[number]
        for name in list(page.carried):
            self.written(name)
        for state in current:
            self._leave(state.name)
            self._unpaged.discard(state.name)
            self._left.pop(state.name, None)
            size = len(entry_bytes(state)) + 1
            page.carried[state.name] = size
            page.used += size
            self._home[state.name] = number
        page.version = version

    def write(
        self, registers: Mapping[str, SignalsState], tick: Callable[[], int]
    ) -> list[tuple[int, int, bytes]]:
        """The pages (number, version, payload) that publish every register in no page
        yet, each carrying on what it held, and the pages that carried a dropped register;
        ``tick`` gives each page its version (above every register in it and every earlier
        version of the page)."""
        pending = sorted(self._unpaged, reverse=True)
        sizes = {name: len(entry_bytes(registers[name])) + 1 for name in pending}
        items = []
        while pending:
            number = self._choose()
            page = self._pages[number]
            space = room(self._site, number) - page.used
            if sizes[pending[-1]] > space:
                raise CrdtLimitError(f"site {self._site!r} has no room left in its signals pages")
            while pending and sizes[pending[-1]] <= space:
                name = pending.pop()
                space -= sizes[name]
                page.carried[name] = sizes[name]
                page.used += sizes[name]
                self._home[name] = number
                self._unpaged.discard(name)
                self._left.pop(name, None)
            items.append(self._rewrite(number, registers, tick))
        while self._stale:
            items.append(self._rewrite(min(self._stale), registers, tick))
        return items

    def _rewrite(
        self, number: int, registers: Mapping[str, SignalsState], tick: Callable[[], int]
    ) -> tuple[int, int, bytes]:
        page = self._pages[number]
        version = tick()
        payload = encode_page(self._site, number, version, (registers[n] for n in page.carried))
        page.version = version
        self._stale.discard(number)
        return number, version, payload

    def _choose(self) -> int:
        """The page that carries least, or a new one when even that one carries more than
        its share."""
        lightest = min(range(len(self._pages)), key=lambda n: self._pages[n].used, default=None)
        if lightest is not None:
            page = self._pages[lightest]
            if (
                page.used <= CARRY_SHARE * room(self._site, lightest)
                or len(self._pages) >= MAX_PAGES
            ):
                return lightest
        self._pages.append(_Page())
        return len(self._pages) - 1

    def _leave(self, name: str) -> int | None:
        number = self._home.pop(name, None)
        if number is not None:
            page = self._pages[number]
            page.used -= page.carried.pop(name)
        return number
