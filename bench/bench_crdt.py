"""Figures for the CRDT state, each beside a baseline measured in the same run.

- merges per second of two snapshots of 1,000 providers, against a cache that only keeps
  the newest version of each key;
- received items applied per second at one site (decode, checks, merge), for the items a
  large mesh sends (signals pages from 100 sites, a few catalogue changes among them),
  through ``GridState.apply_item`` and through ``SiteEngine.receive_item``; against the
  same changes applied as catalogue items (the strict JSON reader every load change went
  through when a provider travelled whole) and against bare ``json.loads`` of the whole
  records those changes used to be;
- encoded bytes per item: a signals register (typical and worst case) against the whole
  record;
- signals registers published per scrape by 1,000 providers whose load follows a random
  walk, with the default ``signalPublishing`` steps against publishing every change;
- bytes a site of 100 providers puts on the wire for its signals, scraped every 15 s and
  published once a second, in pages against each register in an item of its own;
- OR-Set metadata after 100,000 add/remove operations, against an OR-Set that keeps a
  tombstone per removed tag.

Run: ``.venv/bin/python bench/bench_crdt.py`` (``--repeat N`` for more timing rounds).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime

from grid.crdt import (
    MAX_ITEM_BYTES,
    CredentialRef,
    Dot,
    GatewayRecord,
    GridState,
    Item,
    LabelSelector,
    ModelEntry,
    ORSet,
    ProviderMetrics,
    ProviderRecord,
    ProviderSpec,
    SiteMetadata,
    TokenCost,
)
from grid.crdt.codec import MAX_SAFE_INT, canonical_json, item_bytes
from grid.crdt.pages import PAGE_PREFIX, entry_bytes
from grid.crdt.records import MAX_AMOUNT
from grid.crdt.signals import SignalsState
from grid.crdt.snapshot import MAX_PROVIDER_NAME, encode_signals
from grid.engine import SiteEngine
from grid.engine.records import signal_thresholds, signals_refresh_seconds
from grid.models import GridNetwork, load_resource

NOW = 1_750_000_000.0
PROVIDERS = 1_000
CHURN_OPERATIONS = 100_000
MESH_SITES = 100
MESH_PROVIDERS = 100
"""Providers per site in the mesh whose items one site receives."""
STREAM_ITEMS = 20_000
CATALOGUE_SHARE = 0.01
"""Share of catalogue changes among the received items (edits of models, tools, spec).
Signals are refreshed and republished on their own, so catalogues change only when a
resource is edited or a site starts afresh: at one edit per provider per hour, a mesh of
this size would send 1 catalogue item per 200 signals items."""
SCRAPES = 80
SCRAPE_INTERVAL_S = 15.0


def record(index: int, rnd: random.Random) -> ProviderRecord:
    """A realistic provider: two or three models, a credential reference, a policy."""
    models = [
        ModelEntry("meta-llama/Llama-3.1-8B-Instruct", ("chat", "tools"), 131_072),
        ModelEntry("mistralai/Mistral-7B-Instruct-v0.3", ("chat",), 32_768),
        ModelEntry("BAAI/bge-large-en-v1.5", ("embeddings",), 512),
    ][: rnd.choice((2, 3))]
    return ProviderRecord(
        name=f"provider-{index:04d}",
        spec=ProviderSpec(
            "local",
            "self_hosted",
            f"vllm-pool-{index % 16}",
            f"https://vllm-{index:04d}.inference.svc.cluster.local:8000/v1",
            cost=TokenCost.from_usd("0.15", "0.60"),
            credential=CredentialRef("BearerToken", f"vllm-{index:04d}-token", "grid", "token"),
            access_policy=LabelSelector({"grid.example.com/tier": "gold"}),
        ),
        phase="Available",
        metrics=random_load(rnd),
        models=tuple(models),
        tools=("web-search", "code-interpreter"),
        agents=("planner",),
    )


def random_load(rnd: random.Random) -> ProviderMetrics:
    return ProviderMetrics.from_measurements(
        healthy=True,
        queue_depth=rnd.uniform(0, 40),
        kv_cache_utilization=rnd.random(),
        prefix_cache_hit_ratio=rnd.random(),
        p99_latency_ms=rnd.uniform(50, 5000),
    )


def median_seconds(action: Callable[[], object], repeat: int) -> float:
    timings = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        timings.append(time.perf_counter() - start)
    return statistics.median(timings)


def bench_merges(repeat: int) -> None:
    rnd = random.Random(1)
    site = GridState("site-a")
    for index in range(PROVIDERS):
        site.put_provider(record(index, rnd), NOW)
    before = site.snapshot()
    for index in range(PROVIDERS):
        site.put_provider(record(index, rnd), NOW + 5)  # new metrics everywhere
    after = site.snapshot()
    assert before.merge(after) == after.merge(before) == after

    old_items = {item.key: item for item in before.items()}
    new_items = {item.key: item for item in after.items()}

    def newest_version_cache() -> object:
        return {
            key: max(item, new_items[key], key=lambda it: it.version)
            for key, item in old_items.items()
        }

    crdt = median_seconds(lambda: before.merge(after), repeat)
    baseline = median_seconds(newest_version_cache, repeat)
    print(f"snapshot merge, {PROVIDERS} providers: median {crdt * 1e3:.2f} ms")
    print(
        f"  {1 / crdt:,.1f} snapshot merges/s = {PROVIDERS / crdt:,.0f} provider merges/s; "
        f"baseline newest-version cache {baseline * 1e3:.3f} ms, ratio {crdt / baseline:.1f}x"
    )


def _mesh_network() -> GridNetwork:
    resource = load_resource(
        {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "GridNetwork",
            "metadata": {"name": "mesh"},
            "spec": {},
        }
    )
    assert isinstance(resource, GridNetwork)
    return resource


def _whole_record(catalogue: Item, signals: SignalsState) -> bytes:
    """The payload a provider's change made when it travelled whole (format 1): the
    catalogue's fields plus phase and metrics registers."""
    body = json.loads(catalogue.payload[1:])
    assert signals.metrics is not None
    body["phase"] = [0, signals.phase]
    body["metrics"] = [0, signals.metrics.to_wire()]
    body["rev"] = body["at"] = signals.version
    return b"\x01" + canonical_json(body)


def mesh_stream() -> tuple[list[tuple[str, Item]], list[tuple[str, Item]], list[bytes]]:
    """What one site receives from a mesh of MESH_SITES sites of MESH_PROVIDERS providers:
    every site's catalogue and signals once (the start), then a stream of changes, mostly
    signals; and each change as the whole-record payload it used to be."""
    rnd = random.Random(5)
    writers = {f"site-{i:03d}": GridState(f"site-{i:03d}") for i in range(MESH_SITES)}
    start: list[tuple[str, Item]] = []
    latest: dict[tuple[str, str], Item] = {}
    declared = {index: record(index, rnd) for index in range(MESH_PROVIDERS)}
    for name, writer in writers.items():
        for entry in declared.values():
            writer.put_provider(entry, NOW)
        start += [(name, item) for item in writer.items_to_publish()]
    stream: list[tuple[str, Item]] = []
    whole: list[bytes] = []
    now = NOW
    for name, item in start:
        latest[(name, item.key)] = item
    while len(stream) < STREAM_ITEMS:
        now += 0.01
        name = rnd.choice(list(writers))
        writer = writers[name]
        current = writer.provider(name, f"provider-{rnd.randrange(MESH_PROVIDERS):04d}")
        assert current is not None
        current = dataclasses.replace(current.record, metrics=random_load(rnd))
        if rnd.random() < CATALOGUE_SHARE:
            tools = ("web-search", f"tool-{rnd.randrange(9)}")
            current = dataclasses.replace(current, tools=tools)
        writer.put_provider(current, now)
        for item in writer.items_to_publish():
            stream.append((name, item))
            latest[(name, item.key)] = item
        catalogue = latest[(name, f"provider/{current.name}")]
        whole.append(_whole_record(catalogue, writer.snapshot().signals[current.name]))
    return start, stream, whole


def bench_apply(repeat: int) -> None:
    start, stream, whole = mesh_stream()
    signals_share = sum(item.key.startswith(PAGE_PREFIX) for _, item in stream) / len(stream)
    catalogue_items = [(name, item) for name, item in start if item.key.startswith("provider/")]

    def primed() -> GridState:
        receiver = GridState("site-x")
        for name, item in start:
            receiver.apply_item(name, item.lane, item.key, item.version, item.payload, NOW)
        return receiver

    signals_only = [(name, item) for name, item in stream if item.key.startswith(PAGE_PREFIX)]
    registers = sum(item.payload.count(b'["') for _, item in signals_only)
    receivers = [primed() for _ in range(2 * repeat)]
    engines = []
    network = _mesh_network()
    moment = datetime.fromtimestamp(NOW + 1_000, UTC)
    for _ in range(repeat):
        engine = SiteEngine(network, "site-x")
        for name, item in start:
            engine.receive_item(name, item.lane, item.key, item.version, item.payload, moment)
        engines.append(engine)

    def apply_stream() -> object:
        receiver = receivers.pop()
        for name, item in stream:
            receiver.apply_item(name, item.lane, item.key, item.version, item.payload, NOW + 1)
        return receiver

    def apply_signals() -> object:
        receiver = receivers.pop()
        for name, item in signals_only:
            receiver.apply_item(name, item.lane, item.key, item.version, item.payload, NOW + 1)
        return receiver

    def receive_stream() -> object:
        engine = engines.pop()
        for name, item in stream:
            engine.receive_item(name, item.lane, item.key, item.version, item.payload, moment)
        return engine

    def apply_catalogues() -> object:
        # Catalogue items at their first arrival: the strict JSON reader, merge included.
        receiver = GridState("site-x")
        for name, item in catalogue_items[: STREAM_ITEMS // 4]:
            receiver.apply_item(name, item.lane, item.key, item.version, item.payload, NOW)
        return receiver

    def parse_whole() -> object:
        return [json.loads(payload[1:]) for payload in whole]

    applied = median_seconds(apply_stream, repeat)
    signals_rate = len(signals_only) / median_seconds(apply_signals, repeat)
    received = median_seconds(receive_stream, repeat)
    catalogue = median_seconds(apply_catalogues, repeat) * 4 * len(stream) / STREAM_ITEMS
    parsed = median_seconds(parse_whole, repeat) * len(stream) / len(whole)
    rate = len(stream) / applied
    print(
        f"received items applied at one site ({MESH_SITES} sites x {MESH_PROVIDERS} providers, "
        f"{len(stream):,} items, {signals_share:.0%} signals):"
    )
    print(f"  GridState.apply_item      {rate:,.0f} items/s (median {applied * 1e3:.1f} ms)")
    print(f"  SiteEngine.receive_item   {len(stream) / received:,.0f} items/s")
    print(
        f"  signals pages alone       {signals_rate:,.0f} pages/s, "
        f"{signals_rate * registers / len(signals_only):,.0f} registers/s "
        f"({registers / len(signals_only):.1f} per page)"
    )
    print(
        f"  baseline: as catalogue items (strict JSON reader) {len(stream) / catalogue:,.0f} "
        f"items/s, ratio {catalogue / applied:.1f}x; bare json.loads of the whole records "
        f"{len(stream) / parsed:,.0f} items/s, ratio {parsed / applied:.2f}x"
    )


def bench_sizes() -> float:
    """Prints the sizes; returns the median size of a whole record (format 1)."""
    rnd = random.Random(2)
    site = GridState("eu-west-1.grid.example")
    catalogue_sizes, signals_sizes, whole_sizes, framed = [], [], [], []
    for index in range(200):
        site.put_provider(record(index, rnd), NOW)
        catalogue, _page = site.items_to_publish()
        register = site.snapshot().signals[record(index, rnd).name]
        catalogue_sizes.append(len(catalogue.payload))
        signals_sizes.append(len(entry_bytes(register)))
        whole_sizes.append(len(_whole_record(catalogue, register)))
        single = encode_signals(site.site, register)
        framed.append(item_bytes(site.site, single.key, single.payload))
    site.put_provider(
        dataclasses.replace(record(0, random.Random(2)), metrics=random_load(rnd)), NOW + 1
    )
    site.items_to_publish()
    update = entry_bytes(site.snapshot().signals["provider-0000"])
    site.remove_provider("provider-0001", NOW + 2)
    tombstone, _page = site.items_to_publish()
    void = entry_bytes(site.snapshot().signals["provider-0001"])
    site.set_gateway(GatewayRecord("gw.eu-west-1.grid.example:8443", "mtls"), NOW)
    site.set_metadata(
        SiteMetadata("eu-west-1", "eu-west-1a", "eu", {"grid.example.com/tier": "gold"}, "g-1"),
        NOW,
    )
    site.add_spend("acme-corp", "2025-06", 1_234_567, NOW)
    other = {item.lane + ":" + item.key.split("/")[0]: len(item.payload)
             for item in site.items_to_publish()}  # fmt: skip
    worst = SignalsState.written(
        "s" * 63,
        "p" * MAX_PROVIDER_NAME,
        MAX_SAFE_INT,
        0,
        "Unavailable",
        ProviderMetrics(False, MAX_AMOUNT, 1_000_000, 1_000_000, MAX_AMOUNT),
    )
    signals_median = statistics.median(signals_sizes)
    whole_median = statistics.median(whole_sizes)
    print(
        f"bytes per signals register in a page: median {signals_median:.0f} (min "
        f"{min(signals_sizes)}, max {max(signals_sizes)}); as an item of its own, worst case "
        f"payload {len(worst.payload)} of 128, framed with its signature median "
        f"{statistics.median(framed):.0f}; load update {len(update)}"
    )
    print(
        f"  baseline whole record (format 1) median {whole_median:.0f} bytes, "
        f"ratio {whole_median / signals_median:.1f}x; catalogue item median "
        f"{statistics.median(catalogue_sizes):.0f} (max {max(catalogue_sizes)} of "
        f"{MAX_ITEM_BYTES}); tombstone {len(tombstone.payload)}, void signals {len(void)}"
    )
    print("bytes per other item: " + ", ".join(f"{k} {v}" for k, v in sorted(other.items())))
    return whole_median


@dataclasses.dataclass
class Walk:
    """One provider's load as scrapes see it: a utilization level that drifts (the share
    of its capacity in use, starting anywhere in 0..1 across the fleet) and readings
    around it, each with its own noise. As in vLLM, requests wait only once the running
    batch is full, so the integer waiting-queue gauge reads 0 until the level nears
    saturation (0.8) and then grows fast; KV-cache use follows the level; P99 latency
    grows with it."""

    rnd: random.Random
    level: float
    prefix: float = 0.5
    healthy: bool = True

    def step(self) -> ProviderMetrics:
        rnd = self.rnd
        self.level = min(1.0, max(0.0, self.level + rnd.gauss(0, 0.02)))
        level = self.level
        mean_queue = 48 * (max(0.0, level - 0.8) / 0.2) ** 2
        queue = max(0, round(rnd.gauss(mean_queue, math.sqrt(mean_queue))))
        kv = min(1.0, max(0.0, 0.1 + 0.85 * level + rnd.gauss(0, 0.015)))
        self.prefix = min(1.0, max(0.0, self.prefix + rnd.gauss(0, 0.005)))
        p99 = 300 * (1 + 4 * level**2) * math.exp(rnd.gauss(0, 0.1))
        if rnd.random() < 0.001:
            self.healthy = not self.healthy
        return ProviderMetrics.from_measurements(
            healthy=self.healthy,
            queue_depth=queue,
            kv_cache_utilization=kv,
            prefix_cache_hit_ratio=self.prefix,
            p99_latency_ms=p99,
        )


def walking_site(
    name: str, providers: int, seed: int
) -> tuple[GridState, list[ProviderRecord], list[Walk]]:
    """A site whose providers' loads follow random walks, each written and published once."""
    rnd = random.Random(seed)
    site = GridState(name)
    base = [record(index, rnd) for index in range(providers)]
    walks = [Walk(random.Random(seed * 10_000 + i), rnd.random()) for i in range(providers)]
    for entry, walk in zip(base, walks, strict=True):
        site.put_provider(dataclasses.replace(entry, metrics=walk.step()), NOW)
    site.items_to_publish()
    return site, base, walks


def published_per_scrape(seed: int, step: float | None) -> tuple[float, float]:
    """Signals registers published per provider per scrape with every ``signalPublishing``
    step at ``step`` (None: publish every change), and their mean size in a page."""
    spec = _mesh_network().spec
    if step is None:
        spec.signal_publishing.enabled = False
    else:
        for name in ("queue_depth_step", "kv_cache_step", "prefix_cache_step", "latency_step"):
            setattr(spec.signal_publishing, name, step)
    thresholds = signal_thresholds(spec)
    refresh = signals_refresh_seconds(spec)
    site, base, walks = walking_site("site-a", PROVIDERS, seed)
    published, size = 0, 0
    for scrape in range(1, SCRAPES + 1):
        now = NOW + scrape * SCRAPE_INTERVAL_S
        before = dict(site.snapshot().signals)
        for entry, walk in zip(base, walks, strict=True):
            current = dataclasses.replace(entry, metrics=walk.step())
            site.put_provider(current, now, refresh_after=refresh, thresholds=thresholds)
        site.items_to_publish()
        after = site.snapshot().signals
        written = [state for name, state in after.items() if before[name] is not state]
        published += len(written)
        size += sum(len(entry_bytes(state)) for state in written)
    return published / (SCRAPES * PROVIDERS), size / max(published, 1)


def bench_publishing(whole_record_bytes: float) -> None:
    seeds = range(1, 6)
    rates = {}
    sizes = []
    for step in (None, 0.02, 0.05):
        runs = [published_per_scrape(seed, step) for seed in seeds]
        rates[step] = statistics.median(rate for rate, _ in runs)
        sizes += [size for _, size in runs]
    every = rates[None]
    print(
        f"signals registers published per provider per scrape ({PROVIDERS} providers, {SCRAPES} "
        f"scrapes of {SCRAPE_INTERVAL_S:.0f} s, random-walk load, median of 5 seeds): "
        f"{rates[0.02]:.3f} with the default steps (2 %), ratio {every / rates[0.02]:.1f}x; "
        f"{rates[0.05]:.3f} with steps of 5 %, ratio {every / rates[0.05]:.1f}x; baseline "
        f"{every:.3f} publishing every change"
    )
    per_site = MESH_PROVIDERS / SCRAPE_INTERVAL_S
    item_size = statistics.median(sizes)
    whole = per_site * every * whole_record_bytes
    print(
        f"  one site of {MESH_PROVIDERS} providers, default steps: {per_site * rates[0.02]:.2f} "
        f"signals registers/s, {per_site * rates[0.02] * item_size:,.0f} register bytes/s "
        f"before relaying; whole records on every change: {whole:,.0f} bytes/s"
    )


def paged_site(seed: int) -> tuple[int, int, int, int, float]:
    """One site of MESH_PROVIDERS providers, each scraped every SCRAPE_INTERVAL_S (spread
    over the interval), the default steps, a pass (and publication) every second:
    registers written, pages written, their bytes as framed (signature included), the
    same registers' bytes as items of their own, and the pages the site ends with."""
    spec = _mesh_network().spec
    thresholds = signal_thresholds(spec)
    refresh = signals_refresh_seconds(spec)
    site, base, walks = walking_site("eu-west-1", MESH_PROVIDERS, seed)
    registers = pages = paged_bytes = single_bytes = 0
    keys: set[str] = set()
    seconds = int(SCRAPES * SCRAPE_INTERVAL_S)
    for second in range(1, seconds + 1):
        now = NOW + second
        before = dict(site.snapshot().signals)
        for index, (entry, walk) in enumerate(zip(base, walks, strict=True)):
            if (second + index * SCRAPE_INTERVAL_S / MESH_PROVIDERS) % SCRAPE_INTERVAL_S < 1:
                current = dataclasses.replace(entry, metrics=walk.step())
                site.put_provider(current, now, refresh_after=refresh, thresholds=thresholds)
        items = [item for item in site.items_to_publish() if item.key.startswith(PAGE_PREFIX)]
        after = site.snapshot().signals
        for name, state in after.items():
            if before[name] is not state:
                registers += 1
                single = encode_signals(site.site, state)
                single_bytes += item_bytes(site.site, single.key, single.payload)
        pages += len(items)
        paged_bytes += sum(item_bytes(site.site, item.key, item.payload) for item in items)
        keys.update(item.key for item in items)
    return registers, pages, paged_bytes, single_bytes, len(keys)


def bench_pages() -> None:
    runs = [paged_site(seed) for seed in range(1, 6)]
    per_register = statistics.median(paged / registers for registers, _, paged, _, _ in runs)
    single = statistics.median(single / registers for registers, _, _, single, _ in runs)
    per_page = statistics.median(registers / pages for registers, pages, _, _, _ in runs)
    seconds = SCRAPES * SCRAPE_INTERVAL_S
    rate = statistics.median(paged / seconds for _, _, paged, _, _ in runs)
    print(
        f"signals of one site of {MESH_PROVIDERS} providers (15 s scrapes, default steps, a "
        f"pass a second, median of 5 seeds): {per_register:.0f} framed bytes per register in "
        f"pages ({per_page:.1f} registers per page, {rate:,.0f} bytes/s, at most "
        f"{max(keys for *_, keys in runs)} pages); baseline items of their own "
        f"{single:.0f} bytes per register, ratio {single / per_register:.2f}x"
    )


class TombstoneORSet:
    """The baseline: an OR-Set that keeps every removed tag as a tombstone."""

    def __init__(self) -> None:
        self.tags: dict[str, set[int]] = {}
        self.tombstones: set[int] = set()

    def add(self, element: str, tag: int) -> None:
        self.tags.setdefault(element, set()).add(tag)

    def remove(self, element: str) -> None:
        self.tombstones |= self.tags.pop(element, set())

    def metadata_size(self) -> int:
        return sum(len(tags) for tags in self.tags.values()) + len(self.tombstones)


def bench_churn() -> None:
    rnd = random.Random(3)
    universe = [f"model-{i}" for i in range(20)]
    replicas = ("a", "b", "c")
    states: dict[str, ORSet[str]] = dict.fromkeys(replicas, ORSet[str]())
    counters = dict.fromkeys(replicas, 0)
    baseline = TombstoneORSet()
    tag = 0
    peak = 0
    start = time.perf_counter()
    for step in range(CHURN_OPERATIONS):
        name = replicas[step % 3]
        element = rnd.choice(universe)
        if rnd.random() < 0.5:
            counters[name] += 1
            tag += 1
            states[name] = states[name].add(element, Dot(name, counters[name]))
            baseline.add(element, tag)
        else:
            states[name] = states[name].remove(element)
            baseline.remove(element)
        if step % 50 == 0:
            states[name] = states[name].merge(states[rnd.choice(replicas)])
        peak = max(peak, states[name].metadata_size())
    elapsed = time.perf_counter() - start
    merged = ORSet[str]()
    for state in states.values():
        merged = merged.merge(state)
    print(
        f"OR-Set after {CHURN_OPERATIONS:,} add/remove operations (3 replicas, 20 elements): "
        f"{merged.metadata_size()} dots+context entries (peak {peak}) vs "
        f"{baseline.metadata_size():,} for a tombstone-keeping OR-Set, "
        f"ratio {baseline.metadata_size() / merged.metadata_size():,.0f}x; "
        f"{CHURN_OPERATIONS / elapsed:,.0f} ops/s"
    )

    # The same churn through a provider record: its item does not grow.
    site = GridState("site-a")
    base = record(0, rnd)
    sizes = []
    tools: set[str] = set()
    for step in range(CHURN_OPERATIONS // 10):
        tool = f"tool-{rnd.randrange(8)}"
        tools ^= {tool}
        site.put_provider(
            ProviderRecord(
                base.name, base.spec, base.phase, base.metrics, base.models, tuple(tools)
            ),
            NOW + step,
        )
        sizes.extend(len(item.payload) for item in site.items_to_publish())
    print(
        f"provider catalogue item across {CHURN_OPERATIONS // 10:,} tool add/remove writes: "
        f"first {sizes[0]} bytes, max {max(sizes)}, last {sizes[-1]}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="timing rounds per figure")
    args = parser.parse_args()
    bench_merges(args.repeat)
    bench_apply(args.repeat)
    bench_publishing(bench_sizes())
    bench_pages()
    bench_churn()


if __name__ == "__main__":
    main()
