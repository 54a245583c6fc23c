"""``grid bench mesh`` through the CLI: a small real run (real agent process, real SWIM
peers, today's design from git beside it) whose report holds measured numbers, a real PNG,
and refusals before any run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from grid.meshbench.figures import (
    delivery_latencies,
    others_joins,
    probe_latencies,
    versions_skipped,
)
from grid.meshbench.report import render as render_mesh
from grid.meshbench.run import MAX_PEERS_ONE_EACH, PROVIDERS_PER_PEER, MeshPlan, verdicts

GRID = [sys.executable, "-m", "grid.cli"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
QUICK = [
    "bench",
    "mesh",
    "--sites",
    "5",
    "--providers-per-site",
    "3",
    "--scrape-interval",
    "2s",
    "--duration",
    "6s",
    "--warmup",
    "1s",
    "--joins",
    "2",
]
FIGURES = (
    "cpu_share",
    "rss_mb_median",
    "bytes_in_per_s",
    "bytes_out_per_s",
    "items_applied_per_s",
    "apply_us_mean",
    "renders_per_s",
    "render_ms_p50",
    "latency_ms_p50",
    "latency_ms_p99",
)


def grid(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GRID, *args], capture_output=True, text=True, timeout=600, env=env, check=False
    )


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    plot = tmp_path_factory.mktemp("mesh") / "mesh.png"
    done = grid(*QUICK, "--json", "--plot", str(plot))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), plot


def test_the_report_holds_figures_measured_for_both_designs(
    quick_run: tuple[dict[str, Any], Path],
) -> None:
    report, _ = quick_run
    assert report["plan"]["joins"] == 2
    assert report["plan"]["sites"] == 5 and report["plan"]["candidates"] == 16
    assert report["baseline"]["ran"], report["baseline"]["reason"]
    for label in ("current", "baseline"):
        run = report["runs"][label]
        assert run["candidates"] == 16
        assert 5.5 < run["window_s"] < 60
        for figure in FIGURES:
            assert isinstance(run[figure], float) and run[figure] > 0, (label, figure)
        assert 0 < run["cpu_share"] < 2
        assert 10 < run["rss_mb_median"] <= run["rss_mb_max"] < 2000
        # Every peer publishes as its providers move: the site takes items in all along.
        assert run["items_applied_per_s"] > 1
        assert run["renders"] >= 1
        assert run["probes_seen"] >= 1 and run["probes_missed"] == 0
        assert run["latency_ms_p50"] <= run["latency_ms_p99"] < 10_000
        # Each change's latency is listed, in the order of the changes.
        assert len(run["latencies_ms"]) == run["probes_seen"]
        assert max(run["latencies_ms"]) == pytest.approx(run["latency_ms_p99"], abs=0.1)
        assert len(run["deliveries_ms"]) <= run["probes"]
        # The gossip part of the latency (matched change by change in a test below); the
        # SWIM thread is part of the site's CPU (counted in clock ticks of 10 ms: a quiet
        # node's thread may not reach one in a 6 s window).
        assert 0 <= run["delivery_ms_p50"] <= run["delivery_ms_p99"] < 10_000
        assert 0 <= run["swim_cpu_share"] < run["cpu_share"]
    current, baseline = report["runs"]["current"], report["runs"]["baseline"]
    # The site joined a formed mesh, then restarted twice: each restart timed until it
    # trusted every site again and ranked every candidate (only the current design's).
    assert current["formed_s"] > 0 and current["converge_s"] > 0
    assert len(current["restarts"]) == 2 and baseline["restarts"] == []
    for restart in current["restarts"]:
        assert 0 < restart["trusted_s"] <= restart["ranked_s"] < 60
        # What it received until then: at least the items it held, a few hundred bytes each.
        assert restart["bytes_in"] > restart["items"] * 100 > 0
    assert current["restart_ranked_s_p50"] <= current["restart_ranked_s_p99"]
    assert current["restart_items"] > 0 and current["restart_bytes_in_p50"] > 0
    # The peers' CPU through the restarts was read (in clock ticks of 10 ms: restarts of a
    # fraction of a second may not reach one).
    assert 0 <= current["restart_peers_cpu_share"] < 4
    assert baseline["restart_peers_cpu_share"] is None
    # Measured, not constants: the two designs (and their memory samples) differ.
    assert current["cpu_share"] != baseline["cpu_share"]
    assert current["bytes_in_per_s"] != baseline["bytes_in_per_s"]
    assert [t["target"] for t in report["targets"]] == [
        "cpu",
        "memory",
        "gossip_in",
        "gossip_out",
        "latency_p99",
    ]
    assert not any(t["at_target_size"] for t in report["targets"])


def test_the_plot_is_a_real_png(quick_run: tuple[dict[str, Any], Path]) -> None:
    _, plot = quick_run
    data = plot.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert b"<svg" not in data
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width >= 800 and height >= 400


def test_the_text_report_names_the_targets_met_or_missed(tmp_path: Path) -> None:
    done = grid(*QUICK[:-6], "--duration", "3s", "--warmup", "0s", "--no-baseline")
    assert done.returncode == 0, done.stderr
    assert "today's design did not run: not asked for (--no-baseline)" in done.stdout
    assert re.search(r"site joined \(every candidate\) after +[0-9.]+ s", done.stdout)
    lines = done.stdout.split("scale targets (100 sites", 1)[1].splitlines()[1:6]
    assert len(lines) == 5, done.stdout
    assert all(line.endswith((" met", " MISSED")) for line in lines), lines


OTHERS_JOIN = [
    "bench",
    "mesh",
    "--sites",
    "3",
    "--providers-per-site",
    "3",
    "--scrape-interval",
    "2s",
    "--duration",
    "10s",
    "--warmup",
    "1s",
    "--no-baseline",
    "--others-join",
    "2",
]


def test_another_site_joining_during_the_measurement_is_measured_apart() -> None:
    done = grid(*OTHERS_JOIN, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["plan"]["others_join"] == 2
    run = report["runs"]["current"]
    # The joiner joined twice and caught up each time, with the whole mesh's items (the
    # probe's and the three sites' at least) and what carried them.
    assert len(run["others_joins"]) == 2 and run["others_join_caught_up"] == 2
    for life in run["others_joins"]:
        assert 0 < life["caught_up_s"] < 30
        assert life["items"] >= 4 and life["bytes_in"] > life["items"] * 100
        # Each join starts just before a probe change: one at least is inside its catch-up.
        assert life["probes"] >= 1
        assert life["site_bytes_out"] is not None
    assert run["others_join_caught_up_s_p50"] <= run["others_join_caught_up_s_p99"] < 30
    # The measured site took the joiner's items in: a site of the mesh to it.
    assert run["others_join_items_taken"] > 0
    # The site's change -> overlay latency over the changes inside the catch-ups, measured
    # from each of them, and over the rest of the window.
    assert run["others_join_probes"] >= 2 and run["others_join_probes_missed"] == 0
    assert len(run["others_join_latencies_ms"]) == run["others_join_probes_seen"] >= 1
    assert 0 < run["others_join_latency_ms_p50"] <= run["others_join_latency_ms_p99"] < 10_000
    assert run["others_join_steady_probes"] >= 1
    assert run["others_join_probes"] + run["others_join_steady_probes"] == run["probes"]
    assert 0 < run["others_join_steady_latency_ms_p50"] < 10_000
    # The site's CPU in and out of the catch-ups, from its samples (and the peers' CPU, in
    # clock ticks of 10 ms: catch-ups of a fraction of a second may not reach one).
    assert 0 < run["others_join_cpu_share"] < 2 and 0 < run["others_join_steady_cpu_share"] < 2
    # The SWIM thread's share of each, from the thread's own clock ticks (10 ms): a node
    # of three sites may not use one tick in a few seconds, so 0 is a reading (as for the
    # window's swim_cpu_share). Over catch-ups of a fraction of a second a tick crossed can
    # put it above the process's share; over the rest of the window it stays below.
    assert 0 <= run["others_join_swim_cpu_share"] < 2
    assert 0 <= run["others_join_steady_swim_cpu_share"] <= run["others_join_steady_cpu_share"]
    assert 0 <= run["others_join_peers_cpu_share"] < 4
    assert run["others_join_steady_bytes_out_per_s"] > 0
    assert run["others_join_steady_bytes_in_per_s"] > 0
    # The joiner comes and goes: the candidates and sites counted are the mesh's without it.
    assert run["candidates"] == report["plan"]["candidates"] == 10
    targets = [t["target"] for t in report["targets"]]
    assert targets[-2:] == ["cpu_while_joining", "latency_p99_while_joining"]
    # The text report shows them as it shows the restarts.
    text = render_mesh(report)
    assert "joins, catches up and leaves 2 times during the measurement" in text
    assert re.search(r"another site joins -> caught up, p99 +[0-9.]+ s", text)
    assert re.search(r"change -> overlay while it catches up, p99 +[0-9]+ ms", text)
    assert re.search(r"CPU while it catches up +[0-9.]+ %", text)
    assert re.search(r"joins of another site caught up +2 of 2", text)


def test_without_matplotlib_a_png_plot_exits_2_before_the_run(tmp_path: Path) -> None:
    plot = tmp_path / "mesh.png"
    # The CLI in a Python where matplotlib cannot be imported (as without the plot extra).
    blocked = "import sys; sys.modules['matplotlib'] = None; from grid.cli import main; "
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            blocked + "sys.exit(main(sys.argv[1:]))",
            *QUICK,
            "--plot",
            str(plot),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "PNG needs the plot extra" in done.stderr
    assert "grid bench mesh:" in done.stderr and not plot.exists()


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        (["--sites", "1"], "--sites must be at least 2"),
        (["--providers-per-site", "0"], "--providers-per-site must be from 1 to 1000"),
        (["--scrape-interval", "soon"], "--scrape-interval must be a duration"),
        (["--duration", "0s"], "--duration must be at least 1 s"),
        (["--sites", "5", "--peers", "9"], "--peers must be from 1 to 4"),
        (
            ["--sites", "300", "--providers-per-site", "100", "--peers", "4"],
            "--peers 4 makes a peer carry 7500 providers, more than the 4096 a site "
            "publishes: use --peers 8 or more",
        ),
        (["--plot", "mesh.svg"], "the mesh plot is a PNG"),
        (["--others-join", "-1"], "--others-join must be from 0 to 100, got -1"),
        (["--others-join", "101"], "--others-join must be from 0 to 100, got 101"),
        (["--others-join", "two"], "--others-join: invalid int value"),
        (
            ["--others-join", "5", "--duration", "10s"],
            "--others-join 5 needs a --duration of at least 20 s (4 s per join), got 10 s",
        ),
    ],
)
def test_bad_options_exit_2_saying_why(options: list[str], reason: str) -> None:
    done = grid("bench", "mesh", *options)
    assert done.returncode == 2
    assert reason in done.stderr


@pytest.mark.parametrize(
    ("sites", "providers", "peers"),
    [(10, 10, 9), (11, 10, 4), (100, 100, 4), (300, 100, 12), (100, 1000, 40)],
)
def test_above_ten_sites_the_peers_carry_at_most_a_hundred_sites_share_each(
    sites: int, providers: int, peers: int
) -> None:
    plan = MeshPlan(sites=sites, providers_per_site=providers)
    assert plan.peer_count == peers
    if sites > MAX_PEERS_ONE_EACH:
        assert -(-(sites - 1) // peers) * providers <= PROVIDERS_PER_PEER + providers


def test_probe_latency_is_matched_to_the_change_it_follows() -> None:
    probes = [{"t": 10.0, "queue": 500.0}, {"t": 12.0, "queue": 0.0}, {"t": 14.0, "queue": 500.0}]
    seen = [(9.0, 3.0), (10.2, 1.0), (12.5, 3.0)]
    latencies, missed = probe_latencies(probes, seen, end=20.0)
    assert latencies == pytest.approx([0.2, 0.5])
    assert missed == 1  # the last change never reached the overlay, 6 s before the end


def test_delivery_is_the_first_item_that_carries_each_change() -> None:
    page = "signals-page/0"
    probes = [
        {"t": 10.0, "queue": 500.0, "items": [[page, 7]]},
        {"t": 12.0, "queue": 0.0, "items": [[page, 8]]},
        {"t": 14.0, "queue": 500.0, "items": [[page, 9]]},
        {"t": 16.0, "queue": 0.0, "items": []},
    ]
    received = [
        (9.5, page, 6),
        (10.1, "provider/other", 12),  # another item of the probe's site: not the change
        (10.4, page, 7),
        (12.3, page, 7),  # a late copy of the earlier version
        (12.6, page, 9),  # a later version carries the change on
        (16.2, page, 10),  # the change at 16 was published in no item: no delivery
    ]
    assert delivery_latencies(probes, received) == pytest.approx([0.4, 0.6, 2.2])


def test_a_version_the_site_never_got_while_a_later_one_came_is_counted() -> None:
    page = "signals-page/0"
    probes = [
        {"t": 10.0, "queue": 500.0, "items": [[page, 7]]},
        {"t": 12.0, "queue": 0.0, "items": [[page, 8]]},  # skipped: 9 came, 8 never did
        {"t": 14.0, "queue": 500.0, "items": [[page, 9]]},
        {"t": 16.0, "queue": 0.0, "items": [[page, 10]]},  # not yet received: not skipped
        {"t": 18.0, "queue": 500.0, "items": []},
    ]
    received = [(10.2, page, 7), (14.1, page, 9), (14.2, "provider/p", 11)]
    assert versions_skipped(probes, received) == 1


def test_changes_and_samples_inside_a_catch_up_are_told_apart() -> None:
    lives = [
        {"event": "joiner", "serial": 1, "t": 2.9, "caught_up_t": 3.5, "caught_up_s": 0.6},
        # Still catching up when the window ended: counted to the end.
        {"event": "joiner", "serial": 2, "t": 6.9, "caught_up_t": None, "caught_up_s": None},
    ]
    for life in lives:
        life |= {"items": 40, "bytes_in": 9000}
    probes = [
        {"event": "probe", "t": t, "queue": queue}
        for t, queue in ((1.0, 0.0), (3.0, 500.0), (5.0, 0.0), (7.0, 500.0))
    ]
    # Samples a second apart: 1 KB/s out, 2 KB/s in and 5 % CPU (1 % the SWIM thread's),
    # but in the seconds that overlap a catch-up 50 % CPU (20 % the SWIM thread's), and
    # 5 KB more out in the one after the first join began.
    samples, cpu, swim, sent = [[0.0, 0.0, 0.0, 0.0, 0.0]], 0.0, 0.0, 0.0
    for second in range(10):
        joined = second in (2, 3, 6, 7, 8, 9)
        cpu += 0.5 if joined else 0.05
        swim += 0.2 if joined else 0.01
        sent += 1000 + (5000 if second == 3 else 0)
        samples.append([second + 1.0, cpu, sent, 2000.0 * (second + 1), swim])
    result = {
        "first": {"t": 0.0},
        "last": {"t": 10.0},
        "probe_seen": [(1.1, 3.0), (3.3, 1.0), (5.1, 3.0), (7.05, 1.0)],
        "samples": samples,
        "joiner_items_taken": 5,
    }
    figures = others_joins(result, [*lives, *probes], 0.4)
    assert figures["others_join_latencies_ms"] == [300.0, 50.0]
    assert figures["others_join_latency_ms_p99"] == pytest.approx(300.0)
    assert figures["others_join_steady_latency_ms_p50"] == pytest.approx(100.0)
    assert figures["others_join_probes"] == figures["others_join_steady_probes"] == 2
    assert figures["others_join_cpu_share"] == pytest.approx(0.5)
    assert figures["others_join_steady_cpu_share"] == pytest.approx(0.05)
    assert figures["others_join_swim_cpu_share"] == pytest.approx(0.2)
    assert figures["others_join_steady_swim_cpu_share"] == pytest.approx(0.01)
    assert figures["others_join_steady_bytes_out_per_s"] == pytest.approx(1000.0)
    assert figures["others_join_steady_bytes_in_per_s"] == pytest.approx(2000.0)
    assert [life["site_bytes_out"] for life in figures["others_joins"]] == pytest.approx(
        [5000.0, 0.0]
    )
    assert [life["probes"] for life in figures["others_joins"]] == [1, 1]
    assert figures["others_join_caught_up"] == 1
    assert figures["others_join_caught_up_s_p99"] == pytest.approx(0.6)
    # Without joins there is nothing to tell apart.
    assert others_joins(result, probes, None)["others_join_steady_latency_ms_p50"] is None


def test_a_missed_change_fails_the_latency_target() -> None:
    plan = MeshPlan(sites=100, providers_per_site=100, scrape_interval_s=15.0)
    figures = {
        "cpu_share": 0.05,
        "rss_mb_median": 120.0,
        "bytes_in_per_s": 1e5,
        "bytes_out_per_s": 3e5,
        "latency_ms_p99": None,
    }
    met = {t["target"]: t["met"] for t in verdicts(plan, figures)}
    assert met == {
        "cpu": True,
        "memory": True,
        "gossip_in": True,
        "gossip_out": False,
        "latency_p99": False,
    }
