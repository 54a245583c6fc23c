"""A whole mesh on 127.0.0.1 in one process: a CA and a certificate per site, a fresh SWIM
key, provider endpoints serving real health and metrics, each site's resource directory
(all written by :mod:`grid.demo.builder`), and one standalone agent per site (with its
egress TLS listener). ``grid demo``, the end to end tests and the propagation benchmark all
build their meshes with it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grid.agent import Agent, AgentOptions, PerNetwork
from grid.agent.outputs import overlay_path
from grid.demo.builder import (
    GATEWAY_NAME,
    GATEWAY_NAMESPACE,
    NETWORK_FILE,
    PROVIDERS_FILE,
    SITES_FILE,
    MeshCredentials,
    MeshTiming,
    SiteDirectory,
    mutual_tls_egress,
    network_document,
    provider_document,
    scraped_observation,
    site_document,
    write_documents,
    write_swim_key,
)
from grid.demo.endpoints import LOOPBACK, DemoProvider
from grid.engine import GatewayOverlay


@dataclass(frozen=True, slots=True)
class ProviderPlan:
    """A provider to run at a site, with its initial load."""

    name: str
    models: tuple[str, ...]
    queue_depth: float = 2.0
    kv_cache_utilization: float = 0.3
    prefix_cache_hit_ratio: float = 0.5
    p99_latency_s: float = 0.8
    cost: tuple[str, str] = ("0.10", "0.20")
    cluster: str | None = None
    bearer_secret: tuple[str, str, str] | None = None
    """(namespace, Secret name, key) of a bearer token, if the provider needs one."""


@dataclass(frozen=True, slots=True)
class SitePlan:
    name: str
    region: str
    zone: str
    providers: tuple[ProviderPlan, ...] = ()


@dataclass(frozen=True, slots=True)
class MeshSettings(MeshTiming):
    """How the mesh runs."""

    network: str = "grid-demo"
    seeds: int = 2
    """How many sites (the first ones) are seeds."""
    wrong_key_sites: frozenset[str] = frozenset()
    """Sites given a SWIM key of their own: they can never join."""
    mispinned_sites: frozenset[str] = frozenset()
    """Sites whose GridSite, at the other sites, pins a certificate other than the one they
    present: SWIM does not hear them there."""
    http: bool = False
    """Serve each agent's /metrics, /healthz and /status on a free port."""
    secrets_dir: Path | None = None


@dataclass
class SiteRuntime(SiteDirectory):
    """Everything that belongs to one site of the mesh."""

    plan: SitePlan
    directory: Path
    swim_address: str
    egress_address: str
    providers: dict[str, DemoProvider] = field(default_factory=dict)
    agent: Agent | None = None
    key_file: Path | None = None


_LOWEST_PORT = 10_000
_FALLBACK_EPHEMERAL_START = 32_768


def _ephemeral_start() -> int:
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        return int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return _FALLBACK_EPHEMERAL_START


_handed_out: set[int] = set()
"""Ports :func:`free_port` returned in this process: a port is free only until its owner
binds it, so one handed out and not bound yet must not be handed out again."""
_handed_out_lock = threading.Lock()


def free_port(kind: socket.SocketKind) -> int:
    """A loopback port free right now (for TCP or UDP), chosen below the ephemeral range
    (a port from that range could be taken as the source port of an outgoing connection
    between now and the moment its owner binds it), and never one this process was handed
    before (two sites, or a site and a test's listener, chosen before either binds)."""
    top = _ephemeral_start()
    chooser = secrets.SystemRandom()
    with _handed_out_lock:
        for _ in range(200):
            port = chooser.randrange(_LOWEST_PORT, max(top, _LOWEST_PORT + 1))
            if port not in _handed_out and _bindable(kind, port):
                _handed_out.add(port)
                return port
        while True:
            with socket.socket(socket.AF_INET, kind) as probe:
                probe.bind((LOOPBACK, 0))
                port = int(probe.getsockname()[1])
            if port not in _handed_out:
                _handed_out.add(port)
                return port


def _bindable(kind: socket.SocketKind, port: int) -> bool:
    with socket.socket(socket.AF_INET, kind) as probe:
        try:
            probe.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


class LocalMesh:
    """Build with the sites, ``await prepare()``, ``await start()``; watch overlays with
    :meth:`overlay` and :meth:`wait_for`; ``await crash(site)``; ``await stop()``."""

    def __init__(
        self, root: Path, sites: Sequence[SitePlan], settings: MeshSettings | None = None
    ) -> None:
        self.root = root
        self.settings = settings or MeshSettings()
        self.sites: dict[str, SiteRuntime] = {}
        self._plans = list(sites)
        self._changed = asyncio.Event()
        self.overlay_log: list[tuple[float, str, GatewayOverlay]] = []
        """(monotonic time, site, overlay) of every overlay written, in order."""
        self.credentials: MeshCredentials | None = None
        """The mesh's SWIM key and CA, once prepared (to certify a site again)."""

    # -- setting up -------------------------------------------------------------------------

    async def prepare(self) -> None:
        """Mint the PKI and the key, start the provider endpoints, write each site's
        resource directory."""
        credentials = self.credentials = MeshCredentials(self.root / "swim.key", "Grid demo CA")
        pins: dict[str, str] = {}
        presented: dict[str, str] = {}
        for plan in self._plans:
            runtime = SiteRuntime(
                plan,
                self.root / plan.name,
                f"{LOOPBACK}:{free_port(socket.SOCK_DGRAM)}",
                f"{LOOPBACK}:{free_port(socket.SOCK_STREAM)}",
            )
            presented[plan.name] = credentials.certify(
                plan.name, runtime.tls_dir, dns_names=("localhost",)
            )
            pins[plan.name] = presented[plan.name]
            if plan.name in self.settings.mispinned_sites:
                pins[plan.name] = credentials.unpresented_fingerprint(plan.name)
            runtime.key_file = credentials.key_file
            if plan.name in self.settings.wrong_key_sites:
                runtime.key_file = write_swim_key(runtime.directory / "swim.key")
            for provider in plan.providers:
                endpoint = DemoProvider(
                    queue_depth=provider.queue_depth,
                    kv_cache_utilization=provider.kv_cache_utilization,
                    prefix_cache_hit_ratio=provider.prefix_cache_hit_ratio,
                    p99_latency_s=provider.p99_latency_s,
                )
                await endpoint.start()
                runtime.providers[provider.name] = endpoint
            self.sites[plan.name] = runtime
        for runtime in self.sites.values():
            # A site pins its own certificate right: a mispinned site is the others' mistake.
            own = {runtime.plan.name: presented[runtime.plan.name]}
            self._write_resources(runtime, pins | own)

    def _write_resources(self, runtime: SiteRuntime, pins: dict[str, str]) -> None:
        settings = self.settings
        seeds = [s.swim_address for s in list(self.sites.values())[: settings.seeds]]
        network = network_document(settings.network, seeds, timing=settings)
        sites = [
            site_document(
                name,
                settings.network,
                region=site.plan.region,
                zone=site.plan.zone,
                # The egress listens on a loopback address; its certificate names the site.
                egress=mutual_tls_egress(site.egress_address, name),
                pin=pins[name],
            )
            for name, site in self.sites.items()
        ]
        providers = [self._provider(runtime, plan) for plan in runtime.plan.providers]
        write_documents(runtime.resources / NETWORK_FILE, [network])
        write_documents(runtime.resources / SITES_FILE, sites)
        if providers:
            write_documents(runtime.resources / PROVIDERS_FILE, providers)

    def _provider(self, runtime: SiteRuntime, plan: ProviderPlan) -> dict[str, Any]:
        endpoint = runtime.providers[plan.name]
        document = provider_document(
            plan.name,
            network=self.settings.network,
            site=runtime.plan.name,
            models=plan.models,
            capabilities=("chat",),
            endpoint=endpoint.url,
            cost=plan.cost,
            observation=scraped_observation(endpoint.port, self.settings.observe_interval),
        )
        spec = document["spec"]
        if plan.cluster is not None:
            spec["cluster"] = plan.cluster
        if plan.bearer_secret is not None:
            namespace, name, key = plan.bearer_secret
            spec["auth"] = {
                "strategy": "BearerToken",
                "secretRef": {"name": name, "namespace": namespace, "key": key},
            }
        return document

    # -- running ----------------------------------------------------------------------------

    def options(self, site: str) -> AgentOptions:
        runtime = self.sites[site]
        settings = self.settings
        assert runtime.key_file is not None
        return AgentOptions(
            resources=runtime.resources,
            state_dir=runtime.state_dir,
            site=PerNetwork(site),
            bind=PerNetwork(runtime.swim_address),
            key_files={None: (runtime.key_file,)},
            tls_dir=runtime.tls_dir,
            secrets_dir=settings.secrets_dir,
            http=f"{LOOPBACK}:0" if settings.http else None,
            egress_listen=runtime.egress_address,
            probe_interval_s=settings.agent_probe_interval_s,
            tick_s=0.5,
        )

    async def start(self, sites: Iterable[str] | None = None) -> None:
        """Start the agents of ``sites`` (default: every site) side by side."""
        names = list(self.sites) if sites is None else list(sites)
        agents = []
        for name in names:
            agent = Agent(self.options(name))
            agent.overlay_listeners.append(self._overlay_written)
            self.sites[name].agent = agent
            agents.append(agent)
        await asyncio.gather(*(agent.start() for agent in agents))

    def _overlay_written(self, network: str, overlay: GatewayOverlay, path: Path) -> None:
        self.overlay_log.append((time.monotonic(), overlay.scope.local_site, overlay))
        self._changed.set()

    async def crash(self, site: str) -> None:
        """Stop a site's agent without leaving the mesh, as a crash would."""
        agent = self.sites[site].agent
        if agent is not None:
            await agent.stop(leave=False)

    async def stop(self) -> None:
        """Stop every agent (leaving the mesh) and every provider endpoint."""
        await asyncio.gather(
            *(r.agent.stop(leave=True) for r in self.sites.values() if r.agent is not None)
        )
        for runtime in self.sites.values():
            for endpoint in runtime.providers.values():
                await endpoint.stop()

    # -- watching ---------------------------------------------------------------------------

    def overlay(self, site: str) -> GatewayOverlay | None:
        """The current overlay of ``site``'s gateway."""
        agent = self.sites[site].agent
        if agent is None or self.settings.network not in agent.networks:
            return None
        engine = agent.networks[self.settings.network].engine
        return engine.overlays.get((GATEWAY_NAMESPACE, GATEWAY_NAME))

    def candidates(self, site: str) -> list[dict[str, Any]]:
        """The candidates of ``site``'s current overlay, in order."""
        current = self.overlay(site)
        if current is None or current.overlay is None:
            return []
        return list(current.overlay.document["overlay"]["candidates"])

    def view_of(self, site: str, peer: str) -> tuple[str, str]:
        """How ``site`` sees ``peer``: its SWIM state and its GridSite phase."""
        agent = self.sites[site].agent
        assert agent is not None
        engine = agent.networks[self.settings.network].engine
        member = engine.members.get(peer)
        status = engine.statuses().get(("GridSite", peer))
        return (
            "unknown" if member is None else member.state.value,
            "unknown" if status is None else str(status.phase),
        )

    def overlay_file(self, site: str) -> Path:
        current = self.overlay(site)
        assert current is not None
        return overlay_path(self.sites[site].state_dir, self.settings.network, current)

    async def wait_for(self, what: str, predicate: Callable[[], bool], timeout: float) -> float:
        """Seconds until ``predicate`` holds, checked after every overlay written (and
        every 50 ms). Raises :class:`TimeoutError` naming ``what``."""
        started = time.monotonic()
        while not predicate():
            left = timeout - (time.monotonic() - started)
            if left <= 0:
                raise TimeoutError(f"{what}: not within {timeout:g}s")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(left, 0.05)):
                    await self._changed.wait()
        return time.monotonic() - started


def quiet_agents(verbose: bool) -> None:
    """Agent logs go to standard error only when ``verbose``."""
    logger = logging.getLogger("grid.agent")
    if verbose:
        if not logging.getLogger().handlers:
            logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logger.setLevel(logging.INFO)
        logger.propagate = True
    else:
        logger.propagate = False
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())
