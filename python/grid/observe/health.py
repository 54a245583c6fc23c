"""HTTP health checks of inference providers."""

from __future__ import annotations

import ssl
from collections.abc import Mapping

import aiohttp

from grid.observe._http import fetch
from grid.observe.tracker import HealthObservation

DEFAULT_HEALTH_TIMEOUT_S = 2.0


async def check_health(
    url: str,
    *,
    timeout: float = DEFAULT_HEALTH_TIMEOUT_S,
    expected_status: int = 200,
    headers: Mapping[str, str] | None = None,
    session: aiohttp.ClientSession | None = None,
    tls: ssl.SSLContext | bool = True,
    server_name: str | None = None,
) -> HealthObservation:
    """GET ``url`` and call it healthy when the status is ``expected_status``.

    The body is not read. Redirects are not followed. Unreachable hosts, timeouts, bad
    URLs and malformed replies give an unhealthy observation with a reason; nothing
    raises. Pass ``session`` to reuse connections across checks. ``server_name`` is the
    TLS server name to send and verify when it is not the URL's host.
    """
    reply = await fetch(
        url,
        timeout=timeout,
        max_body_bytes=0,
        headers=headers,
        session=session,
        tls=tls,
        server_name=server_name,
    )
    if reply.error is not None:
        return HealthObservation(False, reply.status, reply.latency_s, reply.error)
    if reply.status != expected_status:
        return HealthObservation(
            False,
            reply.status,
            reply.latency_s,
            f"HTTP status {reply.status}, expected {expected_status}",
        )
    return HealthObservation(True, reply.status, reply.latency_s)
