"""The operator's HTTP endpoints, each on the port the Deployment gives it: ``/healthz``
(liveness and readiness) and ``/metrics`` (Prometheus)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from grid.errors import OperatorConfigError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Endpoint:
    """One small HTTP server on ``host:port`` (port 0 picks one)."""

    def __init__(self, address: str, routes: dict[str, Handler]) -> None:
        host, _, port = address.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if not host or not port.isdigit() or int(port) > 65535:
            raise OperatorConfigError(f"{address!r} is not host:port")
        self._host, self._port = host, int(port)
        self._routes = routes
        self._runner: web.AppRunner | None = None

    @property
    def address(self) -> str:
        """The bound ``host:port``."""
        if self._runner is None or not self._runner.addresses:
            raise RuntimeError("the endpoint is not started")
        host, port = self._runner.addresses[0][:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    async def start(self) -> None:
        app = web.Application()
        for path, handler in self._routes.items():
            app.router.add_get(path, handler)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        try:
            await web.TCPSite(self._runner, self._host, self._port).start()
        except OSError as error:
            await self._runner.cleanup()
            self._runner = None
            raise OperatorConfigError(
                f"cannot listen on {self._host}:{self._port}: {error.strerror}"
            ) from None

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def metrics_endpoint(address: str, registry: CollectorRegistry) -> Endpoint:
    """``/metrics`` from ``registry``."""

    async def metrics(request: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    return Endpoint(address, {"/metrics": metrics})


def health_endpoint(address: str, check: Callable[[], tuple[bool, str]]) -> Endpoint:
    """``/healthz``: 200 while ``check`` says healthy, else 503, with its explanation."""

    async def healthz(request: web.Request) -> web.Response:
        healthy, detail = check()
        return web.Response(status=200 if healthy else 503, text=detail + "\n")

    return Endpoint(address, {"/healthz": healthz})
