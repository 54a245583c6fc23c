"""Coalesced rendering: the engine re-renders only when an input changed, at once while
changes come less often than once per ``spec.renderInterval`` on average (with room for a
burst), and once per interval when they come faster; a change held back is rendered when its
turn comes (never lost). Unit tests with an explicit ``now``, and one agent end to end."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import grid.engine.pacing as pacing_module
from grid.agent import Agent
from grid.demo import DemoProvider
from grid.demo.endpoints import QUEUE_METRIC
from grid.engine import SiteEngine
from grid.engine.pacing import MAX_RENDER_SPACING, RENDER_BURST, RENDER_SHARE
from grid.errors import InvalidResourceError
from grid.models import load_resource
from test_agent import NETWORK, SITE, SITE_YAML, Lab, eventually, network_yaml
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


def spend_burst(a: SiteEngine, b: SiteEngine, renders: Renders, moment: datetime) -> None:
    """Changes rendered one after another at ``moment`` until the pacing holds the next
    one back: every render the burst allows is spent, the last at ``moment``."""
    for step in range(RENDER_BURST):
        assert deliver(a, b, (20, 0)[step % 2], moment) > 0
        assert renders.refresh(moment) is None
    assert renders.count == RENDER_BURST


def test_a_change_after_a_quiet_interval_is_rendered_at_once() -> None:
    a, b = pair()
    renders = Renders(a)
    start = T0 + timedelta(seconds=10)
    assert deliver(a, b, 40, start) > 0
    assert renders.refresh(start) is None
    assert renders.count == 1
    assert a.overlays[GATEWAY].rendered_at == start


def test_changes_less_often_than_once_per_interval_on_average_are_each_rendered_at_once() -> None:
    a, b = pair()
    renders = Renders(a)
    start = T0 + timedelta(seconds=10)
    # Two changes 50 ms apart every 2.5 intervals, for a minute: closer together than the
    # interval, but fewer than one per interval on average.
    moments = [
        start + pair_start + gap
        for pair_start in (INTERVAL * 2.5 * n for n in range(24))
        for gap in (timedelta(0), timedelta(milliseconds=50))
    ]
    for step, moment in enumerate(moments):
        assert deliver(a, b, (10, 300)[step % 2], moment) > 0
        assert renders.refresh(moment) is None
        assert a.overlays[GATEWAY].rendered_at == moment
    assert renders.count == len(moments)


def test_a_steady_stream_of_changes_is_rendered_once_per_interval_once_the_burst_is_spent() -> None:
    a, b = pair()
    renders = Renders(a)
    start = T0 + timedelta(seconds=10)
    step = INTERVAL / 10
    due: datetime | None = None
    held_back = 0
    for k in range(300):  # thirty intervals, ten changes in each
        moment = start + step * k
        if due is not None and due <= moment:
            assert renders.refresh(due) is None  # the shell calls at next_render_at
            due = None
        assert deliver(a, b, (10, 300)[k % 2], moment) > 0
        next_render_at = renders.refresh(moment)
        if next_render_at is not None:
            held_back += 1
            assert due is None or next_render_at == due
            due = next_render_at
    # The burst was rendered at once, then one render per interval.
    assert held_back > 0
    elapsed = step * 299 / INTERVAL
    assert RENDER_BURST + elapsed - 1 <= renders.count <= RENDER_BURST + elapsed + 1
    assert due is not None
    assert renders.refresh(due) is None
    assert queue_score(a, "site-b") == score_at_queue(a, b, 300, due)


def score_at_queue(a: SiteEngine, b: SiteEngine, queue: float, now: datetime) -> float:
    """The queue score site-b's candidate gets at ``queue`` (rendered now in a fresh pair)."""
    fresh_a, fresh_b = pair()
    deliver(fresh_a, fresh_b, queue, now)
    fresh_a.refresh(now)
    return queue_score(fresh_a, "site-b")


def test_a_burst_of_items_past_the_budget_is_rendered_once_at_the_end_of_its_interval() -> None:
    a, b = pair()
    renders = Renders(a)
    start = T0 + timedelta(seconds=10)
    spend_burst(a, b, renders, start)
    first = queue_score(a, "site-b")
    for step, queue in enumerate((30, 60, 90, 120, 150), start=1):
        moment = start + timedelta(milliseconds=150 * step)
        assert deliver(a, b, queue, moment) > 0
        assert renders.refresh(moment) == start + INTERVAL
    assert renders.count == RENDER_BURST
    assert queue_score(a, "site-b") == first  # nothing of the burst is rendered yet
    assert renders.refresh(start + INTERVAL) is None
    assert renders.count == RENDER_BURST + 1
    assert queue_score(a, "site-b") < first  # the last value of the burst is in
    assert a.overlays[GATEWAY].rendered_at == start + INTERVAL


def test_the_burst_comes_back_after_a_quiet_stretch() -> None:
    a, b = pair()
    renders = Renders(a)
    start = T0 + timedelta(seconds=10)
    spend_burst(a, b, renders, start)
    quiet = start + INTERVAL * RENDER_BURST
    for step in range(RENDER_BURST):
        assert deliver(a, b, (20, 0)[step % 2], quiet) > 0
        assert renders.refresh(quiet) is None
    assert renders.count == 2 * RENDER_BURST
    assert deliver(a, b, 900, quiet) > 0
    assert renders.refresh(quiet) == quiet + INTERVAL


def test_a_change_at_the_very_end_of_an_interval_is_rendered_by_the_next_refresh() -> None:
    a, b = pair()
    renders = Renders(a)
    start = T0 + timedelta(seconds=10)
    spend_burst(a, b, renders, start)
    before = queue_score(a, "site-b")
    late = start + INTERVAL - timedelta(milliseconds=1)
    deliver(a, b, 900, late)
    assert renders.refresh(late) == start + INTERVAL
    assert renders.count == RENDER_BURST
    # Whenever the next refresh comes, however late, the change is rendered then.
    assert renders.refresh(start + timedelta(seconds=7)) is None
    assert renders.count == RENDER_BURST + 1
    assert queue_score(a, "site-b") < before


def test_a_flush_renders_a_held_back_change_at_once() -> None:
    a, b = pair()
    renders = Renders(a)
    start = T0 + timedelta(seconds=10)
    spend_burst(a, b, renders, start)
    before = queue_score(a, "site-b")
    moment = start + timedelta(milliseconds=100)
    deliver(a, b, 900, moment)
    assert renders.refresh(moment) == start + INTERVAL
    assert a.refresh(moment, flush=True).next_render_at is None
    assert queue_score(a, "site-b") < before
    assert a.overlays[GATEWAY].rendered_at == moment
    assert renders.refresh(moment + timedelta(milliseconds=1)) is None  # nothing left


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
    spend_burst(a, b, renders, start)
    earlier = start - timedelta(minutes=5)
    deliver(a, b, 900, earlier)
    assert renders.refresh(earlier) is None
    assert renders.count == RENDER_BURST + 1


def steady_stream(a: SiteEngine, b: SiteEngine, start: datetime, seconds: int) -> int:
    """Ten changes a second for ``seconds``, the shell refreshing at every change and at
    each ``next_render_at`` (the last one too); returns the renders made."""
    renders = Renders(a)
    due: datetime | None = None
    for k in range(seconds * 10):
        moment = start + timedelta(milliseconds=100 * k)
        if due is not None and due <= moment:
            renders.refresh(due)
            due = None
        deliver(a, b, (10, 300)[k % 2], moment)
        due = renders.refresh(moment) or due
    if due is not None:
        renders.refresh(due)
    return renders.count


def test_a_costly_render_stretches_the_spacing_up_to_a_second() -> None:
    a, b = pair("250ms")
    assert a.render_spacing == timedelta(milliseconds=250)
    a.note_render_cost(0.005)  # 5 ms: 2 % of the interval, nothing to stretch
    assert a.render_spacing == timedelta(milliseconds=250)
    a, b = pair("250ms")
    a.note_render_cost(0.025)  # 25 ms: renders every 250 ms would take 10 % of a core
    assert a.render_spacing == timedelta(seconds=0.025 / RENDER_SHARE)
    assert timedelta(milliseconds=250) < a.render_spacing < MAX_RENDER_SPACING
    a.note_render_cost(1.0)  # running cost 0.3175 s: stretched as far as allowed
    assert a.render_spacing == MAX_RENDER_SPACING
    # Under a steady stream, one render per (stretched) spacing once the burst is spent.
    start = T0 + timedelta(seconds=10)
    renders = steady_stream(a, b, start, 60)
    assert RENDER_BURST + 59 <= renders <= RENDER_BURST + 62
    # The change last taken in still reaches the overlay within the spacing.
    assert queue_score(a, "site-b") == score_at_queue(a, b, 300, start)


def test_a_spacing_that_wavers_with_the_cost_of_passes_keeps_the_rate() -> None:
    """Passes cost a little more, then a little less: the spacing shrinks and grows from
    one render to the next, and renders stay within one per (shortest) spacing once the
    burst is spent, and no change waits longer than one (longest) spacing. A shrinking
    spacing used to pass for a clock gone back, giving the whole burst back every time;
    then it put the next render off by the burst's length times the shrink (4 to 5 s at
    a site of a 100 x 100 mesh, rendering once a second)."""
    a, b = pair("250ms")
    renders = Renders(a)
    start = T0 + timedelta(seconds=10)
    due: datetime | None = None
    costs = (0.030, 0.020, 0.045, 0.015)
    spacings = set()
    waiting: datetime | None = None  # the oldest change not rendered yet
    waits = []
    for k in range(600):  # a minute, ten changes a second
        moment = start + timedelta(milliseconds=100 * k)
        for when in ([due] if due is not None and due <= moment else []) + [moment]:
            if when is moment:
                deliver(a, b, (10, 300)[k % 2], moment)
                waiting = waiting or moment
            before = renders.count
            next_render_at = renders.refresh(when)
            if renders.count > before:
                a.note_render_cost(costs[renders.count % len(costs)])
                spacings.add(a.render_spacing)
                if waiting is not None:
                    waits.append(when - waiting)
                waiting = None
            if when is due:
                due = None
            due = next_render_at or due
    shortest, longest = min(spacings), max(spacings)
    assert longest > shortest  # the spacing did waver
    assert renders.count <= RENDER_BURST + timedelta(seconds=60) / shortest + 1
    assert max(waits) <= longest


def test_the_running_cost_follows_the_passes_and_a_single_slow_one_does_not_dominate() -> None:
    a, _ = pair("250ms")
    a.note_render_cost(0.008)
    a.note_render_cost(0.032)  # one slow pass: alone it would mean 800 ms
    assert timedelta(milliseconds=250) < a.render_spacing < timedelta(milliseconds=450)
    for _ in range(20):
        a.note_render_cost(0.008)
    assert a.render_spacing == timedelta(milliseconds=250)
    with pytest.raises(ValueError, match="seconds >= 0"):
        a.note_render_cost(-1.0)


@pytest.mark.parametrize("interval", ["0s", "2s"])
def test_a_zero_interval_or_one_past_the_stretch_is_never_stretched(interval: str) -> None:
    a, _ = pair(interval)
    a.note_render_cost(0.5)
    assert a.render_spacing == timedelta(seconds=float(interval[:-1]))


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
    lab.write("00-network.yaml", network_yaml(render_interval="1s"))
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


@pytest.mark.parametrize("leave", [True, False], ids=["graceful", "crash"])
async def test_a_graceful_stop_renders_a_change_still_held_back(
    lab: Lab, monkeypatch: pytest.MonkeyPatch, leave: bool
) -> None:
    # A burst of two: the first render (before any scrape) and the idle load's spend it,
    # and the next change waits for the 10 s interval to end.
    monkeypatch.setattr(pacing_module, "RENDER_BURST", 2)
    endpoint = DemoProvider(
        queue_depth=0, kv_cache_utilization=0.1, prefix_cache_hit_ratio=0.5, p99_latency_s=0.2
    )
    await endpoint.start()
    lab.write("00-network.yaml", network_yaml(render_interval="10s"))
    lab.write("10-site.yaml", SITE_YAML)
    lab.write("20-llama.yaml", metrics_provider_yaml("llama-a", endpoint))
    agent = Agent(lab.options())
    await agent.start()
    try:
        e = agent.networks[NETWORK].engine

        def published_queue() -> float | None:
            entry = e.state.provider(SITE, "llama-a")
            return None if entry is None else entry.record.metrics.queue_depth

        def idle_rendered() -> bool:
            score = overlay_queue_score(lab.overlay)
            return score is not None and score > 0

        await eventually("the idle load in the overlay file", idle_rendered, timeout=25.0)
        held = overlay_queue_score(lab.overlay)
        endpoint.set_load(queue_depth=400)
        # Taken in and published, but not rendered: the interval (10 s) is far from over.
        await eventually("the busy load published", lambda: published_queue() == 400)
        assert overlay_queue_score(lab.overlay) == held
    finally:
        await agent.stop(leave=leave)
        await endpoint.stop()
    # A graceful stop leaves the overlay with the last inputs; a crash leaves it as it was.
    assert overlay_queue_score(lab.overlay) == (0.0 if leave else held)


async def test_received_items_alone_take_no_pass_before_their_render_is_due(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A burst of one: the first render spends it, and the next change waits 2 s.
    monkeypatch.setattr(pacing_module, "RENDER_BURST", 1)
    lab.write("00-network.yaml", network_yaml(render_interval="2s"))
    lab.write("10-site.yaml", SITE_YAML)
    # Nothing else wakes the loop meanwhile: no providers, slow ticks, probes and reloads.
    agent = Agent(lab.options(tick_s=30.0, probe_interval_s=60.0, reload_interval_s=60.0))
    await agent.start()
    try:
        runtime = agent.networks[NETWORK]
        e = runtime.engine
        await eventually("the first render", lambda: e.ranking is not None)
        passes: list[float] = []
        take_pass = runtime._refresh

        def counted(*, final: bool = False) -> float | None:
            passes.append(time.monotonic())
            return take_pass(final=final)

        monkeypatch.setattr(runtime, "_refresh", counted)
        # A change the engine took in (as a received item's is), and its render held back.
        now = datetime.now(UTC)
        e.member_up("peer-x", "192.0.2.9:7946", 1, now)
        due = e.render_due_at(now)
        assert due is not None and due > now
        woken = time.monotonic()
        for _ in range(5):
            runtime._items_applied()
            await asyncio.sleep(0)
        await eventually("the render pass", lambda: bool(passes), timeout=5.0)
        assert passes[0] - woken >= (due - now).total_seconds() - 0.05
        await asyncio.sleep(0)
        assert len(passes) == 1
        # Anything else the engine depends on takes a pass at once.
        runtime.wake()
        await eventually("a pass for another input", lambda: len(passes) == 2, timeout=1.0)
    finally:
        await agent.stop()
