"""grid.simbench and ``grid bench convergence`` at tiny sizes."""

from __future__ import annotations

import io
import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from grid._native import run_state_scenario
from grid.cli import main
from grid.errors import SimulationError
from grid.simbench.plot import render_svg
from grid.simbench.profiles import GRID, MEMBERLIST_LAN, epidemic_rounds, profile
from grid.simbench.progress import Progress
from grid.simbench.report import render
from grid.simbench.runner import (
    DEFAULT_SIZES,
    QUICK_SIZES,
    Plan,
    SpeedProbeError,
    Verdict,
    measure_speed,
    run_plan,
    targets,
    verdict,
)
from grid.simbench.scenarios import Context, failure_runs, form_cluster, join_runs
from grid.simbench.speed import measure
from grid.simbench.state import (
    MEMORY_LIMIT,
    StatePlan,
    estimated_memory,
    items_per_site,
    state_row,
)
from grid.simbench.stats import (
    coverage_time,
    pooled_cdf,
    quantile,
    spread,
    tail_miss_bound,
    uninformed_by_round,
)


def test_quantiles_interpolate() -> None:
    assert quantile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert quantile([1.0, 2.0], 0.5) == 1.5
    assert quantile([5.0], 0.99) == 5.0
    assert quantile([0.0, 10.0], 0.99) == pytest.approx(9.9)
    with pytest.raises(ValueError, match="no values"):
        quantile([], 0.5)
    with pytest.raises(ValueError, match="between 0 and 1"):
        quantile([1.0], 1.5)
    assert spread([]) is None
    assert spread([1.0, 2.0, 3.0]) == {"p50": 2.0, "p99": pytest.approx(2.98), "max": 3.0}


def test_coverage_counts_the_whole_population() -> None:
    delays = [0.1, 0.2, 0.3, 0.4]
    assert coverage_time(delays, 4, 0.5) == 0.2
    assert coverage_time(delays, 4, 1.0) == 0.4
    assert coverage_time(delays, 5, 1.0) is None  # one member never learned
    assert coverage_time(delays, 100, 0.99) is None
    curve = pooled_cdf([(delays, 4), ([0.2], 2)], points=5)
    assert curve[0] == (0.1, pytest.approx((0.25 + 0.0) / 2))
    assert curve[-1] == (0.4, pytest.approx((1.0 + 0.5) / 2))
    assert [t for t, _ in curve] == sorted({t for t, _ in curve})
    assert pooled_cdf([([], 3)]) == []


def test_profiles_and_the_epidemic_bound() -> None:
    grid = profile(GRID, 1000)
    assert (grid.probe_interval, grid.suspicion_timeout, grid.gossip_interval) == (5.0, 10.0, 1.0)
    lan = profile(MEMBERLIST_LAN, 1000)
    assert lan.gossip_interval == pytest.approx(0.2)
    assert lan.suspicion_timeout == pytest.approx(12.0)
    assert profile(MEMBERLIST_LAN, 5).suspicion_timeout == pytest.approx(4.0)
    # Pittel's log2 N + ln N for fanout 1.
    assert epidemic_rounds(1024, 1) == pytest.approx(10 + math.log(1024))
    assert epidemic_rounds(10_000, 3) == pytest.approx(math.log(10_000, 4) + math.log(10_000) / 3)
    with pytest.raises(ValueError, match="unknown profile"):
        profile("consul", 10)


def test_join_and_failure_runs_share_a_large_cluster() -> None:
    ctx = Context()
    lan = profile(MEMBERLIST_LAN, 30)
    shared = form_cluster(29, 1, lan, ctx, label="shared")
    joins = join_runs(30, [1, 2], lan, ctx, shared)
    assert [run.size for run in joins] == [30, 31]  # the second joined the first's cluster
    for run in joins:
        assert run.coverage(1.0) is not None
        assert run.coverage(0.5) <= run.coverage(1.0)  # type: ignore[operator]
        assert run.joiner_coverage(0.99) is not None
    crashes = failure_runs(30, [1, 2], lan, ctx, shared)
    assert [crash.observers for crash in crashes] == [30, 29]  # 31 members, then one down
    for crash in crashes:
        assert crash.false_positives == 0
        assert crash.first_suspicion is not None and crash.everywhere is not None
        assert crash.first_suspicion < crash.everywhere
    alone = failure_runs(30, [3], lan, ctx, None)
    assert alone[0].observers == 29


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    plan = Plan(
        scenarios=("join", "failure", "accuracy", "partition"),
        sizes=(20,),
        runs=1,
        quick=True,
    )
    return run_plan(plan, Progress(None))


def test_a_plan_reports_every_scenario_under_both_profiles(report: dict[str, Any]) -> None:
    json.dumps(report)  # JSON-ready throughout
    for scenario in ("join", "failure", "partition"):
        assert {row["profile"] for row in report[scenario]} == {GRID, MEMBERLIST_LAN}
    join = {row["profile"]: row for row in report["join"]}
    assert join[GRID]["reached_all"] == 1.0
    assert join[GRID]["epidemic_bound_rounds"] == pytest.approx(epidemic_rounds(20, 3))
    assert join[GRID]["grid_vs_memberlist"]["seconds/100%/p50"] > 1.0  # slower gossip
    assert join[GRID]["cdf"][-1][1] == pytest.approx(1.0)
    accuracy = report["accuracy"]
    assert len(accuracy) == 2 * 3  # two profiles, 10% and 20% loss and a slow node
    assert {row["loss"] for row in accuracy} == {0.0, 0.1, 0.2}
    partition = {row["profile"]: row for row in report["partition"]}
    assert partition[GRID]["split_complete"] == 1.0
    assert partition[GRID]["converged"] == 1.0
    # The targets name sizes this plan does not run: each is unproven, not run.
    targets = report["targets"]
    assert [target["met"] for target in targets] == [None] * 5
    assert all(target["reason"].startswith("not run: no N=") for target in targets)
    assert "(--quick)" in targets[0]["reason"]
    text = render(report)
    assert text.startswith("SWIM convergence (grid bench convergence)\n")
    for heading in ("Join dissemination", "Failure detection", "Accuracy", "Partition"):
        assert heading in text
    assert "MISSED" not in text


def test_the_plot_is_an_svg_with_one_curve_per_row(report: dict[str, Any]) -> None:
    root = ET.fromstring(render_svg(report))
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    curves = root.findall(".//{http://www.w3.org/2000/svg}polyline")
    assert len(curves) == len(report["join"]) + len(report["failure"])
    panels = [g.get("data-scenario") for g in root.iter("{http://www.w3.org/2000/svg}g")]
    assert [p for p in panels if p] == ["join", "failure", "accuracy", "partition"]
    empty = render_svg({"plan": {}})
    ET.fromstring(empty)
    assert "no results to plot" in empty


def test_speed_is_measured_in_virtual_per_wall_seconds() -> None:
    from grid.simbench.profiles import NetworkModel

    row = measure(40, 1, GRID, network=NetworkModel(), threads=1)
    # One push/pull period holds about one sync per node, and converged peers' view
    # digests agree: nearly every request and answer leaves its members out.
    assert row["virtual_seconds"] == row["push_pull_period"]
    assert 20 <= row["syncs"] <= 60
    assert row["sync_members_left_out"] >= row["syncs"]
    assert row["speed"] > 1.0
    assert row["peak_rss_bytes"] > 0


def test_the_command_prints_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    plot = tmp_path / "cdf.svg"
    argv = ["bench", "convergence", "--scenario", "join", "--sizes", "20", "--runs", "2"]
    assert main([*argv, "--json", "--plot", str(plot)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [row["size"] for row in report["join"]] == [20, 20]
    assert report["join"][0]["runs"] == 2
    ET.parse(plot)
    assert main(argv) == 0
    assert "Join dissemination" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--sizes", "ten"], "--sizes"),
        (["--sizes", "2"], "at least 3"),
        (["--scenario", "gossip"], "unknown scenario"),
        (["--runs", "0"], "runs"),
        (["--threads", "0"], "--threads"),
        (["--delay", "0"], "--delay"),
        (["--plot", "/no/such/dir/x.svg"], "--plot"),
        (["--profiles", "consul"], "unknown profile"),
        (["--profiles", ","], "at least one profile"),
        (["--losses", "0.1,x"], "--losses"),
        (["--losses", "1.5"], "losses"),
        (["--accuracy-minutes", "0"], "accuracy minutes"),
        (["--state-joins", "0"], "--state-joins must be at least 1"),
        (["--state-changes", "0"], "--state-changes"),
        (["--state-start", "grown"], "--state-start must be one of growing, converged"),
    ],
)
def test_bad_options_exit_2(
    options: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "convergence", "--sizes", "20", *options]) == 2
    assert message in capsys.readouterr().err


def test_bench_alone_prints_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench"]) == 2
    assert "convergence" in capsys.readouterr().err


def test_the_progress_bar_draws_only_where_asked() -> None:
    stream = io.StringIO()
    bar = Progress(stream)
    bar.show("forming", 1, 4)
    bar.show("forming", 4, 4)
    assert "#" in stream.getvalue() and "100.0% forming" in stream.getvalue()
    bar.clear()
    assert stream.getvalue().endswith("\r")
    silent = Progress(None)
    silent.show("x", 1, 2)
    silent.clear()


def test_targets_need_enough_runs_to_be_met() -> None:
    def join(runs: int, within: float) -> dict[str, Any]:
        return {
            "size": 10_000,
            "profile": GRID,
            "runs": runs,
            "within_target_rounds": within,
            "rounds": {"100%": {"p50": 6.0, "p99": 6.1, "max": 6.2}},
        }

    few = targets({"join": [join(3, 1.0)]})
    assert few[0]["met"] is None
    assert few[0]["reason"].startswith("too few samples: 3 passing runs show 36.84%")
    assert targets({"join": [join(3000, 1.0)]})[0]["met"] is True
    assert targets({"join": [join(3, 2 / 3)]})[0]["met"] is False
    text = render({"plan": _PLAN, "targets": few})
    assert "unproven" in text and "too few samples" in text
    # Fewer runs can meet it when their measured tail leaves a miss very unlikely.
    thin = targets({"join": [{**join(200, 1.0), "miss_bound": 1e-9}]})[0]
    assert thin["met"] is True
    assert "estimated miss chance 1.0e-09" in thin["measured"]
    fat = targets({"join": [{**join(200, 1.0), "miss_bound": 0.01}]})[0]
    assert fat["met"] is None
    assert targets({"join": [{**join(200, 0.99), "miss_bound": 1e-9}]})[0]["met"] is False


def test_the_tail_estimate_extrapolates_the_slowest_measured_decay() -> None:
    # Two runs of 100 members learning at 0.5 s steps of 1 s rounds.
    early = [0.5] * 50 + [1.5] * 40 + [2.5] * 9 + [3.5]
    late = [0.5] * 50 + [1.5] * 45 + [2.5] * 5
    curve = uninformed_by_round([(early, 100), (late, 100)], 1.0, 5)
    assert curve == pytest.approx([1.0, 0.5, 0.075, 0.005, 0.0, 0.0])
    # Slowest decay once half knew: 0.075 / 0.5 = 0.15 per round, from round 3 on.
    assert tail_miss_bound(curve, 100, 6.0) == pytest.approx(100 * 0.005 * 0.15**3)
    assert tail_miss_bound(curve, 100, 3.0) == 1.0
    assert tail_miss_bound([1.0, 1.0], 100, 6.0) is None


def test_a_short_accuracy_run_is_unproven_not_missed() -> None:
    def accuracy(false_downs: int, minutes: float) -> dict[str, Any]:
        return {
            "size": 100,
            "profile": GRID,
            "seed": 1,
            "loss": 0.10,
            "minutes": minutes,
            "false_declarations": false_downs,
        }

    short = targets({"accuracy": [accuracy(0, 5.0)]})
    assert [(t["met"], t["reason"]) for t in short] == [(None, "run too short: 5 of 30 minutes")]
    assert targets({"accuracy": [accuracy(0, 30.0)]})[0]["met"] is True
    # The figure at 10,000 members is checked too when it was run.
    large = targets({"accuracy": [{**accuracy(0, 30.0), "size": 10_000}]})
    assert [(t["target"], t["met"]) for t in large] == [
        ("zero false downs in 30 min at 10% loss, N=10000", True)
    ]
    # A false down in a short run is already a miss: no longer run can undo it.
    assert targets({"accuracy": [accuracy(2, 5.0)]})[0]["met"] is False
    text = render({"plan": _PLAN, "targets": short})
    assert "unproven" in text and "run too short" in text and "MISSED" not in text


def test_the_verdict_weighs_failures_then_length_then_samples() -> None:
    assert verdict(failures=0, samples=1) == Verdict(True)
    assert verdict(failures=1, samples=1) == Verdict(False)
    assert verdict(failures=0, samples=0) == Verdict(None, "no samples")
    # Run length: too short is unproven; any failure is MISSED however short the run.
    assert verdict(failures=0, samples=1, minutes=5, required_minutes=30) == Verdict(
        None, "run too short: 5 of 30 minutes"
    )
    assert verdict(failures=0, samples=1, minutes=None, required_minutes=30).met is None
    assert verdict(failures=0, samples=1, minutes=30, required_minutes=30) == Verdict(True)
    assert verdict(failures=3, samples=1, minutes=5, required_minutes=30) == Verdict(False)
    # Pass rates: K passing runs show 0.05^(1/K) at 95 % confidence.
    few = verdict(failures=0, samples=100, required_rate=0.999)
    assert few.met is None
    assert (
        few.reason == "too few samples: 100 passing runs show 97.05% at 95% confidence, not 99.9%"
    )
    assert verdict(failures=0, samples=2994, required_rate=0.999).met is None
    assert verdict(failures=0, samples=2995, required_rate=0.999).met is True
    assert verdict(failures=1, samples=100, required_rate=0.999).met is False
    # ... or fewer runs whose measured tail bounds the chance of a miss.
    tail = verdict(failures=0, samples=100, required_rate=0.999, miss_bound=1e-4)
    assert tail == Verdict(True)
    assert verdict(failures=0, samples=100, required_rate=0.999, miss_bound=0.01).met is None
    assert [v.label for v in (Verdict(True), Verdict(False), Verdict(None, "x"))] == [
        "met",
        "MISSED",
        "unproven",
    ]


def test_quick_drops_the_largest_cluster_and_the_deep_runs_at_1000() -> None:
    assert Plan().sizes == DEFAULT_SIZES == (100, 1000, 10_000)
    quick = Plan(quick=True)
    assert quick.sizes == QUICK_SIZES == (100, 1000)
    assert quick.accuracy_duration == 300.0
    assert quick.scenario_sizes("join") == [100, 1000]
    assert quick.scenario_sizes("accuracy") == quick.scenario_sizes("partition") == [100]
    assert quick.scenario_sizes("speed") == [1000]
    assert Plan().scenario_sizes("accuracy") == [100, 1000]
    assert Plan().scenario_sizes("speed") == [1000, 10_000]
    assert Plan(quick=True, sizes=(1000,)).scenario_sizes("accuracy") == [1000]
    assert Plan(quick=True, sizes=(20, 10_000)).sizes == (20, 10_000)  # given sizes stand
    # One size alone runs accuracy at it: the 10,000-member accuracy figure is one command.
    assert Plan(sizes=(10_000,)).scenario_sizes("accuracy") == [10_000]


_PLAN = {
    "sizes": [10_000],
    "seed": 1,
    "shared_from": 5000,
    "network": {"delay": 0.005, "jitter": 0.005, "jitter_kind": "exponential"},
}


def test_the_speed_probe_runs_in_its_own_process() -> None:
    from grid.simbench.profiles import NetworkModel

    row = measure_speed(40, 1, GRID, NetworkModel(), threads=1)
    assert row["size"] == 40
    assert row["speed"] > 1.0
    assert 0 < row["peak_rss_bytes"] < 2**30
    with pytest.raises(SpeedProbeError, match="consul"):
        measure_speed(40, 1, "consul", NetworkModel(), threads=1)


def test_the_state_scenario_reports_traffic_changes_and_catch_up(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["bench", "convergence", "--scenario", "state", "--sizes", "12", "--providers", "10"]
    argv += ["--state-window", "20", "--state-changes", "4"]
    assert main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (row,) = report["state"]
    # Two certificate chunks, gateway, metadata, 10 catalogues and one page a site.
    assert row["items"] == 12 * 15 == 12 * items_per_site(10)
    assert row["filled_after"] is not None and row["missing_after_fill"] == 0
    assert row["changes"] == 4 and row["changes_converged"] == 1.0
    assert 0 < row["change_seconds"]["p50"] <= row["change_seconds"]["max"] < 30
    assert row["catch_up"] is not None and row["joiner_items"] == row["items"]
    kinds = row["per_site"]
    assert kinds["broadcast"]["bytes_out"] > 0 and kinds["sync-response"]["bytes_out"] > 0
    # No loss: what sites send in the window they receive, but for what is in flight at its ends.
    assert row["bytes_in_per_site"] == pytest.approx(row["bytes_out_per_site"], rel=0.05)
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert text.startswith("The state plane (grid bench convergence)\n")
    assert "State plane" in text


def test_a_converged_state_start_skips_the_fill_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["bench", "convergence", "--scenario", "state", "--sizes", "12", "--providers", "10"]
    argv += ["--state-window", "20", "--state-changes", "2", "--state-start", "converged"]
    assert main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["plan"]["state"]["start"] == "converged"
    (row,) = report["state"]
    assert row["start"] == "converged" and row["filled_after"] is None
    assert row["missing_after_fill"] == 0 and row["joiner_items"] == row["items"] == 12 * 15
    assert row["per_site"]["broadcast"]["bytes_out"] > 0 and row["changes_converged"] == 1.0
    assert main(argv) == 0
    assert " converged " in capsys.readouterr().out
    with pytest.raises(SimulationError, match='start must be "growing" or "converged"'):
        run_state_scenario(4, 2, start="grown")
    with pytest.raises(SimulationError, match="joins must be at least 1"):
        run_state_scenario(4, 2, joins=0)


def test_an_empty_site_joins_again_in_each_life_and_each_catch_up_is_reported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["bench", "convergence", "--scenario", "state", "--sizes", "12", "--providers", "10"]
    argv += ["--state-window", "10", "--state-changes", "1", "--state-start", "converged"]
    assert main([*argv, "--state-joins", "3", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["state"]
    assert row["joins"] == 3 and len(row["catch_ups"]) == 3
    assert all(life["items"] == row["items"] and life["bytes_in"] > 0 for life in row["catch_ups"])
    seconds = sorted(life["catch_up"] for life in row["catch_ups"])
    assert row["catch_up"] == seconds[1] and row["catch_up_seconds"]["max"] == seconds[2]
    assert row["join_bytes_in"]["p50"] > 0 and row["joiner_items"] == row["items"]


def test_a_state_size_whose_stores_do_not_fit_is_skipped_with_what_it_needs() -> None:
    from grid.simbench.profiles import NetworkModel

    row = state_row(5000, 1, StatePlan(), NetworkModel(), threads=1)
    assert "skipped" in row and "GiB" in row["skipped"]
    # Thousands are separated in the size as in the counts after it.
    assert row["skipped"].startswith("its stores need about 2,7")
    assert estimated_memory(1000, 5) < MEMORY_LIMIT < estimated_memory(1000, 10)
