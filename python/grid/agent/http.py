"""The agent's HTTP endpoints: ``/healthz`` (200 while every network's SWIM node runs),
``/status`` (JSON: membership, trust, certificates, overlays, phases, recent events),
``/metrics`` (Prometheus, from the agent's own registry; docs/observability.md lists the
families) and the live view, ``/`` and ``/view.json`` (:mod:`grid.view`), with the Grid
Booklet at ``/booklet/``.
Label values and documents carry names, addresses, revisions and public key ids only:
never a key, a token or a private key."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry

from grid import __version__
from grid.agent.network import NetworkRuntime
from grid.agent.options import AgentOptions
from grid.agent.report import ResourceReport
from grid.booklet.serve import booklet_routes
from grid.errors import AgentConfigError, GridError
from grid.membership import PROTOCOLS, SwimNode
from grid.runtime.http import Endpoint, health_handler, metrics_handler
from grid.runtime.metrics import Exposition, Family, GridCollector, Kind, NetworkView
from grid.runtime.tokens import CREDENTIAL_EXPIRY_FAMILY
from grid.trust.probe import parse_address
from grid.view import LiveView, NetworkSource, catch_up, node_info
from grid.view.model import certificates_part


class ServedAgent(Protocol):
    """What the endpoints read from the agent (:class:`grid.agent.agent.Agent`, which
    imports this module to serve them: a protocol here, not an import back)."""

    @property
    def site(self) -> str: ...

    @property
    def options(self) -> AgentOptions: ...

    @property
    def networks(self) -> Mapping[str, NetworkRuntime]: ...

    @property
    def report(self) -> ResourceReport: ...

    @property
    def events(self) -> list[dict[str, str]]:
        """Recent resource events, newest last."""


def _protocols_spoken(node: SwimNode | None) -> dict[tuple[str, str, int], int | None]:
    """The protocol version spoken with each member identity the node knows."""
    if node is None or not node.running:
        return {}
    try:
        members = node.members()
    except GridError:
        return {}  # stopped meanwhile
    return {(m.site, m.address, m.generation): m.protocol for m in members}


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
    spoken = _protocols_spoken(node)
    caught_up, waiting = catch_up(node)
    return {
        "gridId": engine.grid_id,
        "membership": {
            "running": node is not None and node.running,
            "address": None if node is None else node.address,
            "generation": None if node is None else node.generation,
            "keyIds": [] if node is None else node.key_ids(),
            "swimError": runtime.swim_error,
            "caughtUp": caught_up,
            "itemsWaiting": waiting,
            "protocols": list(PROTOCOLS),
            "members": [
                {
                    "site": member.site,
                    "address": member.address,
                    "state": member.state.value,
                    "generation": member.generation,
                    "since": member.since.isoformat(),
                    "protocol": spoken.get((member.site, member.address, member.generation)),
                }
                for _, member in sorted(engine.members.items())
            ],
            "refusedVersions": [
                {
                    "site": refused.site,
                    "address": refused.address,
                    "generation": refused.generation,
                    "theirs": list(refused.theirs),
                    "ours": list(refused.ours),
                    "message": refused.describe(),
                }
                for refused in runtime.swim.refused_versions.values()
            ],
        },
        "trustedSites": sorted(engine.trusted_sites),
        "discoveredSites": list(engine.discovered_sites),
        "certificates": certificates_part(engine),
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


def status_document(agent: ServedAgent) -> dict[str, Any]:
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


AGENT_FAMILIES = (
    Family(
        "grid_agent_overlay_writes_total",
        Kind.COUNTER,
        "Overlay files written (a new revision each).",
        ("network", "gateway_namespace", "gateway"),
    ),
    Family(
        "grid_agent_resource_errors",
        Kind.GAUGE,
        "Invalid resource documents in the agent's directory.",
    ),
)


def agent_collector(agent: ServedAgent) -> GridCollector:
    """Grid's families (:mod:`grid.runtime.metrics`) and the agent's own, read from the
    agent at scrape time."""

    def views() -> list[NetworkView]:
        return [
            NetworkView(
                name,
                runtime.engine,
                runtime.swim,
                runtime.observers.durations,
                lambda overlay: bool(overlay.message),
                # swim_error is the key file's problem first, else the driver's.
                key_file_problem=runtime.swim_error not in (None, runtime.swim.error),
            )
            for name, runtime in agent.networks.items()
        ]

    def extra(out: Exposition) -> None:
        for name, runtime in sorted(agent.networks.items()):
            for namespace, gateway in sorted(runtime.engine.overlays):
                out.add(
                    "grid_agent_overlay_writes_total",
                    (name, namespace, gateway),
                    runtime.overlay_writes[(namespace, gateway)],
                )
        out.add("grid_agent_resource_errors", (), len(agent.report.errors))
        now = datetime.now(UTC)
        for name, runtime in sorted(agent.networks.items()):
            for provider, expires_at in sorted(runtime.tokens.expiries(now).items()):
                out.add(CREDENTIAL_EXPIRY_FAMILY.name, (name, provider), expires_at.timestamp())

    return GridCollector("agent", views, extra_families=AGENT_FAMILIES, extra=extra)


def network_source(runtime: NetworkRuntime) -> NetworkSource:
    """What the live view shows of one network of the agent."""
    node = runtime.node
    return NetworkSource(
        runtime.name,
        runtime.engine,
        node_info(node),
        runtime.swim_error,
    )


class StatusServer:
    """``/healthz``, ``/status``, ``/metrics``, the live view (``/``, ``/view.json``) and
    the booklet (``/booklet/``) on ``host:port`` (port 0 picks one)."""

    def __init__(self, agent: ServedAgent, address: str) -> None:
        host, _, port = address.rpartition(":")
        try:
            host, _ = parse_address(f"{host}:1")
        except GridError:
            raise GridError(f"--http {address!r} is not host:port") from None
        if not port.isdigit() or int(port) > 65535:
            raise GridError(f"--http {address!r} has no port between 0 and 65535")
        self._agent = agent
        self.registry = CollectorRegistry()
        self.registry.register(agent_collector(agent))
        self.view = LiveView(
            "agent",
            lambda: [network_source(runtime) for _, runtime in sorted(agent.networks.items())],
            links={"Grid Booklet": "/booklet/"},
        )
        routes = {
            **self.view.routes(),
            **booklet_routes("/booklet"),
            "/healthz": health_handler(self._health),
            "/status": self._status,
            "/metrics": metrics_handler(self.registry),
        }
        self._endpoint = Endpoint(host, int(port), routes, error=AgentConfigError)

    @property
    def address(self) -> str:
        return self._endpoint.address

    async def start(self) -> None:
        """Listen. Raises :class:`~grid.errors.AgentConfigError` when the address cannot be
        bound."""
        await self._endpoint.start()
        await self.view.start()

    async def stop(self) -> None:
        await self.view.stop()
        await self._endpoint.stop()

    def _health(self) -> tuple[bool, str]:
        down = [
            name
            for name, runtime in sorted(self._agent.networks.items())
            if runtime.node is None or not runtime.node.running
        ]
        if down:
            return False, f"SWIM not running for: {', '.join(down)}"
        return True, "ok"

    async def _status(self, request: web.Request) -> web.Response:
        return web.json_response(status_document(self._agent))
