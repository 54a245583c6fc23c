"""The convergence plot as PNG, through matplotlib: the ``plot`` extra
(``pip install 'grid-mesh[plot]'``). It draws the same :class:`grid.simbench.figure_model.Figure`
as the SVG writer; matplotlib measures the text, and constrained layout with a tight
bounding box keeps legends, notes and labels inside the image."""

from __future__ import annotations

import io
import textwrap
from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure as MplFigure
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.lines import Line2D

from grid.simbench.figure import figure
from grid.simbench.figure_model import ALERT_COLOUR, Axis, Figure, Panel, Reference

WIDTH_IN = 12.0
DPI = 110
FONT_SIZE = 9
#: Characters a note line holds before it wraps (the figure is 12 in wide).
NOTE_CHARS = 150
CDF_NOTE_CHARS = 115
LEGEND_CHARS = 42


def render_png(report: dict[str, Any], version: str | None = None) -> bytes:
    """The report's plot as PNG bytes."""
    return png(figure(report, version))


def png(fig: Figure, dpi: int = DPI) -> bytes:
    panels = fig.panels
    heights = [_height(panel) for panel in panels]
    caption = "\n".join(textwrap.fill(line, NOTE_CHARS + 25) for line in fig.caption)
    total = sum(heights) + 0.8 + 0.16 * caption.count("\n")
    layout = ConstrainedLayoutEngine(w_pad=0.15, h_pad=0.1)
    out = MplFigure(figsize=(WIDTH_IN, total), layout=layout, facecolor="white")
    FigureCanvasAgg(out)
    out.suptitle(fig.title, x=0.01, ha="left", fontsize=13, fontweight="bold")
    if panels:
        # A subfigure per panel, so each aligns its own labels (row labels are wide).
        subfigures = out.subfigures(len(panels), 1, height_ratios=heights, squeeze=False)[:, 0]
        for sub, panel in zip(subfigures, panels, strict=True):
            _panel(sub.subplots(), panel)
    else:
        out.text(0.5, 0.5, "no results to plot", ha="center")
    out.supxlabel(caption, x=0.01, ha="left", fontsize=FONT_SIZE - 0.5, color="#333333")
    buffer = io.BytesIO()
    out.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def _row_references(panel: Panel) -> list[Reference]:
    """A row panel's reference lines, one per label: named in its notes (a CDF panel names
    them in its legend)."""
    if panel.y is not None:
        return []
    seen: dict[str, Reference] = {}
    for ref in panel.references:
        seen.setdefault(ref.label, ref)
    return list(seen.values())


def _reference_note(ref: Reference) -> str:
    what = {"bound": "dashed lines", "target": "red ticks", "pace": "dotted lines"}[ref.kind]
    if ref.kind == "target" and ref.row is None:
        what = "dash-dotted lines"
    return f"{what}: {ref.label}" + ("" if ref.on_scale else " (off scale)")


def _note_chars(panel: Panel) -> int:
    """A CDF panel's notes run under the plot only, clear of the legend beside it."""
    return CDF_NOTE_CHARS if panel.y is not None else NOTE_CHARS


def _legend_entries(panel: Panel) -> list[tuple[Line2D, str]]:
    """A CDF panel's legend: curves, reference lines, then those off scale."""
    entries = [
        (Line2D([], [], color=c.colour, linestyle=_dash(c.dash), lw=1.8), c.label)
        for c in panel.curves
    ]
    labels = set()
    for ref in panel.on_scale:
        if ref.label not in labels:
            labels.add(ref.label)
            entries.append((Line2D([], [], color=ref.colour, linestyle=_dash(ref.dash)), ref.label))
    if panel.off_scale:
        entries.append((Line2D([], [], linestyle="none"), "off scale, beyond the axis:"))
        entries += [
            (Line2D([], [], color=ref.colour, linestyle=_dash(ref.dash)), ref.label)
            for ref in panel.off_scale
        ]
    return [(handle, textwrap.fill(label, LEGEND_CHARS)) for handle, label in entries]


def _height(panel: Panel) -> float:
    """Inches for ``panel``: its plot, or its legend when that is taller, and its notes."""
    if panel.empty is not None:
        return 0.8
    texts = [note.text for note in panel.notes]
    texts += [_reference_note(ref) for ref in _row_references(panel)]
    notes = sum(len(textwrap.wrap(text, _note_chars(panel))) for text in texts)
    if panel.y is not None:
        legend = sum(label.count("\n") + 1 for _, label in _legend_entries(panel))
        body = max(2.9, 0.65 + 0.19 * legend)
    else:
        body = 0.9 + 0.3 * len(panel.marks)
    return body + 0.17 * notes + 0.3


def _dash(svg_dash: str) -> Any:
    if not svg_dash:
        return "-"
    return (0, tuple(float(part) / 1.5 for part in svg_dash.split()))


def _panel(ax: Axes, panel: Panel) -> None:
    tags_above = panel.y is None and any(ref.row is None for ref in panel.on_scale)
    ax.set_title(
        panel.title, loc="left", fontsize=11, fontweight="bold", pad=16 if tags_above else 6
    )
    if panel.empty is not None:
        ax.set_axis_off()
        ax.text(0, 0.5, panel.empty, transform=ax.transAxes, color="#666666")
        return
    if panel.y is not None:
        _cdf(ax, panel, panel.y)
    else:
        _rows(ax, panel)
    _x_axis(ax, panel.x)
    texts = [(_reference_note(ref), False) for ref in _row_references(panel)]
    texts += [(note.text, note.alert) for note in panel.notes]
    notes = [
        (line, alert) for text, alert in texts for line in textwrap.wrap(text, _note_chars(panel))
    ]
    for i, (line, alert) in enumerate(notes):
        ax.annotate(
            line,
            xy=(0, 0),
            xycoords="axes fraction",
            xytext=(0, -34 - 11.5 * i),
            textcoords="offset points",
            va="top",
            fontsize=FONT_SIZE - 0.5,
            color=ALERT_COLOUR if alert else "#444444",
            fontweight="bold" if alert else "normal",
        )


def _x_axis(ax: Axes, axis: Axis) -> None:
    if axis.log:
        ax.set_xscale("log")
    ax.set_xlim(axis.low, axis.high)
    ax.set_xticks(list(axis.ticks), [axis.tick_label(t) for t in axis.ticks])
    ax.minorticks_off()
    ax.set_xlabel(axis.label + (" (log scale)" if axis.log else ""), fontsize=FONT_SIZE)
    ax.tick_params(labelsize=FONT_SIZE)
    ax.grid(axis="x", color="#e6e6e6")
    ax.set_axisbelow(True)


def _cdf(ax: Axes, panel: Panel, share: Axis) -> None:
    for curve in panel.curves:
        xs = [x for x, _ in curve.points if not panel.x.log or x > 0]
        ys = [f for x, f in curve.points if not panel.x.log or x > 0]
        ax.plot(xs, ys, color=curve.colour, linestyle=_dash(curve.dash), lw=1.8)
    for ref in panel.on_scale:
        ax.axvline(ref.value, color=ref.colour, linestyle=_dash(ref.dash), lw=1.3)
        near_end = share is not None and panel.x.position(ref.value) > 0.85
        ax.annotate(
            ref.tag,
            xy=(ref.value, 0),
            xycoords=("data", "axes fraction"),
            xytext=(-3 if near_end else 3, 4),
            textcoords="offset points",
            ha="right" if near_end else "left",
            fontsize=FONT_SIZE - 1.5,
            color=ref.colour,
        )
    ax.set_ylim(share.low, share.high * 1.02)
    ax.set_yticks(list(share.ticks), [share.tick_label(t) for t in share.ticks])
    ax.set_ylabel(share.label, fontsize=FONT_SIZE)
    ax.grid(axis="y", color="#e6e6e6")
    entries = _legend_entries(panel)
    ax.legend(
        [handle for handle, _ in entries],
        [label for _, label in entries],
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=FONT_SIZE - 0.5,
        frameon=False,
        handlelength=2.6,
    )


def _rows(ax: Axes, panel: Panel) -> None:
    count = len(panel.marks)
    for i, mark in enumerate(panel.marks):
        if mark.value is not None:
            if mark.high is not None and mark.high > mark.value:
                ax.plot([mark.value, mark.high], [i, i], color=mark.colour, lw=2)
                ax.plot([mark.high], [i], marker="|", color=mark.colour, markersize=9, mew=2)
            ax.plot(
                [mark.value],
                [i],
                marker="o",
                markersize=7,
                color=mark.colour,
                markerfacecolor="white" if mark.hollow else mark.colour,
                mew=2,
            )
    for ref in panel.on_scale:
        where: tuple[float, float]
        if ref.row is None:
            ax.axvline(ref.value, color=ref.colour, linestyle=_dash(ref.dash), lw=1.3)
            where, offset = (ref.value, 1.0), (2, 2)
        else:
            ax.plot([ref.value] * 2, [ref.row - 0.38, ref.row + 0.38], color=ref.colour, lw=2.5)
            where, offset = (ref.value, ref.row + 0.38), (3, 1)
        ax.annotate(
            ref.tag,
            xy=where,
            xycoords="data" if ref.row is not None else ("data", "axes fraction"),
            xytext=offset,
            textcoords="offset points",
            fontsize=FONT_SIZE - 1.5,
            color=ref.colour,
        )
    ax.set_ylim(count - 0.5, -0.5)
    ax.set_yticks(range(count), [mark.label for mark in panel.marks])
    # The notes are the tick labels of a twin axis on the right: laid out like any label.
    notes = ax.twinx()
    notes.set_ylim(count - 0.5, -0.5)
    notes.set_yticks(range(count), [mark.note for mark in panel.marks])
    notes.tick_params(length=0, labelsize=FONT_SIZE)
    for label, mark in zip(notes.get_yticklabels(), panel.marks, strict=True):
        if mark.alert:
            label.set_color(ALERT_COLOUR)
            label.set_fontweight("bold")
