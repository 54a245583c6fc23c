"""How fast the simulator runs a converged cluster, and in how much memory.

Run as ``python -m grid.simbench.speed --size N`` (the runner starts it in a fresh
interpreter so the peak memory it reports is this cluster's alone); prints one JSON object.

After forming the cluster and a short warm-up, the probe runs one whole push/pull period
straight through and divides virtual by wall time. Every node starts its push/pull timer
at a random phase of the period, so that span holds one full-state sync per node spread
over it, as in a cluster that has run for a while: the figure includes everything a node
does in steady state (probes, acks, gossip and syncs).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from grid.simbench.profiles import GRID, PROFILES, NetworkModel, new_simulation, profile

#: Virtual seconds run before anything is timed (first allocations, cold caches).
_WARM_UP = 10.0


def peak_rss_bytes() -> int:
    """This process's peak resident memory (VmHWM), 0 where /proc is not available."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0


def measure(
    size: int,
    seed: int,
    name: str,
    *,
    network: NetworkModel,
    threads: int | None,
    span: float | None = None,
) -> dict[str, Any]:
    """Forms a converged cluster of ``size`` and times ``span`` virtual seconds of it
    (one push/pull period by default)."""
    prof = profile(name, size)
    started = time.perf_counter()
    sim = new_simulation(size, seed, prof, network, threads=threads)
    sim.bootstrap()
    bootstrap_seconds = time.perf_counter() - started
    period = float(sim.settings()["push_pull_period"])
    span = period if span is None else span

    sim.run_until(sim.now + _WARM_UP)
    before = sim.stats()
    tick = time.perf_counter()
    sim.run_until(sim.now + span)
    wall = time.perf_counter() - tick
    after = sim.stats()
    return {
        "size": size,
        "profile": name,
        "seed": seed,
        "threads": threads,
        "bootstrap_seconds": bootstrap_seconds,
        "push_pull_period": period,
        "virtual_seconds": span,
        "wall_seconds": wall,
        "speed": span / wall if wall else None,
        "syncs": after["syncs_completed"] - before["syncs_completed"],
        "sync_entries_known": after["sync_entries_known"] - before["sync_entries_known"],
        "sync_members_left_out": after["sync_members_left_out"] - before["sync_members_left_out"],
        "messages_per_virtual_second": (after["sent"] - before["sent"]) / span,
        "events_per_wall_second": (after["events"] - before["events"]) / wall if wall else None,
        "peak_rss_bytes": peak_rss_bytes(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", choices=PROFILES, default=GRID)
    default = NetworkModel()
    parser.add_argument("--delay", type=float, default=default.delay)
    parser.add_argument("--jitter", type=float, default=default.jitter)
    parser.add_argument("--jitter-kind", default=default.jitter_kind)
    parser.add_argument("--threads", type=int)
    parser.add_argument(
        "--span",
        type=float,
        help="virtual seconds to time (default: one push/pull period)",
    )
    args = parser.parse_args(argv)
    network = NetworkModel(delay=args.delay, jitter=args.jitter, jitter_kind=args.jitter_kind)
    row = measure(
        args.size,
        args.seed,
        args.profile,
        network=network,
        threads=args.threads,
        span=args.span,
    )
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
