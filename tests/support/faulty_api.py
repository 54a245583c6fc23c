"""A fault-injecting HTTP/1.1 proxy on 127.0.0.1, in front of an emulated API server.

Requests pass through to the upstream server unless an injected fault matches first:

- :class:`Answer`: the proxy answers itself (a 429 with ``Retry-After``, a 500, ...) and the
  upstream never sees the request;
- :class:`Stall`: no answer at all until the client gives up (a timeout);
- :class:`Drop`: the connection closes without an answer, either before the request is
  forwarded or after (``after_forwarding``: the upstream applied it, the answer is lost);

Each fault applies to the next ``times`` matching requests, in the order they were
injected. :meth:`FaultyApi.down` stops listening (connections are refused and open ones
closed) until :meth:`FaultyApi.up` listens again on the same port. The proxy is a
:class:`support.servers.StreamServer`, serving TLS when given a server context
(:func:`support.servers.tls_server_context`). :attr:`FaultyApi.seen` records every request
with what became of it.

Only what the operator's own client needs is proxied: plain request/response exchanges
(no watch streams).
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

import aiohttp

from support.servers import StreamServer

_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade"}
)


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b'{"kind":"Status","apiVersion":"v1","status":"Failure"}'


@dataclass(frozen=True)
class Stall:
    """No answer; the connection closes when the client leaves or the proxy stops."""


@dataclass(frozen=True)
class Drop:
    after_forwarding: bool = False


Fault = Answer | Stall | Drop
Match = Callable[[Request], bool]


@dataclass
class _Injected:
    fault: Fault
    match: Match
    times: int


@dataclass(frozen=True)
class Seen:
    """One request the proxy received: when (loop time) and what became of it."""

    method: str
    path: str
    at: float
    outcome: str  # "forwarded", "answered 429", "stalled", "dropped", "dropped after forwarding"


def matching(method: str | None = None, path_contains: str | None = None) -> Match:
    def match(request: Request) -> bool:
        return (method is None or request.method == method) and (
            path_contains is None or path_contains in request.path
        )

    return match


class FaultyApi(StreamServer):
    """``async with FaultyApi(upstream_url) as proxy``: ``proxy.url`` goes to the upstream
    through the injected faults."""

    def __init__(self, upstream: str, *, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(tls)
        self._upstream = upstream.rstrip("/")
        self._session: aiohttp.ClientSession | None = None
        self._faults: list[_Injected] = []
        self.seen: list[Seen] = []

    @property
    def url(self) -> str:
        scheme = "https" if self._tls is not None else "http"
        return f"{scheme}://{self.address}"

    def inject(self, fault: Fault, *, times: int = 1, match: Match | None = None) -> None:
        """Apply ``fault`` to the next ``times`` requests that ``match`` (default: all)."""
        self._faults.append(_Injected(fault, match or (lambda _: True), times))

    def seen_for(self, path_contains: str) -> list[Seen]:
        """The requests whose path contains ``path_contains``, in order."""
        return [seen for seen in self.seen if path_contains in seen.path]

    async def __aenter__(self) -> Self:
        self._session = aiohttp.ClientSession()
        return await super().__aenter__()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await super().__aexit__(kind, error, tb)
        if self._session is not None:
            await self._session.close()

    async def up(self) -> None:
        """Listen (again, on the same port)."""
        await self.listen()

    async def down(self) -> None:
        """Stop listening and close every open connection."""
        await self.close()

    # -- serving ----------------------------------------------------------------------------

    def _hang_up(self, writer: asyncio.StreamWriter) -> None:
        # At once, as a failing proxy does: a dropped request gets no polite TLS close, and
        # nothing still buffered is sent.
        writer.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        while True:
            request = await _read_request(reader)
            if request is None:
                return
            fault = self._take(request)
            now = loop.time()
            if isinstance(fault, Answer):
                self._saw(request, now, f"answered {fault.status}")
                reason = http.HTTPStatus(fault.status).phrase
                await _write(writer, fault.status, reason, fault.headers, fault.body)
                continue
            if isinstance(fault, Stall):
                self._saw(request, now, "stalled")
                await reader.read()  # until the client hangs up (or the proxy stops)
                return
            if isinstance(fault, Drop) and not fault.after_forwarding:
                self._saw(request, now, "dropped")
                return
            status, reason, headers, body = await self._forward(request)
            if isinstance(fault, Drop):
                self._saw(request, now, "dropped after forwarding")
                return
            self._saw(request, now, "forwarded")
            await _write(writer, status, reason, headers, body)

    def _take(self, request: Request) -> Fault | None:
        for injected in self._faults:
            if injected.times > 0 and injected.match(request):
                injected.times -= 1
                return injected.fault
        return None

    def _saw(self, request: Request, at: float, outcome: str) -> None:
        self.seen.append(Seen(request.method, request.path, at, outcome))

    async def _forward(self, request: Request) -> tuple[int, str, dict[str, str], bytes]:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        async with self._session.request(
            request.method,
            self._upstream + request.target,
            headers=headers,
            data=request.body or None,
            allow_redirects=False,
        ) as response:
            body = await response.read()
            kept = {
                key: value
                for key, value in response.headers.items()
                if key.lower() in ("content-type", "retry-after", "audit-id")
            }
            return response.status, response.reason or "", kept, body


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    line = await reader.readline()
    if not line.strip():
        return None
    method, target, _ = line.decode("latin-1").split(" ", 2)
    headers: dict[str, str] = {}
    while True:
        header = await reader.readline()
        if header in (b"\r\n", b"\n", b""):
            break
        key, _, value = header.decode("latin-1").partition(":")
        headers[key.strip()] = value.strip()
    lowered = {key.lower(): value for key, value in headers.items()}
    if lowered.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                await reader.readline()
                break
            body += await reader.readexactly(size)
            await reader.readline()
    else:
        body = await reader.readexactly(int(lowered.get("content-length", "0") or 0))
    return Request(method, target, headers, body)


async def _write(
    writer: asyncio.StreamWriter, status: int, reason: str, headers: dict[str, str], body: bytes
) -> None:
    lines = [f"HTTP/1.1 {status} {reason or 'Answer'}"]
    lines += [f"{key}: {value}" for key, value in headers.items()]
    if not any(key.lower() == "content-type" for key in headers):
        lines.append("Content-Type: application/json")
    lines.append(f"Content-Length: {len(body)}")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
    with contextlib.suppress(ConnectionError):
        await writer.drain()
