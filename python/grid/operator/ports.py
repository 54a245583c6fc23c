"""Which UDP port each GridNetwork's SWIM node binds, so that no two networks of one operator
ever try the same one.

* A network with ``spec.swim.port`` gets that port. When two networks ask for the same one,
  the one already running on it keeps it, else the older one (creation time, then name)
  gets it; the other is refused with a clear reason and its node does not start.
* A network without it gets ``GRID_SWIM_PORT`` when that is free, else the next free port
  above it (one no other network has or asks for, and that can be bound right now). The
  oldest such network gets ``GRID_SWIM_PORT``; the others follow in creation order. A port
  once given is kept while the operator runs, and the one recorded in the network's status
  (``MembershipReady``) is taken again after a restart when it is still free; only a network
  that asks for that port in ``spec.swim.port`` takes it away.

The port in use and how it was chosen are reported in the network's ``MembershipReady``
condition, so that peers can be told where to reach it.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from grid.operator.cache import NETWORK, Entry, ResourceCache, valid_network

SPAN: Final = 100
"""How many ports above ``GRID_SWIM_PORT`` an unset port may be given."""
FROM_SPEC: Final = "spec.swim.port"
FROM_DEFAULT: Final = "GRID_SWIM_PORT"
ASSIGNED: Final = "assigned"

_RECORDED = re.compile(r"\bSWIM on UDP port (\d{1,5})\b")


@dataclass(frozen=True, slots=True)
class Claim:
    """What one network asks for."""

    network: str
    port: int | None
    """``spec.swim.port`` when set."""
    created: str = ""
    """``metadata.creationTimestamp`` (RFC 3339, so it sorts by time)."""
    recorded: int | None = None
    """The port its status reports from an earlier run."""

    @property
    def age(self) -> tuple[str, str]:
        return (self.created or "~", self.network)


@dataclass(frozen=True, slots=True)
class Assignment:
    """A network's SWIM port, or why it has none."""

    port: int | None
    how: str = ""
    """``spec.swim.port``, ``GRID_SWIM_PORT`` or ``assigned``."""
    note: str = ""
    """Why an assigned port is not ``GRID_SWIM_PORT``."""
    problem: str | None = None

    def describe(self) -> str:
        """``SWIM on UDP port 7947 (assigned: ...)``, as the status reports it."""
        if self.port is None:
            return ""
        detail = f"{self.how}: {self.note}" if self.note else self.how
        return f"SWIM on UDP port {self.port} ({detail})"


def udp_bindable(host: str) -> Callable[[int], bool]:
    """Whether a UDP port can be bound on ``host`` right now."""

    def bindable(port: int) -> bool:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                return False
        return True

    return bindable


def claims_of(cache: ResourceCache) -> list[Claim]:
    """The claims of every valid network in the cache."""
    found = []
    for entry in cache.entries(NETWORK):
        network = valid_network(entry)
        if network is None:
            continue
        swim = network.spec.swim
        explicit = swim.port if "port" in swim.model_fields_set else None
        found.append(
            Claim(
                entry.name,
                explicit,
                created=_created(entry),
                recorded=recorded_port(entry.status),
            )
        )
    return found


def recorded_port(status: Mapping[str, Any]) -> int | None:
    """The port a status reports in ``MembershipReady`` (None when it reports none)."""
    for condition in status.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "MembershipReady":
            found = _RECORDED.search(str(condition.get("message") or ""))
            if found is not None and 1 <= int(found.group(1)) <= 65535:
                return int(found.group(1))
    return None


class SwimPorts:
    """The SWIM ports of one operator's networks (see the module docstring)."""

    def __init__(
        self, default_port: int, bindable: Callable[[int], bool], *, span: int = SPAN
    ) -> None:
        self.default_port = default_port
        self._bindable = bindable
        self._span = span
        self._held: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"SwimPorts(default={self.default_port}, held={self._held})"

    @property
    def held(self) -> Mapping[str, int]:
        """The port given to each network."""
        return dict(self._held)

    def release(self, network: str) -> None:
        """The network stopped: its port is free again."""
        self._held.pop(network, None)

    def assign(self, network: str, claims: Iterable[Claim]) -> Assignment:
        """The port of ``network`` among ``claims`` (which include its own)."""
        everyone = {claim.network: claim for claim in claims}
        mine = everyone.get(network)
        if mine is None:
            self._held.pop(network, None)
            return Assignment(None, problem=f"network {network} is not known")
        explicit = self._explicit_owners(everyone.values())
        if mine.port is not None:
            owner = explicit[mine.port]
            if owner != network:
                self._held.pop(network, None)
                return Assignment(
                    None,
                    problem=f"spec.swim.port {mine.port} is network {owner}'s too (it "
                    f"{'runs on it' if self._held.get(owner) == mine.port else 'is older'}): "
                    "the SWIM node does not start; give this network another port",
                )
            self._held[network] = mine.port
            return Assignment(mine.port, FROM_SPEC)
        held = self._held.get(network)
        kept = held is not None and held not in explicit and held not in self._others(network)
        # Only a network that needs a new port makes a plan (and probes ports for it).
        port = held if kept else self._plan(everyone, explicit).get(network)
        if port is None:
            self._held.pop(network, None)
            last = self.default_port + self._span
            return Assignment(
                None,
                problem=f"no free UDP port from {self.default_port} to {last} for SWIM "
                "(spec.swim.port is not set): set spec.swim.port",
            )
        self._held[network] = port
        if port == self.default_port:
            return Assignment(port, FROM_DEFAULT)
        return Assignment(port, ASSIGNED, self._why_not_default(network, everyone, explicit))

    def _others(self, network: str) -> set[int]:
        return {port for name, port in self._held.items() if name != network}

    def _explicit_owners(self, claims: Iterable[Claim]) -> dict[int, str]:
        """Who gets each port asked for in a spec: the network running on it, else the
        oldest asking."""
        owners: dict[int, Claim] = {}
        for claim in claims:
            if claim.port is None:
                continue
            current = owners.get(claim.port)
            if current is None or self._precedes(claim, current):
                owners[claim.port] = claim
        return {port: claim.network for port, claim in owners.items()}

    def _precedes(self, claim: Claim, other: Claim) -> bool:
        holds = self._held.get(claim.network) == claim.port
        other_holds = self._held.get(other.network) == other.port
        if holds != other_holds:
            return holds
        return claim.age < other.age

    def _plan(self, everyone: Mapping[str, Claim], explicit: Mapping[int, str]) -> dict[str, int]:
        """The ports of the networks without ``spec.swim.port``: kept, recorded, then new
        ones in creation order."""
        # Ports of networks that are going (no longer valid or known) stay taken until
        # their nodes stop and release them.
        taken: set[int] = set(explicit) | {
            port for name, port in self._held.items() if name not in everyone
        }
        plan: dict[str, int] = {}
        unset = sorted(
            (claim for claim in everyone.values() if claim.port is None), key=lambda c: c.age
        )
        for claim in unset:  # kept while the operator runs
            held = self._held.get(claim.network)
            if held is not None and held not in taken:
                plan[claim.network] = held
                taken.add(held)
        for claim in unset:  # recorded by an earlier run
            recorded = claim.recorded
            if claim.network in plan or recorded is None or recorded in taken:
                continue
            if recorded == self.default_port or self._bindable(recorded):
                plan[claim.network] = recorded
                taken.add(recorded)
        for claim in unset:
            if claim.network in plan:
                continue
            port = self._free(taken)
            if port is not None:
                plan[claim.network] = port
                taken.add(port)
        return plan

    def _free(self, taken: set[int]) -> int | None:
        # The default port is not probed: when something else holds it, binding it reports
        # the problem (it is the port the Deployment exposes).
        if self.default_port not in taken:
            return self.default_port
        for port in range(self.default_port + 1, min(self.default_port + self._span, 65535) + 1):
            if port not in taken and self._bindable(port):
                return port
        return None

    def _why_not_default(
        self, network: str, everyone: Mapping[str, Claim], explicit: Mapping[int, str]
    ) -> str:
        default = self.default_port
        holder = explicit.get(default) or next(
            (name for name, port in self._held.items() if port == default and name != network),
            None,
        )
        if holder is not None and holder in everyone:
            return f"{FROM_DEFAULT} {default} is network {holder}'s"
        return f"{FROM_DEFAULT} {default} was not free"


def _created(entry: Entry) -> str:
    value = (entry.body.get("metadata") or {}).get("creationTimestamp")
    return value if isinstance(value, str) else ""
