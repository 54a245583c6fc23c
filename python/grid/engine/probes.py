"""Probes of the sites' egress: which sites are due a probe, and the last result of each.

A site is probed once per probe interval, and at once when it is first known, joins,
changes its advertised gateway or has its GridSite changed. Pure: time comes in as ``now``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from grid.engine.events import clip
from grid.engine.targets import ProbeTarget
from grid.models.phases import ProbeObservation
from grid.models.site import EgressTlsMode, ProbeStatus
from grid.render.consumer import ClusterEndpoint
from grid.trust.site import ProbeResult


@dataclass(frozen=True, slots=True)
class Probe:
    """One probe's result, when it was made and under which TLS mode."""

    result: ProbeResult
    at: datetime
    tls_mode: EgressTlsMode

    def status(self) -> ProbeStatus:
        """The probe as a GridSite's status shows it."""
        result = self.result
        return ProbeStatus(
            at=self.at,
            reachable=result.reachable,
            latency_ms=round(result.latency_s * 1000, 3),
            message=clip(result.error or ""),
        )

    def observation(self, advertised_fingerprint: str | None) -> ProbeObservation:
        """The probe as the site's phase machine reads it. A plaintext egress has no TLS to
        read a certificate from: the site is pinned by the one it advertises."""
        result = self.result
        latency = round(result.latency_s * 1000, 3)
        if self.tls_mode is EgressTlsMode.PLAINTEXT:
            reachable = result.reachable and result.error is None
            return ProbeObservation(
                self.at, reachable, advertised_fingerprint, latency, result.error or "", True
            )
        if result.ok:
            return ProbeObservation(self.at, True, result.fingerprint, latency)
        return ProbeObservation(self.at, False, None, latency, result.error or "probe failed")


class Probes:
    """The probe schedule and the last probe of each site."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._last: dict[str, Probe] = {}
        self._requested: dict[str, datetime] = {}
        self._soon: set[str] = set()

    def get(self, site: str) -> Probe | None:
        return self._last.get(site)

    def soon(self, sites: Iterable[str]) -> None:
        """Probe ``sites`` at the next :meth:`take_due`, whatever the interval."""
        self._soon.update(sites)

    def observe(self, site: str, result: ProbeResult, now: datetime, mode: EgressTlsMode) -> None:
        self._last[site] = Probe(result, now, mode)

    def take_due(
        self,
        sites: Iterable[str],
        egress: Callable[[str], ClusterEndpoint | None],
        now: datetime,
    ) -> tuple[ProbeTarget, ...]:
        """Of ``sites`` (in order), those with an egress whose probe is due: never probed,
        probed more than the interval ago, or asked for :meth:`soon`. Each is marked as
        requested, so the next call does not return it again before the interval."""
        due: list[ProbeTarget] = []
        for name in sites:
            endpoint = egress(name)
            if endpoint is None:
                continue
            last = self._requested.get(name)
            soon = name in self._soon
            recent = last is not None and (now - last).total_seconds() < self.interval_s
            if recent and not soon:
                continue
            self._requested[name] = now
            self._soon.discard(name)
            due.append(ProbeTarget(name, endpoint.address, endpoint.tls_mode, endpoint.server_name))
        return tuple(due)
