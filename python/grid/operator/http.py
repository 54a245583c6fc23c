"""The operator's HTTP endpoints, each on the port the Deployment gives it: ``/healthz``
(liveness and readiness), and ``/metrics`` (Prometheus) with the live view beside it
(``/`` and ``/view.json``, :mod:`grid.view`) and the booklet (``/booklet/``) on the port its
Service exposes."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from prometheus_client import CollectorRegistry

from grid.errors import OperatorConfigError
from grid.runtime.http import Endpoint, Handler, health_handler, metrics_handler


def _endpoint(address: str, routes: Mapping[str, Handler]) -> Endpoint:
    host, _, port = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or int(port) > 65535:
        raise OperatorConfigError(f"{address!r} is not host:port")
    return Endpoint(host, int(port), dict(routes), error=OperatorConfigError)


def metrics_endpoint(
    address: str, registry: CollectorRegistry, extra_routes: Mapping[str, Handler] | None = None
) -> Endpoint:
    """``/metrics`` from ``registry`` on ``host:port`` (port 0 picks one), and any
    ``extra_routes`` (the live view, the booklet)."""
    return _endpoint(address, {**(extra_routes or {}), "/metrics": metrics_handler(registry)})


def health_endpoint(address: str, check: Callable[[], tuple[bool, str]]) -> Endpoint:
    """``/healthz`` on ``host:port``: 200 while ``check`` says healthy, else 503, with its
    explanation."""
    return _endpoint(address, {"/healthz": health_handler(check)})
