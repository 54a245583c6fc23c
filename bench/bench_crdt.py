"""Figures for the CRDT state, each beside a baseline measured in the same run.

- merges per second of two snapshots of 1,000 providers, against a cache that only keeps
  the newest version of each key;
- received items applied per second (decode, checks, merge), against bare ``json.loads``
  of the same payloads;
- encoded bytes per item;
- OR-Set metadata after 100,000 add/remove operations, against an OR-Set that keeps a
  tombstone per removed tag.

Run: ``.venv/bin/python bench/bench_crdt.py`` (``--repeat N`` for more timing rounds).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable

from grid.crdt import (
    MAX_ITEM_BYTES,
    CredentialRef,
    Dot,
    GatewayRecord,
    GridState,
    LabelSelector,
    ModelEntry,
    ORSet,
    ProviderMetrics,
    ProviderRecord,
    ProviderSpec,
    SiteMetadata,
    TokenCost,
)
from grid.crdt.codec import item_bytes

NOW = 1_750_000_000.0
PROVIDERS = 1_000
CHURN_OPERATIONS = 100_000


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
        metrics=ProviderMetrics.from_measurements(
            healthy=True,
            queue_depth=rnd.uniform(0, 40),
            kv_cache_utilization=rnd.random(),
            prefix_cache_hit_ratio=rnd.random(),
            p99_latency_ms=rnd.uniform(50, 5000),
        ),
        models=tuple(models),
        tools=("web-search", "code-interpreter"),
        agents=("planner",),
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

    payloads = [item.payload for item in after.items()]
    items = after.items()

    def apply_all() -> object:
        receiver = GridState("site-b")
        for item in items:
            receiver.apply_item("site-a", item.lane, item.key, item.version, item.payload, NOW)
        return receiver

    def parse_all() -> object:
        return [json.loads(payload[1:]) for payload in payloads]

    applied = median_seconds(apply_all, repeat)
    parsed = median_seconds(parse_all, repeat)
    print(f"apply_item, {PROVIDERS} provider items: median {applied * 1e3:.1f} ms")
    print(
        f"  {PROVIDERS / applied:,.0f} items/s; baseline json.loads only "
        f"{parsed * 1e3:.2f} ms, ratio {applied / parsed:.1f}x"
    )


def bench_sizes() -> None:
    rnd = random.Random(2)
    site = GridState("eu-west-1.grid.example")
    sizes = []
    framed = []
    for index in range(200):
        site.put_provider(record(index, rnd), NOW)
        (item,) = site.items_to_publish()
        sizes.append(len(item.payload))
        framed.append(item_bytes(site.site, item.key, item.payload))
    site.put_provider(record(0, rnd), NOW + 1)
    (update,) = site.items_to_publish()
    site.remove_provider("provider-0001", NOW + 2)
    (tombstone,) = site.items_to_publish()
    site.set_gateway(GatewayRecord("gw.eu-west-1.grid.example:8443", "mtls"), NOW)
    site.set_metadata(
        SiteMetadata("eu-west-1", "eu-west-1a", "eu", {"grid.example.com/tier": "gold"}, "g-1"),
        NOW,
    )
    site.add_spend("acme-corp", "2025-06", 1_234_567, NOW)
    other = {item.lane + ":" + item.key.split("/")[0]: len(item.payload)
             for item in site.items_to_publish()}  # fmt: skip
    print(
        "bytes per provider item (2-3 models, credential ref, policy, all metrics): "
        f"min {min(sizes)}, median {statistics.median(sizes):.0f}, max {max(sizes)}; "
        f"metrics update {len(update.payload)}; tombstone {len(tombstone.payload)}"
    )
    print(
        f"  as framed by the transport (origin {site.site!r}, key, version): median "
        f"{statistics.median(framed):.0f} of the {MAX_ITEM_BYTES} bytes allowed"
    )
    print("bytes per other item: " + ", ".join(f"{k} {v}" for k, v in sorted(other.items())))


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
        f"provider item across {CHURN_OPERATIONS // 10:,} tool add/remove writes: "
        f"first {sizes[0]} bytes, max {max(sizes)}, last {sizes[-1]}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="timing rounds per figure")
    args = parser.parse_args()
    bench_merges(args.repeat)
    bench_sizes()
    bench_churn()


if __name__ == "__main__":
    main()
