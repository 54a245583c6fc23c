"""The site engine's decision pass at 100 peers x 10 providers: what a pass costs with nothing
new, with a peer's membership changing (a full rank and render), and what the outputs the
shells read every second cost (``statuses``).

The engine is bench_metrics' viewer: a site that took in every peer's items, with every
peer alive and trusted. The cases take turns, round after round, so that load from other
work on the machine falls on all alike; figures are medians in milliseconds. Run it under
two builds side by side with ``bench/bench_trees.py`` to compare them.

Run: ``.venv/bin/python bench/bench_engine.py [--rounds N] [--peers N] [--json]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from datetime import timedelta

from bench_metrics import NOW, build_viewer
from grid.engine import SiteEngine


def cases(engine: SiteEngine) -> dict[str, Callable[[], object]]:
    """The operations timed, each leaving the engine as a steady site would be."""
    moment = [NOW + timedelta(seconds=2)]
    peer = "site-001"
    address = "10.0.0.1:7946"

    def idle_pass() -> object:
        moment[0] += timedelta(milliseconds=10)
        return engine.refresh(moment[0])

    def render_pass() -> object:
        # Suspect, then alive again: each turn changes what routing reads, so the pass ranks
        # and renders every gateway (flushed: the pacing would hold back the second).
        moment[0] += timedelta(milliseconds=10)
        member = engine.members[peer]
        if member.state.value == "alive":
            engine.member_suspect(peer, address, member.generation, moment[0])
        else:
            engine.member_up(peer, address, member.generation, moment[0])
        result = engine.refresh(moment[0], flush=True)
        if not result.rendered:
            raise SystemExit("a membership change did not render")
        return result

    return {"idle_pass": idle_pass, "render_pass": render_pass, "statuses": engine.statuses}


def measure(operations: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median milliseconds of each operation; the first round warms up."""
    samples: dict[str, list[float]] = {name: [] for name in operations}
    for round_ in range(rounds + 1):
        for name, operation in operations.items():
            started = time.perf_counter()
            operation()
            elapsed = (time.perf_counter() - started) * 1000
            if round_:
                samples[name].append(elapsed)
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--peers", type=int, default=100)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    engine = build_viewer(args.peers)
    figures = measure(cases(engine), args.rounds)
    if args.json:
        print(json.dumps({"figures": figures}))
        return
    candidates = sum(
        len(o.overlay.candidates) for o in engine.overlays.values() if o.overlay is not None
    )
    print(f"engine of {len(engine.members)} peers, {candidates} candidates in its overlay:")
    for name, ms in figures.items():
        print(f"  {name:<12} median {ms:8.3f} ms")


if __name__ == "__main__":
    main()
