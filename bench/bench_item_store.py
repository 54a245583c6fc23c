"""What a SWIM node's item store costs: resident memory per stored item, and how long a node
joining a loaded mesh takes to hold every item.

Two real SWIM nodes on 127.0.0.1 (encrypted, signed frames). The first publishes a mesh's
worth of items (by default 100 sites x 100 providers: a catalogue item and a signals item
per provider, at the median sizes `bench/bench_crdt.py` measures); the second joins it
afterwards, long after gossip stopped carrying them, so every item reaches it by the sync
walk. Its resident memory is read before it joins and once it holds every item (events
read and dropped as they come), so the difference is the store and the node's other
per-item state. Then the same with every payload as large as an item may be (the worst
case per item).

    .venv/bin/python bench/bench_item_store.py [--items 20000]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from datetime import UTC, datetime

from grid.membership import SwimConfig, SwimNode
from grid.runtime.credentials import swim_credentials
from grid.trust import CertificateAuthority

CATALOGUE_BYTES = 640
SIGNALS_BYTES = 65
LARGEST_PAYLOAD = 1024 - 11 - len("site-a") - len("provider/p00000") - 64
"""The largest payload under `provider/p00000` of `site-a` (an item is at most 1024 bytes
framed: 11 bytes, origin, key, payload, 64-byte signature)."""


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def measure(items: int, sizes: tuple[int, int], timeout_s: float) -> dict[str, float]:
    now = datetime.now(UTC)
    ca = CertificateAuthority.generate("bench CA", now=now)
    key = bytes(range(32))
    config = SwimConfig(probe_interval=0.5, suspicion_timeout=2.0, push_pull_interval=600.0)

    def node(site: str) -> SwimNode:
        issued = ca.issue(site, now=now)
        credentials = swim_credentials(
            issued.certificate_pem, issued.private_key_pem().decode(), ca.certificate_pem
        )
        return SwimNode("127.0.0.1:0", site, None, [key], config, credentials=credentials)

    origin = node("site-a")
    origin.start()
    for k in range(items // 2):
        origin.publish("state", f"provider/p{k:05d}", 1, b"c" * sizes[0])
        origin.publish("state", f"signals/p{k:05d}", 1, b"s" * sizes[1])
    joiner = node("site-b")
    before = rss_bytes()
    joiner.start()
    started = time.monotonic()
    joiner.join([origin.address])
    deadline = started + timeout_s
    while joiner.stats()["items_stored"] < items:
        if time.monotonic() > deadline:
            raise SystemExit(f"the joiner holds {joiner.stats()['items_stored']} of {items}")
        while joiner.next_event(timeout=0.05) is not None:
            pass
    took = time.monotonic() - started
    while joiner.next_event(timeout=0.2) is not None:
        pass
    grown = rss_bytes() - before
    stats = joiner.stats()
    joiner.close()
    origin.close()
    return {
        "items": items,
        "bytes_per_item": grown / items,
        "catch_up_s": took,
        "catch_up_syncs": stats["catch_up_syncs"],
        "sync_bytes_in": stats["bytes_in"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    for label, sizes in (
        ("100 x 100 mix (catalogue 640 B, signals 65 B)", (CATALOGUE_BYTES, SIGNALS_BYTES)),
        (f"largest payloads ({LARGEST_PAYLOAD} B)", (LARGEST_PAYLOAD, LARGEST_PAYLOAD)),
    ):
        result = measure(args.items, sizes, args.timeout)
        print(
            f"{label}: {result['items']:,} items, "
            f"{result['bytes_per_item']:,.0f} resident bytes per stored item at the joiner; "
            f"caught up in {result['catch_up_s']:.1f} s "
            f"({result['catch_up_syncs']} catch-up syncs, "
            f"{result['sync_bytes_in'] / 1e6:.1f} MB received)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
