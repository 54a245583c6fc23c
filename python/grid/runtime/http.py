"""Small HTTP servers for a shell's endpoints: ``/metrics`` (Prometheus, from a registry:
the text format, or OpenMetrics when the scraper asks for it, gzipped when it accepts
gzip) and ``/healthz`` (200 while healthy, else 503, with the explanation), or any other
GET routes a shell adds."""

from __future__ import annotations

import gzip
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted

from grid.errors import ConfigError
from grid.models.fields import join_host_port

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Endpoint:
    """One HTTP server on ``host:port`` (port 0 picks one) answering GET ``routes``."""

    def __init__(
        self, host: str, port: int, routes: dict[str, Handler], *, error: type[ConfigError]
    ) -> None:
        self._host, self._port = host, port
        self._routes = routes
        self._error = error
        self._runner: web.AppRunner | None = None

    @property
    def address(self) -> str:
        """The bound ``host:port`` (an IPv6 host in brackets)."""
        if self._runner is None or not self._runner.addresses:
            raise RuntimeError("the endpoint is not started")
        host, port = self._runner.addresses[0][:2]
        return join_host_port(host, port)

    async def start(self) -> None:
        """Listen. Raises ``error`` (the shell's configuration error) naming the address
        when it cannot be bound."""
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
            raise self._error(
                f"cannot listen on {self._host}:{self._port}: {error.strerror}"
            ) from None

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def metrics_handler(registry: CollectorRegistry) -> Handler:
    """``/metrics``: ``registry`` exposed by ``prometheus_client`` itself, in the format
    the ``Accept`` header negotiates (OpenMetrics 1.0 for Prometheus, else the text format
    0.0.4), gzipped when ``Accept-Encoding`` allows it; ``?name[]=`` keeps only the families
    named."""

    async def metrics(request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        names = request.query.getall("name[]", [])
        source = registry.restricted_registry(names) if names else registry
        body = encoder(source)
        headers = {"Content-Type": content_type, "Vary": "Accept, Accept-Encoding"}
        if gzip_accepted(request.headers.get("Accept-Encoding", "")):
            body = gzip.compress(body)
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=body, headers=headers)

    return metrics


def health_handler(check: Callable[[], tuple[bool, str]]) -> Handler:
    """``/healthz``: 200 while ``check`` says healthy, else 503, with its explanation."""

    async def healthz(request: web.Request) -> web.Response:
        healthy, detail = check()
        return web.Response(status=200 if healthy else 503, text=detail + "\n")

    return healthz
