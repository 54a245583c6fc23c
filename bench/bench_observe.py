"""Cost of observing a provider, measured side by side with a baseline in the same run.

- Signal extraction from a vLLM-sized exposition vs. only running the Prometheus parser
  over it (the floor: extraction cannot be cheaper than parsing).
- The TLS probe (settle wait off) vs. a bare asyncio TLS connect + close to the same
  loopback server.

Run: .venv/bin/python bench/bench_observe.py
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from grid.observe import MetricSelector, SignalMapping, extract_signals
from grid.trust import build_client_context, probe_site
from support.pki import make_pki
from support.servers import TlsServer

MODELS = 8
ROUNDS = 200
PROBES = 60


def exposition() -> str:
    registry = CollectorRegistry()
    waiting = Gauge("vllm:num_requests_waiting", "w", ["model_name"], registry=registry)
    running = Gauge("vllm:num_requests_running", "r", ["model_name"], registry=registry)
    cache = Gauge("vllm:gpu_cache_usage_perc", "c", ["model_name"], registry=registry)
    buckets = [0.01 * 2**i for i in range(20)]
    latency = Histogram(
        "vllm:e2e_request_latency_seconds", "l", ["model_name"], buckets=buckets, registry=registry
    )
    ttft = Histogram(
        "vllm:time_to_first_token_seconds", "t", ["model_name"], buckets=buckets, registry=registry
    )
    for index in range(MODELS):
        model = f"model-{index}"
        waiting.labels(model).set(index)
        running.labels(model).set(index * 2)
        cache.labels(model).set(index / MODELS)
        for sample in range(50):
            latency.labels(model).observe(0.01 * (sample % 17 + 1))
            ttft.labels(model).observe(0.001 * (sample % 13 + 1))
    return generate_latest(registry).decode()


def median_us(action: Callable[[], object], rounds: int) -> float:
    timings = []
    for _ in range(rounds):
        started = time.perf_counter()
        action()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings) * 1e6


def parse_only(text: str) -> None:
    for family in text_string_to_metric_families(text):
        for _ in family.samples:
            pass


def bench_extraction() -> None:
    text = exposition()
    mapping = SignalMapping(
        queue_depth=MetricSelector(name="vllm:num_requests_waiting"),
        kv_cache_utilization=MetricSelector(name="vllm:gpu_cache_usage_perc"),
        p99_latency_ms=MetricSelector(
            name="vllm:e2e_request_latency_seconds", quantile=0.99, scale=1000
        ),
    )
    baseline, extraction = [], []
    for _ in range(5):  # interleaved, so both see the same machine load
        baseline.append(median_us(lambda: parse_only(text), ROUNDS // 5))
        extraction.append(median_us(lambda: extract_signals(text, mapping), ROUNDS // 5))
    base, ours = statistics.median(baseline), statistics.median(extraction)
    print(f"exposition: {len(text)} bytes, {MODELS} models")
    print(f"  parser only (baseline): median {base:8.0f} us")
    print(f"  extract_signals:        median {ours:8.0f} us   ratio {ours / base:.2f}x")


async def bench_probe() -> None:
    with tempfile.TemporaryDirectory() as directory:
        pki = make_pki(Path(directory), ("site-a",))
        context = build_client_context()
        async with TlsServer(pki["site-a"].files) as server:
            host, port = server.address.rsplit(":", 1)

            async def bare() -> None:
                _, writer = await asyncio.open_connection(
                    host, int(port), ssl=context, server_hostname=host
                )
                writer.close()
                await writer.wait_closed()

            async def probe() -> None:
                result = await probe_site(server.address, ssl_context=context, settle_s=0)
                assert result.ok, result.error

            baseline, probes = [], []
            for _ in range(PROBES):
                for action, timings in ((bare, baseline), (probe, probes)):
                    started = time.perf_counter()
                    await action()
                    timings.append(time.perf_counter() - started)
    base = statistics.median(baseline) * 1e3
    ours = statistics.median(probes) * 1e3
    print(f"TLS to 127.0.0.1 ({PROBES} each, interleaved)")
    print(f"  bare asyncio TLS connect (baseline): median {base:6.2f} ms")
    print(
        f"  probe_site (settle 0):               median {ours:6.2f} ms   ratio {ours / base:.2f}x"
    )


if __name__ == "__main__":
    bench_extraction()
    asyncio.run(bench_probe())
