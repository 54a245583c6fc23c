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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from grid.membership import SwimConfig
from grid.simbench.runner import JOIN_ROUND_TARGET, SCENARIOS
from grid.simbench.runner import title as report_title

Row = dict[str, Any]

#: One colour per cluster size (in size order), the same in every panel.
SIZE_COLOURS = ("#1b6ca8", "#2a9d8f", "#e08e0b", "#6a4c93", "#495057", "#8c564b")
TARGET_COLOUR = "#c0392b"
PACE_COLOUR = "#7f7f7f"
ALERT_COLOUR = "#c0392b"
#: Line styles per profile (SVG dash arrays; "" is solid).
PROFILE_DASHES = {"grid": "", "memberlist-lan": "7 4"}
OTHER_DASH = "2 3"
#: A reference line widens the axis when it lies within this factor of the data's top
#: (so the epidemic bound stays in view); further out it is listed as off scale.
REFERENCE_REACH = 1.6
#: A value axis turns logarithmic when its positive data spans this factor or more.
LOG_SPAN = 30.0
#: foca announces itself to members it holds down every this many probe intervals.
ANNOUNCE_TO_DOWN_INTERVALS = 13

ReferenceKind = Literal["bound", "target", "pace"]


@dataclass(frozen=True, slots=True)
class Axis:
    """A value axis from ``low`` to ``high``; ``unit`` follows each tick label."""

    label: str
    low: float
    high: float
    log: bool = False
    unit: str = ""
    percent: bool = False
    #: Linear tick spacing (None: a round step for the span).
    step: float | None = None

    @property
    def ticks(self) -> tuple[float, ...]:
        if self.log:
            return _log_ticks(self.low, self.high)
        step = self.step or _nice_step(self.high - self.low)
        first = math.ceil(self.low / step - 1e-9)
        count = math.floor(self.high / step + 1e-9) - first
        return tuple(_clean((first + i) * step) for i in range(count + 1))

    def position(self, value: float) -> float:
        """Where ``value`` sits along the axis, 0 at ``low`` and 1 at ``high`` (clamped)."""
        if self.log:
            value = max(value, self.low)
            where = math.log(value / self.low) / math.log(self.high / self.low)
        else:
            where = (value - self.low) / (self.high - self.low)
        return min(1.0, max(0.0, where))

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high and (not self.log or value > 0)

    def tick_label(self, value: float) -> str:
        if self.percent:
            return f"{value:.0%}"
        return f"{_number(value)}{self.unit}"


@dataclass(frozen=True, slots=True)
class Curve:
    """One CDF: (x, share) points."""

    label: str
    points: tuple[tuple[float, float], ...]
    colour: str
    dash: str


@dataclass(frozen=True, slots=True)
class Reference:
    """A labelled reference line at ``value`` on the x axis: across the plot, or on one
    row of a row panel (``row``). ``tag`` is the short label drawn at the line; ``label``
    the legend's. ``on_scale`` False: outside the axis, listed as off scale."""

    kind: ReferenceKind
    value: float
    label: str
    tag: str
    colour: str
    on_scale: bool = True
    row: int | None = None

    @property
    def dash(self) -> str:
        return {"bound": "3 3", "target": "9 3 2 3", "pace": "1 3"}[self.kind]


@dataclass(frozen=True, slots=True)
class Mark:
    """One row of a row panel: a dot at ``value`` (hollow for memberlist-lan), a whisker
    to ``high`` when given, and ``note`` beside the plot (``alert`` in red)."""

    label: str
    value: float | None
    colour: str
    note: str
    high: float | None = None
    hollow: bool = False
    alert: bool = False


@dataclass(frozen=True, slots=True)
class Note:
    """A line of text under a panel: a target's verdict, or how to read the panel."""

    text: str
    alert: bool = False


@dataclass(frozen=True, slots=True)
class Panel:
    """One scenario. A CDF panel has ``y`` (the share, 0 to 100 %) and ``curves``; a row
    panel has ``marks``. ``empty`` says why there is nothing to draw."""

    scenario: str
    title: str
    x: Axis
    y: Axis | None = None
    curves: tuple[Curve, ...] = ()
    marks: tuple[Mark, ...] = ()
    references: tuple[Reference, ...] = ()
    notes: tuple[Note, ...] = ()
    empty: str | None = None

    @property
    def on_scale(self) -> tuple[Reference, ...]:
        return tuple(ref for ref in self.references if ref.on_scale)

    @property
    def off_scale(self) -> tuple[Reference, ...]:
        return tuple(ref for ref in self.references if not ref.on_scale)


@dataclass(frozen=True, slots=True)
class Figure:
    title: str
    panels: tuple[Panel, ...]
    caption: tuple[str, ...]


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
        "state": (_state_traffic, _state_changes),
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
            label=_who(row),
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
        log_basis=_cdf_basis(curves),
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
            label=_who(row),
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
                    f"detection bound {_number(bound)} s for {_who(row)}",
                    f"bound {_who(row)}",
                    colours.get(row["size"], SIZE_COLOURS[-1]),
                )
            )
    x = fit_axis(
        xs,
        "seconds after the crash",
        [w[0] for w in wanted],
        unit=" s",
        log_basis=_cdf_basis(curves),
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
            setting = f"slow node +{_number(row['slow_node_delay'])} s"
        else:
            setting = f"{row['loss']:.0%} loss"
        seed = f", seed {row['seed']}" if several_seeds and "seed" in row else ""
        downs = row["false_declarations"]
        note = f"{downs} false down{'' if downs == 1 else 's'}"
        if downs:
            note += f" ({row.get('falsely_declared_members', '?')} members)"
        if "minutes" in row:
            note += f" in {_number(row['minutes'])} min"
        marks.append(
            Mark(
                label=f"{_who(row)}, {setting}{seed}",
                value=rate,
                colour=_colour(colours, row),
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
            parts.append(f"healed in {_number(seconds['p50'])} s")
        if split is not None:
            parts.append(f"split {_number(split['p50'])} s")
        if converged < runs:
            parts.append(f"{converged} of {runs} converged")
        marks.append(
            Mark(
                label=_who(row),
                value=None if after is None else after["p50"],
                high=None if after is None or runs < 2 else after["max"],
                colour=_colour(colours, row),
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
                colour=_colour(colours, row),
                note=note,
            )
        )
        if row["size"] in SPEED_TARGETS:
            value, label = SPEED_TARGETS[row["size"]]
            wanted.append((i, value, label, f">= {_number(value)}x"))
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


#: The state plane's message kinds as the plot groups them (as the report's table does):
#: (name, the kinds in the row's ``per_site``).
STATE_KINDS = (
    ("broadcast", ("broadcast",)),
    ("sync", ("sync-request", "sync-response")),
    ("digest + repair", ("digest", "repair")),
    ("SWIM", ("swim",)),
    ("other", ("other",)),
)


def _state_traffic(rows: Sequence[Row], colours: dict[int, str], targets: Sequence[Row]) -> Panel:
    del targets  # no state-plane target is set
    title = "State plane: what a site sends"
    marks = []
    for row in rows:
        if "skipped" in row:
            note = f"skipped: {row['skipped']}"
            marks.append(
                Mark(label=_sites(row), value=None, colour=_colour(colours, row), note=note)
            )
            continue
        total = float(row["bytes_out_per_site"])
        parts = [f"{name} {_kb(value)}" for name, value in _state_split(row) if value > 0]
        marks.append(
            Mark(
                label=_sites(row),
                value=total / 1000,
                colour=_colour(colours, row),
                note=f"{_kb(total)} KB/s: {', '.join(parts)}",
            )
        )
    x = fit_axis(
        [m.value for m in marks if m.value is not None],
        "KB a site sends a second in steady state (mean over sites; 1 KB = 1,000 bytes)",
        (),
        zero_floor=True,
    )
    windows = sorted({float(row["window"]) for row in rows if "window" in row})
    window = (
        f"the {' / '.join(_number(w) for w in windows)} s window" if windows else "steady state"
    )
    notes = (
        Note(
            f"rows: N sites x providers a site; dot: bytes out per site and second over "
            f"{window}; right: the total and its split by kind in KB/s (sync = requests and "
            "answers)"
        ),
    )
    return Panel(
        scenario="state",
        title=title,
        x=x,
        marks=tuple(marks),
        notes=notes,
        empty=None if marks else "no state-plane results to plot",
    )


def _state_split(row: Row) -> list[tuple[str, float]]:
    """A state row's bytes out per site and second by kind, grouped as :data:`STATE_KINDS`
    (a kind the row does not carry counts 0)."""
    per_site = row.get("per_site") or {}
    return [
        (name, sum(float((per_site.get(kind) or {}).get("bytes_out", 0.0)) for kind in kinds))
        for name, kinds in STATE_KINDS
    ]


def _state_changes(rows: Sequence[Row], colours: dict[int, str], targets: Sequence[Row]) -> Panel:
    del targets  # no state-plane target is set
    title = "State plane: a change reaching every site"
    ran = [row for row in rows if "skipped" not in row]
    curves = []
    notes = [
        Note(
            "each curve: the share of the run's catalogue changes (one at a time, from a random "
            "site) that every other site had taken, against the seconds since it was published"
        )
    ]
    for row in ran:
        delays = row.get("change_delays")
        if not delays:
            continue
        took = sorted(float(d) for d in delays if d is not None)
        count = len(delays)
        points: list[tuple[float, float]] = []
        for i, delay in enumerate(took):  # a step per change
            points += [(delay, i / count), (delay, (i + 1) / count)]
        curves.append(
            Curve(
                label=f"{_sites(row)} ({count} change{'' if count == 1 else 's'})",
                points=tuple(points),
                colour=_colour(colours, row),
                dash="",
            )
        )
        if len(took) < count:
            notes.append(
                Note(
                    f"{_sites(row)}: {count - len(took)} of {count} changes never reached every "
                    "site",
                    alert=True,
                )
            )
    xs = [x for curve in curves for x, _ in curve.points]
    x = fit_axis(
        xs,
        "seconds after the change until every other site held it",
        (),
        unit=" s",
        log_basis=_cdf_basis(curves),
    )
    notes += [_catch_up_note(row) for row in ran]
    skipped = [_sites(row) for row in rows if "skipped" in row]
    if skipped:
        notes.append(Note(f"not run (skipped, see above): {', '.join(skipped)}"))
    if not rows:
        empty: str | None = "no state-plane results to plot"
    elif not ran:
        empty = "no state-plane size ran: every one was skipped"
    else:
        empty = None if curves else "no change delays in the report"
    return Panel(
        scenario="state",
        title=title,
        x=x,
        y=_CHANGES,
        curves=tuple(curves),
        notes=tuple(notes),
        empty=empty,
    )


def _catch_up_note(row: Row) -> Note:
    """How long an empty node took to hold 99 % and all of the row's names."""

    def after(seconds: float | None) -> str:
        return "never within the run" if seconds is None else f"after {_number(seconds)} s"

    most, every = row.get("catch_up_99"), row.get("catch_up")
    items = f", {row['items']:,} names" if "items" in row else ""
    text = f"joiner at {_sites(row)} (an empty node{items}): held 99 % {after(most)}, "
    text += f"all {after(every)}"
    return Note(text, alert=every is None)


def _kb(value: float) -> str:
    return _number(value / 1000)


def _sites(row: Row) -> str:
    return f"N={row['size']:,} x {row['providers']}" if "providers" in row else _who(row)


_SHARE = Axis("share of members", 0.0, 1.0, percent=True, step=0.2)
_CHANGES = Axis("share of changes at every site", 0.0, 1.0, percent=True, step=0.2)


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


# --- caption --------------------------------------------------------------------------


def caption(report: dict[str, Any], version: str | None = None) -> tuple[str, ...]:
    """Sentences naming what the figure came from: Grid version, seed, runs, network."""
    plan = report.get("plan") or {}
    if version is None:
        version = report.get("version") or _running_version()
    seed = plan.get("seed")
    # Speed and the state plane run once per size under grid alone.
    profiled = any(name in report for name in _PROFILED)
    first = f"Grid {version}"
    if seed is not None:
        first += f"; seed {seed}"
        if profiled:
            first += f" (run i uses seed {seed} + i, the same under both profiles)"
    lines = [first + "."]
    runs = _runs(report)
    if runs:
        lines.append(f"Runs per size and profile: {'; '.join(runs)}.")
    network = plan.get("network")
    if network:
        loss = float(network.get("loss", 0.0))
        text = (
            f"Network: {_number(network['delay'] * 1000)} ms one way + "
            f"{network['jitter_kind']} jitter averaging {_number(network['jitter'] * 1000)} ms "
            f"per message, {'no loss' if loss == 0 else f'{loss:.0%} loss'}"
        )
        accuracy = _accuracy_settings(plan) if "accuracy" in report else ""
        lines.append(text + (f"; {accuracy}" if accuracy else "") + ".")
    profiles = plan.get("profiles")
    if profiles and profiled:
        described = [_PROFILE_TEXT.get(name, name) for name in profiles]
        lines.append(f"Profiles: {'; '.join(described)}.")
    return tuple(lines)


#: The scenarios that run under every profile of the plan.
_PROFILED = ("join", "failure", "accuracy", "partition")
_PROFILE_TEXT = {
    "grid": "grid (solid, filled): probe P 5 s, suspicion S 10 s, gossip every 1 s to 3",
    "memberlist-lan": "memberlist-lan (dashed, hollow): P 1 s, S 4·max(1, log10 N) s, gossip "
    "every 0.2 s to 3",
}


def _runs(report: dict[str, Any]) -> list[str]:
    out = []
    for name in ("join", "failure", "partition"):
        rows = report.get(name) or []
        by_count: dict[int, list[int]] = {}
        for row in rows:
            if "runs" in row:
                sizes = by_count.setdefault(int(row["runs"]), [])
                if row["size"] not in sizes:
                    sizes.append(row["size"])
        if not by_count:
            continue
        label = "failure" if name == "failure" else name
        if len(by_count) == 1:
            out.append(f"{label} {next(iter(by_count))}")
        else:
            parts = [
                f"{count} at N={', '.join(f'{s:,}' for s in sizes)}"
                for count, sizes in sorted(by_count.items(), reverse=True)
            ]
            out.append(f"{label} {', '.join(parts)}")
    accuracy = report.get("accuracy") or []
    if accuracy:
        settings: dict[tuple[Any, ...], int] = {}
        for row in accuracy:
            key = (row["size"], row["profile"], row["loss"], bool(row.get("slow_node_delay")))
            settings[key] = settings.get(key, 0) + 1
        counts = sorted(set(settings.values()))
        minutes = sorted({row["minutes"] for row in accuracy if "minutes" in row})
        out.append(
            f"accuracy {'/'.join(map(str, counts))} of {'/'.join(_number(m) for m in minutes)} "
            "virtual minutes per setting"
        )
    if report.get("speed"):
        out.append("speed 1 timed push/pull period per size")
    if report.get("state"):
        state = (report.get("plan") or {}).get("state") or {}
        providers = sorted({row["providers"] for row in report["state"] if "providers" in row})
        text = "state plane 1 under grid"
        parts = []
        if providers:
            parts.append(f"{'/'.join(map(str, providers))} providers a site")
        if "window" in state:
            parts.append(f"{_number(float(state['window']))} s of steady state")
        if "changes" in state:
            parts.append(f"{state['changes']} changes")
        out.append(text + (f" ({', '.join(parts)})" if parts else ""))
    return out


def _accuracy_settings(plan: dict[str, Any]) -> str:
    parts = [f"{loss:.0%}" for loss in plan.get("losses", ())]
    text = f"accuracy runs at {' and '.join(parts)} loss" if parts else "accuracy runs"
    if plan.get("slow_node"):
        text += ", and at no loss with one slow node (1.5 P late)"
    return text


def _running_version() -> str:
    try:
        from grid import __version__
    except ImportError:  # pragma: no cover - the extension is always built here
        return "unknown"
    return str(__version__)


# --- axes -----------------------------------------------------------------------------


def fit_axis(
    values: Iterable[float],
    label: str,
    references: Iterable[float] = (),
    *,
    unit: str = "",
    reach: float = REFERENCE_REACH,
    zero_floor: bool = False,
    log_basis: Iterable[float] | None = None,
) -> Axis:
    """An axis fitted to ``values``: logarithmic when they are positive and span
    :data:`LOG_SPAN` or more, else linear from 0 (or from a round value below the data
    when 0 is far off) with a little headroom; ends at round values. ``references`` within
    ``reach`` times the data's extent widen it; the rest stay outside (off scale).
    ``zero_floor``: a linear axis always starts at 0. ``log_basis``: the values that decide
    between log and linear, when not all of ``values`` should (a CDF's first learners sit
    near 0 however the bulk spreads)."""
    data = [float(v) for v in values if math.isfinite(v)]
    if not data:
        return Axis(label, 0.0, 1.0, unit=unit)
    low, high = min(data), max(data)
    basis = data if log_basis is None else [float(v) for v in log_basis if math.isfinite(v)]
    log = bool(basis) and low > 0 and min(basis) > 0 and max(basis) / min(basis) >= LOG_SPAN
    for ref in references:
        if not math.isfinite(ref):
            continue
        inside = low / reach <= ref <= high * reach if log else 0 <= ref <= high * reach
        if inside:
            low, high = min(low, ref), max(high, ref)
    if log:  # a little room, so nothing sits on the frame
        return Axis(
            label, _round_down_125(low / 1.05), _round_up_125(high * 1.05), log=True, unit=unit
        )
    if high <= low:  # one value: show it from 0
        low, high = min(low, 0.0), max(high, 0.0) if high != 0 else 1.0
    start = 0.0 if zero_floor or (low >= 0 and low <= 0.4 * high) else low - 0.05 * (high - low)
    top = high + 0.05 * (high - start)
    step = _nice_step(top - start)
    axis_low = math.floor(start / step + 1e-9) * step
    axis_high = math.ceil(top / step - 1e-9) * step
    return Axis(label, _clean(axis_low), _clean(axis_high), unit=unit, step=step)


def _nice_step(span: float) -> float:
    """A round tick step giving 4 to 7 ticks over ``span``."""
    raw = span / 6
    magnitude = 10 ** math.floor(math.log10(raw))
    for factor in (1.0, 2.0, 2.5, 5.0):
        if factor * magnitude >= raw:
            return float(factor * magnitude)
    return float(10 * magnitude)


def _round_down_125(value: float) -> float:
    magnitude = 10 ** math.floor(math.log10(value))
    for factor in (5, 2, 1):
        if factor * magnitude <= value * (1 + 1e-9):
            return _clean(factor * magnitude)
    return _clean(magnitude)  # pragma: no cover


def _round_up_125(value: float) -> float:
    magnitude = 10 ** math.floor(math.log10(value))
    for factor in (1, 2, 5, 10):
        if factor * magnitude >= value * (1 - 1e-9):
            return _clean(factor * magnitude)
    return _clean(10 * magnitude)  # pragma: no cover


def _log_ticks(low: float, high: float) -> tuple[float, ...]:
    """1-2-5 values from ``low`` to ``high``, thinned to decades (and the ends) when the
    axis spans more than two decades."""
    ticks = []
    decade = 10 ** math.floor(math.log10(low))
    while decade <= high * (1 + 1e-9):
        for factor in (1, 2, 5):
            value = _clean(factor * decade)
            if low * (1 - 1e-9) <= value <= high * (1 + 1e-9):
                ticks.append(value)
        decade *= 10
    if high / low > 200:
        ticks = [t for t in ticks if t in (low, high) or math.log10(t).is_integer()]
    return tuple(ticks)


def _clean(value: float) -> float:
    return float(f"{value:.10g}")


def _number(value: float) -> str:
    """A figure for a label: thousands separated, at most 3 significant digits past 10."""
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.0f}" if float(value).is_integer() or abs(value) >= 100 else f"{value:.1f}"
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return text or "0"


def _cdf_basis(curves: Sequence[Curve]) -> list[float]:
    """Where each curve first reaches 10 % and where it ends: a CDF axis goes logarithmic
    only when these span decades."""
    basis = []
    for curve in curves:
        if curve.points:
            basis.append(next((x for x, f in curve.points if f >= 0.1), curve.points[-1][0]))
            basis.append(curve.points[-1][0])
    return basis


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


def _colour(colours: dict[int, str], row: Row) -> str:
    return colours.get(int(row["size"]), SIZE_COLOURS[-1])


def _who(row: Row) -> str:
    return f"N={row['size']:,} {row['profile']}" if "profile" in row else f"N={row['size']:,}"


def _gossip_interval(row: Row) -> float:
    if row.get("gossip_interval"):
        return float(row["gossip_interval"])
    return {"grid": 1.0, "memberlist-lan": 0.2}.get(row.get("profile", ""), 1.0)
