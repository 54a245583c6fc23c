"""32 real SWIM nodes in one process on 127.0.0.1: how fast the cluster forms and how fast
a crash is noticed, at the default settings and at ``probeInterval: 1s``.

- *all see all*: from starting 32 nodes (all joining one seed at once) until every node
  lists the 31 others alive;
- *all see down*: from silencing one node (it stops without a word, like a crash) until
  every survivor lists it as down; printed beside the worst-case bound of docs/swim.md.
  The crash comes at a random point of the probe cycle (the nodes start together, so
  their probe ticks are in phase).

Medians (and min/max) over ``--repeat`` fresh clusters per setting.

Run: ``.venv/bin/python bench/bench_cluster.py`` (about 3 minutes; ``--repeat 1`` for a
quick look).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections.abc import Callable

from grid.membership import SwimConfig, SwimNode


def wait(predicate: Callable[[], bool], timeout: float) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"not within {timeout}s")
        time.sleep(0.005)
    return time.monotonic() - start


def one_run(size: int, config: SwimConfig) -> tuple[float, float]:
    key = os.urandom(32)
    nodes = [SwimNode("127.0.0.1:0", f"site-{i}", None, [key], config) for i in range(size)]
    try:
        start = time.monotonic()
        for node in nodes:
            node.start()
        for node in nodes[1:]:
            node.join([nodes[0].address])

        def all_see_all() -> bool:
            return all(sum(m.state == "alive" for m in n.members()) == size - 1 for n in nodes)

        wait(all_see_all, timeout=120)
        formed = time.monotonic() - start

        time.sleep(random.uniform(0, config.probe_interval))
        victim, survivors = nodes[size // 2], [n for n in nodes if n is not nodes[size // 2]]
        address = victim.address
        start = time.monotonic()
        victim.close()

        def all_see_down() -> bool:
            return all(
                any(m.address == address and m.state == "down" for m in n.members())
                for n in survivors
            )

        wait(all_see_down, timeout=config.detection_bound(size) + 30)
        return formed, time.monotonic() - start
    finally:
        for node in nodes:
            node.close()


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f}s  (min {min(values):.2f}, max {max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    settings = {
        "default (probe 5s, suspicion 10s)": SwimConfig(),
        "probeInterval 1s (suspicion 10s)": SwimConfig(probe_interval=1.0),
    }
    for name, config in settings.items():
        formed, detected = [], []
        for _ in range(args.repeat):
            f, d = one_run(args.nodes, config)
            formed.append(f)
            detected.append(d)
        print(f"{args.nodes} nodes, {name}:")
        print(f"  all see all      {summary(formed)}")
        print(f"  all see down     {summary(detected)}")
        print(f"  worst-case bound {config.detection_bound(args.nodes):6.2f}s")


if __name__ == "__main__":
    main()
