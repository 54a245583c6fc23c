"""One bounded HTTP request, shared by health checks and metric scrapes (GET) and token
requests (POST of a form).

Every failure becomes a short reason that names what went wrong, never the URL (it may
carry a token in its query) and never the response body.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import aiohttp

_READ_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class HttpReply:
    """What came back: ``error`` is ``None`` when a complete response (body within the
    cap) arrived, whatever its status."""

    status: int | None
    latency_s: float
    error: str | None = None
    body: bytes = field(default=b"", repr=False)


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be fetched, or ``None``."""
    try:
        parsed = urlsplit(url)
        parsed.port  # noqa: B018 - raises for a port that is not a number in range
    except ValueError:
        return "the URL is not valid"
    if parsed.scheme not in {"http", "https"}:
        return "the URL must start with http:// or https://"
    if not parsed.hostname:
        return "the URL has no host"
    if parsed.username is not None or parsed.password is not None:
        return "the URL embeds credentials (user:password@), which are not allowed"
    return None


async def fetch(
    url: str,
    *,
    timeout: float,
    max_body_bytes: int,
    headers: Mapping[str, str] | None = None,
    session: aiohttp.ClientSession | None = None,
    tls: ssl.SSLContext | bool = True,
    server_name: str | None = None,
    form: Mapping[str, str] | None = None,
) -> HttpReply:
    """GET ``url`` (POST ``form``, URL-encoded, when given) within ``timeout`` seconds,
    reading at most ``max_body_bytes`` of body (0: the body is not read). Redirects are not
    followed: a 3xx is reported as it is. Never raises for network or protocol trouble."""
    problem = url_problem(url)
    if problem is not None:
        return HttpReply(status=None, latency_s=0.0, error=problem)
    started = time.perf_counter()
    try:
        async with asyncio.timeout(timeout), contextlib.AsyncExitStack() as stack:
            if session is None:
                session = await stack.enter_async_context(aiohttp.ClientSession())
            return await _request(
                session,
                url,
                max_body_bytes=max_body_bytes,
                headers=headers,
                tls=tls,
                server_name=server_name,
                form=form,
                started=started,
            )
    except TimeoutError:
        error = f"no complete response within {timeout:g}s"
    except aiohttp.ClientError as exc:
        error = describe_client_error(exc)
    return HttpReply(status=None, latency_s=time.perf_counter() - started, error=error)


async def _request(
    session: aiohttp.ClientSession,
    url: str,
    *,
    max_body_bytes: int,
    headers: Mapping[str, str] | None,
    tls: ssl.SSLContext | bool,
    server_name: str | None,
    form: Mapping[str, str] | None,
    started: float,
) -> HttpReply:
    async with session.request(
        "GET" if form is None else "POST",
        url,
        headers=headers,
        data=None if form is None else dict(form),
        allow_redirects=False,
        ssl=tls,
        server_hostname=server_name,
    ) as response:
        body = bytearray()
        while max_body_bytes > 0:
            chunk = await response.content.read(min(_READ_CHUNK, max_body_bytes + 1 - len(body)))
            if not chunk:
                break
            body += chunk
            if len(body) > max_body_bytes:
                # Stop reading here; closing drops the connection and the rest of the body.
                response.close()
                return HttpReply(
                    status=response.status,
                    latency_s=time.perf_counter() - started,
                    error=f"the response body exceeds {max_body_bytes} bytes",
                )
        return HttpReply(
            status=response.status, latency_s=time.perf_counter() - started, body=bytes(body)
        )


def describe_client_error(exc: aiohttp.ClientError) -> str:
    """A short, secret-free sentence for an aiohttp failure."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return "the server's TLS certificate was not accepted"
    if isinstance(exc, aiohttp.ClientSSLError):
        return "the TLS handshake failed"
    if isinstance(exc, aiohttp.ClientConnectorError):
        if isinstance(exc.os_error, ConnectionRefusedError):
            return "connection refused"
        return f"cannot connect: {exc.os_error.strerror or type(exc.os_error).__name__}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection without a complete response"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "the response body was cut short or wrongly encoded"
    if isinstance(exc, aiohttp.ClientResponseError):
        return "the server's reply is not valid HTTP"
    if isinstance(exc, aiohttp.ClientOSError):
        return f"connection failed: {exc.strerror or type(exc).__name__}"
    return f"the HTTP request failed ({type(exc).__name__})"
