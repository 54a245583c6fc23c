"""The benchmarks in bench/ still run against the code of today (a bench that stopped
running measures nothing): each prints its figures, briefly, as JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def run_bench(script: str, *args: str) -> str:
    """What ``bench/<script>`` printed, run with ``args`` under this interpreter."""
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        cwd=BENCH.parent,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


@pytest.mark.parametrize(
    ("script", "args", "figures"),
    [
        ("bench_engine.py", ("--peers", "5", "--rounds", "2"), {"idle_pass", "render_pass"}),
        ("bench_render.py", ("--runs", "2"), {"render_ms", "memo_render_ms", "digest_ms"}),
        ("bench_metrics.py", ("--rounds", "1"), {"text_ms", "openmetrics_ms"}),
        (
            "bench_gateway_kinds.py",
            ("--peers", "5", "--rounds", "2"),
            {"one_kind", "both_kinds", "both_kinds_no_header"},
        ),
    ],
)
def test_a_bench_prints_its_figures(script: str, args: tuple[str, ...], figures: set[str]) -> None:
    printed = json.loads(run_bench(script, *args, "--json"))["figures"]
    assert isinstance(printed, dict)
    assert figures <= set(printed)
    assert all(value > 0 for value in printed.values()), printed


def test_bench_trees_compares_two_builds_figure_by_figure() -> None:
    # The same build on both sides: every figure is compared, with a ratio near 1.
    arguments = ["--before", sys.executable, "--after", sys.executable, "--rounds", "1"]
    report = json.loads(run_bench("bench_trees.py", *arguments, "--only", "engine", "--json"))
    engine = report["engine"]
    assert isinstance(engine, dict)
    assert {"idle_pass", "render_pass", "statuses"} <= set(engine)
    for figure in engine.values():
        assert figure["before"] > 0 and figure["after"] > 0
        assert figure["ratio"] == pytest.approx(figure["after"] / figure["before"])


def test_bench_propagation_measures_a_change_reaching_the_other_sites() -> None:
    printed = run_bench("bench_propagation.py", "--sites", "3", "--changes", "2")
    assert "metric change -> overlay elsewhere  p50" in printed, printed
    assert "SWIM-only crash -> removed" in printed, printed
