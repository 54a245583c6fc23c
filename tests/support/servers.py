"""Real servers on 127.0.0.1 for tests.

- :class:`StreamServer`: what every stream server here is made of (also the fault-injecting
  proxy of ``support.faulty_api``): plain TCP or TLS (:func:`tls_server_context`), it can
  stop and listen again on the same port, and it waits for its connection handlers when it
  stops.
- :class:`TlsServer`: a TLS endpoint presenting a given certificate, optionally requiring a
  client certificate; it holds each session open until the client leaves.
- :class:`PlainTcpServer`: accepts TCP and either answers with fixed bytes (a peer that does
  not speak TLS) or says nothing at all (for timeouts).
- :func:`closed_port`: a loopback port where nothing listens.
- :class:`ProviderEndpoint`: an HTTP server with ``/healthz`` and ``/metrics`` (Prometheus
  text from a real registry). Tests set metric values at runtime and switch either path to
  fail, hang, or return garbage, non-UTF-8 or oversized bodies. It runs on the test's event
  loop (``async with``) or on its own thread (``with endpoint.serve_in_thread()``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest

from grid.trust import PemFiles

LOOPBACK = "127.0.0.1"


def closed_port() -> int:
    """A loopback port that nothing listens on (bound once, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def tls_server_context(
    certificate: PemFiles, *, client_ca_file: Path | None = None, require_client_cert: bool = False
) -> ssl.SSLContext:
    """A server's TLS context presenting ``certificate``. With ``client_ca_file`` it asks
    for a client certificate signed by that CA, and with ``require_client_cert`` it
    refuses clients without one."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate.certificate, certificate.private_key)
    if client_ca_file is not None:
        context.load_verify_locations(client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    return context


class StreamServer:
    """An asyncio stream server on 127.0.0.1, speaking TLS when given a context. It waits
    for its connection handlers when it stops, so no handler outlives the test, and listens
    again on the same port when asked to. Subclasses say how a connection is served."""

    HANDSHAKE_TIMEOUT_S = 5.0

    def __init__(self, tls: ssl.SSLContext | None) -> None:
        self._tls = tls
        self._port = 0
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        assert self._port, "server not started"
        return f"{LOOPBACK}:{self._port}"

    async def listen(self) -> None:
        """Listen: on a free port the first time, on the same port again after
        :meth:`close`."""
        if self._server is not None:
            return
        self._server = await asyncio.start_server(
            self._track,
            LOOPBACK,
            self._port,
            ssl=self._tls,
            ssl_handshake_timeout=None if self._tls is None else self.HANDSHAKE_TIMEOUT_S,
            reuse_address=True,
        )
        self._port = int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop listening and end every open connection."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await server.wait_closed()

    async def __aenter__(self) -> Self:
        await self.listen()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _track(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._serve(reader, writer)
        except (OSError, EOFError, ValueError, asyncio.CancelledError):
            pass  # the client left, sent what cannot be read, or the server stops
        finally:
            self._handlers.discard(task)
            self._hang_up(writer)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    def _hang_up(self, writer: asyncio.StreamWriter) -> None:
        """End a connection once served: what is written is sent first."""
        writer.close()


class TlsServer(StreamServer):
    """A TLS server on 127.0.0.1 presenting ``certificate``; each session stays open until
    the client leaves.

    With ``client_ca_file`` it asks for a client certificate signed by that CA, and with
    ``require_client_cert`` it refuses clients without one. ``client_names`` lists the
    common name of each accepted client certificate (``None`` for clients without one).
    """

    def __init__(
        self,
        certificate: PemFiles,
        *,
        client_ca_file: Path | None = None,
        require_client_cert: bool = False,
    ) -> None:
        super().__init__(
            tls_server_context(
                certificate,
                client_ca_file=client_ca_file,
                require_client_cert=require_client_cert,
            )
        )
        self.client_names: list[str | None] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Only sessions whose handshake completed get here.
        peer = writer.get_extra_info("peercert")
        self.client_names.append(_common_name(peer) if peer else None)
        await reader.read()


def _common_name(peercert: dict[str, Any]) -> str | None:
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


class PlainTcpServer(StreamServer):
    """A TCP server on 127.0.0.1 that answers every connection with ``reply`` and closes,
    or, with ``reply=None``, accepts and stays silent until the client leaves."""

    def __init__(self, reply: bytes | None) -> None:
        super().__init__(None)
        self._reply = reply

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._reply is None:
            await reader.read()
            return
        await reader.read(1024)
        writer.write(self._reply)
        await writer.drain()


class Mode(Enum):
    """How a :class:`ProviderEndpoint` path answers."""

    NORMAL = "normal"
    ERROR = "error"  # HTTP 500
    HANG = "hang"  # never answers (until the server stops)
    GARBAGE = "garbage"  # 200 with ``garbage_body``
    NOT_UTF8 = "not_utf8"  # 200 with bytes that are not UTF-8
    OVERSIZED = "oversized"  # 200 streaming ``oversized_bytes`` bytes


_STOPPED_WRITING = (ConnectionError, OSError, RuntimeError)


class ProviderEndpoint:
    """An inference provider's health and metrics endpoints on 127.0.0.1."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.health_mode = Mode.NORMAL
        self.metrics_mode = Mode.NORMAL
        self.health_status = 200
        self.garbage_body = b"this is { not prometheus text\n"
        self.oversized_bytes = 4 * 1024 * 1024
        # How much of each oversized body got out before the client hung up.
        self.oversized_sent: list[int] = []
        self.requests: list[tuple[str, dict[str, str]]] = []
        self._gauges: dict[str, Gauge] = {}
        self._histograms: dict[str, Histogram] = {}
        self._counters: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        self.metrics_served_at: list[float] = []
        """When (monotonic) each ``/metrics`` answer was made."""
        self._runner: web.AppRunner | None = None
        self._port = 0
        self._release: asyncio.Event | None = None

    # --- what the endpoint serves ----------------------------------------------------

    def set_gauge(self, name: str, value: float, **labels: str) -> None:
        """Set gauge ``name`` (created on first use with these label names) to ``value``."""
        gauge = self._gauges.get(name)
        if gauge is None:
            gauge = Gauge(name, f"test gauge {name}", sorted(labels), registry=self.registry)
            self._gauges[name] = gauge
        (gauge.labels(**labels) if labels else gauge).set(value)

    def observe(
        self, name: str, value: float, buckets: tuple[float, ...] = Histogram.DEFAULT_BUCKETS
    ) -> None:
        """Record ``value`` in histogram ``name`` (created on first use with ``buckets``)."""
        histogram = self._histograms.get(name)
        if histogram is None:
            histogram = Histogram(
                name, f"test histogram {name}", buckets=buckets, registry=self.registry
            )
            self._histograms[name] = histogram
        histogram.observe(value)

    def set_counter(self, name: str, value: float, **labels: str) -> None:
        """Serve counter sample ``name`` (``..._total``) with these labels at ``value``, which
        may be lower than before: an exporter that restarted."""
        self._counters.setdefault(name, {})[tuple(sorted(labels.items()))] = value

    def remove_counter(self, name: str, **labels: str) -> None:
        """Stop serving one series of counter ``name`` (as an exporter that dropped it)."""
        self._counters.get(name, {}).pop(tuple(sorted(labels.items())), None)

    def _counter_text(self) -> bytes:
        lines = []
        for name, series in sorted(self._counters.items()):
            lines.append(f"# TYPE {name.removesuffix('_total')} counter")
            for labels, value in sorted(series.items()):
                text = ",".join(f'{key}="{label}"' for key, label in labels)
                lines.append(f"{name}{{{text}}} {value!r}")
        return "".join(line + "\n" for line in lines).encode()

    @property
    def metrics_requests(self) -> int:
        """``/metrics`` requests answered or under way."""
        return sum(1 for path, _ in self.requests if path == "/metrics")

    # --- where --------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        assert self._port, "server not started"
        return f"http://{LOOPBACK}:{self._port}"

    @property
    def health_url(self) -> str:
        return f"{self.base_url}/healthz"

    @property
    def metrics_url(self) -> str:
        return f"{self.base_url}/metrics"

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        self._release = asyncio.Event()
        app = web.Application()
        app.router.add_get("/healthz", self._health)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, LOOPBACK, 0)
        await site.start()
        self._port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._release is not None:
            self._release.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @contextlib.contextmanager
    def serve_in_thread(self) -> Iterator[Self]:
        """Serve from a private event loop on a daemon thread, for synchronous tests or
        for code under test that runs its own loop."""
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="provider-endpoint", daemon=True)
        thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self.start(), loop).result(timeout=10)
            yield self
        finally:
            asyncio.run_coroutine_threadsafe(self.stop(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            loop.close()

    # --- handlers -----------------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, self.health_mode, self.health_status, b"ok\n")

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        body = generate_latest(self.registry) + self._counter_text()
        self.metrics_served_at.append(time.monotonic())
        return await self._answer(request, self.metrics_mode, 200, body)

    async def _answer(
        self, request: web.Request, mode: Mode, status: int, body: bytes
    ) -> web.StreamResponse:
        self.requests.append((request.path, dict(request.headers)))
        match mode:
            case Mode.NORMAL:
                return web.Response(status=status, body=body, content_type="text/plain")
            case Mode.ERROR:
                return web.Response(status=500, text="internal error\n")
            case Mode.HANG:
                assert self._release is not None
                await self._release.wait()
                return web.Response(status=503, text="stopping\n")
            case Mode.GARBAGE:
                return web.Response(body=self.garbage_body, content_type="text/plain")
            case Mode.NOT_UTF8:
                return web.Response(body=b"up \xff\xfe 1\n", content_type="text/plain")
            case Mode.OVERSIZED:
                return await self._stream_oversized(request)

    async def _stream_oversized(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        line = b"# padding " + b"x" * 53 + b"\n"
        chunk = line * 1024
        sent = 0
        try:
            while sent < self.oversized_bytes:
                await response.write(chunk)
                sent += len(chunk)
            await response.write_eof()
        except _STOPPED_WRITING:
            pass
        finally:
            self.oversized_sent.append(sent)
        return response
