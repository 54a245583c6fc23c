"""Coalesced rendering: the engine re-renders only when an input changed, at most once per
``spec.renderInterval``, and a change that arrives within the interval is rendered when it
ends (never lost). Unit tests with an explicit ``now``, and one agent end to end."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from grid.agent import Agent
from grid.demo import DemoProvider
from grid.demo.endpoints import QUEUE_METRIC
from grid.engine import SiteEngine
from grid.errors import InvalidResourceError
from grid.models import load_resource
from test_agent import NETWORK, SITE, SITE_YAML, Lab, eventually
from test_engine import (
    GATEWAY,
    T0,
    connect,
    engine,
    exchange,
    network,
    overlay_of,
    provider,
    scrape,
)

INTERVAL = timedelta(seconds=1)


class Renders:
    """Counts the renders of an engine: each one ranks anew."""

    def __init__(self, e: SiteEngine) -> None:
        self._engine = e
        self._last = e.ranking
        self.count = 0

    def refresh(self, now: datetime) -> datetime | None:
        result = self._engine.refresh(now)
        if self._engine.ranking is not self._last:
            self._last = self._engine.ranking
            self.count += 1
        return result.next_render_at


def queue_score(e: SiteEngine, site: str) -> float:
    """The queue-depth part of the score of ``site``'s candidate in ``e``'s overlay."""
    (candidate,) = [c for c in overlay_of(e)["overlay"]["candidates"] if c["site"] == site]
    return float(candidate["score_breakdown"]["queue_depth"])


def pair(interval: str = "1s") -> tuple[SiteEngine, SiteEngine]:
    """site-a (the renderer) and site-b (one provider with metrics), connected and
    exchanged, with everything rendered at ``T0 + 1s``."""
    net = network(renderInterval=interval)
    a = engine("site-a", [provider("llama-a", "site-a")], net=net)
    b = engine("site-b", [provider("llama-b", "site-b", metrics=True)], net=net)
    connect([a, b], T0)
    b.observe_scrape("llama-b", scrape(queue=0, kv=0.1), T0)
    exchange([a, b], T0)
    a.refresh(T0 + INTERVAL)
    assert [c["site"] for c in overlay_of(a)["overlay"]["candidates"]].count("site-b") == 1
    return a, b


def deliver(a: SiteEngine, b: SiteEngine, queue: float, now: datetime) -> int:
    """site-b's provider reports ``queue`` requests waiting; its new items reach site-a.
    Returns how many items travelled."""
    b.observe_scrape("llama-b", scrape(queue=queue, kv=0.1), now)
    items = b.refresh(now).items
    for item in items:
        a.receive_item("site-b", item.lane, item.key, item.version, item.payload, now)
    return len(items)


def test_a_change_after_a_quiet_interval_is_rendered_at_once() -> None:
    a, b = pair()
    renders = Renders(a)
    start = T0 + timedelta(seconds=10)
    assert deliver(a, b, 40, start) > 0
    assert renders.refresh(start) is None
    assert renders.count == 1
    assert a.overlays[GATEWAY].rendered_at == start


def test_a_burst_of_items_within_one_interval_is_rendered_once_at_its_end() -> None:
    a, b = pair()
    renders = Renders(a)
    start = T0 + timedelta(seconds=10)
    deliver(a, b, 10, start)
    renders.refresh(start)
    first = queue_score(a, "site-b")
    for step, queue in enumerate((30, 60, 90, 120, 150), start=1):
        moment = start + timedelta(milliseconds=150 * step)
        assert deliver(a, b, queue, moment) > 0
        assert renders.refresh(moment) == start + INTERVAL
    assert renders.count == 1
    assert queue_score(a, "site-b") == first  # nothing of the burst is rendered yet
    assert renders.refresh(start + INTERVAL) is None
    assert renders.count == 2
    assert queue_score(a, "site-b") < first  # the last value of the burst is in
    assert a.overlays[GATEWAY].rendered_at == start + INTERVAL


def test_a_change_at_the_very_end_of_an_interval_is_rendered_by_the_next_refresh() -> None:
    a, b = pair()
    renders = Renders(a)
    start = T0 + timedelta(seconds=10)
    deliver(a, b, 10, start)
    renders.refresh(start)
    before = queue_score(a, "site-b")
    late = start + INTERVAL - timedelta(milliseconds=1)
    deliver(a, b, 200, late)
    assert renders.refresh(late) == start + INTERVAL
    assert renders.count == 1
    # Whenever the next refresh comes, however late, the change is rendered then.
    assert renders.refresh(start + timedelta(seconds=7)) is None
    assert renders.count == 2
    assert queue_score(a, "site-b") < before


def test_nothing_is_rendered_without_a_change() -> None:
    a, _ = pair()
    renders = Renders(a)
    revision = a.overlays[GATEWAY].revision
    for tenth in range(1, 40):
        assert renders.refresh(T0 + INTERVAL + timedelta(milliseconds=100 * tenth)) is None
    assert renders.count == 0
    assert a.overlays[GATEWAY].revision == revision


def test_an_item_already_known_changes_nothing_and_is_not_rendered() -> None:
    a, b = pair()
    renders = Renders(a)
    start = T0 + timedelta(seconds=10)
    b.observe_scrape("llama-b", scrape(queue=70, kv=0.1), start)
    items = b.refresh(start).items
    for moment in (start, start + timedelta(seconds=5)):
        for item in items:
            a.receive_item("site-b", item.lane, item.key, item.version, item.payload, moment)
        renders.refresh(moment)
    assert renders.count == 1


def test_a_zero_interval_renders_every_change() -> None:
    a, b = pair("0s")
    renders = Renders(a)
    start = T0 + timedelta(seconds=10)
    for step, queue in enumerate((30, 60, 90), start=1):
        moment = start + timedelta(milliseconds=step)
        deliver(a, b, queue, moment)
        assert renders.refresh(moment) is None
    assert renders.count == 3


def test_a_clock_that_steps_back_does_not_hold_a_change_back() -> None:
    a, b = pair()
    renders = Renders(a)
    start = T0 + timedelta(seconds=10)
    deliver(a, b, 10, start)
    renders.refresh(start)
    earlier = start - timedelta(minutes=5)
    deliver(a, b, 150, earlier)
    assert renders.refresh(earlier) is None
    assert renders.count == 2


def test_the_default_interval_is_a_quarter_second() -> None:
    document: dict[str, Any] = {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "GridNetwork",
        "metadata": {"name": "mesh"},
        "spec": {},
    }
    assert load_resource(document).spec.render_interval.seconds == 0.25  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("11s", "spec.renderInterval: must be between 0ms and 10s"),
        (5, "spec.renderInterval: must be a duration string such as 5s or 500ms"),
        ("soon", "spec.renderInterval"),
    ],
)
def test_a_bad_render_interval_is_refused_with_its_field(value: object, reason: str) -> None:
    document = {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "GridNetwork",
        "metadata": {"name": "mesh"},
        "spec": {"renderInterval": value},
    }
    with pytest.raises(InvalidResourceError) as error:
        load_resource(document)
    assert reason in str(error.value)


# --- end to end ----------------------------------------------------------------------------


@pytest.fixture
def lab(tmp_path: Path) -> Lab:
    return Lab(tmp_path)


def metrics_provider_yaml(name: str, endpoint: DemoProvider) -> str:
    return f"""\
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: InferenceProvider
metadata: {{name: {name}}}
spec:
  gridNetworkRef: {NETWORK}
  backendKind: local
  providerKind: self_hosted
  models: [{{name: llama}}]
  endpoint: {endpoint.url}
  siteSelector: {{matchLabels: {{grid.praxis-proxy.io/site: {SITE}}}}}
  metricsConfig:
    port: {endpoint.port}
    path: /metrics
    interval: 1s
    timeout: 500ms
    signals: {{queueDepth: {{metric: {QUEUE_METRIC}, aggregation: sum}}}}
"""


def overlay_queue_score(overlay: Path) -> float | None:
    if not overlay.exists():
        return None
    (candidate,) = json.loads(overlay.read_text())["overlay"]["candidates"]
    return float(candidate["score_breakdown"]["queue_depth"])


async def test_a_metric_change_reaches_the_overlay_file_promptly(lab: Lab) -> None:
    endpoint = DemoProvider(
        queue_depth=0, kv_cache_utilization=0.1, prefix_cache_hit_ratio=0.5, p99_latency_s=0.2
    )
    await endpoint.start()
    lab.write(
        "00-network.yaml",
        f"""\
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: GridNetwork
metadata: {{name: {NETWORK}}}
spec:
  gridId: lab-grid
  gatewayRefs: [{{name: {GATEWAY[1]}, namespace: {GATEWAY[0]}}}]
  renderInterval: 1s
""",
    )
    lab.write("10-site.yaml", SITE_YAML)
    lab.write("20-llama.yaml", metrics_provider_yaml("llama-a", endpoint))
    agent = Agent(lab.options(tick_s=5.0))
    await agent.start()
    try:
        await eventually("overlay written", lambda: overlay_queue_score(lab.overlay) is not None)
        idle = overlay_queue_score(lab.overlay)
        endpoint.set_load(queue_depth=400)

        def busier() -> bool:
            score = overlay_queue_score(lab.overlay)
            return score is not None and idle is not None and score < idle

        # A scrape every second, then at most one render interval (1 s): well within 15 s,
        # although the refresh tick (5 s) alone would be too slow.
        await eventually("the busier provider in the overlay file", busier, timeout=15.0)
    finally:
        await agent.stop()
        await endpoint.stop()
