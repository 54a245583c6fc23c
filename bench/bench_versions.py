"""What speaking two releases costs on the wire: four SWIM nodes on 127.0.0.1, all of this
release, half and half with the previous release (``compat/previous.txt``, built by
``scripts/previous-release``), or all of the previous one. Every node publishes provider-
sized items for a while; then the bytes per message of each kind (as sent, before
encryption) and the bytes per item delivered are summed over all nodes. Medians over the
rounds; the ratio column compares each mesh with the pure mesh of this release.

    .venv/bin/python bench/bench_versions.py [--rounds 5] [--seconds 8]
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from grid.membership import SwimConfig
from support.attacker import wait_until
from support.previous import previous_release
from support.remote_node import CURRENT, Release
from support.swim import credentials

KINDS = ("foca", "sync_request", "sync_response", "hello", "digest", "repair")
SITES = ("site-a", "site-b", "site-c", "site-d")
CONFIG = SwimConfig(0.2, 0.6, push_pull_interval=2.0)
PAYLOAD = bytes([2]) + b"x" * 500


def one_round(releases: dict[str, Release], seconds: float) -> Counter[str]:
    """Bytes and messages sent by kind, and items delivered, summed over the mesh."""
    key = secrets.token_bytes(32)
    nodes = [
        releases[site].node("127.0.0.1:0", site, None, [key], CONFIG, credentials=credentials(site))
        for site in SITES
    ]
    try:
        for node in nodes:
            node.start()
        for node in nodes[1:]:
            node.join([nodes[0].address])
        wait_until(
            lambda: all(
                sum(m.state == "alive" for m in node.members()) == len(SITES) - 1 for node in nodes
            ),
            15,
            "all see all",
        )
        deadline = time.monotonic() + seconds
        version = 0
        while time.monotonic() < deadline:
            version += 1
            for node in nodes:
                node.publish("state", f"provider/p{version % 20}", version, PAYLOAD)
            time.sleep(0.1)  # a publishing pace, not a wait for a condition
        totals: Counter[str] = Counter()
        for node in nodes:
            stats = node.stats()
            for kind in KINDS:
                totals[f"bytes_{kind}"] += stats[f"message_bytes_sent_{kind}"]
                totals[f"messages_{kind}"] += stats[f"messages_sent_{kind}"]
            totals["items_delivered"] += stats["items_delivered"]
            totals["bytes_all"] += stats["bytes_out"]
        return totals
    finally:
        for node in nodes:
            node.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args()
    built = previous_release()
    previous = Release(built.version, built.python)
    meshes = {
        "current": dict.fromkeys(SITES, CURRENT),
        "mixed": {site: CURRENT if i % 2 == 0 else previous for i, site in enumerate(SITES)},
        f"previous ({built.version})": dict.fromkeys(SITES, previous),
    }
    results: dict[str, list[Counter[str]]] = {name: [] for name in meshes}
    for _ in range(args.rounds):
        for name, releases in meshes.items():  # interleaved, so load drifts hit all alike
            results[name].append(one_round(releases, args.seconds))

    def per(rounds: list[Counter[str]], numerator: str, denominator: str) -> float:
        return statistics.median(r[numerator] / max(r[denominator], 1) for r in rounds)

    baseline = results["current"]
    print(f"{'mesh':<18} {'kind':<14} {'bytes/message':>14} {'vs current':>11}")
    for name, rounds in results.items():
        for kind in KINDS:
            if not any(r[f"messages_{kind}"] for r in rounds):
                continue
            value = per(rounds, f"bytes_{kind}", f"messages_{kind}")
            ratio = value / max(per(baseline, f"bytes_{kind}", f"messages_{kind}"), 1e-9)
            print(f"{name:<18} {kind:<14} {value:>14.1f} {ratio:>11.3f}")
        value = per(rounds, "bytes_all", "items_delivered")
        ratio = value / per(baseline, "bytes_all", "items_delivered")
        print(f"{name:<18} {'all / item':<14} {value:>14.1f} {ratio:>11.3f}")


if __name__ == "__main__":
    main()
