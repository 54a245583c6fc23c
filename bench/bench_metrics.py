"""Size and render time of the agent's ``/metrics`` at 100 members and 1,000 candidates.

The state is built with real engines, as gossip would leave it: 100 peer sites, each with
10 providers, publish their items; one viewing site receives them, sees every peer alive
and trusted, and renders one gateway's overlay of 1,000 candidates. Its SWIM node is a
stand-in returning every statistic a real node reports; its health checks, scrapes and
probes have observed durations.

Measured over repeated scrapes, as medians: the body size (text format, gzipped, and
OpenMetrics) and the time to answer a scrape through the ``/metrics`` handler (collect
and encode; with gzip). Baseline, in the same run: the hand-written exposition of the
commit before issue 15 (its ``NetworkGauges`` and ``AgentCollector``, loaded from git and
encoded with ``generate_latest`` as its handler did) over the same state; without git
the figures are absolute.

Run: .venv/bin/python bench/bench_metrics.py [--rounds 41] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import hashlib
import json
import logging
import statistics
import subprocess
import sys
import time
import types
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from aiohttp.test_utils import make_mocked_request
from prometheus_client import CollectorRegistry, generate_latest

from grid.agent.http import agent_collector
from grid.engine import SiteEngine
from grid.membership import Member
from grid.models import GridNetwork, GridSite, InferenceProvider, load_resource
from grid.runtime.http import metrics_handler
from grid.runtime.metrics import SWIM_STATS, ObservationDurations
from grid.runtime.notices import Notices
from grid.runtime.swim import SwimDriver
from grid.trust.site import ProbeResult

REPO = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
NETWORK = "mesh"
GATEWAY = ("grid-system", "edge-gateway")
PEERS = 100
PROVIDERS_PER_PEER = 10
VIEWER = "site-000"
OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def pin(site: str) -> str:
    return hashlib.sha256(site.encode()).hexdigest()


def network() -> GridNetwork:
    resource = load_resource(
        {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "GridNetwork",
            "metadata": {"name": NETWORK},
            "spec": {
                "gridId": "bench",
                "gatewayRefs": [{"name": GATEWAY[1], "namespace": GATEWAY[0]}],
                "staleCandidateTtlSeconds": 3600,
            },
        }
    )
    assert isinstance(resource, GridNetwork)
    return resource


def site(index: int) -> GridSite:
    name = f"site-{index:03d}"
    resource = load_resource(
        {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "GridSite",
            "metadata": {"name": name, "labels": {"grid.praxis-proxy.io/site": name}},
            "spec": {
                "gridNetworkRef": NETWORK,
                "egress": {"address": f"{name}.bench:8443", "tlsMode": "mutual_tls"},
                "region": f"region-{index % 4}",
                "zone": f"zone-{index % 12}",
                "trust": {"certFingerprint": pin(name)},
            },
        }
    )
    assert isinstance(resource, GridSite)
    return resource


def provider(site_name: str, index: int) -> InferenceProvider:
    resource = load_resource(
        {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "InferenceProvider",
            "metadata": {"name": f"{site_name}-p{index}"},
            "spec": {
                "gridNetworkRef": NETWORK,
                "backendKind": "local",
                "providerKind": "self_hosted",
                "models": [{"name": f"model-{index}"}],
                "endpoint": f"http://{site_name}-p{index}.bench:8000",
                "cost": {"inputPerMillion": "0.10", "outputPerMillion": "0.20"},
                "siteSelector": {"matchLabels": {"grid.praxis-proxy.io/site": site_name}},
            },
        }
    )
    assert isinstance(resource, InferenceProvider)
    return resource


def build_viewer(peers: int = PEERS) -> SiteEngine:
    """The viewing site's engine after gossip: ``peers`` members (100 by default),
    ``PROVIDERS_PER_PEER`` candidates each, every peer alive and trusted."""
    sites = [site(index) for index in range(peers + 1)]
    viewer = SiteEngine(network(), VIEWER, sites=sites)
    viewer.set_membership_running(True)
    for index in range(1, peers + 1):
        name = f"site-{index:03d}"
        providers = [provider(name, p) for p in range(PROVIDERS_PER_PEER)]
        peer = SiteEngine(network(), name, sites=sites, providers=providers)
        peer.set_membership_running(True)
        for item in peer.refresh(NOW).items:
            viewer.receive_item(name, item.lane, item.key, item.version, item.payload, NOW)
        viewer.member_up(name, f"10.0.{index // 250}.{index % 250}:7946", 1, NOW)
        viewer.observe_probe(name, ProbeResult(True, pin(name), None, 0.004), NOW)
    viewer.refresh(NOW)
    # Past the render interval: this refresh ranks with every peer trusted.
    viewer.refresh(NOW + timedelta(seconds=1))
    overlay = viewer.overlays[GATEWAY].overlay
    assert overlay is not None, viewer.overlays[GATEWAY].message
    assert len(overlay.candidates) == peers * PROVIDERS_PER_PEER, len(overlay.candidates)
    assert len(viewer.trusted_sites) == peers
    return viewer


class StandInNode:
    """What the collectors read of a running SWIM node."""

    running = True

    def stats(self) -> dict[str, int]:
        return {stat: 1000 + index for index, stat in enumerate(SWIM_STATS)}

    def key_ids(self) -> list[str]:
        return ["k-1"]

    def members(self) -> list[Member]:
        """Every peer alive, speaking protocol 2 (as ``grid_swim_peers_by_protocol``
        reads them)."""
        return [
            Member(f"site-{index:03d}", f"10.0.0.{index}:7946", "alive", 1, protocol=2)
            for index in range(1, PEERS + 1)
        ]


def fake_agent(engine: SiteEngine) -> Any:
    log = logging.getLogger("bench")
    driver = SwimDriver(Notices(log, "bench"), log, lambda: engine, lambda: None)
    driver.node = StandInNode()  # type: ignore[assignment]
    driver.published.update({"state": 10_000, "gateway": 10, "cert": 2, "metadata": 1})
    driver.received.update({("state", "applied"): 50_000, ("state", "unchanged"): 9_000})
    durations = ObservationDurations()
    for step in range(500):
        durations.probe.observe(("mutual_tls", "ok"), 0.002 + step * 1e-5)
    runtime = SimpleNamespace(
        engine=engine,
        swim=driver,
        node=driver.node,
        observers=SimpleNamespace(durations=durations),
        overlay_writes=Counter({GATEWAY: 12}),
        swim_error=None,
        # No provider mints tokens here: the scrape reads their expiries all the same.
        tokens=SimpleNamespace(expiries=lambda now: {}),
    )
    return SimpleNamespace(networks={NETWORK: runtime}, report=SimpleNamespace(errors=[]))


def baseline_registry(agent: Any) -> CollectorRegistry | None:
    """The hand-written exposition of the commit before issue 15, or None without git."""
    try:
        changed = subprocess.run(
            [
                "git",
                "log",
                "-1",
                "--format=%H",
                "-SNetworkGauges",
                "HEAD",
                "--",
                "python/grid/runtime",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        source = {
            path: subprocess.run(
                ["git", "show", f"{changed}^:{path}"],
                cwd=REPO,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            for path in ("python/grid/runtime/metrics.py", "python/grid/agent/http.py")
        }
    except (OSError, subprocess.CalledProcessError):
        return None
    if not changed or "class AgentCollector" not in source["python/grid/agent/http.py"]:
        return None
    old_metrics = types.ModuleType("grid_old_metrics")
    exec(source["python/grid/runtime/metrics.py"], old_metrics.__dict__)
    old_http = types.ModuleType("grid_old_agent_http")
    saved = sys.modules["grid.runtime.metrics"]
    sys.modules["grid.runtime.metrics"] = old_metrics
    try:
        exec(source["python/grid/agent/http.py"], old_http.__dict__)
    finally:
        sys.modules["grid.runtime.metrics"] = saved
    registry = CollectorRegistry()
    registry.register(old_http.AgentCollector(agent))
    return registry


def median(samples: list[float]) -> float:
    return statistics.median(samples)


Answer = Callable[[str, str], Awaitable[bytes]]
MODES = {
    "text": ("", "identity"),
    "text+gzip": ("", "gzip"),
    "openmetrics": (OPENMETRICS, "identity"),
}


async def measure(
    answers: dict[str, tuple[Answer, tuple[str, ...]]], rounds: int
) -> dict[str, dict[str, tuple[float, float]]]:
    """(median size in bytes, median time in ms) of each answer in each of its modes. The
    answers take turns within every round, so that a busy machine slows them alike."""
    sizes: dict[tuple[str, str], list[float]] = {}
    times: dict[tuple[str, str], list[float]] = {}
    for round_ in range(rounds + 1):
        for name, (answer, modes) in answers.items():
            for mode in modes:
                accept, encoding = MODES[mode]
                started = time.perf_counter()
                body = await answer(accept, encoding)
                elapsed = (time.perf_counter() - started) * 1000
                if round_:  # the first round warms up
                    times.setdefault((name, mode), []).append(elapsed)
                    sizes.setdefault((name, mode), []).append(float(len(body)))
    return {
        name: {mode: (median(sizes[name, mode]), median(times[name, mode])) for mode in modes}
        for name, (_, modes) in answers.items()
    }


def handler_answer(registry: CollectorRegistry) -> Callable[[str, str], Awaitable[bytes]]:
    """The ``/metrics`` handler itself, with requests made beforehand."""
    handler = metrics_handler(registry)
    requests = {
        (accept, encoding): make_mocked_request(
            "GET", "/metrics", headers={"Accept": accept, "Accept-Encoding": encoding}
        )
        for accept, encoding in MODES.values()
    }

    async def answer(accept: str, encoding: str) -> bytes:
        response = await handler(requests[accept, encoding])
        body = response.body
        assert isinstance(body, bytes)
        return body

    return answer


def old_answer(registry: CollectorRegistry) -> Callable[[str, str], Awaitable[bytes]]:
    """The old handler: the text format whatever is asked, never compressed."""

    async def answer(accept: str, encoding: str) -> bytes:
        return generate_latest(registry)

    return answer


def samples(text: bytes) -> int:
    return sum(1 for line in text.decode().splitlines() if line and not line.startswith("#"))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--json", action="store_true", help="print the medians (ms) as JSON")
    args = parser.parse_args()

    started = time.perf_counter()
    engine = build_viewer()
    agent = fake_agent(engine)
    registry = CollectorRegistry()
    registry.register(agent_collector(agent))
    answers = {"new": (handler_answer(registry), tuple(MODES))}
    if args.json:
        results = await measure(answers, args.rounds)
        figures = {f"{mode}_ms": ms for mode, (_, ms) in results["new"].items()}
        print(json.dumps({"figures": figures}))
        return
    print(
        f"state: {len(engine.members)} members, {len(engine.trusted_sites)} trusted, "
        f"{len(engine.overlays[GATEWAY].overlay.candidates)} candidates, "  # type: ignore[union-attr]
        f"{len(engine.statuses())} resources (built in {time.perf_counter() - started:.1f} s)"
    )
    old_registry = baseline_registry(agent)
    if old_registry is not None:
        answers["old"] = (old_answer(old_registry), ("text",))
    results = await measure(answers, args.rounds)
    print(f"new: {samples(generate_latest(registry))} samples")
    for label, (size, ms) in results["new"].items():
        print(f"  {label:<12} {size / 1024:8.1f} KiB  {ms:7.2f} ms")
    if old_registry is None:
        print("baseline: the old exposition is not in git here; figures above are absolute")
        return
    old_text = generate_latest(old_registry)
    print(f"old (hand-written families, generate_latest): {samples(old_text)} samples")
    size, ms = results["old"]["text"]
    print(f"  {'text':<12} {size / 1024:8.1f} KiB  {ms:7.2f} ms")
    print(f"  {'(gzipped)':<12} {len(gzip.compress(old_text)) / 1024:8.1f} KiB  (never served)")
    new_size, new_ms = results["new"]["text"]
    print(f"ratio new/old, text: size {new_size / size:.2f}x, time {new_ms / ms:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
