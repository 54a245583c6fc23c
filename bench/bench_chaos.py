"""Chaos soak: seeded schedules of partitions, one-way loss, pauses, crashes and leaves
(with provider edits and budget spends throughout) played back to back against four
``grid agent`` processes in network namespaces, then the figures:

- time from the heal to one view (every site's overlay equal to a fresh render of everyone's
  current resources, every record and every spend everywhere), p50 / p99 / max, against the
  SWIM detection bound ``2(N-1)·probeInterval + suspicionTimeout``;
- records lost and spend lost (must be 0), routes to departed sites (must be 0), and spend
  that only a killed process knew (the harness waits for spend to reach another process
  before killing one; this counts what never did);

per family of schedules (partitions, one-way, pauses, restarts, mixed) and in all. Needs
root and iproute2 (``ip netns``); the mesh lives in namespaces with addresses in
10.77.0.0/24 that exist nowhere else.

    sudo .venv/bin/python bench/bench_chaos.py --minutes 30 [--seed N] [--families pauses restarts]

Each failing schedule is printed with its seed, the schedule and the command that replays it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from chaos import netns
from chaos.schedule import FAMILIES, figures
from chaos.soak import SOAK_ORDER, soak
from grid.membership import SwimConfig


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long to play (default 10)")
    parser.add_argument("--seed", type=int, help="first seed (default: random)")
    parser.add_argument("--families", nargs="+", choices=sorted(FAMILIES), default=list(SOAK_ORDER))
    parser.add_argument("--keep", type=Path, help="keep the meshes' files here (logs, views)")
    args = parser.parse_args()
    reason = netns.unavailable_reason()
    if reason is not None:
        print(f"bench_chaos: {reason}", file=sys.stderr)
        return 2
    netns.cleanup_stale()
    with tempfile.TemporaryDirectory(prefix="grid-chaos-") as scratch:
        root = args.keep or Path(scratch)
        outcomes = soak(root, args.minutes, seed=args.seed, families=tuple(args.families))
    bound = SwimConfig(0.5, 1.5).detection_bound(4)
    print(figures(outcomes, bound))
    failed = [o for o in outcomes if not o.ok]
    if failed:
        print(f"{len(failed)} of {len(outcomes)} schedules failed; replay them with:")
        for outcome in failed:
            print(f"  {outcome.schedule.rerun_command()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
