"""Fetching a provider's Prometheus metrics."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

import aiohttp

from grid.models.common import SignalScales
from grid.observe._http import fetch
from grid.observe.signals import (
    OnError,
    SignalMapping,
    Signals,
    extract_signals,
    fallback_signals,
)

DEFAULT_SCRAPE_TIMEOUT_S = 5.0
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
# Ask for the classic text format, which is what the parser reads.
_ACCEPT = {"Accept": "text/plain;version=0.0.4;q=1.0, */*;q=0.1"}


@dataclass(frozen=True, slots=True)
class ScrapeResult:
    """A scrape: ``text`` holds the exposition when ``error`` is ``None``."""

    status: int | None
    latency_s: float
    error: str | None = None
    text: str | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.error is None

    def signals(
        self,
        mapping: SignalMapping,
        on_error: OnError = OnError.NEUTRAL,
        *,
        scales: SignalScales | None = None,
        previous: Signals | None = None,
    ) -> Signals:
        """The signals this scrape yields: extracted from its text, or, if it failed,
        fallbacks whose first reason says why (see :func:`extract_signals`)."""
        if self.text is None:
            return fallback_signals(
                f"metrics scrape failed: {self.error}",
                mapping,
                on_error,
                scales=scales,
                previous=previous,
            )
        return extract_signals(self.text, mapping, on_error, scales=scales, previous=previous)


async def scrape(
    url: str,
    *,
    timeout: float = DEFAULT_SCRAPE_TIMEOUT_S,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    headers: Mapping[str, str] | None = None,
    session: aiohttp.ClientSession | None = None,
    tls: ssl.SSLContext | bool = True,
    server_name: str | None = None,
) -> ScrapeResult:
    """GET the Prometheus text at ``url`` (over TLS, asking for and verifying
    ``server_name`` when given, else the URL's host).

    Reading stops at ``max_body_bytes``: a longer body is an error, as are a status other
    than 200, a body that is not UTF-8, an unreachable host and a timeout. Nothing raises.
    """
    reply = await fetch(
        url,
        timeout=timeout,
        max_body_bytes=max_body_bytes,
        headers={**_ACCEPT, **(headers or {})},
        session=session,
        tls=tls,
        server_name=server_name,
    )
    if reply.error is not None:
        return ScrapeResult(reply.status, reply.latency_s, reply.error)
    if reply.status != 200:
        return ScrapeResult(reply.status, reply.latency_s, f"HTTP status {reply.status}")
    try:
        text = reply.body.decode("utf-8")
    except UnicodeDecodeError:
        return ScrapeResult(reply.status, reply.latency_s, "the metrics body is not UTF-8")
    return ScrapeResult(reply.status, reply.latency_s, text=text)
