"""Canary: a bearer token sent to or echoed by a provider never shows in what observe returns."""

from __future__ import annotations

import uuid

import pytest

from grid.observe import (
    MetricSelector,
    OnError,
    SignalMapping,
    check_health,
    extract_signals,
    scrape,
)
from support.canary import Canaries
from support.servers import Mode, PlainTcpServer, ProviderEndpoint, closed_port

TOKEN = f"grid-canary-{uuid.uuid4().hex}"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MAPPING = SignalMapping(
    queue_depth=MetricSelector(name="queue"),
    p99_latency_ms=MetricSelector(name="lat_seconds", quantile=0.99, scale=1000),
    healthy=MetricSelector(name="up"),
)


CANARIES = Canaries([TOKEN.encode()])


def assert_unquoted(*outcomes: object) -> None:
    CANARIES.assert_absent("\n".join(repr(outcome) for outcome in outcomes), "an outcome")


@pytest.mark.parametrize("mode", list(Mode))
async def test_no_failure_mode_echoes_the_token(mode: Mode) -> None:
    async with ProviderEndpoint() as endpoint:
        endpoint.set_gauge("queue", 1, tenant=TOKEN)
        endpoint.garbage_body = f"Authorization: Bearer {TOKEN} {{{{ not metrics\n".encode()
        endpoint.health_mode = endpoint.metrics_mode = mode
        # Only the hanging endpoint needs the timeout to fire; the others get time enough to
        # answer on a loaded machine.
        timeout = 0.3 if mode is Mode.HANG else 10.0
        health = await check_health(endpoint.health_url, headers=AUTH, timeout=timeout)
        result = await scrape(
            endpoint.metrics_url, headers=AUTH, timeout=timeout, max_body_bytes=4096
        )
        received = [headers.get("Authorization") for _, headers in endpoint.requests]
    assert received == [AUTH["Authorization"]] * 2  # the token really was in play
    for on_error in OnError:
        signals = result.signals(MAPPING, on_error)
        assert_unquoted(health, result, signals, *signals.reasons)


async def test_tokens_in_urls_are_never_quoted() -> None:
    port = closed_port()
    for url in (
        f"http://127.0.0.1:{port}/metrics?access_token={TOKEN}",
        f"http://user:{TOKEN}@127.0.0.1:{port}/metrics",
        f"gopher://{TOKEN}/",
        TOKEN,
    ):
        health = await check_health(url, headers=AUTH)
        result = await scrape(url, headers=AUTH)
        assert health.reason and result.error
        assert_unquoted(health, result, result.signals(MAPPING))


async def test_a_peer_echoing_the_token_is_not_quoted() -> None:
    echo = f"HTTP/1.1 {TOKEN}\r\nX: {TOKEN}\r\n\r\n".encode()
    async with PlainTcpServer(echo) as server:
        health = await check_health(server.url, headers=AUTH)
        result = await scrape(server.url, headers=AUTH)
    assert_unquoted(health, result, result.signals(MAPPING))


def test_metrics_text_holding_the_token_is_never_quoted() -> None:
    texts = [
        f'# TYPE queue gauge\nqueue{{token="{TOKEN}"}} NaN\n',
        f'# TYPE queue gauge\nqueue{{token="{TOKEN}"}} -5\n',
        f"{TOKEN} not-a-number\n",
        f'lat_seconds_bucket{{le="{TOKEN}"}} 1\n',
        f'up{{x="{TOKEN}"}} 1\n',
    ]
    for text in texts:
        for on_error in OnError:
            signals = extract_signals(text, MAPPING, on_error)
            assert signals.reasons
            assert_unquoted(signals, *signals.reasons)
