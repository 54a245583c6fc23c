"""SWIM convergence at 100, 1,000 and 10,000 members on the deterministic simulator.

The same runner as ``grid bench convergence``: join dissemination, failure detection,
accuracy under loss, partition and heal, and the simulator's speed and peak memory, each
under Grid's SWIM defaults and memberlist's LAN parameters (side by side, as ratios), next
to the epidemic bound. Every option of the command is accepted; see docs/convergence.md.

Run: ``.venv/bin/python bench/bench_convergence.py [--scenario join --sizes 1000 ...]``
"""

from __future__ import annotations

import sys

from grid.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "convergence", *sys.argv[1:]]))
