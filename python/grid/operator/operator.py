"""The operator: Grid's resources as kopf reports them, one :class:`NetworkRuntime` per
GridNetwork, the statuses of resources no network serves, and the HTTP endpoints.

kopf's handlers (:mod:`grid.operator.handlers`) only translate between kopf and the methods
here; everything runs on kopf's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Mapping
from typing import Any, Protocol

import aiohttp

from grid.booklet.serve import booklet_routes
from grid.errors import KubernetesApiError, OperatorConfigError
from grid.models.network import GatewayRef
from grid.operator.cache import NETWORK, ResourceCache, valid_network
from grid.operator.configmaps import Target, gateway_targets, selector, spec_targets
from grid.operator.http import health_endpoint, metrics_endpoint
from grid.operator.kube import KubeApi
from grid.operator.metrics import OperatorMetrics
from grid.operator.options import OperatorOptions
from grid.operator.ports import SwimPorts, udp_bindable
from grid.operator.runtime import NetworkRuntime, PostEvent, Shared, utc_now
from grid.operator.spend_checkpoints import checkpoint_name
from grid.operator.status import dump_status, orphan_status
from grid.operator.validation import known_spec
from grid.operator.writes import StatusWriter, delete_managed_configmap
from grid.runtime.http import Endpoint
from grid.view import LiveView, NetworkSource, node_info

_log = logging.getLogger("grid.operator")


class StopFlag(Protocol):
    """What kopf hands a daemon: awaitable until the daemon must stop."""

    def wait(self) -> Awaitable[Any]: ...


class Operator:
    """Grid's Kubernetes operator for one cluster."""

    def __init__(self, options: OperatorOptions, configuration: Any, post_event: PostEvent) -> None:
        self.options = options
        self.kube = KubeApi(configuration)
        self.ports = SwimPorts(options.swim_port, udp_bindable(options.swim_bind_host))
        self.cache = ResourceCache()
        self.metrics = OperatorMetrics()
        self.runtimes: dict[str, NetworkRuntime] = {}
        self._post_event = post_event
        self._shared: Shared | None = None
        self._session: aiohttp.ClientSession | None = None
        self._metrics_endpoint: Endpoint | None = None
        self._health_endpoint: Endpoint | None = None
        self._orphans: StatusWriter | None = None
        self._orphans_task: asyncio.Task[None] | None = None
        self._api_task: asyncio.Task[None] | None = None
        self._orphans_wake = asyncio.Event()
        self._started = False
        self.failure: str | None = None
        """Why the operator could not start (a port in use), once it could not."""
        self.metrics.watch(lambda: list(self.runtimes.values()))
        self.view = LiveView(
            "operator",
            lambda: [network_source(runtime) for _, runtime in sorted(self.runtimes.items())],
            links={"Grid Booklet": "/booklet/"},
        )

    def __repr__(self) -> str:
        return f"Operator(server={self.kube.server!r}, networks={sorted(self.runtimes)})"

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the API client and the HTTP endpoints. Raises
        :class:`~grid.errors.OperatorConfigError` when a port cannot be bound."""
        await self.kube.start()
        self._session = aiohttp.ClientSession()
        self._shared = Shared(
            self.options,
            self.kube,
            self.cache,
            self.metrics,
            self._session,
            self._post_event,
            self.ports,
        )
        self._orphans = StatusWriter(self.kube, self.metrics, self.options.status_interval_s)
        self._orphans_wake = asyncio.Event()
        try:
            if self.options.metrics_address is not None:
                self._metrics_endpoint = metrics_endpoint(
                    self.options.metrics_address,
                    self.metrics.registry,
                    {**self.view.routes(), **booklet_routes("/booklet")},
                )
                await self._metrics_endpoint.start()
                await self.view.start()
            if self.options.health_address is not None:
                self._health_endpoint = health_endpoint(self.options.health_address, self.health)
                await self._health_endpoint.start()
        except OperatorConfigError as error:
            self.failure = str(error)
            await self.stop()
            raise
        except BaseException:
            await self.stop()
            raise
        self._orphans_task = asyncio.create_task(self._orphan_loop(), name="grid-orphans")
        self._api_task = asyncio.create_task(self._api_loop(), name="grid-api-probe")
        self._started = True
        _log.info(
            "operator started (namespace %s, metrics %s, health %s)",
            self.options.namespace,
            self.metrics_address,
            self.health_address,
        )

    async def stop(self) -> None:
        """Leave every mesh and close everything. Idempotent."""
        self._started = False
        runtimes, self.runtimes = list(self.runtimes.values()), {}
        await asyncio.gather(*(runtime.stop(leave=True) for runtime in runtimes))
        for task in (self._orphans_task, self._api_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._orphans_task = self._api_task = None
        await self.view.stop()
        for endpoint in (self._metrics_endpoint, self._health_endpoint):
            if endpoint is not None:
                await endpoint.stop()
        self._metrics_endpoint = self._health_endpoint = None
        if self._session is not None:
            await self._session.close()
            self._session = None
        await self.kube.close()

    @property
    def metrics_address(self) -> str | None:
        endpoint = self._metrics_endpoint
        return None if endpoint is None else endpoint.address

    @property
    def health_address(self) -> str | None:
        endpoint = self._health_endpoint
        return None if endpoint is None else endpoint.address

    def health(self) -> tuple[bool, str]:
        """Healthy once started while every network's reconcile loop runs and the API
        server answers (it may be silent for ``api_unreachable_s``). A network that cannot
        join its mesh (a missing Secret, say) is reported in its status, not here:
        restarting the pod would not fix it."""
        if not self._started:
            return False, "starting"
        reachability = self.kube.reachability
        silent = reachability.unreachable_for(time.monotonic())
        if silent is not None and silent >= self.options.api_unreachable_s:
            return False, (
                f"the Kubernetes API server {self.kube.server} has not answered for "
                f"{silent:.0f}s ({reachability.problem})"
            )
        stuck = sorted(name for name, runtime in self.runtimes.items() if not runtime.alive)
        if stuck:
            return False, f"reconcile loop stopped for: {', '.join(stuck)}"
        lines = ["ok"]
        for name, runtime in sorted(self.runtimes.items()):
            node = runtime.node
            state = "running" if node is not None and node.running else "not running"
            lines.append(f"{name}: SWIM {state}")
        return True, "\n".join(lines)

    # -- what kopf reports ----------------------------------------------------------------

    def resource_event(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """A watch event about a Grid resource."""
        kind = body.get("kind")
        name = (body.get("metadata") or {}).get("name")
        if not isinstance(kind, str) or not isinstance(name, str):
            return
        if event_type == "DELETED":
            removed = self.cache.remove(kind, name)
            if removed is not None:
                self._wake(removed.network_ref)
            return
        previous = self.cache.get(kind, name)
        before = previous.network_ref if previous is not None else None
        entry = self.cache.apply(body)
        if entry is not None:
            self._wake(entry.network_ref)
            if before != entry.network_ref:
                self._wake(before)

    def _wake(self, network: str | None) -> None:
        self._orphans_wake.set()
        if network is not None and network in self.runtimes:
            self.runtimes[network].wake()

    async def serve_network(self, name: str, stopped: StopFlag) -> None:
        """Run a network until kopf says to stop (it was deleted, or the operator exits)."""
        runtime = self.runtimes.get(name)
        if runtime is None:
            runtime = NetworkRuntime(name, self._require_shared())
            self.runtimes[name] = runtime
            runtime.start()
        try:
            await stopped.wait()
        finally:
            if self.runtimes.get(name) is runtime:
                del self.runtimes[name]
            await runtime.stop(leave=True)

    async def gateways_changed(
        self, name: str, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None
    ) -> list[str]:
        """The spec changed (also while the operator was down): ConfigMaps of gateways no
        longer listed are deleted. Returns those that could not be deleted yet."""
        removed = _targets(old) - _targets(new)
        runtime = self.runtimes.get(name)
        if runtime is not None:
            runtime.retire(removed)
            return []
        return await self._delete_all(name, removed)

    async def network_deleted(self, name: str, body: Mapping[str, Any]) -> list[str]:
        """Leave the network's mesh and delete every ConfigMap Grid wrote for it. Returns
        the ConfigMaps that could not be deleted yet (kopf retries then)."""
        runtime = self.runtimes.pop(name, None)
        targets = _targets(body.get("spec"))
        network = valid_network(self.cache.network(name))
        if network is not None:
            targets |= spec_targets(network.spec)
        if runtime is not None:
            await runtime.stop(leave=True)
            targets |= runtime.written_targets
        targets.add((self.options.namespace, checkpoint_name(name)))
        for namespace in sorted({namespace for namespace, _ in targets}):
            with contextlib.suppress(KubernetesApiError):
                for found in await self.kube.list_configmaps(namespace, selector(name)):
                    targets.add((namespace, found["metadata"]["name"]))
        return await self._delete_all(name, targets)

    async def _delete_all(self, network: str, targets: set[Target]) -> list[str]:
        failed = []
        for target in sorted(targets):
            if not await delete_managed_configmap(self.kube, self.metrics, network, target):
                failed.append(f"{target[0]}/{target[1]}")
        return failed

    def _require_shared(self) -> Shared:
        if self._shared is None:
            raise RuntimeError("the operator is not started")
        return self._shared

    # -- the API server -------------------------------------------------------------------

    async def _api_loop(self) -> None:
        """Ask the API server whether it answers whenever no other call found out lately
        (what ``/healthz`` reports)."""
        interval = self.options.api_probe_interval_s
        while True:
            if not self.kube.answered_within(interval):
                await self.kube.probe()
            await asyncio.sleep(interval)

    # -- resources no network serves ------------------------------------------------------

    async def _orphan_loop(self) -> None:
        while True:
            self._orphans_wake.clear()
            try:
                await self._report_orphans()
            except Exception:
                # As for a network's pass: log the bug with its traceback, carry on.
                _log.exception("reporting resources no network serves failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._orphans_wake.wait(), self.options.tick_s * 5)

    async def _report_orphans(self) -> None:
        writer = self._orphans
        if writer is None:
            return
        now, moment = utc_now(), time.monotonic()
        orphans = self.cache.orphans()
        writer.keep_only({(entry.kind, entry.name) for entry in orphans})
        for entry in orphans:
            previous = writer.last(entry.kind, entry.name) or entry.status
            network = entry.network_ref
            exists = network is not None and self.cache.network(network) is not None
            status = orphan_status(
                entry.kind,
                network,
                network_exists=exists,
                generation=entry.generation,
                previous=previous,
                now=now,
            )
            problem = await writer.write(
                entry.kind, entry.name, dump_status(status), entry.status, moment
            )
            if problem is not None:
                _log.warning("%s %s: %s", entry.kind, entry.name, problem)


def network_source(runtime: NetworkRuntime) -> NetworkSource:
    """What the live view shows of one network: until the cluster's site is known there
    is no engine, and the view says so."""
    node = runtime.node
    engine = runtime.engine
    swim_error = runtime.mesh.error
    status = runtime.network_status
    if swim_error is None and status is not None:
        # A missing Secret or a taken port: the network's status says why SWIM is not up.
        swim_error = next(
            (
                condition.message
                for condition in status.conditions
                if condition.type == "MembershipReady" and str(condition.status) == "False"
            ),
            None,
        )
    return NetworkSource(
        runtime.name,
        engine,
        node_info(node),
        swim_error,
        held_back=lambda overlay: overlay.message or runtime.write_message(*overlay.key),
        problem=None if engine is not None else "this cluster's site is not known yet",
    )


def _targets(spec: Mapping[str, Any] | None) -> set[Target]:
    """The ConfigMaps a (possibly invalid) spec's gatewayRefs name (a gatewayRef with a
    field only a newer release knows still names its ConfigMaps)."""
    targets: set[Target] = set()
    known = known_spec(NETWORK, spec) if isinstance(spec, Mapping) else None
    refs = known.get("gatewayRefs") if known is not None else None
    for item in refs if isinstance(refs, list) else []:
        try:
            targets |= gateway_targets(GatewayRef.model_validate(item))
        except ValueError:
            continue
    return targets
