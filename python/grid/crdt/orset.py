"""Add-wins observed-remove sets with a compact causal context."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Generic, NamedTuple, TypeVar

from grid.crdt.codec import MAX_SAFE_INT
from grid.errors import CrdtValueError

E = TypeVar("E", bound=Hashable)


class Dot(NamedTuple):
    """The unique tag of one add: the adding replica and a counter only it advances."""

    replica: str
    counter: int


_NO_DOTS: frozenset[Dot] = frozenset()


class ORSet(Generic[E]):
    """An add-wins observed-remove set.

    Each element carries the dots of the adds that put it there; the causal context says,
    per replica, up to which counter this state has seen that replica's adds. A dot that is
    in the context but no longer on an element was removed. Merge keeps a dot if both sides
    hold it, or if one side holds it and the other has not seen it yet; so a remove only
    cancels the adds it observed, and a concurrent add survives.

    Removed elements leave nothing behind: the context is one counter per replica, and an
    element holds at most one dot per replica. Metadata is therefore bounded by live
    elements times replicas plus replicas, however many adds and removes happened.

    A version vector is a complete context because states only travel whole (every state a
    replica ships includes all its earlier adds), so what a state has seen of a replica is
    always a prefix of that replica's counters. Counters need not be consecutive.

    Instances are immutable: operations return a new set.
    """

    __slots__ = ("_context", "_entries")

    _entries: dict[E, frozenset[Dot]]
    _context: dict[str, int]

    def __init__(
        self,
        entries: Mapping[E, Iterable[Dot]] | None = None,
        context: Mapping[str, int] | None = None,
    ) -> None:
        clean_context = dict(context or {})
        for replica, counter in clean_context.items():
            if not isinstance(replica, str) or not replica:
                raise CrdtValueError("OR-Set context: replica ids must be non-empty strings")
            _check_counter(counter, "OR-Set context counter")
        clean_entries: dict[E, frozenset[Dot]] = {}
        for element, dots in (entries or {}).items():
            dot_set = frozenset(dots)
            if not dot_set:
                raise CrdtValueError("OR-Set: an element must carry at least one dot")
            for dot in dot_set:
                if not isinstance(dot, Dot):
                    raise CrdtValueError("OR-Set: dots must be Dot values")
                _check_counter(dot.counter, "OR-Set dot counter")
                if dot.counter > clean_context.get(dot.replica, 0):
                    raise CrdtValueError("OR-Set: a dot lies outside the causal context")
            clean_entries[element] = dot_set
        self._entries = clean_entries
        self._context = clean_context

    @classmethod
    def _trusted(cls, entries: dict[E, frozenset[Dot]], context: dict[str, int]) -> ORSet[E]:
        # Results of merge and update satisfy the invariants by construction.
        result: ORSet[E] = cls.__new__(cls)
        result._entries = entries
        result._context = context
        return result

    @property
    def elements(self) -> frozenset[E]:
        """The elements currently in the set."""
        return frozenset(self._entries)

    @property
    def context(self) -> Mapping[str, int]:
        """Per replica, the highest counter of its adds this state has seen."""
        return MappingProxyType(self._context)

    def entries(self) -> Iterator[tuple[E, frozenset[Dot]]]:
        """Each element with the dots that keep it in the set."""
        return iter(self._entries.items())

    def __contains__(self, element: object) -> bool:
        return element in self._entries

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ORSet):
            return NotImplemented
        return self._entries == other._entries and self._context == other._context

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ORSet({sorted(map(repr, self._entries))}, context={dict(self._context)})"

    def metadata_size(self) -> int:
        """How much bookkeeping the set holds: dots on elements plus context entries."""
        return sum(len(dots) for dots in self._entries.values()) + len(self._context)

    def update(
        self, adds: Iterable[E] = (), removes: Iterable[E] = (), dot: Dot | None = None
    ) -> ORSet[E]:
        """Remove ``removes`` (the dots observed here), then add ``adds`` under ``dot``.

        One dot may tag every add of one write: dots are compared per element, so they stay
        distinct events. ``dot`` must be fresh: above this state's context for its replica,
        and minted only by that replica.
        """
        additions = list(adds)
        entries = dict(self._entries)
        for element in removes:
            entries.pop(element, None)
        context = self._context
        if additions:
            if dot is None:
                raise CrdtValueError("OR-Set add: a dot is needed")
            _check_counter(dot.counter, "OR-Set dot counter")
            if dot.counter <= self._context.get(dot.replica, 0):
                raise CrdtValueError("OR-Set add: the dot is not newer than the context")
            tagged = frozenset((dot,))
            for element in additions:
                entries[element] = tagged
            context = {**self._context, dot.replica: dot.counter}
        return ORSet._trusted(entries, context)

    def add(self, element: E, dot: Dot) -> ORSet[E]:
        """Add ``element`` under the fresh ``dot``, replacing the dots observed on it."""
        return self.update(adds=(element,), dot=dot)

    def remove(self, element: E) -> ORSet[E]:
        """Remove ``element``: only the adds this state has seen are cancelled."""
        return self.update(removes=(element,))

    def merge(self, other: ORSet[E]) -> ORSet[E]:
        """The join of two states."""
        if other is self:
            return self
        mine_context, their_context = self._context, other._context
        entries: dict[E, frozenset[Dot]] = {}
        for element in self._entries.keys() | other._entries.keys():
            mine = self._entries.get(element, _NO_DOTS)
            theirs = other._entries.get(element, _NO_DOTS)
            if mine == theirs:
                kept = mine
            else:
                kept = frozenset(
                    [dot for dot in mine if dot in theirs or not _seen(dot, their_context)]
                    + [dot for dot in theirs if dot not in mine and not _seen(dot, mine_context)]
                )
            if kept:
                entries[element] = kept
        context = dict(mine_context)
        for replica, counter in their_context.items():
            if counter > context.get(replica, 0):
                context[replica] = counter
        return ORSet._trusted(entries, context)


def _seen(dot: Dot, context: Mapping[str, int]) -> bool:
    return dot.counter <= context.get(dot.replica, 0)


def _check_counter(counter: object, what: str) -> None:
    if isinstance(counter, bool) or not isinstance(counter, int):
        raise CrdtValueError(f"{what} must be an integer")
    if not 1 <= counter <= MAX_SAFE_INT:
        raise CrdtValueError(f"{what} must be between 1 and {MAX_SAFE_INT}")
