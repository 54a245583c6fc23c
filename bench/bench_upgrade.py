"""Rolling upgrades of a mixed-version mesh, N times: four ``grid agent`` processes in
network namespaces start on the previous release (``compat/previous.txt``, built by
``scripts/previous-release``), are moved one at a time to the current code under load
(provider edits, signals changes, budget spends), and one is rolled back; the same run as
``tests/chaos/test_upgrade.py`` (see ``tests/chaos/upgrade.py``), on a fresh mesh each time.
Then the figures, medians over the runs:

- the time from the start (every site on the previous release) to one view;
- for each step (each upgrade, the rollback), the time from the restarted agent's start to
  one view (every overlay equal to a fresh render, every record and every spend
  everywhere), and over every restart p50 / p99 / max.

Needs root and iproute2 (``ip netns``), like ``bench/bench_chaos.py``.

    sudo .venv/bin/python bench/bench_upgrade.py --runs 10 [--seed N] [--keep DIR]

A failing run is printed whole, with the command that replays it.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from chaos import netns
from chaos.upgrade import UpgradeRun, figures, previous_of, rolling_upgrade
from support.previous import PreviousReleaseUnavailable, previous_release


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="how many rolling upgrades (default 5)")
    parser.add_argument("--seed", type=int, help="first seed (default: random)")
    parser.add_argument("--keep", type=Path, help="keep the meshes' files here (logs, views)")
    args = parser.parse_args()
    reason = netns.unavailable_reason()
    if reason is not None:
        print(f"bench_upgrade: {reason}", file=sys.stderr)
        return 2
    try:
        build = previous_release()
    except PreviousReleaseUnavailable as error:
        print(f"bench_upgrade: the previous release is not built: {error}", file=sys.stderr)
        return 2
    netns.cleanup_stale()
    previous = previous_of(build)
    base = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**9)
    print(f"bench_upgrade: {args.runs} runs, seeds from {base}, previous = {previous.label}")
    runs: list[UpgradeRun] = []
    with tempfile.TemporaryDirectory(prefix="grid-upgrade-") as scratch:
        root = args.keep or Path(scratch)
        for index in range(args.runs):
            run = rolling_upgrade(root / f"run-{index + 1}", previous, seed=base + index)
            runs.append(run)
            times = run.restart_times
            took = (
                f"restart -> one view median {statistics.median(times):.2f}s, max {max(times):.2f}s"
                if times
                else "no restart reached one view"
            )
            verdict = "ok" if run.ok else "FAILED"
            print(
                f"[{index + 1}] seed={run.seed}: {verdict}, {took}, {run.seconds:.0f}s", flush=True
            )
            if not run.ok:
                print(run.report(), flush=True)
    print(figures(runs))
    failed = [run for run in runs if not run.ok]
    if failed:
        print(f"{len(failed)} of {len(runs)} runs failed; replay them with:")
        for run in failed:
            print(
                f"  GRID_UPGRADE_SEED={run.seed} .venv/bin/python -m pytest "
                "tests/chaos/test_upgrade.py -s"
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
