"""How gossip bandwidth per node grows with the mesh: the relay factor `grid bench mesh`
needs to state per-site gossip at 100 sites from a run with a few peers.

Every SWIM node sends each item version it takes in on to g members, and digests bring
what that push misses (repair by pull, docs/swim.md): how the bytes per item grow with the
cluster is measured here, not assumed. `grid bench mesh` has the measured site, a probe
and a few peers standing for the other sites, so its gossip figures are those of a small
cluster. This bench runs N
real SWIM nodes in one process on 127.0.0.1 (encrypted, signed frames, the default
timing), lets one of them publish items at a steady rate, and reports per node the bytes
sent and received per second: with no items (membership alone) and with them, for
signals pages and for catalogue-like items, so the bytes each published item costs every
node is measured at each size, and the ratio between sizes is the relay factor. It also
reports the share of published versions each node received (median and lowest node), and
of those the share repair by pull brought (docs/swim.md), the rest push gossip. "updates
tx" is the budget of membership updates at that size (`max_transmissions`); items go to g
members from every node that takes them in, whatever the size. Membership includes the
repair digests.

    .venv/bin/python bench/bench_gossip_relay.py [--nodes 6 101] [--rate 20] [--seconds 40]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime

from grid.membership import SwimConfig, SwimNode
from grid.runtime.credentials import swim_credentials
from grid.trust import CertificateAuthority

KINDS = {
    # A real site's page: about 4 registers of about 70 bytes (docs/scale.md).
    "page": ("signals-page/{n}", 32, 280),
    # A provider's catalogue: rarely replaced.
    "catalogue": ("provider/p{n:03d}", 500, 640),
}
"""Item kind: key pattern, how many keys the publisher cycles through, payload bytes."""


def per_node_rates(nodes: list[SwimNode], seconds: float) -> tuple[float, float]:
    """Median bytes received and sent per second per node over `seconds`."""
    before = [node.stats() for node in nodes]
    time.sleep(seconds)
    after = [node.stats() for node in nodes]
    received = [
        (a["bytes_in"] - b["bytes_in"]) / seconds for a, b in zip(after, before, strict=True)
    ]
    sent = [(a["bytes_out"] - b["bytes_out"]) / seconds for a, b in zip(after, before, strict=True)]
    return statistics.median(received), statistics.median(sent)


def measure(count: int, rate: float, seconds: float) -> list[dict[str, float]]:
    now = datetime.now(UTC)
    ca = CertificateAuthority.generate("bench CA", now=now)
    key = bytes(range(32))
    nodes = []
    for i in range(count):
        site = f"site-{i:03d}"
        issued = ca.issue(site, now=now)
        credentials = swim_credentials(
            issued.certificate_pem, issued.private_key_pem().decode(), ca.certificate_pem
        )
        node = SwimNode(
            "127.0.0.1:0",
            site,
            None,
            [key],
            SwimConfig(event_capacity=16),
            credentials=credentials,
        )
        node.start()
        nodes.append(node)
    try:
        for node in nodes[1:]:
            node.join([nodes[0].address])
        deadline = time.monotonic() + 120
        while min(node.stats()["members"] for node in nodes) < count - 1:
            if time.monotonic() > deadline:
                raise SystemExit(f"{count} nodes did not converge in 120 s")
            time.sleep(0.5)
        time.sleep(10)
        idle_in, idle_out = per_node_rates(nodes, seconds)
        publisher = nodes[count // 2]
        results = []
        version = 0
        for kind, (pattern, keys, size) in KINDS.items():
            stop = time.monotonic() + seconds + 5
            published = 0
            started = time.monotonic()
            before = [node.stats() for node in nodes]
            while time.monotonic() < stop:
                version += 1
                publisher.publish("state", pattern.format(n=published % keys), version, b"s" * size)
                published += 1
                time.sleep(max(0.0, started + published / rate - time.monotonic()))
            window = time.monotonic() - started
            # What is still on its way arrives within a few gossip rounds.
            time.sleep(5)
            after = [node.stats() for node in nodes]
            busy_in = statistics.median(
                (a["bytes_in"] - b["bytes_in"]) / window for a, b in zip(after, before, strict=True)
            )
            busy_out = statistics.median(
                (a["bytes_out"] - b["bytes_out"]) / window
                for a, b in zip(after, before, strict=True)
            )
            received = [
                (a["items_delivered"] - b["items_delivered"]) / published
                for node, a, b in zip(nodes, after, before, strict=True)
                if node is not publisher
            ]
            repaired = sum(
                a["items_repaired"] - b["items_repaired"]
                for a, b in zip(after, before, strict=True)
            )
            delivered = sum(
                a["items_delivered"] - b["items_delivered"]
                for a, b in zip(after, before, strict=True)
            )
            items_rate = published / window
            results.append(
                {
                    "kind": kind,
                    "nodes": count,
                    "max_transmissions": nodes[0].stats()["max_transmissions"],
                    "idle_in": idle_in,
                    "idle_out": idle_out,
                    "item_in": (busy_in - idle_in) / items_rate,
                    "item_out": (busy_out - idle_out) / items_rate,
                    "received_median": statistics.median(received),
                    "received_lowest": min(received),
                    "repaired": repaired / max(delivered, 1),
                }
            )
        return results
    finally:
        for node in nodes:
            node.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[6, 101])
    parser.add_argument("--rate", type=float, default=20.0, help="items published per second")
    parser.add_argument("--seconds", type=float, default=40.0)
    args = parser.parse_args()
    results = [result for n in args.nodes for result in measure(n, args.rate, args.seconds)]
    print(
        f"{'kind':>9} {'nodes':>5} {'updates tx':>10} {'membership in/out B/s':>22} "
        f"{'per item in/out B per node':>27} {'received median/lowest':>23} {'repaired':>8}"
    )
    for r in results:
        print(
            f"{r['kind']:>9} {r['nodes']:>5} {r['max_transmissions']:>10} "
            f"{r['idle_in']:>10,.0f} /{r['idle_out']:>9,.0f} "
            f"{r['item_in']:>13,.0f} /{r['item_out']:>11,.0f} "
            f"{r['received_median']:>13.1%} /{r['received_lowest']:>7.1%} "
            f"{r['repaired']:>8.2%}"
        )
    for kind in KINDS:
        runs = [r for r in results if r["kind"] == kind]
        first = runs[0]
        for r in runs[1:]:
            factor_in = r["item_in"] / first["item_in"]
            factor_out = r["item_out"] / first["item_out"]
            print(
                f"relay factor of a {kind} {first['nodes']} -> {r['nodes']} nodes: "
                f"{factor_in:.2f} (in), {factor_out:.2f} (out)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
