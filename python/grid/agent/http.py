"""The agent's HTTP endpoints: ``/healthz`` (200 while every network's SWIM node runs),
``/status`` (JSON: membership, trust, overlays, phases, recent events) and ``/metrics``
(Prometheus, from the agent's own registry). Label values and documents carry names,
addresses, revisions and public key ids only: never a key, a token or a private key."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from grid import __version__
from grid.agent.network import NetworkRuntime
from grid.errors import GridError
from grid.trust.probe import parse_address

if TYPE_CHECKING:
    from grid.agent.agent import Agent


def network_status(runtime: NetworkRuntime) -> dict[str, Any]:
    """One network's part of ``/status``."""
    engine = runtime.engine
    node = runtime.node
    statuses = engine.statuses()
    overlays = []
    for key, current in sorted(engine.overlays.items()):
        rendered = current.overlay
        path = runtime.overlay_paths.get(key)
        rendered_at = current.rendered_at
        overlays.append(
            {
                "gateway": current.gateway.name,
                "namespace": current.gateway.namespace,
                "revision": current.revision,
                "renderedAt": None if rendered_at is None else rendered_at.isoformat(),
                "message": current.message,
                "path": None if path is None else str(path),
                "candidates": []
                if rendered is None
                else [
                    {
                        key: candidate[key]
                        for key in (
                            "rank",
                            "name",
                            "site",
                            "cluster",
                            "admission_state",
                            "selection_tier",
                            "score",
                            "fresh",
                        )
                    }
                    for candidate in rendered.document["overlay"]["candidates"]
                ],
            }
        )
    return {
        "gridId": engine.grid_id,
        "membership": {
            "running": node is not None and node.running,
            "address": None if node is None else node.address,
            "generation": None if node is None else node.generation,
            "keyIds": [] if node is None else node.key_ids(),
            "swimError": runtime.swim_error,
            "members": [
                {
                    "site": member.site,
                    "address": member.address,
                    "state": member.state.value,
                    "generation": member.generation,
                    "since": member.since.isoformat(),
                }
                for _, member in sorted(engine.members.items())
            ],
        },
        "trustedSites": sorted(engine.trusted_sites),
        "discoveredSites": list(engine.discovered_sites),
        "overlays": overlays,
        "notOffered": [
            {"provider": provider, "reason": reason} for provider, reason in engine.not_offered
        ],
        "leftOut": []
        if engine.ranking is None
        else [
            {
                "provider": entry.candidate.provider,
                "model": entry.candidate.model,
                "site": entry.candidate.site,
                "reason": entry.reason.value,
                "detail": entry.detail,
            }
            for entry in engine.ranking.left_out
        ],
        "refusedItems": dict(engine.refused_items),
        "resources": [
            {
                "kind": kind,
                "name": name,
                "status": status.model_dump(mode="json", by_alias=True, exclude_none=True),
            }
            for (kind, name), status in statuses.items()
        ],
    }


def status_document(agent: Agent) -> dict[str, Any]:
    """The whole ``/status`` document."""
    return {
        "site": agent.site,
        "version": __version__,
        "resources": {
            "directory": str(agent.options.resources),
            "applied": agent.report.applied,
            "errors": [
                {
                    "file": error.file,
                    "document": error.document,
                    "kind": error.kind,
                    "name": error.name,
                    "field": error.path,
                    "reason": error.reason,
                }
                for error in agent.report.errors
            ],
        },
        "networks": {name: network_status(r) for name, r in sorted(agent.networks.items())},
        "events": list(agent.events),
    }


class AgentCollector(Collector):
    """Prometheus metrics read from the agent at scrape time."""

    def __init__(self, agent: Agent) -> None:
        self._agent = agent

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        agent = self._agent
        members = GaugeMetricFamily(
            "grid_members", "Peers by SWIM state.", labels=["network", "state"]
        )
        trusted = GaugeMetricFamily(
            "grid_trusted_sites", "Peers whose certificate matched its pin.", labels=["network"]
        )
        candidates = GaugeMetricFamily(
            "grid_overlay_candidates",
            "Candidates in the current overlay.",
            labels=["network", "namespace", "gateway"],
        )
        refused = GaugeMetricFamily(
            "grid_overlay_render_refused",
            "1 while the last render was refused and the previous overlay is kept.",
            labels=["network", "namespace", "gateway"],
        )
        writes = CounterMetricFamily(
            "grid_overlay_writes",
            "Overlay files written (a new revision each).",
            labels=["network", "namespace", "gateway"],
        )
        published = CounterMetricFamily(
            "grid_items_published", "Items handed to SWIM.", labels=["network", "lane"]
        )
        unpublished = CounterMetricFamily(
            "grid_items_refused_by_swim",
            "This site's items SWIM refused to send, by error.",
            labels=["network", "error"],
        )
        received = CounterMetricFamily(
            "grid_items_received",
            "Items received from peers, by outcome.",
            labels=["network", "lane", "outcome"],
        )
        phases = GaugeMetricFamily(
            "grid_resource_phase",
            "1 for the current phase of each resource.",
            labels=["network", "kind", "name", "phase"],
        )
        swim = GaugeMetricFamily(
            "grid_swim", "SWIM node counters and gauges.", labels=["network", "name"]
        )
        for name, runtime in sorted(agent.networks.items()):
            engine = runtime.engine
            states: dict[str, int] = {"alive": 0, "suspect": 0, "down": 0, "left": 0}
            for member in engine.members.values():
                states[member.state.value] += 1
            for state, count in states.items():
                members.add_metric([name, state], count)
            trusted.add_metric([name], len(engine.trusted_sites))
            for (namespace, gateway), current in sorted(engine.overlays.items()):
                count = 0 if current.overlay is None else len(current.overlay.candidates)
                candidates.add_metric([name, namespace, gateway], count)
                refused.add_metric([name, namespace, gateway], 1 if current.message else 0)
                writes.add_metric(
                    [name, namespace, gateway], runtime.overlay_writes[(namespace, gateway)]
                )
            for lane, count in sorted(runtime.items_published.items()):
                published.add_metric([name, lane], count)
            for error, count in sorted(runtime.publish_refused.items()):
                unpublished.add_metric([name, error], count)
            for (lane, outcome), count in sorted(runtime.items_received.items()):
                received.add_metric([name, lane, outcome], count)
            for (kind, resource), status in engine.statuses().items():
                phases.add_metric([name, kind, resource, str(status.phase)], 1)
            node = runtime.node
            if node is not None and node.running:
                for stat, value in sorted(node.stats().items()):
                    swim.add_metric([name, stat], value)
        yield from (
            members,
            trusted,
            candidates,
            refused,
            writes,
            published,
            unpublished,
            received,
            phases,
            swim,
        )
        errors = GaugeMetricFamily(
            "grid_resource_errors", "Invalid resource documents in the directory."
        )
        errors.add_metric([], len(agent.report.errors))
        yield errors


class StatusServer:
    """``/healthz``, ``/status`` and ``/metrics`` on ``host:port`` (port 0 picks one)."""

    def __init__(self, agent: Agent, address: str) -> None:
        host, _, port = address.rpartition(":")
        try:
            self._host, _ = parse_address(f"{host}:1")
        except GridError:
            raise GridError(f"--http {address!r} is not host:port") from None
        if not port.isdigit() or int(port) > 65535:
            raise GridError(f"--http {address!r} has no port between 0 and 65535")
        self._port = int(port)
        self._agent = agent
        self.registry = CollectorRegistry()
        self.registry.register(AgentCollector(agent))
        self._runner: web.AppRunner | None = None

    @property
    def address(self) -> str:
        if self._runner is None:
            raise RuntimeError("the HTTP server is not started")
        host, port = self._runner.addresses[0][:2]
        return f"{host}:{port}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/status", self._status)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, self._host, self._port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, request: web.Request) -> web.Response:
        down = [
            name
            for name, runtime in sorted(self._agent.networks.items())
            if runtime.node is None or not runtime.node.running
        ]
        if down:
            return web.Response(status=503, text=f"SWIM not running for: {', '.join(down)}\n")
        return web.Response(text="ok\n")

    async def _status(self, request: web.Request) -> web.Response:
        return web.json_response(status_document(self._agent))

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
