"""What a network observes for its engine: health checks and metrics scrapes of the
providers the engine names (:meth:`~grid.engine.SiteEngine.observation_targets`), scrapes of
the spend sources it reads (:meth:`~grid.engine.SiteEngine.spend_targets`), the object this
site's egress address is read from (:meth:`~grid.engine.SiteEngine.egress_source_target`),
and probes of every site whose egress is due. Each result goes to the engine at once, and
the network is woken to act on it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol, TypeVar

import aiohttp

from grid.engine import (
    EgressSourceTarget,
    ObservationTarget,
    ProbeTarget,
    SiteEngine,
    SourceRead,
    SpendCheckpoint,
    SpendTarget,
)
from grid.models.egress_source import EgressSource
from grid.observe.health import check_health
from grid.observe.scrape import ScrapeResult, scrape
from grid.runtime.metrics import Durations, ObservationDurations
from grid.runtime.probes import SiteProber
from grid.runtime.swim import EngineOf
from grid.runtime.tasks import Tasks

Observe = Callable[[SiteEngine, str, Any, datetime], None]
"""An engine method taking one result: (engine, provider or site, result, now)."""

EgressReader = Callable[[EgressSource], Awaitable[SourceRead]]
"""Reads the object a ``spec.egress.from`` names (never raises: a failure is the reading's
``error``). The operator reads through the Kubernetes API; the agent has none."""

SpendKeeper = Callable[[SpendCheckpoint], bool]
"""Writes a spend checkpoint durably before the spend it holds is counted (and so before it
can be published); False when it could not, and that spend is counted by a later scrape."""


class _Timed(Protocol):
    @property
    def latency_s(self) -> float: ...


_T = TypeVar("_T", bound=_Timed)


class Observers:
    """Runs the observations of one network (each provider's loops, each site's probe)."""

    def __init__(
        self,
        *,
        session: aiohttp.ClientSession,
        prober: SiteProber,
        engine_of: EngineOf,
        wake: Callable[[], None],
        logger: logging.Logger,
        prefix: str,
        egress_reader: EgressReader,
        keep_spend: SpendKeeper | None = None,
    ) -> None:
        self._session = session
        self._egress_reader = egress_reader
        self._keep_spend = keep_spend
        self._spend: dict[str, tuple[SpendTarget, asyncio.Task[None]]] = {}
        self._egress: tuple[EgressSourceTarget, asyncio.Task[None]] | None = None
        self.prober = prober
        """Replaced when this site's TLS material changes; the next probe uses it."""
        self._engine_of = engine_of
        self._wake = wake
        self._tasks = Tasks(logger, prefix)
        self._providers: dict[str, tuple[ObservationTarget, list[asyncio.Task[None]]]] = {}
        self._probing: set[str] = set()
        self.durations = ObservationDurations()
        """How long each health check, scrape and probe took (read by ``/metrics``)."""

    async def stop(self) -> None:
        """Cancel every observation (and wait until they are gone)."""
        await self._tasks.cancel_all()
        self._providers.clear()
        self._spend.clear()
        self._probing.clear()
        self._egress = None

    def _deliver(self, observe: Observe, name: str, result: object) -> None:
        engine = self._engine_of()
        if engine is not None:
            observe(engine, name, result, datetime.now(UTC))
            self._wake()

    # -- providers ------------------------------------------------------------------------

    def follow(self, engine: SiteEngine) -> None:
        """Run the health checks, scrapes, spend scrapes and readings of the egress source
        the engine asks for, and only those."""
        self._follow_egress_source(engine)
        self._follow_spend_sources(engine)
        wanted = {target.provider: target for target in engine.observation_targets()}
        for name in list(self._providers):
            target, tasks = self._providers[name]
            if wanted.get(name) != target:
                for task in tasks:
                    task.cancel()
                del self._providers[name]
        for durations in (self.durations.health, self.durations.scrape):
            durations.forget(lambda labels: labels[0] in wanted)
        for name, target in wanted.items():
            if name in self._providers:
                continue
            tasks = []
            if target.health is not None:
                health = target.health
                check = partial(
                    check_health,
                    health.url,
                    timeout=health.timeout_s,
                    expected_status=health.expected_status,
                    session=self._session,
                    server_name=health.server_name,
                )
                loop = self._repeat(
                    health.interval_s,
                    check,
                    SiteEngine.observe_health,
                    name,
                    self.durations.health,
                    lambda result: result.healthy,
                )
                tasks.append(self._tasks.spawn(loop, f"health of {name}"))
            if target.metrics is not None:
                metrics = target.metrics
                fetch = partial(
                    scrape,
                    metrics.url,
                    timeout=metrics.timeout_s,
                    max_body_bytes=metrics.max_body_bytes,
                    session=self._session,
                )
                loop = self._repeat(
                    metrics.interval_s,
                    fetch,
                    SiteEngine.observe_scrape,
                    name,
                    self.durations.scrape,
                    lambda result: result.ok,
                )
                tasks.append(self._tasks.spawn(loop, f"scrape of {name}"))
            self._providers[name] = (target, tasks)

    async def _repeat(  # noqa: PLR0917 - one loop's parts
        self,
        interval_s: float,
        fetch: Callable[[], Awaitable[_T]],
        observe: Observe,
        provider: str,
        durations: Durations,
        ok: Callable[[_T], bool],
        *,
        label: str | None = None,
    ) -> None:
        """Every ``interval_s``: ``fetch`` a result (never raises), time it in
        ``durations`` (under ``label``, by default the provider's name) and hand it over
        about ``provider``."""
        while True:
            result = await fetch()
            durations.observe((label or provider, _outcome(ok(result))), result.latency_s)
            self._deliver(observe, provider, result)
            await asyncio.sleep(interval_s)

    # -- spend sources --------------------------------------------------------------------

    def _follow_spend_sources(self, engine: SiteEngine) -> None:
        """Scrape the spend sources the engine reads, and only those."""
        wanted = {target.source: target for target in engine.spend_targets()}
        for name in list(self._spend):
            target, task = self._spend[name]
            if wanted.get(name) != target:
                task.cancel()
                del self._spend[name]
        self.durations.spend_scrape.forget(lambda labels: labels[0] in wanted)
        for name, target in wanted.items():
            if name in self._spend:
                continue
            fetch = partial(
                scrape,
                target.url,
                timeout=target.timeout_s,
                max_body_bytes=target.max_body_bytes,
                session=self._session,
                server_name=target.server_name,
            )
            loop = self._repeat(
                target.interval_s,
                fetch,
                self._count_spend,
                name,
                self.durations.spend_scrape,
                lambda result: result.ok,
            )
            self._spend[name] = (target, self._tasks.spawn(loop, f"spend scrape of {name}"))

    def _count_spend(
        self, engine: SiteEngine, source: str, result: ScrapeResult, now: datetime
    ) -> None:
        # One synchronous step: no other observation runs between the checkpoint and the
        # count, so the checkpoint holds exactly what is counted.
        counted = engine.count_spend(source, result, now)
        if counted is None:
            return
        if self._keep_spend is None or self._keep_spend(counted.checkpoint):
            engine.commit_spend(counted, now)

    # -- this site's egress source --------------------------------------------------------

    def _follow_egress_source(self, engine: SiteEngine) -> None:
        """Read the object the engine names for this site's egress address, and only that."""
        target = engine.egress_source_target()
        if self._egress is not None and self._egress[0] != target:
            self._egress[1].cancel()
            self._egress = None
        if self._egress is not None:
            return
        source = target.source if target is not None else None
        kind = None if source is None else "service" if source.service is not None else "gateway"
        self.durations.egress_read.forget(lambda labels: labels[0] == kind)
        if target is None or source is None:
            return
        loop = self._repeat(
            target.interval_s,
            partial(self._egress_reader, source),
            SiteEngine.observe_egress_source,
            engine.site,
            self.durations.egress_read,
            lambda read: read.error is None and read.found is not None,
            label=kind,
        )
        self._egress = (target, self._tasks.spawn(loop, f"reading of {source.described}"))

    # -- sites ----------------------------------------------------------------------------

    def probe_due_sites(self, engine: SiteEngine, now: datetime) -> None:
        """Start a probe of every site whose egress is due (one at a time per site)."""
        for target in engine.take_due_probes(now):
            if target.site not in self._probing:
                self._probing.add(target.site)
                self._tasks.spawn(self._probe(target), f"probe of {target.site}")

    async def _probe(self, target: ProbeTarget) -> None:
        try:
            result = await self.prober.probe(target)
            ok = result.reachable and result.error is None
            self.durations.probe.observe((target.tls_mode.value, _outcome(ok)), result.latency_s)
            self._deliver(SiteEngine.observe_probe, target.site, result)
        finally:
            self._probing.discard(target.site)


def _outcome(ok: bool) -> str:
    return "ok" if ok else "failed"
