"""Scraping Prometheus metrics over real HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import time

import pytest

from grid.models.common import SignalScales
from grid.observe import MetricSelector, OnError, SignalMapping, scrape
from support.servers import Mode, PlainTcpServer, ProviderEndpoint, closed_port

MAPPING = SignalMapping(
    queue_depth=MetricSelector(name="vllm:num_requests_waiting"),
    kv_cache_utilization=MetricSelector(name="vllm:gpu_cache_usage_perc"),
    p99_latency_ms=MetricSelector(
        name="vllm:e2e_request_latency_seconds", quantile=0.99, scale=1000
    ),
)
PESSIMISTIC = {"queue_depth": 64.0, "kv_cache_utilization": 1.0, "p99_latency_ms": 10_000.0}


@pytest.fixture
async def endpoint():
    async with ProviderEndpoint() as served:
        served.set_gauge("vllm:num_requests_waiting", 2, model_name="llama")
        served.set_gauge("vllm:num_requests_waiting", 1, model_name="qwen")
        served.set_gauge("vllm:gpu_cache_usage_perc", 0.3)
        for seconds in (0.02, 0.03, 0.04):
            served.observe("vllm:e2e_request_latency_seconds", seconds)
        yield served


def assert_fell_back(result, reason: str) -> None:
    assert not result.ok
    assert result.error == reason
    neutral = result.signals(MAPPING)
    assert (neutral.queue_depth, neutral.kv_cache_utilization, neutral.p99_latency_ms) == (
        None,
        None,
        None,
    )
    assert neutral.reasons[0] == f"metrics scrape failed: {reason}"
    pessimistic = result.signals(MAPPING, OnError.PESSIMISTIC, scales=SignalScales())
    for name, value in PESSIMISTIC.items():
        assert getattr(pessimistic, name) == value


async def test_a_scrape_reads_the_signals(endpoint: ProviderEndpoint) -> None:
    result = await scrape(endpoint.metrics_url)
    assert result.ok and result.status == 200
    signals = result.signals(MAPPING)
    assert signals.queue_depth == 3
    assert signals.kv_cache_utilization == 0.3
    # three requests in the (0.025, 0.05] and (0.01, 0.025] buckets of the default layout
    assert 25 < (signals.p99_latency_ms or 0) <= 50
    assert signals.reasons == ()
    path, headers = endpoint.requests[-1]
    assert path == "/metrics"
    assert headers["Accept"].startswith("text/plain")


async def test_changes_at_the_endpoint_show_in_the_next_scrape(endpoint: ProviderEndpoint) -> None:
    first = (await scrape(endpoint.metrics_url)).signals(MAPPING)
    endpoint.set_gauge("vllm:num_requests_waiting", 40, model_name="llama")
    endpoint.set_gauge("vllm:gpu_cache_usage_perc", 0.95)
    for _ in range(200):
        endpoint.observe("vllm:e2e_request_latency_seconds", 2.0)
    second = (await scrape(endpoint.metrics_url)).signals(MAPPING, previous=first)
    assert second.queue_depth == 41
    assert second.kv_cache_utilization == 0.95
    # only the 200 slow requests are in the window: P99 inside (1, 2.5] seconds
    assert 1000 < (second.p99_latency_ms or 0) <= 2500


async def test_an_http_error_status_falls_back(endpoint: ProviderEndpoint) -> None:
    endpoint.metrics_mode = Mode.ERROR
    result = await scrape(endpoint.metrics_url)
    assert result.status == 500
    assert_fell_back(result, "HTTP status 500")


async def test_a_hanging_endpoint_times_out(endpoint: ProviderEndpoint) -> None:
    endpoint.metrics_mode = Mode.HANG
    started = time.perf_counter()
    result = await scrape(endpoint.metrics_url, timeout=0.3)
    assert time.perf_counter() - started < 1.5
    assert_fell_back(result, "no complete response within 0.3s")


async def test_reading_stops_at_the_body_cap(endpoint: ProviderEndpoint) -> None:
    endpoint.metrics_mode = Mode.OVERSIZED
    endpoint.oversized_bytes = 256 * 1024 * 1024
    result = await scrape(endpoint.metrics_url, max_body_bytes=100_000)
    assert_fell_back(result, "the response body exceeds 100000 bytes")
    for _ in range(100):  # the server notices the hang-up on its next write
        if endpoint.oversized_sent:
            break
        await asyncio.sleep(0.02)
    assert endpoint.oversized_sent
    assert endpoint.oversized_sent[0] < endpoint.oversized_bytes / 4


async def test_a_body_exactly_at_the_cap_is_read(endpoint: ProviderEndpoint) -> None:
    size = len((await scrape(endpoint.metrics_url)).text or "")
    assert (await scrape(endpoint.metrics_url, max_body_bytes=size)).ok
    assert not (await scrape(endpoint.metrics_url, max_body_bytes=size - 1)).ok


async def test_garbage_parses_to_fallbacks_with_a_reason(endpoint: ProviderEndpoint) -> None:
    endpoint.metrics_mode = Mode.GARBAGE
    result = await scrape(endpoint.metrics_url)
    assert result.ok
    signals = result.signals(MAPPING, OnError.PESSIMISTIC)
    assert signals.reasons[0] == "the metrics text is not valid Prometheus exposition format"
    assert signals.queue_depth == 64.0


async def test_a_body_that_is_not_utf8_falls_back(endpoint: ProviderEndpoint) -> None:
    endpoint.metrics_mode = Mode.NOT_UTF8
    assert_fell_back(await scrape(endpoint.metrics_url), "the metrics body is not UTF-8")


async def test_bad_values_give_per_signal_reasons(endpoint: ProviderEndpoint) -> None:
    endpoint.set_gauge("vllm:num_requests_waiting", -1, model_name="llama")
    endpoint.set_gauge("vllm:gpu_cache_usage_perc", float("nan"))
    signals = (await scrape(endpoint.metrics_url)).signals(MAPPING)
    assert signals.queue_depth is None
    assert signals.kv_cache_utilization is None
    assert signals.p99_latency_ms is not None
    assert [reason.split(":")[0] for reason in signals.reasons] == [
        "queue_depth",
        "kv_cache_utilization",
    ]


async def test_an_unreachable_endpoint_falls_back() -> None:
    assert_fell_back(
        await scrape(f"http://127.0.0.1:{closed_port()}/metrics"), "connection refused"
    )


async def test_a_peer_that_is_not_http_falls_back() -> None:
    async with PlainTcpServer(b"\x00\x01\x02 binary junk\r\n\r\n") as server:
        result = await scrape(server.url)
    assert_fell_back(result, "the server's reply is not valid HTTP")


async def test_a_connection_dropped_mid_reply_falls_back() -> None:
    async with PlainTcpServer(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nup 1\n") as server:
        result = await scrape(server.url)
    assert not result.ok
    assert result.error in {
        "the response body was cut short or wrongly encoded",
        "the server closed the connection without a complete response",
    }


def test_an_endpoint_on_its_own_thread_serves_code_with_its_own_loop() -> None:
    endpoint = ProviderEndpoint()
    endpoint.set_gauge("vllm:num_requests_waiting", 7)
    with endpoint.serve_in_thread():
        result = asyncio.run(scrape(endpoint.metrics_url))
        endpoint.set_gauge("vllm:num_requests_waiting", 9)
        again = asyncio.run(scrape(endpoint.metrics_url))
    assert result.signals(MAPPING).queue_depth == 7
    assert again.signals(MAPPING).queue_depth == 9
