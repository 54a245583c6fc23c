"""What a network observes for its engine: health checks and metrics scrapes of this site's
providers, probes of every site's egress, and checks of the providers' credential Secrets
(present, key there, not empty: the value is never decoded or kept)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp

from grid.engine import ObservationTarget, ProbeTarget, SiteEngine
from grid.engine.targets import HealthTarget, MetricsTarget
from grid.errors import KubernetesApiError
from grid.models.phases import CredentialState
from grid.observe.health import check_health
from grid.observe.scrape import scrape
from grid.operator.kube import KubeApi
from grid.operator.metrics import OperatorMetrics
from grid.operator.notices import Notices
from grid.operator.probes import SiteProber
from grid.operator.secrets import credential_state_of

EngineOf = Callable[[], SiteEngine | None]
CredentialRef = tuple[str, str, str]
"""(namespace, Secret name, key)."""


@dataclass
class _Credentials:
    refs: dict[str, CredentialRef | None] = field(default_factory=dict)
    checked_at: float | None = None


class Observers:
    """Runs the observations of one network and hands every result to its engine."""

    def __init__(
        self,
        *,
        kube: KubeApi,
        session: aiohttp.ClientSession,
        metrics: OperatorMetrics,
        notices: Notices,
        engine_of: EngineOf,
        wake: Callable[[], None],
        credential_refresh_s: float,
    ) -> None:
        self._kube = kube
        self._session = session
        self._metrics = metrics
        self._notices = notices
        self._engine_of = engine_of
        self._wake = wake
        self._credential_refresh_s = credential_refresh_s
        self.prober = SiteProber(None)
        self._credentials = _Credentials()
        self._providers: dict[str, tuple[ObservationTarget, list[asyncio.Task[None]]]] = {}
        self._probing: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def stop(self) -> None:
        """Cancel every observation."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._providers.clear()
        self._probing.clear()

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- providers ------------------------------------------------------------------------

    def follow(self, engine: SiteEngine) -> None:
        """Run the health checks and scrapes the engine asks for, and only those."""
        wanted = {target.provider: target for target in engine.observation_targets()}
        for name in list(self._providers):
            target, tasks = self._providers[name]
            if wanted.get(name) != target:
                for task in tasks:
                    task.cancel()
                del self._providers[name]
        for name, target in wanted.items():
            if name in self._providers:
                continue
            tasks = []
            if target.health is not None:
                tasks.append(self._spawn(self._health_loop(name, target.health)))
            if target.metrics is not None:
                tasks.append(self._spawn(self._scrape_loop(name, target.metrics)))
            self._providers[name] = (target, tasks)

    async def _health_loop(self, provider: str, target: HealthTarget) -> None:
        while True:
            observation = await check_health(
                target.url,
                timeout=target.timeout_s,
                expected_status=target.expected_status,
                session=self._session,
            )
            engine = self._engine_of()
            if engine is not None:
                engine.observe_health(provider, observation, datetime.now(UTC))
                self._wake()
            await asyncio.sleep(target.interval_s)

    async def _scrape_loop(self, provider: str, target: MetricsTarget) -> None:
        while True:
            result = await scrape(
                target.url,
                timeout=target.timeout_s,
                max_body_bytes=target.max_body_bytes,
                session=self._session,
            )
            engine = self._engine_of()
            if engine is not None:
                engine.observe_scrape(provider, result, datetime.now(UTC))
                self._wake()
            await asyncio.sleep(target.interval_s)

    # -- sites ----------------------------------------------------------------------------

    def probe_due_sites(self, engine: SiteEngine, now: datetime) -> None:
        """Start a probe of every site whose egress is due (one at a time per site)."""
        for target in engine.take_due_probes(now):
            if target.site not in self._probing:
                self._probing.add(target.site)
                self._spawn(self._probe(target))

    async def _probe(self, target: ProbeTarget) -> None:
        try:
            result = await self.prober.probe(target)
            engine = self._engine_of()
            if engine is not None:
                engine.observe_probe(target.site, result, datetime.now(UTC))
                self._wake()
        finally:
            self._probing.discard(target.site)

    # -- credentials ----------------------------------------------------------------------

    async def check_credentials(self, engine: SiteEngine, moment: float) -> None:
        """Check the Secret of every observed provider that names one, when the providers
        changed or the refresh interval passed."""
        refs = engine.credential_refs()
        wanted: dict[str, CredentialRef | None] = {
            target.provider: refs.get(target.provider) for target in engine.observation_targets()
        }
        state = self._credentials
        due = (
            state.checked_at is None
            or wanted != state.refs
            or moment - state.checked_at >= self._credential_refresh_s
        )
        if not due:
            return
        state.refs, state.checked_at = wanted, moment
        checks = {
            provider: self._credential_state(ref)
            for provider, ref in wanted.items()
            if ref is not None
        }
        found = dict(zip(checks, await asyncio.gather(*checks.values()), strict=True))
        for provider in wanted:
            engine.observe_credentials(provider, found.get(provider, CredentialState.NOT_REQUIRED))

    async def _credential_state(self, ref: CredentialRef) -> CredentialState:
        namespace, name, key = ref
        try:
            data = await self._kube.read_secret(namespace, name)
        except KubernetesApiError as error:
            self._metrics.secret_reads.labels("credential", "error").inc()
            self._notices.say(
                f"credential {namespace}/{name}",
                f"cannot check credential Secret {namespace}/{name}: {error}",
                logging.WARNING,
            )
            return CredentialState.SECRET_NOT_FOUND
        state = credential_state_of(data, key)
        self._metrics.secret_reads.labels("credential", state.value).inc()
        # Only the verdict leaves this function; the Secret's data is dropped here.
        del data
        return state
