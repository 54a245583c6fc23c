"""A stand-in inference provider for the demo: real HTTP on 127.0.0.1 serving ``/health``
and Prometheus ``/metrics`` (vLLM's metric names, from a real ``prometheus_client``
registry), whose load the demo changes while the mesh runs."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest

LOOPBACK = "127.0.0.1"
QUEUE_METRIC = "vllm:num_requests_waiting"
KV_METRIC = "vllm:gpu_cache_usage_perc"
PREFIX_METRIC = "vllm:gpu_prefix_cache_hit_rate"
LATENCY_METRIC = "vllm:e2e_request_latency_p99_seconds"


class DemoProvider:
    """One provider's health and metrics endpoints."""

    def __init__(
        self,
        *,
        queue_depth: float,
        kv_cache_utilization: float,
        prefix_cache_hit_ratio: float,
        p99_latency_s: float,
    ) -> None:
        self.registry = CollectorRegistry()
        self._queue = Gauge(QUEUE_METRIC, "Requests waiting.", registry=self.registry)
        self._kv = Gauge(KV_METRIC, "KV cache usage (0-1).", registry=self.registry)
        self._prefix = Gauge(PREFIX_METRIC, "Prefix cache hit rate.", registry=self.registry)
        self._latency = Gauge(LATENCY_METRIC, "P99 request latency.", registry=self.registry)
        self.healthy = True
        self.set_load(
            queue_depth=queue_depth,
            kv_cache_utilization=kv_cache_utilization,
            prefix_cache_hit_ratio=prefix_cache_hit_ratio,
            p99_latency_s=p99_latency_s,
        )
        self._runner: web.AppRunner | None = None
        self._port = 0

    def set_load(
        self,
        *,
        queue_depth: float | None = None,
        kv_cache_utilization: float | None = None,
        prefix_cache_hit_ratio: float | None = None,
        p99_latency_s: float | None = None,
    ) -> None:
        """Change what ``/metrics`` reports (``None`` leaves a value as it is)."""
        for gauge, value in (
            (self._queue, queue_depth),
            (self._kv, kv_cache_utilization),
            (self._prefix, prefix_cache_hit_ratio),
            (self._latency, p99_latency_s),
        ):
            if value is not None:
                gauge.set(value)

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("the provider endpoint is not started")
        return self._port

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, LOOPBACK, 0).start()
        self._port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _health(self, request: web.Request) -> web.Response:
        if not self.healthy:
            return web.Response(status=503, text="unhealthy\n")
        return web.Response(text="ok\n")

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )
