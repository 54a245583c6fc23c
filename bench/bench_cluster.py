"""32 real SWIM nodes in one process on 127.0.0.1: how fast the cluster forms, how fast a
node joins it and how fast a crash is noticed, at the default settings and at
``probeInterval: 1s``. Every node signs with its site certificate (one test CA).

- *all see all*: from starting 31 nodes (all joining one seed at once) until every node
  lists the 30 others alive;
- *join*: from a 32nd node joining (its seed is one of the 31) until it lists the 31 alive
  and every one of them lists it alive;
- *all see down*: from silencing one node (it stops without a word, like a crash) until
  every survivor lists it as down; printed beside the worst-case bound of docs/swim.md.
  The crash comes at a random point of the probe cycle (the nodes start together, so
  their probe ticks are in phase).

Medians (and min/max) over ``--repeat`` fresh clusters per setting.

Run: ``.venv/bin/python bench/bench_cluster.py`` (about 4 minutes; ``--repeat 1`` for a
quick look).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from grid.membership import SwimConfig, SwimNode
from support.swim import credentials


def wait(predicate: Callable[[], bool], timeout: float) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"not within {timeout}s")
        time.sleep(0.005)
    return time.monotonic() - start


def alive(viewer: SwimNode, node: SwimNode) -> bool:
    return any(
        m.address == node.address and m.state == "alive" and m.generation == node.generation
        for m in viewer.members()
    )


def one_run(size: int, config: SwimConfig) -> tuple[float, float, float]:
    key = os.urandom(32)
    nodes = [
        SwimNode(
            "127.0.0.1:0",
            f"site-{i}",
            None,
            [key],
            config,
            credentials=credentials(f"site-{i}"),
        )
        for i in range(size)
    ]
    founders, joiner = nodes[:-1], nodes[-1]
    try:
        start = time.monotonic()
        for node in founders:
            node.start()
        for node in founders[1:]:
            node.join([founders[0].address])

        def all_see_all() -> bool:
            return all(alive(n, o) for n in founders for o in founders if o is not n)

        wait(all_see_all, timeout=120)
        formed = time.monotonic() - start

        start = time.monotonic()
        joiner.start()
        joiner.join([random.choice(founders).address])

        def joined() -> bool:
            return all(alive(joiner, n) and alive(n, joiner) for n in founders)

        wait(joined, timeout=120)
        join = time.monotonic() - start

        time.sleep(random.uniform(0, config.probe_interval))
        victim = nodes[size // 2]
        survivors = [n for n in nodes if n is not victim]
        address = victim.address
        start = time.monotonic()
        victim.close()

        def all_see_down() -> bool:
            return all(
                any(m.address == address and m.state == "down" for m in n.members())
                for n in survivors
            )

        wait(all_see_down, timeout=config.detection_bound(size) + 30)
        return formed, join, time.monotonic() - start
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
        formed, joins, detected = [], [], []
        for _ in range(args.repeat):
            f, j, d = one_run(args.nodes, config)
            formed.append(f)
            joins.append(j)
            detected.append(d)
        print(f"{args.nodes} nodes, {name}:")
        print(f"  all see all      {summary(formed)}   ({args.nodes - 1} nodes starting together)")
        print(f"  join             {summary(joins)}   (node {args.nodes} into the others)")
        print(f"  all see down     {summary(detected)}")
        print(f"  worst-case bound {config.detection_bound(args.nodes):6.2f}s")


if __name__ == "__main__":
    main()
