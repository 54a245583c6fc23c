"""The state plane's two panels of the convergence figure: what a site sends a second per
size, split by kind, and the share of catalogue changes that reached every site against
seconds, with the joiner's catch-up. No target is set for the state plane, so neither has
a target line. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from grid.simbench.figure_model import (
    Axis,
    Curve,
    Mark,
    Note,
    Panel,
    Row,
    cdf_basis,
    colour_of,
    fit_axis,
    number,
    row_label,
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


def state_traffic(rows: Sequence[Row], colours: dict[int, str], targets: Sequence[Row]) -> Panel:
    del targets  # no state-plane target is set
    title = "State plane: what a site sends"
    marks = []
    for row in rows:
        if "skipped" in row:
            note = f"skipped: {row['skipped']}"
            marks.append(
                Mark(label=_sites(row), value=None, colour=colour_of(colours, row), note=note)
            )
            continue
        total = float(row["bytes_out_per_site"])
        parts = [f"{name} {_kb(value)}" for name, value in _state_split(row) if value > 0]
        marks.append(
            Mark(
                label=_sites(row),
                value=total / 1000,
                colour=colour_of(colours, row),
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
    window = f"the {' / '.join(number(w) for w in windows)} s window" if windows else "steady state"
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


def state_changes(rows: Sequence[Row], colours: dict[int, str], targets: Sequence[Row]) -> Panel:
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
                colour=colour_of(colours, row),
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
        log_basis=cdf_basis(curves),
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
        return "never within the run" if seconds is None else f"after {number(seconds)} s"

    most, every = row.get("catch_up_99"), row.get("catch_up")
    items = f", {row['items']:,} names" if "items" in row else ""
    text = f"joiner at {_sites(row)} (an empty node{items}): held 99 % {after(most)}, "
    text += f"all {after(every)}"
    return Note(text, alert=every is None)


def _kb(value: float) -> str:
    return number(value / 1000)


def _sites(row: Row) -> str:
    return f"N={row['size']:,} x {row['providers']}" if "providers" in row else row_label(row)


_CHANGES = Axis("share of changes at every site", 0.0, 1.0, percent=True, step=0.2)
