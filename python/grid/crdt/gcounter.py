"""Grow-only counters."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from grid.crdt.codec import MAX_SAFE_INT
from grid.errors import CrdtLimitError, CrdtValueError

MAX_SLOTS = 256
"""Most slots one counter holds; a merge or increment that would add more is refused."""


class GCounter:
    """A grow-only counter: one slot per writer, each advanced only by its writer; merge
    keeps the larger value of each slot, and the counter's value is the sum of the slots.

    Values are integers (money is counted in micro-USD, never in floats). A slot at zero
    is the same as no slot, so equal counts give equal counters. Immutable.
    """

    __slots__ = ("_slots",)

    _slots: dict[str, int]

    def __init__(self, slots: Mapping[str, int] | None = None) -> None:
        clean: dict[str, int] = {}
        for slot, value in (slots or {}).items():
            if not isinstance(slot, str) or not slot:
                raise CrdtValueError("G-Counter slot ids must be non-empty strings")
            _check_amount(value, "G-Counter slot value")
            if value:
                clean[slot] = value
        _check_slot_count(len(clean))
        self._slots = clean

    @classmethod
    def _trusted(cls, slots: dict[str, int]) -> GCounter:
        result = cls.__new__(cls)
        result._slots = slots
        return result

    @property
    def value(self) -> int:
        """The count: the sum of every slot."""
        return sum(self._slots.values())

    @property
    def slots(self) -> Mapping[str, int]:
        """Each writer's contribution."""
        return MappingProxyType(self._slots)

    def slot(self, slot: str) -> int:
        """One writer's contribution (0 if it has none)."""
        return self._slots.get(slot, 0)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GCounter):
            return NotImplemented
        return self._slots == other._slots

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"GCounter({dict(sorted(self._slots.items()))})"

    def increment(self, slot: str, amount: int) -> GCounter:
        """Add ``amount`` (an integer >= 0) to ``slot``; only ``slot``'s owner may do this."""
        if not isinstance(slot, str) or not slot:
            raise CrdtValueError("G-Counter slot ids must be non-empty strings")
        _check_amount(amount, "G-Counter increment")
        if amount == 0:
            return self
        total = self._slots.get(slot, 0) + amount
        if total > MAX_SAFE_INT:
            raise CrdtLimitError(f"G-Counter slot would exceed {MAX_SAFE_INT}")
        slots = {**self._slots, slot: total}
        _check_slot_count(len(slots))
        return GCounter._trusted(slots)

    def merge(self, other: GCounter) -> GCounter:
        """The join of two counters: the larger value of each slot."""
        slots = dict(self._slots)
        for slot, value in other._slots.items():
            if value > slots.get(slot, 0):
                slots[slot] = value
        _check_slot_count(len(slots))
        return GCounter._trusted(slots)


def _check_amount(value: object, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CrdtValueError(f"{what} must be an integer")
    if not 0 <= value <= MAX_SAFE_INT:
        raise CrdtValueError(f"{what} must be between 0 and {MAX_SAFE_INT}")


def _check_slot_count(count: int) -> None:
    if count > MAX_SLOTS:
        raise CrdtLimitError(f"a G-Counter may hold at most {MAX_SLOTS} slots")
