"""Reading the signals registers out of published signals pages."""

from __future__ import annotations

from collections.abc import Iterable

from grid.crdt import Item, decode_item
from grid.crdt.pages import PAGE_PREFIX, SignalsPage
from grid.crdt.signals import SignalsState


def paged(items: Iterable[Item], site: str) -> dict[str, SignalsState]:
    """The signals registers the pages among ``items`` (published by ``site``) carry, by
    provider name; a page also carries registers it held before, unchanged."""
    held: dict[str, SignalsState] = {}
    for item in items:
        if item.key.startswith(PAGE_PREFIX):
            page = decode_item(site, item.lane, item.key, item.version, item.payload)
            assert isinstance(page, SignalsPage)
            held.update({state.name: state for state in page.states})
    return held


def fresh(items: Iterable[Item], site: str, before: dict[str, int]) -> list[str]:
    """The providers whose registers in these pages are newer than the versions in
    ``before`` (name → version), sorted."""
    return sorted(
        name for name, state in paged(items, site).items() if state.version > before.get(name, 0)
    )
