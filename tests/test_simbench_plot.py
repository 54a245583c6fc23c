"""The convergence plot (issue 15): a panel per scenario, nothing clipped at any size, axes
fitted to the data, bounds and targets as labelled reference lines, a caption; SVG always,
PNG with the plot extra. Built from small synthetic reports, never from a bench run, but for
the state plane's panels from one 10-site run (a twentieth of a second)."""

from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from grid.cli import main
from grid.membership import SwimConfig
from grid.simbench import plot as plot_module
from grid.simbench.figure import figure
from grid.simbench.figure_model import fit_axis
from grid.simbench.plot import PlotError, check_plot_path, render_svg, write_plot
from grid.simbench.profiles import NetworkModel, epidemic_rounds
from grid.simbench.runner import SCENARIOS, targets
from grid.simbench.state import (
    MEMORY_LIMIT,
    StatePlan,
    estimated_memory,
    items_per_site,
    state_row,
)
from grid.simbench.stats import spread

SVG = "{http://www.w3.org/2000/svg}"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: An independent, conservative text width: 0.6 em a character (DejaVu Sans, the widest
#: common sans font, averages about 0.55 on this text), bold 10 % wider.
EM_PER_CHAR = 0.6


def _cdf(start: float, end: float, points: int = 24) -> list[list[float]]:
    return [[start + (end - start) * i / (points - 1), (i + 1) / points] for i in range(points)]


def _profiles(size: int) -> list[tuple[str, float, float]]:
    """(name, probe interval, suspicion timeout) as in grid.simbench.profiles."""
    return [("grid", 5.0, 10.0), ("memberlist-lan", 1.0, 4 * max(1.0, math.log10(size)))]


def state_row_at(size: int, providers: int = 100) -> dict[str, Any]:
    """A state-plane row shaped like grid.simbench.state.summarise's, with the figures of
    100 x 100 in docs/convergence.md (197 KB/s a site, 183 KB/s of it broadcast; changes
    everywhere within 0.5 to 1.45 s; a joiner at 99 % after 3.5 s, all after 3.75 s); or,
    for a size whose stores do not fit, the skipped row state_row gives (nothing runs)."""
    if estimated_memory(size, providers) > MEMORY_LIMIT:
        return state_row(size, 7, StatePlan(providers=providers), NetworkModel(), threads=1)
    out = {
        "swim": 120.0,
        "broadcast": 183_000.0,
        "sync-request": 4_800.0,
        "sync-response": 4_900.0,
        "digest": 4_000.0,
        "repair": 600.0,
        "other": 0.0,
    }
    per_site = {
        kind: {"bytes_out": value, "bytes_in": value, "messages_out": value / 1000}
        for kind, value in out.items()
    }
    delays = [0.5 + 0.05 * i for i in range(20)]
    items = size * items_per_site(providers)
    return {
        "size": size,
        "providers": providers,
        "items": items,
        "start": "growing",
        "filled_after": 453.0,
        "missing_after_fill": 0,
        "window": 60.0,
        "per_site": per_site,
        "bytes_out_per_site": sum(out.values()),
        "bytes_in_per_site": sum(out.values()),
        "messages_out_per_site": sum(out.values()) / 1000,
        "busiest_site_bytes": 427_000.0,
        "changes": len(delays),
        "changes_converged": 1.0,
        "change_seconds": spread(delays),
        "change_delays": delays,
        "joins": 1,
        "catch_up_99": 3.5,
        "catch_up": 3.75,
        "catch_up_seconds": spread([3.75]),
        "joiner_items": items,
        "join_bytes_in": spread([items * 600.0]),
        "catch_ups": [
            {"catch_up_99": 3.5, "catch_up": 3.75, "items": items, "bytes_in": items * 600}
        ],
        "virtual_seconds": 541.0,
        "wall_seconds": 286.0,
        "events": 10**7,
    }


def synthetic_report(
    sizes: tuple[int, ...] = (100, 1000, 10_000),
    scenarios: tuple[str, ...] = ("join", "failure", "accuracy", "partition", "speed", "state"),
) -> dict[str, Any]:
    """A report shaped like run_plan's, with made-up figures: failures detected in 9 to
    25 s, joins complete in about 4 to 6 rounds, speed 94x at 1,000 and 1.4x at 10,000;
    the state plane at 100 sites x 100 providers, larger sizes skipped for memory."""
    report: dict[str, Any] = {
        "plan": {
            "scenarios": list(scenarios),
            "sizes": list(sizes),
            "seed": 7,
            "quick": False,
            "shared_from": 5000,
            "network": {"delay": 0.005, "jitter": 0.005, "jitter_kind": "exponential"},
            "profiles": ["grid", "memberlist-lan"],
            "losses": [0.1, 0.2],
            "slow_node": True,
            "accuracy_minutes": 30.0,
            "state": {"providers": 100, "window": 60.0, "changes": 20, "patience": 600.0},
        }
    }
    if "join" in scenarios:
        report["join"] = [
            {
                "size": size,
                "profile": name,
                "runs": 2 if size >= 5000 else 20,
                "probe_interval": probe,
                "gossip_interval": probe / 5,
                "epidemic_bound_rounds": epidemic_rounds(size, 3),
                "rounds": {"100%": {"p50": 5.0, "p99": 6.0, "max": 6.2}},
                "within_target_rounds": 1.0,
                "miss_bound": 1e-9,
                "joiner_knows_99%": {"p50": 0.03, "p99": 0.04, "max": 0.05},
                "joiner_reached_99%": 1.0,
                "cdf": _cdf(0.005, probe / 5 * (3 + math.log10(size))),
            }
            for size in sizes
            for name, probe, _ in _profiles(size)
        ]
    if "failure" in scenarios:
        report["failure"] = [
            {
                "size": size,
                "profile": name,
                "runs": 10,
                "probe_interval": probe,
                "suspicion_timeout": suspicion,
                "cdf": _cdf(9.0, 25.0),
            }
            for size in sizes
            for name, probe, suspicion in _profiles(size)
        ]
    if "accuracy" in scenarios:
        report["accuracy"] = [
            {
                "size": size,
                "profile": name,
                "seed": 7,
                "loss": loss,
                "slow_node_delay": slow,
                "minutes": 30.0,
                "false_declarations": 0,
                "falsely_declared_members": 0,
                "false_suspicions": int(300 * (loss * 10 + 0.3) * size / 100 / probe),
            }
            for size in sizes
            if size <= 1000
            for name, probe, _ in _profiles(size)
            for loss, slow in ((0.1, 0.0), (0.2, 0.0), (0.0, 1.5 * probe))
        ]
    if "partition" in scenarios:
        report["partition"] = [
            {
                "size": size,
                "profile": name,
                "runs": 3,
                "split_seconds": {"p50": 100.0, "p99": 120.0, "max": 120.0},
                "split_complete": 1.0,
                "converged": 1.0,
                "converged_after": {"p50": 14.4 * probe, "p99": 16.4 * probe, "max": 16.4 * probe},
                "converged_after_probe_intervals": {"p50": 14.4, "p99": 16.4, "max": 16.4},
            }
            for size in sizes
            if size <= 1000
            for name, probe, _ in _profiles(size)
        ]
    if "speed" in scenarios:
        speeds = {1000: 93.8, 10_000: 1.36}
        report["speed"] = [
            {"size": size, "speed": speeds.get(size, 20.0), "peak_rss_bytes": size * 600_000}
            for size in sizes
            if size >= 1000
        ] or [{"size": max(sizes), "speed": 150.0, "peak_rss_bytes": 10**8}]
    if "state" in scenarios:
        report["state"] = [state_row_at(size) for size in sizes]
    report["targets"] = targets(report)
    return report


def _svg(report: dict[str, Any]) -> ET.Element:
    return ET.fromstring(render_svg(report, version="9.9.9"))


def _panels(root: ET.Element) -> dict[str, ET.Element]:
    """The panels by scenario (the state plane's second panel, when it has two)."""
    return {g.get("data-scenario", ""): g for g in _all_panels(root)}


def _all_panels(root: ET.Element, scenario: str | None = None) -> list[ET.Element]:
    return [
        g
        for g in root.iter(f"{SVG}g")
        if g.get("class") == "panel" and scenario in (None, g.get("data-scenario"))
    ]


def _text_box(text: ET.Element, default_size: float) -> tuple[float, float, float, float]:
    """(left, top, right, bottom) of a <text>, conservatively."""
    size = float(text.get("font-size", default_size))
    width = len(text.text or "") * EM_PER_CHAR * size * (1.1 if text.get("font-weight") else 1)
    x, y = float(text.get("x", 0)), float(text.get("y", 0))
    anchor = text.get("text-anchor", "start")
    left = {"start": x, "middle": x - width / 2, "end": x - width}[anchor]
    return left, y - 0.8 * size, left + width, y + 0.25 * size


def _texts(element: ET.Element) -> list[str]:
    return [text.text or "" for text in element.iter(f"{SVG}text")]


@pytest.mark.parametrize(
    "scenarios",
    [
        ("join", "failure", "accuracy", "partition", "speed", "state"),
        ("join",),
        ("accuracy", "speed"),
        ("failure", "partition"),
        ("state",),
    ],
)
def test_every_scenario_that_ran_gets_its_panel(scenarios: tuple[str, ...]) -> None:
    report = synthetic_report(scenarios=scenarios)
    root = _svg(report)
    assert list(_panels(root)) == list(scenarios)
    assert len(_all_panels(root, "state")) == (2 if "state" in scenarios else 0)
    assert "no results to plot" in render_svg({"plan": {}})
    # The title names what ran: membership, the state plane, or both.
    title = {
        ("state",): "The state plane",
        tuple(SCENARIOS): "SWIM convergence and the state plane",
    }.get(scenarios, "SWIM convergence")
    assert f"{title} (grid bench convergence)" in _texts(root)


@pytest.mark.parametrize("sizes", [(100,), (1000,), (100, 1000), (100, 1000, 10_000)])
def test_nothing_leaves_the_view_box_or_covers_the_plot(sizes: tuple[int, ...]) -> None:
    root = _svg(synthetic_report(sizes))
    _, _, width, height = map(float, root.get("viewBox", "").split())
    default = float(root.get("font-size", 12))
    texts = list(root.iter(f"{SVG}text"))
    assert len(texts) > 50
    for text in texts:
        left, top, right, bottom = _text_box(text, default)
        assert left >= 0 and right <= width, (text.text, left, right)
        assert top >= 0 and bottom <= height, (text.text, top, bottom)
    for panel in _all_panels(root):
        name = panel.get("data-scenario")
        frames = [r for r in panel.iter(f"{SVG}rect") if r.get("class") == "plot"]
        if not frames:  # an empty panel: the state plane's changes when every size skipped
            assert name == "state" and "every one was skipped" in " ".join(_texts(panel))
            continue
        frame = frames[0]
        fx, fy = float(frame.get("x", 0)), float(frame.get("y", 0))
        fw, fh = float(frame.get("width", 0)), float(frame.get("height", 0))
        for legend in (g for g in panel.iter(f"{SVG}g") if g.get("class") in ("legend", "notes")):
            for text in legend.iter(f"{SVG}text"):
                left, top, right, bottom = _text_box(text, default)
                overlaps = left < fx + fw and fx < right and top < fy + fh and fy < bottom
                assert not overlaps, (name, text.text)


def test_axes_fit_the_data() -> None:
    panels = _panels(_svg(synthetic_report((100, 1000))))

    def frame(name: str) -> dict[str, str]:
        rect = next(r for r in panels[name].iter(f"{SVG}rect") if r.get("class") == "plot")
        return dict(rect.attrib)

    # Failures detected in 9 to 25 s: a linear axis, not 1 to 100 s on a log scale.
    failure = frame("failure")
    assert failure["data-x-scale"] == "linear"
    assert 0 <= float(failure["data-x-low"]) <= 9
    assert 25 < float(failure["data-x-high"]) <= 2 * 25
    ticks = [t.text or "" for t in panels["failure"].iter(f"{SVG}text") if t.get("class") == "tick"]
    assert ticks and all(0 <= float(t.removesuffix(" s")) <= 50 for t in ticks)
    # Joins in rounds: linear, wide enough for the epidemic bound at 1,000 (7.3 rounds).
    join = frame("join")
    assert join["data-x-scale"] == "linear"
    assert epidemic_rounds(1000, 3) <= float(join["data-x-high"]) <= 2 * epidemic_rounds(1000, 3)
    # One speed, 93.8x, with its 20x target: linear from 0.
    assert (frame("speed")["data-x-scale"], frame("speed")["data-x-low"]) == ("linear", "0")
    # Speeds of 1.36x and 93.8x span decades: a log axis round the 1x target and 93.8x.
    panels = _panels(_svg(synthetic_report((100, 1000, 10_000))))
    speed = frame("speed")
    assert speed["data-x-scale"] == "log"
    assert (float(speed["data-x-low"]), float(speed["data-x-high"])) == (0.5, 100)


def test_fit_axis_goes_log_only_for_decades() -> None:
    tight = fit_axis([9.0, 25.0], "s")
    assert (tight.low, tight.high, tight.log) == (0.0, 30.0, False)
    assert tight.ticks == (0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0)
    far = fit_axis([60.0, 70.0], "s")
    assert 50 <= far.low < 60 and 70 < far.high <= 80 and not far.log
    wide = fit_axis([0.02, 3.0, 40.0], "s")
    assert wide.log and (wide.low, wide.high) == (0.01, 50.0)
    assert fit_axis([2.0, 3.0], "x", [2.5, 40.0]).high < 5  # a far reference stays off
    assert fit_axis([2.0, 3.0], "x", [4.0]).high >= 4  # a near one widens the axis
    assert fit_axis([], "empty").high == 1.0


def test_bounds_and_targets_are_labelled_reference_lines() -> None:
    report = synthetic_report((100, 1000, 10_000))
    fig = figure(report, version="9.9.9")
    join = next(p for p in fig.panels if p.scenario == "join")
    bounds = [ref for ref in join.references if ref.kind == "bound"]
    assert [round(ref.value, 1) for ref in bounds] == [4.9, 7.3, 9.7]
    assert all(ref.on_scale for ref in bounds)
    target = next(ref for ref in join.references if ref.kind == "target")
    assert target.value == 15 and "15 rounds" in target.label
    failure = next(p for p in fig.panels if p.scenario == "failure")
    expected = SwimConfig(probe_interval=5.0, suspicion_timeout=10.0).detection_bound(100)
    assert expected in [ref.value for ref in failure.references]
    assert all(not ref.on_scale for ref in failure.references)  # 1,000 s and more

    panels = _panels(_svg(report))
    for name in ("join", "partition", "speed"):
        refs = [g for g in panels[name].iter(f"{SVG}g") if g.get("class") == "reference"]
        assert refs, name
        legend = " ".join(_texts(panels[name]))
        for ref in refs:
            assert ref.find(f"{SVG}line") is not None
            label = ref.get("data-label", "")
            assert label and label.split()[0] in legend
    join_text = " ".join(_texts(panels["join"]))
    assert "bound N=1,000" in join_text  # the tag at the line
    assert "epidemic bound 7.3 rounds for N=1,000" in join_text  # its legend entry
    assert "target: 100 % of 10,000 within 15 rounds" in join_text  # off scale, listed
    failure_text = " ".join(_texts(panels["failure"]))
    assert "off scale" in failure_text and "1,000 s" in failure_text
    speed_text = " ".join(_texts(panels["speed"]))
    assert "target: 1,000 members at >= 20x real time" in speed_text


def test_the_caption_names_seed_runs_network_and_version() -> None:
    root = _svg(synthetic_report((100, 1000, 10_000)))
    caption = next(g for g in root.iter(f"{SVG}g") if g.get("class") == "caption")
    text = " ".join(_texts(caption))
    for part in (
        "Grid 9.9.9",
        "seed 7",
        "join 20 at N=100, 1,000, 2 at N=10,000",
        "failure 10",
        "partition 3",
        "accuracy 1 of 30 virtual minutes",
        "5 ms one way",
        "exponential jitter averaging 5 ms",
        "no loss",
        "10% and 20% loss",
        "memberlist-lan (dashed, hollow)",
    ):
        assert part in text, part


def test_a_missed_target_is_drawn_in_red() -> None:
    report = synthetic_report((100,), scenarios=("accuracy",))
    report["accuracy"][0] |= {"false_declarations": 2, "falsely_declared_members": 1}
    report["targets"] = targets(report)
    root = _svg(report)
    red = [t.text for t in root.iter(f"{SVG}text") if t.get("fill") == "#c0392b"]
    assert "2 false downs (1 members) in 30 min" in red
    assert any("MISSED" in (line or "") for line in red)


def _state_report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    report: dict[str, Any] = {
        "plan": {"scenarios": ["state"], "seed": 1, "state": {"window": 60.0, "changes": 20}},
        "state": rows,
    }
    report["targets"] = targets(report)
    return report


def test_the_state_plane_from_a_real_run_gets_its_two_panels() -> None:
    row = state_row(10, 1, StatePlan(providers=10), NetworkModel(), threads=1)
    skipped = state_row(1000, 1, StatePlan(providers=100), NetworkModel(), threads=1)
    assert set(row) == set(state_row_at(100))  # the synthetic rows are shaped like this one
    assert len(row["change_delays"]) == row["changes"] == 20
    assert max(d for d in row["change_delays"] if d is not None) == row["change_seconds"]["max"]
    report = _state_report([row, skipped])
    root = _svg(report)
    traffic, changes = _all_panels(root, "state")
    text = " ".join(_texts(traffic))
    assert "State plane: what a site sends" in text
    assert "N=10 x 10" in text and "N=1,000 x 100" in text
    total = row["bytes_out_per_site"] / 1000
    assert f"{total:.2f} KB/s: broadcast" in text and "sync " in text
    assert f"skipped: {skipped['skipped']}" in text  # "its stores need about 109 GiB (...)"
    assert "109 GiB" in text
    # One dot, for the size that ran; no targets are set, so no target lines.
    assert len(traffic.findall(f".//{SVG}circle")) == 1
    assert not [g for g in root.iter(f"{SVG}g") if g.get("class") == "reference"]
    text = " ".join(_texts(changes))
    assert "State plane: a change reaching every site" in text
    assert "N=10 x 10 (20 changes)" in text  # the legend
    assert f"{row['items']} names" in text and "held 99 % after" in text
    assert "not run (skipped, see above): N=1,000 x 100" in text
    (curve,) = changes.findall(f".//{SVG}polyline")
    converged = sum(d is not None for d in row["change_delays"])
    assert len(curve.get("points", "").split()) == 2 * converged  # a step per change
    caption = next(g for g in root.iter(f"{SVG}g") if g.get("class") == "caption")
    caption_text = " ".join(_texts(caption))
    assert "state plane 1 under grid (10/100 providers a site, 60 s of steady state" in caption_text
    assert "memberlist-lan" not in caption_text and "both profiles" not in caption_text
    if plot_module.png_available():
        from grid.simbench.plot_png import render_png

        assert render_png(report, version="9.9.9").startswith(PNG_SIGNATURE)


def test_the_state_panels_split_bytes_by_kind_and_fit_their_axes() -> None:
    fig = figure(synthetic_report((100, 1000), scenarios=("state",)), version="9.9.9")
    traffic, changes = fig.panels
    ran, skipped = traffic.marks
    assert (ran.label, ran.value) == ("N=100 x 100", pytest.approx(197.42))
    assert ran.note == "197 KB/s: broadcast 183, sync 9.7, digest + repair 4.6, SWIM 0.12"
    assert skipped.value is None and skipped.note.startswith("skipped: its stores need about")
    assert (traffic.x.low, traffic.x.log) == (0.0, False) and traffic.x.high >= 197.42
    assert not traffic.references and not changes.references
    (curve,) = changes.curves
    assert curve.points[0] == (0.5, 0.0) and curve.points[-1] == (pytest.approx(1.45), 1.0)
    assert changes.x.low <= 0.5 and 1.45 < changes.x.high <= 2 and not changes.x.log
    notes = [note.text for note in changes.notes]
    assert (
        "joiner at N=100 x 100 (an empty node, 11,300 names): held 99 % after 3.5 s, "
        "all after 3.75 s" in notes
    )
    # Only skipped sizes: their rows with the reason, and no curves to draw.
    traffic, changes = figure(synthetic_report((1000,), scenarios=("state",))).panels
    assert [m.value for m in traffic.marks] == [None] and traffic.empty is None
    assert changes.empty == "no state-plane size ran: every one was skipped"


def test_a_change_that_never_reached_every_site_is_in_red() -> None:
    report = synthetic_report((100,), scenarios=("state",))
    row = report["state"][0]
    row["change_delays"][-2:] = [None, None]
    row["catch_up"] = None
    _, changes = figure(report).panels
    assert changes.curves[0].points[-1][1] == pytest.approx(18 / 20)  # tops out at 90 %
    red = [t.text for t in _svg(report).iter(f"{SVG}text") if t.get("fill") == "#c0392b"]
    assert "N=100 x 100: 2 of 20 changes never reached every site" in red
    assert any("all never within the run" in (line or "") for line in red)


def test_the_extension_picks_the_format(tmp_path: Path) -> None:
    report = synthetic_report((100,))
    write_plot(report, tmp_path / "plot.SVG")
    ET.parse(tmp_path / "plot.SVG")
    for name in ("plot.pdf", "plot", "plot.svg.gz"):
        with pytest.raises(PlotError, match=r"\.svg or \.png"):
            check_plot_path(tmp_path / name)
    assert not list(tmp_path.glob("plot.pdf"))


def test_png_with_the_plot_extra(tmp_path: Path) -> None:
    if not plot_module.png_available():
        if os.environ.get("CI") == "true":
            pytest.fail("matplotlib (the plot extra, part of the dev dependencies) is missing")
        pytest.skip("the plot extra (matplotlib) is not installed")
    path = tmp_path / "convergence.png"
    write_plot(synthetic_report(), path)
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 10_000


def _fake_run(monkeypatch: pytest.MonkeyPatch) -> None:
    report = synthetic_report((100,), scenarios=("join", "failure"))
    monkeypatch.setattr("grid.commands.bench.run_plan", lambda plan, progress: report)


def test_the_command_refuses_png_without_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_run(monkeypatch)
    monkeypatch.setattr(plot_module, "png_available", lambda: False)
    target = tmp_path / "q.png"
    assert main(["bench", "convergence", "--sizes", "20", "--plot", str(target)]) == 2
    err = capsys.readouterr().err
    assert "grid bench: PNG needs the plot extra: pip install 'grid-mesh[plot]'" in err
    assert not target.exists()  # never SVG bytes in a .png


def test_the_command_refuses_an_unknown_extension(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_run(monkeypatch)
    assert main(["bench", "convergence", "--plot", str(tmp_path / "q.pdf")]) == 2
    assert ".svg or .png" in capsys.readouterr().err
    assert not (tmp_path / "q.pdf").exists()


@pytest.mark.parametrize("suffix", [".svg", ".png"])
def test_the_command_writes_the_plot_by_extension(
    suffix: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if suffix == ".png" and not plot_module.png_available() and os.environ.get("CI") != "true":
        pytest.skip("the plot extra (matplotlib) is not installed")
    _fake_run(monkeypatch)
    target = tmp_path / f"q{suffix}"
    assert main(["bench", "convergence", "--json", "--plot", str(target)]) == 0
    data = target.read_bytes()
    if suffix == ".png":
        assert data.startswith(PNG_SIGNATURE)
    else:
        assert list(_panels(ET.fromstring(data))) == ["join", "failure"]
