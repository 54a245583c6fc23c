"""The SWIM settings a scenario runs with, the network it runs on, and the epidemic bound.

Two profiles run side by side in every scenario:

- ``grid``: Grid's defaults from ``GridNetwork.spec.swim`` (probe every 5 s, suspicion
  10 s, 3 gossip nodes, so gossip every 1 s; retransmissions ``4·ceil(log10(N+1))``).
- ``memberlist-lan``: memberlist's ``DefaultLANConfig`` on the same driver: probe every
  1 s (so gossip every 200 ms) to 3 nodes, retransmit multiplier 4 (the same
  ``4·ceil(log10(N+1))``), and suspicion ``4·max(1, log10 N)`` probe intervals, the
  floor of memberlist's Lifeguard timeout (foca has no confirmations to shrink it from
  its ceiling, so the floor is the faithful choice).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from grid._native import Simulation

GRID = "grid"
MEMBERLIST_LAN = "memberlist-lan"
PROFILES = (GRID, MEMBERLIST_LAN)


@dataclass(frozen=True, slots=True)
class SwimProfile:
    """SWIM timing for one cluster size."""

    name: str
    probe_interval: float
    suspicion_timeout: float
    gossip_nodes: int
    push_pull_interval: float

    @property
    def gossip_interval(self) -> float:
        """Periodic gossip runs five times per probe interval."""
        return self.probe_interval / 5


def profile(name: str, size: int) -> SwimProfile:
    """The named profile for a cluster of ``size`` members."""
    if name == GRID:
        return SwimProfile(GRID, 5.0, 10.0, 3, 30.0)
    if name == MEMBERLIST_LAN:
        suspicion = 4 * max(1.0, math.log10(max(size, 1))) * 1.0
        return SwimProfile(MEMBERLIST_LAN, 1.0, suspicion, 3, 30.0)
    raise ValueError(f"unknown profile {name!r}; profiles are {', '.join(PROFILES)}")


def epidemic_rounds(size: int, fanout: int) -> float:
    """Gossip rounds for push gossip with this fanout to reach all of ``size`` members:
    ``log_{f+1}(N) + ln(N) / f``.

    The first term is the growth phase (the informed set multiplies by ``f + 1`` per
    round); the second the end phase (each round an uninformed member stays uninformed
    with probability ``e^-f``, so ``ln(N) / f`` rounds take the last one). For ``f = 1``
    this is Pittel's ``log2 N + ln N``.
    """
    if size <= 1:
        return 0.0
    return math.log(size, fanout + 1) + math.log(size) / fanout


@dataclass(frozen=True, slots=True)
class NetworkModel:
    """What every link does: a fixed delay plus jitter (seconds), and independent loss.

    The default stands for sites spread over the zones of a region: 5 ms plus an
    exponential tail averaging 5 ms (median about 8.5 ms, 99th percentile about 28 ms).
    """

    delay: float = 0.005
    jitter: float = 0.005
    jitter_kind: str = "exponential"
    loss: float = 0.0


def new_simulation(
    size: int,
    seed: int,
    profile: SwimProfile,
    network: NetworkModel,
    *,
    threads: int | None,
) -> Simulation:
    """A converged cluster of ``size`` members under ``profile`` on ``network``, its
    member lists not handed out yet (see ``Simulation.bootstrap``)."""
    return Simulation(
        size,
        seed,
        probe_interval=profile.probe_interval,
        suspicion_timeout=profile.suspicion_timeout,
        gossip_nodes=profile.gossip_nodes,
        push_pull_interval=profile.push_pull_interval,
        delay=network.delay,
        jitter=network.jitter,
        jitter_kind=network.jitter_kind,
        loss=network.loss,
        threads=threads,
    )
