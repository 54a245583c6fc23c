"""How fast the simulator runs a converged cluster, and in how much memory.

Run as ``python -m grid.simbench.speed --size N`` (the runner starts it in a fresh
interpreter so the peak memory it reports is this cluster's alone); prints one JSON object.

Steady-state cost has two parts. Most of the time nodes only probe, ack and gossip (the
*quiet* rate, measured directly after a short warm-up). Once per push/pull period every
node also exchanges its full state with a random member, which at N members costs O(N²)
member-list scans per sync in foca. A converged start puts every node's first sync in the
same probe interval, so the probe times the quiet phase up to the first sync, skips half a
second of the burst (warm-up) and times it until ``--min-syncs`` syncs completed to derive
the cost of one sync; the amortized speed is one push/pull period of virtual time over the
quiet wall time of that period plus N syncs. With ``--direct`` (cheap at small N) it also
runs a whole period after the burst straight through, as a check on that derivation.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from grid.simbench.profiles import GRID, PROFILES, NetworkModel, new_simulation, profile

#: Virtual seconds run before anything is timed (first allocations, cold caches).
_WARM_UP = 10.0
#: Quiet phase ends at the first sync, or after this many probe intervals at most.
_MAX_QUIET_INTERVALS = 40
_BURST_WARM_UP = 0.5
_BURST_STEP = 0.1


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
    min_syncs: int,
    direct: bool,
) -> dict[str, Any]:
    prof = profile(name, size)
    started = time.perf_counter()
    sim = new_simulation(size, seed, prof, network, threads=threads)
    sim.bootstrap()
    bootstrap_seconds = time.perf_counter() - started
    period = float(sim.settings()["push_pull_period"])

    def step() -> tuple[float, dict[str, int], dict[str, int]]:
        before = sim.stats()
        tick = time.perf_counter()
        sim.run_until(sim.now + 1.0)
        return time.perf_counter() - tick, before, sim.stats()

    # Warm-up, then the quiet phase: one virtual second at a time until a sync starts.
    sim.run_until(sim.now + _WARM_UP)
    quiet_virtual = quiet_wall = 0.0
    quiet_events = quiet_messages = 0
    limit = sim.now + _MAX_QUIET_INTERVALS * prof.probe_interval
    first_sync = None
    while sim.now < limit:
        wall, before, after = step()
        if after["syncs_started"] > before["syncs_started"]:
            first_sync = sim.now - 1.0
            break
        quiet_virtual += 1.0
        quiet_wall += wall
        quiet_events += after["events"] - before["events"]
        quiet_messages += after["sent"] - before["sent"]
    quiet_rate = quiet_wall / quiet_virtual if quiet_virtual else 0.0

    # Half a second of the sync burst warms up; then it is timed in short steps until
    # enough syncs have completed (the burst lasts one probe interval).
    sample_wall = sample_virtual = 0.0
    syncs = 0
    if first_sync is not None:
        sim.run_until(sim.now + _BURST_WARM_UP)
        while syncs < min_syncs and sample_virtual < prof.probe_interval:
            before = sim.stats()
            tick = time.perf_counter()
            sim.run_until(sim.now + _BURST_STEP)
            sample_wall += time.perf_counter() - tick
            sample_virtual += _BURST_STEP
            syncs += sim.stats()["syncs_completed"] - before["syncs_completed"]
    per_sync = max(0.0, (sample_wall - quiet_rate * sample_virtual) / syncs) if syncs else 0.0
    period_wall = quiet_rate * period + size * per_sync
    row: dict[str, Any] = {
        "size": size,
        "profile": name,
        "seed": seed,
        "threads": threads,
        "bootstrap_seconds": bootstrap_seconds,
        "quiet_virtual_seconds": quiet_virtual,
        "quiet_speed": 1 / quiet_rate if quiet_rate else None,
        "quiet_events_per_wall_second": quiet_events / quiet_wall if quiet_wall else None,
        "quiet_messages_per_virtual_second": quiet_messages / quiet_virtual
        if quiet_virtual
        else None,
        "syncs_sampled": syncs,
        "wall_seconds_per_sync": per_sync,
        "push_pull_period": period,
        "amortized_speed": period / period_wall if period_wall else 0.0,
        "direct_speed": None,
    }
    if direct and first_sync is not None:
        # Past the first burst (it spans one probe interval), then one whole period, which
        # holds exactly one sync per node.
        sim.run_until(max(sim.now, first_sync + prof.probe_interval + 1.0))
        tick = time.perf_counter()
        sim.run_until(sim.now + period)
        row["direct_speed"] = period / (time.perf_counter() - tick)
    row["peak_rss_bytes"] = peak_rss_bytes()
    return row


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
        "--min-syncs",
        type=int,
        default=200,
        help="time the sync burst until this many syncs completed (default 200)",
    )
    parser.add_argument("--direct", action="store_true", help="also run one whole push/pull period")
    args = parser.parse_args(argv)
    network = NetworkModel(delay=args.delay, jitter=args.jitter, jitter_kind=args.jitter_kind)
    row = measure(
        args.size,
        args.seed,
        args.profile,
        network=network,
        threads=args.threads,
        min_syncs=args.min_syncs,
        direct=args.direct,
    )
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
