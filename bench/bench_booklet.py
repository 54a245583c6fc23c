"""Booklet benchmark: how long ``grid booklet`` takes to build, and what each chapter
weighs.

Measures, as medians over repeated runs in this process:

- building the whole booklet (``build_site``: 24 recorded SWIM runs, the CRDT exploration,
  the scoring tables and the pages), and each of its three data parts, against two
  baselines: recording one SWIM run (16 nodes, 20 % loss, with the crash) and one
  ``grid explain`` of the scoring scenario (what the served API computes per request);
- the weight of each chapter (page, shared and own assets, data; SWIM with every run the
  controls can load) against its data alone, and gzipped, as a server could send it;
- what the simulator's message log costs (the SWIM chapter's source): the chapter's
  scenario run straight through with the log on against the same run with it off, at the
  chapter's largest size and at 200 nodes.

Run with ``.venv/bin/python bench/bench_booklet.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import statistics
import time
from collections.abc import Callable
from typing import Any

from grid._native import Simulation
from grid.booklet import crdt, scoring, swim
from grid.booklet.site import CHAPTERS, Site, build_site


def median_seconds(action: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def data_names(site: Site, page: str) -> list[str]:
    own = page.removesuffix(".html")
    return [name for name in site.files if name.startswith(f"data/{own}")]


def swim_scenario(n: int, *, log: bool) -> None:
    """The SWIM chapter's run (a join at 10 s, a crash at 20 s, 80 s in all, 20 % loss),
    straight through, with or without the message log."""
    sim = Simulation(n, swim.SEED, loss=0.2, threads=1)
    start = sim.now
    sim.set_message_log(log, 10_000_000)
    sim.run_until(start + swim.JOIN_AFTER)
    sim.join(sim.add_node(), [swim.SEED_NODE])
    sim.run_until(start + swim.CRASH_AFTER)
    sim.crash(swim.CRASHED_NODE)
    sim.run_until(start + swim.RUN_FOR)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement")
    args = parser.parse_args()
    repeat = max(1, args.repeat)

    # The scenario's resources are read once per process (as a server does); read them
    # before timing so every run measures the same work.
    scoring.scenario_resources()
    one_run = median_seconds(lambda: swim.record_trace(16, 0.2, True), repeat * 4)
    one_explain = median_seconds(lambda: scoring.explain_inputs(scoring.base_inputs()), repeat * 4)
    whole = median_seconds(build_site, repeat)
    parts = {
        "SWIM runs": median_seconds(swim.all_traces, repeat),
        "CRDT exploration": median_seconds(crdt.explore, repeat),
        "scoring tables": median_seconds(scoring.precomputed_tables, repeat),
    }

    print(f"build time, median of {repeat} (baselines: median of {repeat * 4})")
    print(f"  whole booklet            {whole * 1000:8.1f} ms")
    for name, seconds in parts.items():
        print(f"  {name:<24} {seconds * 1000:8.1f} ms")
    print(f"  baseline: one SWIM run   {one_run * 1000:8.1f} ms   booklet = {whole / one_run:.0f}x")
    print(
        f"  baseline: one explain    {one_explain * 1000:8.1f} ms   "
        f"booklet = {whole / one_explain:.0f}x"
    )

    print("\nmessage log, the chapter's scenario straight through (medians)")
    for n, runs in ((16, repeat * 4), (200, repeat * 2)):
        # Alternate off and on so that both see the same machine load.
        off_times, on_times = [], []
        for _ in range(runs):
            off_times.append(median_seconds(functools.partial(swim_scenario, n, log=False), 1))
            on_times.append(median_seconds(functools.partial(swim_scenario, n, log=True), 1))
        off, on = statistics.median(off_times), statistics.median(on_times)
        print(
            f"  {n:>5} nodes   log off {off * 1000:8.1f} ms   log on {on * 1000:8.1f} ms"
            f"   on/off = {on / off:.2f} ({runs} runs)"
        )

    site = build_site()
    total = sum(len(content) for content in site.files.values())
    print(f"\npage weight ({len(site.files)} files, {total / 1024:.0f} KiB in all)")
    print(f"  {'chapter':<18} {'loaded':>10} {'data alone':>11} {'ratio':>6} {'gzipped':>9}")
    for chapter in CHAPTERS:
        loaded = site.chapter_bytes(chapter)
        data = sum(len(site.files[name]) for name in data_names(site, chapter.page))
        own = chapter.page.removesuffix(".html")
        names = {chapter.page, "favicon.png", "booklet.css", "booklet.js", f"{own}.js"}
        names |= set(data_names(site, chapter.page))
        zipped = sum(len(gzip.compress(site.files[name])) for name in names)
        print(
            f"  {chapter.title:<18} {loaded / 1024:8.0f} KiB {data / 1024:7.0f} KiB"
            f" {loaded / data:6.2f} {zipped / 1024:6.0f} KiB"
        )


if __name__ == "__main__":
    main()
