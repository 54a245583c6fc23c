"""The engine's benchmarks under two builds of Grid, side by side: what a change to the code
costs or saves, measured on the same machine in the same run.

Each build is a Python environment with Grid installed (``--before`` and ``--after``: the
interpreters of two virtualenvs, e.g. one built from an earlier commit with ``pip install``
and this checkout's ``.venv``). Every benchmark below runs once per round under each build
in turn (before, after, before, ...), so that load from other work on the machine falls on
both alike. The micro-benchmarks run this checkout's script under either interpreter (the
workload is the same; the code measured is the build's); ``grid bench mesh`` runs each
build's own command with ``--no-baseline --json``. The figures are medians over rounds,
with each side's spread (min..max over rounds) and the ratio after/before: lower is better
for every figure.

Run: ``.venv/bin/python bench/bench_trees.py --before /path/to/venv/bin/python
[--after .venv/bin/python] [--rounds 5] [--only engine,render,metrics,mesh-10,mesh-100]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent

MESH_FIGURES = (
    "cpu_share",
    "swim_cpu_share",
    "rss_mb_median",
    "bytes_out_per_s",
    "apply_us_mean",
    "render_ms_p50",
    "render_cpu_ms_p50",
    "delivery_ms_p50",
    "delivery_ms_p99",
    "latency_ms_p50",
    "latency_ms_p99",
)


def _script(name: str, *args: str) -> Callable[[Path], list[str]]:
    return lambda python: [str(python), str(BENCH / name), *args, "--json"]


def _mesh(sites: int, providers: int, duration: str) -> Callable[[Path], list[str]]:
    def command(python: Path) -> list[str]:
        # Each build's own command line: its own code measures its own site.
        grid = python.parent / "grid"
        return [
            str(grid), "bench", "mesh", "--no-baseline", "--json",
            "--sites", str(sites), "--providers-per-site", str(providers),
            "--duration", duration,
        ]  # fmt: skip

    return command


def _script_figures(output: str) -> dict[str, float]:
    return {k: float(v) for k, v in json.loads(output.splitlines()[-1])["figures"].items()}


def _mesh_figures(output: str) -> dict[str, float]:
    run = json.loads(output)["runs"]["current"]
    return {key: float(run[key]) for key in MESH_FIGURES if run.get(key) is not None}


@dataclass(frozen=True)
class Benchmark:
    command: Callable[[Path], list[str]]
    figures: Callable[[str], dict[str, float]]


BENCHMARKS = {
    "engine": Benchmark(_script("bench_engine.py"), _script_figures),
    "render": Benchmark(_script("bench_render.py", "--runs", "41"), _script_figures),
    "metrics": Benchmark(_script("bench_metrics.py"), _script_figures),
    "mesh-10": Benchmark(_mesh(10, 10, "60s"), _mesh_figures),
    "mesh-100": Benchmark(_mesh(100, 100, "60s"), _mesh_figures),
}


def run_once(benchmark: Benchmark, python: Path) -> dict[str, float]:
    command = benchmark.command(python)
    done = subprocess.run(command, capture_output=True, text=True, cwd=BENCH.parent, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return benchmark.figures(done.stdout)


def compare(benchmark: Benchmark, builds: dict[str, Path], rounds: int) -> dict[str, Any]:
    """Per figure: each build's median and spread over ``rounds``, and the ratio."""
    samples: dict[str, dict[str, list[float]]] = {label: {} for label in builds}
    for _ in range(rounds):
        for label, python in builds.items():
            for key, value in run_once(benchmark, python).items():
                samples[label].setdefault(key, []).append(value)
    report: dict[str, Any] = {}
    for key in samples["before"]:
        before, after = samples["before"][key], samples["after"].get(key, [])
        if not after:
            continue
        median_before, median_after = statistics.median(before), statistics.median(after)
        report[key] = {
            "before": median_before,
            "after": median_after,
            "before_spread": [min(before), max(before)],
            "after_spread": [min(after), max(after)],
            "ratio": median_after / median_before if median_before else None,
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="python of the earlier build")
    parser.add_argument("--after", type=Path, default=Path(sys.executable))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default=",".join(BENCHMARKS))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    names = [name for name in args.only.split(",") if name]
    unknown = [name for name in names if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmarks {unknown}; known: {', '.join(BENCHMARKS)}")
    builds = {"before": args.before, "after": args.after}
    reports = {}
    for name in names:
        reports[name] = compare(BENCHMARKS[name], builds, args.rounds)
        if not args.json:
            print(f"{name} ({args.rounds} rounds each, medians; spread min..max)")
            for key, figure in reports[name].items():
                low_b, high_b = figure["before_spread"]
                low_a, high_a = figure["after_spread"]
                ratio = figure["ratio"]
                print(
                    f"  {key:<20} before {figure['before']:>10.4g} ({low_b:.4g}..{high_b:.4g})"
                    f"  after {figure['after']:>10.4g} ({low_a:.4g}..{high_a:.4g})"
                    f"  ratio {'-' if ratio is None else f'{ratio:.3f}'}"
                )
            sys.stdout.flush()
    if args.json:
        print(json.dumps(reports, indent=2))


if __name__ == "__main__":
    main()
