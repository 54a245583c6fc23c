"""Membership as SWIM reports it: each peer's address, generation and state, and since
when. An event about an older generation than the one known is stale and ignored. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType

from grid.models.phases import MemberState

LIVE_STATES = (MemberState.ALIVE, MemberState.SUSPECT)
"""States in which a peer's candidates stay routable (a suspect one as not fresh)."""


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """A peer as SWIM last reported it."""

    site: str
    address: str
    generation: int
    state: MemberState
    since: datetime


class Members:
    """The peers of one site (itself excluded). Each method that takes an event returns
    whether it changed what routing reads (a peer joining, turning suspect, going)."""

    def __init__(self, site: str) -> None:
        self._site = site
        self._members: dict[str, MemberInfo] = {}

    def __len__(self) -> int:
        return len(self._members)

    @property
    def view(self) -> Mapping[str, MemberInfo]:
        """Peers as SWIM last reported them (down and left ones included)."""
        return MappingProxyType(self._members)

    def get(self, site: str) -> MemberInfo | None:
        return self._members.get(site)

    def state_of(self, site: str) -> MemberState | None:
        member = self._members.get(site)
        return None if member is None else member.state

    def is_alive(self, site: str) -> bool:
        return self.state_of(site) is MemberState.ALIVE

    def up(self, site: str, address: str, generation: int, now: datetime) -> bool:
        """SWIM reports ``site`` alive (joined, or back with a new generation); True when
        it was not alive before (its egress is worth probing again)."""
        if site == self._site:
            return False
        previous = self._members.get(site)
        if previous is not None and generation < previous.generation:
            return False
        self._members[site] = MemberInfo(site, address, generation, MemberState.ALIVE, now)
        return previous is None or previous.state is not MemberState.ALIVE

    def suspect(self, site: str, address: str, generation: int, now: datetime) -> bool:
        """SWIM suspects ``site`` (only an alive member of the same generation turns
        suspect)."""
        if site == self._site:
            return False
        previous = self._members.get(site)
        if previous is None or generation < previous.generation:
            return False
        if previous.state is MemberState.ALIVE and generation == previous.generation:
            self._members[site] = MemberInfo(site, address, generation, MemberState.SUSPECT, now)
            return True
        return False

    def gone(
        self, site: str, address: str, generation: int, state: MemberState, now: datetime
    ) -> bool:
        """SWIM declared ``site`` down, or it left (``state``); False for this site and for
        an older identity of a site that is already back."""
        if site == self._site:
            return False
        previous = self._members.get(site)
        if previous is not None and generation < previous.generation:
            return False
        self._members[site] = MemberInfo(site, address, generation, state, now)
        return True

    def alive_unknown(self, known: Mapping[str, object]) -> tuple[str, ...]:
        """Alive peers that ``known`` (the GridSites) does not name, in name order."""
        return tuple(
            sorted(
                name
                for name, member in self._members.items()
                if member.state is MemberState.ALIVE and name not in known
            )
        )
