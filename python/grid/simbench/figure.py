"""What the convergence plot shows, whatever draws it: one panel per scenario that ran, axes
fitted to the data, the protocol's bounds and Grid's targets as labelled reference
lines, and a caption (seed, runs, network model, Grid version).

Pure: :func:`figure` turns a report (``grid.simbench.runner.run_plan``'s dict, or its
JSON) into a :class:`Figure`; ``grid.simbench.plot`` draws it as SVG and
``grid.simbench.plot_png`` as PNG.

- **join**: the share of members that know the new member, against gossip rounds (the
  time over the profile's gossip interval), so both profiles share one axis; the epidemic
  bound per size and the 15-round target are the reference lines.
- **failure detection**: the share of live members that marked the crashed one down,
  against seconds; the worst-case detection bound ``2(N-1)·P + S``
  (``grid.membership.SwimConfig.detection_bound``) per size and profile.
- **accuracy**: healthy members wrongly suspected per member-hour for each setting (loss,
  slow node), with its false downs (the target is none) beside it.
- **partition**: probe intervals from the heal until one view (p50, whisker to the max),
  with foca's announcements to down members, every 13 P, which pace the heal.
- **speed**: virtual seconds per wall second per size, each with its target.
- **state** (two panels): the bytes a site sends a second per size (sites x providers),
  split by kind beside each row, skipped sizes with their reason; and the share of
  catalogue changes that had reached every site, against seconds, with the joiner's
  catch-up under it. No target is set for the state plane, so neither has a target line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from grid.membership import SwimConfig
from grid.simbench.figure_caption import caption
from grid.simbench.figure_model import (
    OTHER_DASH,
    PACE_COLOUR,
    PROFILE_DASHES,
    SIZE_COLOURS,
    TARGET_COLOUR,
    Axis,
    Curve,
    Figure,
    Mark,
    Note,
    Panel,
    Reference,
    ReferenceKind,
    Row,
    cdf_basis,
    colour_of,
    fit_axis,
    number,
    row_label,
)
from grid.simbench.figure_state import state_changes, state_traffic
from grid.simbench.runner import JOIN_ROUND_TARGET, SCENARIOS
from grid.simbench.runner import title as report_title

#: foca announces itself to members it holds down every this many probe intervals.
ANNOUNCE_TO_DOWN_INTERVALS = 13


def figure(report: dict[str, Any], version: str | None = None) -> Figure:
    """The figure for ``report``: a panel for every scenario in it, in the runner's order.
    ``version`` is Grid's (default: the report's ``version``, else the running one)."""
    colours = _size_colours(report)
    builders: dict[str, tuple[Builder, ...]] = {
        "join": (_join,),
        "failure": (_failure,),
        "accuracy": (_accuracy,),
        "partition": (_partition,),
        "speed": (_speed,),
        "state": (state_traffic, state_changes),
    }
    panels = tuple(
        build(report[name] or [], colours, report.get("targets") or [])
        for name in SCENARIOS
        if name in report and name in builders
        for build in builders[name]
    )
    quick = " --quick" if (report.get("plan") or {}).get("quick") else ""
    return Figure(
        title=f"{report_title(report)} (grid bench convergence{quick})",
        panels=panels,
        caption=caption(report, version),
    )


# --- panels ---------------------------------------------------------------------------

#: A scenario's panel from its rows, the size colours and the report's targets.
Builder = Callable[[Sequence[Row], dict[int, str], Sequence[Row]], Panel]


def _join(rows: Sequence[Row], colours: dict[int, str], targets: Sequence[Row]) -> Panel:
    title = "Join: share of members that know the new member"
    rows = [row for row in rows if row.get("cdf")]
    curves = tuple(
        Curve(
            label=row_label(row),
            points=tuple(
                (t / _gossip_interval(row), f) for t, f in row["cdf"] if t >= 0 and f >= 0
            ),
            colour=colours.get(row["size"], SIZE_COLOURS[-1]),
            dash=PROFILE_DASHES.get(row["profile"], OTHER_DASH),
        )
        for row in rows
    )
    xs = [x for curve in curves for x, _ in curve.points]
    bounds: dict[int, float] = {}
    for row in rows:
        if row.get("epidemic_bound_rounds") is not None:
            bounds.setdefault(row["size"], float(row["epidemic_bound_rounds"]))
    wanted: list[tuple[ReferenceKind, float, str, str, str]] = [
        (
            "bound",
            value,
            f"epidemic bound {value:.1f} rounds for N={size:,}",
            f"bound N={size:,}",
            colours.get(size, SIZE_COLOURS[-1]),
        )
        for size, value in sorted(bounds.items())
    ]
    if rows:
        wanted.append(
            (
                "target",
                float(JOIN_ROUND_TARGET),
                f"target: 100 % of 10,000 within {JOIN_ROUND_TARGET} rounds",
                f"target {JOIN_ROUND_TARGET}",
                TARGET_COLOUR,
            )
        )
    x = fit_axis(
        xs,
        "gossip rounds after the join (time / gossip interval)",
        [w[1] for w in wanted],
        log_basis=cdf_basis(curves),
    )
    references = tuple(
        Reference(kind, value, label, tag, colour, on_scale=x.contains(value))
        for kind, value, label, tag, colour in wanted
    )
    notes = [
        Note(
            "1 round = 1 s under grid, 0.2 s under memberlist-lan (P / 5); epidemic bound = "
            "log_4(N) + ln(N) / 3 rounds for fanout 3"
        ),
        *_target_notes(targets, ("a join reaches", "a joiner knows")),
    ]
    return Panel(
        scenario="join",
        title=title,
        x=x,
        y=_SHARE,
        curves=curves,
        references=references,
        notes=tuple(notes),
        empty=None if curves else "no join results to plot",
    )


def _failure(rows: Sequence[Row], colours: dict[int, str], targets: Sequence[Row]) -> Panel:
    del targets  # no detection-time target is set
    title = "Failure detection: share of live members that marked the crashed one down"
    rows = [row for row in rows if row.get("cdf")]
    curves = tuple(
        Curve(
            label=row_label(row),
            points=tuple((t, f) for t, f in row["cdf"] if t >= 0 and f >= 0),
            colour=colours.get(row["size"], SIZE_COLOURS[-1]),
            dash=PROFILE_DASHES.get(row["profile"], OTHER_DASH),
        )
        for row in rows
    )
    xs = [x for curve in curves for x, _ in curve.points]
    wanted: list[tuple[float, str, str, str]] = []
    for row in rows:
        bound = detection_bound(row)
        if bound is not None:
            wanted.append(
                (
                    bound,
                    f"detection bound {number(bound)} s for {row_label(row)}",
                    f"bound {row_label(row)}",
                    colours.get(row["size"], SIZE_COLOURS[-1]),
                )
            )
    x = fit_axis(
        xs,
        "seconds after the crash",
        [w[0] for w in wanted],
        unit=" s",
        log_basis=cdf_basis(curves),
    )
    references = tuple(
        Reference("bound", value, label, tag, colour, on_scale=x.contains(value))
        for value, label, tag, colour in wanted
    )
    notes = (
        Note(
            "detection bound = 2(N-1)·P + S: every survivor has probed the crashed member "
            "and waited the suspicion timeout S, without help from gossip (the worst case)"
        ),
    )
    return Panel(
        scenario="failure",
        title=title,
        x=x,
        y=_SHARE,
        curves=curves,
        references=references,
        notes=notes,
        empty=None if curves else "no failure-detection results to plot",
    )


def _accuracy(rows: Sequence[Row], colours: dict[int, str], targets: Sequence[Row]) -> Panel:
    title = "Accuracy: healthy members wrongly suspected, and wrongly declared down"
    settings = {
        (row["size"], row["profile"], row["loss"], bool(row.get("slow_node_delay"))) for row in rows
    }
    several_seeds = len(settings) < len(rows)
    marks = []
    for row in rows:
        hours = row["size"] * row.get("minutes", 0.0) / 60
        rate = row.get("false_suspicions", 0) / hours if hours > 0 else None
        if row.get("slow_node_delay"):
            setting = f"slow node +{number(row['slow_node_delay'])} s"
        else:
            setting = f"{row['loss']:.0%} loss"
        seed = f", seed {row['seed']}" if several_seeds and "seed" in row else ""
        downs = row["false_declarations"]
        note = f"{downs} false down{'' if downs == 1 else 's'}"
        if downs:
            note += f" ({row.get('falsely_declared_members', '?')} members)"
        if "minutes" in row:
            note += f" in {number(row['minutes'])} min"
        marks.append(
            Mark(
                label=f"{row_label(row)}, {setting}{seed}",
                value=rate,
                colour=colour_of(colours, row),
                note=note,
                hollow=row["profile"] != "grid",
                alert=downs > 0,
            )
        )
    x = fit_axis(
        [m.value for m in marks if m.value is not None],
        "false suspicions per member-hour (every one refuted unless it became a false down)",
        (),
        zero_floor=True,
    )
    notes = (
        Note("right: healthy members declared down by their own suspicion (false downs)"),
        *_target_notes(targets, ("false downs",)),
    )
    return Panel(
        scenario="accuracy",
        title=title,
        x=x,
        marks=tuple(marks),
        notes=notes,
        empty=None if marks else "no accuracy results to plot",
    )


def _partition(rows: Sequence[Row], colours: dict[int, str], targets: Sequence[Row]) -> Panel:
    del targets
    title = "Partition and heal: probe intervals from the heal until one view"
    marks = []
    for row in rows:
        after = row.get("converged_after_probe_intervals")
        seconds = row.get("converged_after")
        split = row.get("split_seconds")
        runs = row.get("runs", 1)
        converged = round(row.get("converged", 0.0) * runs)
        parts = []
        if seconds is not None:
            parts.append(f"healed in {number(seconds['p50'])} s")
        if split is not None:
            parts.append(f"split {number(split['p50'])} s")
        if converged < runs:
            parts.append(f"{converged} of {runs} converged")
        marks.append(
            Mark(
                label=row_label(row),
                value=None if after is None else after["p50"],
                high=None if after is None or runs < 2 else after["max"],
                colour=colour_of(colours, row),
                note=" · ".join(parts) if parts else "never converged",
                hollow=row["profile"] != "grid",
                alert=converged < runs,
            )
        )
    values = [v for m in marks for v in (m.value, m.high) if v is not None]
    x = fit_axis(
        values,
        "probe intervals P after the heal (grid P = 5 s, memberlist-lan 1 s)",
        (),
        zero_floor=True,
    )
    step = ANNOUNCE_TO_DOWN_INTERVALS
    references = tuple(
        Reference(
            "pace",
            float(k * step),
            f"foca announces to members it holds down every {step} P",
            f"{k * step} P",
            PACE_COLOUR,
        )
        for k in range(1, int(x.high // step) + 1)
        if x.contains(k * step)
    )
    notes = (Note("dot: p50 over runs; line: to the max; hollow: memberlist-lan"),)
    return Panel(
        scenario="partition",
        title=title,
        x=x,
        marks=tuple(marks),
        references=references,
        notes=notes,
        empty=None if marks else "no partition results to plot",
    )


#: Grid's speed targets (as ``grid.simbench.runner.targets`` checks them): size ->
#: (at least this many times real time, label).
SPEED_TARGETS = {
    1000: (20.0, "target: 1,000 members at >= 20x real time"),
    10_000: (1.0, "target: 10,000 members at >= real time on 2 cores within 8 GiB"),
}


def _speed(rows: Sequence[Row], colours: dict[int, str], targets: Sequence[Row]) -> Panel:
    title = "Simulator speed: virtual seconds per wall second (grid profile)"
    marks = []
    wanted: list[tuple[int, float, str, str]] = []
    for i, row in enumerate(rows):
        note = f"{row['speed']:.2f}x real time, peak {row['peak_rss_bytes'] / 2**30:.2f} GiB"
        marks.append(
            Mark(
                label=f"N={row['size']:,}",
                value=float(row["speed"]),
                colour=colour_of(colours, row),
                note=note,
            )
        )
        if row["size"] in SPEED_TARGETS:
            value, label = SPEED_TARGETS[row["size"]]
            wanted.append((i, value, label, f">= {number(value)}x"))
    x = fit_axis(
        [m.value for m in marks if m.value is not None],
        "virtual seconds per wall second",
        [w[1] for w in wanted],
        unit="x",
        reach=math.inf,
        zero_floor=True,
    )
    references = tuple(
        Reference("target", value, label, tag, TARGET_COLOUR, on_scale=x.contains(value), row=i)
        for i, value, label, tag in wanted
    )
    return Panel(
        scenario="speed",
        title=title,
        x=x,
        marks=tuple(marks),
        references=references,
        notes=_target_notes(targets, ("real time",)),
        empty=None if marks else "no speed results to plot",
    )


_SHARE = Axis("share of members", 0.0, 1.0, percent=True, step=0.2)


def detection_bound(row: Row) -> float | None:
    """``SwimConfig.detection_bound`` for a failure row's size and profile timing (None
    when the row does not carry the timing)."""
    if "probe_interval" not in row or "suspicion_timeout" not in row:
        return None
    config = SwimConfig(
        probe_interval=float(row["probe_interval"]),
        suspicion_timeout=float(row["suspicion_timeout"]),
        push_pull_interval=max(30.0, float(row["probe_interval"])),
    )
    return config.detection_bound(int(row["size"]))


def _target_notes(targets: Sequence[Row], keys: Sequence[str]) -> tuple[Note, ...]:
    verdicts = {True: "met", False: "MISSED", None: "unproven"}
    notes = []
    for target in targets:
        if not any(key in target["target"] for key in keys):
            continue
        verdict = verdicts[target["met"]]
        text = f"target: {target['target']}: {verdict}"
        if target.get("reason"):
            text += f" ({target['reason']})"
        elif target.get("measured") and target["measured"] != "-":
            text += f" ({target['measured']})"
        notes.append(Note(text, alert=target["met"] is False))
    return tuple(notes)


# --- small helpers --------------------------------------------------------------------


def _size_colours(report: dict[str, Any]) -> dict[int, str]:
    sizes = sorted(
        {
            int(row["size"])
            for name in SCENARIOS
            for row in (report.get(name) or [])
            if isinstance(row, dict) and "size" in row
        }
    )
    return {size: SIZE_COLOURS[i % len(SIZE_COLOURS)] for i, size in enumerate(sizes)}


def _gossip_interval(row: Row) -> float:
    if row.get("gossip_interval"):
        return float(row["gossip_interval"])
    return {"grid": 1.0, "memberlist-lan": 0.2}.get(row.get("profile", ""), 1.0)
