"""A bounded record of SWIM state transitions per member, as the engine's members show them.

The engine keeps each member's current state and when it began (:class:`MemberInfo`'s
``since``); this record keeps the transitions that led there. It is fed by sampling the
members (:meth:`MemberHistory.observe`), so a state that lasted less than the sampling
period can be missed; every transition that is recorded carries the moment the engine
says it happened, not the moment it was sampled. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime

from grid.engine.members import MemberInfo

DEFAULT_CAPACITY = 500
"""Transitions kept per network, oldest dropped first."""


@dataclass(frozen=True, slots=True)
class Transition:
    """``site`` went from ``before`` (None: first seen) to ``after`` at ``at``."""

    site: str
    before: str | None
    after: str
    generation: int
    address: str
    at: datetime


class MemberHistory:
    """The last ``capacity`` member transitions of one network, oldest first."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("a member history holds at least one transition")
        self.capacity = capacity
        self._transitions: deque[Transition] = deque(maxlen=capacity)
        self._last: dict[str, tuple[str, int, datetime]] = {}
        self.dropped = 0
        """Transitions pushed out by newer ones."""

    def observe(self, members: Mapping[str, MemberInfo]) -> int:
        """Record what changed since the last call; returns how many transitions."""
        recorded = 0
        for site, member in members.items():
            state = member.state.value
            seen = (state, member.generation, member.since)
            last = self._last.get(site)
            if last == seen:
                continue
            self._last[site] = seen
            if last is not None and last[0] == state and last[1] == member.generation:
                continue  # the same state, re-announced: not a transition
            if len(self._transitions) == self.capacity:
                self.dropped += 1
            self._transitions.append(
                Transition(
                    site,
                    None if last is None else last[0],
                    state,
                    member.generation,
                    member.address,
                    member.since,
                )
            )
            recorded += 1
        return recorded

    def __iter__(self) -> Iterator[Transition]:
        return iter(self._transitions)

    def __len__(self) -> int:
        return len(self._transitions)
