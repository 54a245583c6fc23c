"""foca's update backlog and the simulator's memory under loss: a converged cluster of the
``grid`` profile runs with independent loss on every message (as ``grid bench convergence
--scenario accuracy`` does), and every ``--every`` virtual seconds this prints the pending
membership updates summed over every node and at the busiest one, the simulator's
suspicions so far, and the process's resident memory. What each pending update costs in
memory is the growth of the one over the growth of the other.

Run: ``.venv/bin/python bench/bench_sim_backlog.py [--size 1000] [--loss 0.2] [--minutes 4]
[--every 20] [--threads 2] [--seed 1]``
"""

from __future__ import annotations

import argparse
import os
import time

from grid.simbench.profiles import GRID, profile
from grid.simbench.scenarios import Context, form_cluster

_PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--loss", type=float, default=0.2)
    parser.add_argument("--minutes", type=float, default=4.0, help="virtual minutes")
    parser.add_argument("--every", type=float, default=20.0, help="virtual seconds")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    swim = profile(GRID, args.size)
    ctx = Context(threads=args.threads)
    sim = form_cluster(args.size, args.seed, swim, ctx, label="backlog", loss=args.loss)
    formed, started, start = resident_mib(), time.monotonic(), sim.now
    print(f"N={args.size} loss={args.loss:.0%}: formed, resident {formed:,.0f} MiB")
    print("virtual s  wall s  resident MiB  backlog, all nodes  busiest  suspicions")
    while sim.now - start < args.minutes * 60:
        sim.run_until(sim.now + args.every)
        stats = sim.stats()
        print(
            f"{sim.now - start:9.0f} {time.monotonic() - started:7.0f} "
            f"{resident_mib():13,.0f} {stats['updates_backlog']:19,d} "
            f"{stats['updates_backlog_max']:8,d} {stats['suspicions']:11,d}",
            flush=True,
        )


if __name__ == "__main__":
    main()
