"""Escrow against lowerBound under a partition, measured: the run of
``tests/chaos/escrow.py`` (four ``grid agent`` processes in network namespaces, each
scraping the token counter its gateway serves; the load at one site, then another, then
the mesh split in two halves that both spend) repeated ``--runs`` times, one fresh mesh
each, then per run and as medians:

- what the escrowed tenant's gateways granted against the cap (overspend 0 by
  construction, measured) and what the lowerBound tenant's granted (its overspend);
- the rebalancing time: from a load shift to the moment the site the load moved to had
  allowance for all of it (refused nothing for 2 s).

Each run first waits for a window its agents may claim shares of (up to two minutes).
Needs root and iproute2 (``ip netns``).

    sudo .venv/bin/python bench/bench_escrow.py --runs 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from chaos import netns
from chaos.escrow import BOUNDED, ESCROW, EscrowOutcome, escrow_mesh, play


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh meshes to run (default 3)")
    args = parser.parse_args()
    reason = netns.unavailable_reason()
    if reason is not None:
        print(f"bench_escrow: {reason}", file=sys.stderr)
        return 2
    netns.cleanup_stale()
    outcomes: list[EscrowOutcome] = []
    with tempfile.TemporaryDirectory(prefix="grid-escrow-") as scratch:
        for run in range(args.runs):
            with escrow_mesh(Path(scratch) / f"run-{run}") as mesh:
                outcome = play(mesh)
            print(f"run {run + 1}: {outcome.report()}", flush=True)
            outcomes.append(outcome)
    escrow = [o.overspend(ESCROW) for o in outcomes]
    bounded = [o.overspend(BOUNDED) for o in outcomes]
    rebalancing = [s for o in outcomes for s in o.rebalancing_s]
    print(
        f"{len(outcomes)} runs: overspend during a partition, median escrow "
        f"{statistics.median(escrow)} (max {max(escrow)}), lowerBound "
        f"{statistics.median(bounded)} (max {max(bounded)}); rebalancing after a load "
        f"shift median {statistics.median(rebalancing):.2f} s, max {max(rebalancing):.2f} s "
        f"({len(rebalancing)} shifts)"
    )
    return 1 if any(escrow) else 0


if __name__ == "__main__":
    sys.exit(main())
