"""Last-writer-wins registers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from grid.crdt.codec import Json, WireValue, value_bytes
from grid.errors import CrdtValueError

T = TypeVar("T", bound="WireValue | Json")


@dataclass(frozen=True, order=True, slots=True)
class Stamp:
    """When and by whom a value was written. Stamps order by revision, then by writer id
    (lexicographically), so every site picks the same latest write."""

    revision: int
    writer: str


@dataclass(frozen=True, slots=True)
class LWWRegister(Generic[T]):
    """A value and the stamp of the write that set it; merge keeps the write with the
    greatest stamp.

    Two different values under one stamp can only come from a writer that reused a
    revision (for example two processes claiming one site). Merge then keeps the value
    with the greater canonical bytes, so it stays commutative even in that case.
    """

    value: T
    stamp: Stamp

    def merge(self, other: LWWRegister[T]) -> LWWRegister[T]:
        """The join of two registers: the later write."""
        if other.stamp != self.stamp:
            return other if other.stamp > self.stamp else self
        if other.value == self.value:
            return self
        return other if value_bytes(other.value) > value_bytes(self.value) else self

    def assign(self, value: T, stamp: Stamp) -> LWWRegister[T]:
        """A local write; its stamp must be later than the current one."""
        if stamp <= self.stamp:
            raise CrdtValueError("a register write needs a stamp later than the current one")
        return LWWRegister(value, stamp)
