"""The convergence plot, written by the file's extension: ``.svg`` by the hand-written SVG
writer here (no extra needed), ``.png`` through matplotlib (the ``plot`` extra,
:mod:`grid.simbench.plot_png`). Both draw the same :class:`grid.simbench.figure_model.Figure`:
a panel per scenario that ran, reference lines for the bounds and targets, a caption.

The SVG is laid out from conservative text widths (DejaVu Sans advances with some slack,
never under 0.6 em a character on average), so legends, notes and labels are sized to
fit and stay inside the view box whatever the cluster sizes."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from grid.simbench.figure import figure
from grid.simbench.figure_model import ALERT_COLOUR, Axis, Figure, Mark, Panel, Reference

PLOT_SUFFIXES = (".svg", ".png")
PLOT_EXTRA = "pip install 'grid-mesh[plot]'"


class PlotError(Exception):
    """The plot cannot be written as asked: an unknown extension, or PNG without the extra."""


def check_plot_path(path: Path) -> None:
    """Raises :class:`PlotError` unless ``path``'s extension names a format this machine
    can write; checked before a run, so a long run never ends in an unwritable plot."""
    suffix = path.suffix.lower()
    if suffix not in PLOT_SUFFIXES:
        raise PlotError(
            f"--plot {str(path)!r}: the plot is written as SVG or PNG, chosen by the "
            f"extension: name a .svg or .png file"
        )
    if suffix == ".png" and not png_available():
        raise PlotError(f"PNG needs the plot extra: {PLOT_EXTRA}")


def png_available() -> bool:
    """Whether matplotlib (the plot extra) can be imported."""
    try:
        return importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):  # a broken or blocked installation
        return False


def write_plot(report: dict[str, Any], path: Path) -> None:
    """Writes the report's plot to ``path`` in the format its extension names."""
    check_plot_path(path)
    if path.suffix.lower() == ".png":
        from grid.simbench.plot_png import render_png

        path.write_bytes(render_png(report))
    else:
        path.write_text(render_svg(report), encoding="utf-8")


# --- text metrics ---------------------------------------------------------------------

#: DejaVu Sans advance widths in em (it is wider than Arial or Helvetica, so text laid
#: out with these fits in either).
_ADVANCE = {
    **dict.fromkeys("0123456789$", 0.636),
    **dict(
        zip(
            "abcdefghijklmnopqrstuvwxyz",
            (
                0.613,
                0.635,
                0.550,
                0.635,
                0.615,
                0.352,
                0.635,
                0.634,
                0.278,
                0.278,
                0.579,
                0.278,
                0.974,
                0.634,
                0.612,
                0.635,
                0.635,
                0.411,
                0.521,
                0.392,
                0.634,
                0.592,
                0.818,
                0.592,
                0.592,
                0.525,
            ),
            strict=True,
        )
    ),
    **dict(
        zip(
            "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
            (
                0.684,
                0.686,
                0.698,
                0.770,
                0.632,
                0.575,
                0.775,
                0.752,
                0.295,
                0.295,
                0.656,
                0.557,
                0.863,
                0.748,
                0.787,
                0.603,
                0.787,
                0.695,
                0.635,
                0.611,
                0.732,
                0.684,
                0.989,
                0.685,
                0.611,
                0.685,
            ),
            strict=True,
        )
    ),
    **dict.fromkeys("#+<=>^~\u00d7\u2265\u2264\u2192\u2248", 0.838),
    **dict.fromkeys(" ,.\u00b7", 0.318),
    **dict.fromkeys(":;/|\\", 0.337),
    **dict.fromkeys("()[]", 0.390),
    "-": 0.361,
    "'": 0.275,
    '"': 0.460,
    "!": 0.401,
    "{": 0.636,
    "}": 0.636,
    "%": 0.950,
    "&": 0.780,
    "@": 1.0,
    "\u2014": 1.0,
    "\u2013": 0.5,
    "*": 0.5,
    "_": 0.5,
    "?": 0.531,
}
#: Margin over DejaVu's advances (for other fonts and hinting), and the least width of a
#: line, in em a character.
SLACK = 1.05
MIN_AVERAGE = 0.6
BOLD = 1.1


def text_width(text: str, size: float, *, bold: bool = False) -> float:
    """A conservative width of ``text`` at ``size`` px: DejaVu Sans's advances (unknown
    characters 1 em) with some slack, and never under 0.6 em a character on average."""
    ems = max(SLACK * sum(_ADVANCE.get(char, 1.0) for char in text), MIN_AVERAGE * len(text))
    return ems * size * (BOLD if bold else 1.0)


def wrap(text: str, width: float, size: float, *, bold: bool = False) -> list[str]:
    """``text`` broken at spaces into lines no wider than ``width`` (a word longer than
    the width is split)."""
    lines: list[str] = []
    line = ""
    for word in text.split():
        candidate = f"{line} {word}" if line else word
        if text_width(candidate, size, bold=bold) <= width:
            line = candidate
            continue
        if line:
            lines.append(line)
        rest = word
        while text_width(rest, size, bold=bold) > width and len(rest) > 1:
            cut = len(rest) - 1
            while cut > 1 and text_width(rest[:cut], size, bold=bold) > width:
                cut -= 1
            lines.append(rest[:cut])
            rest = rest[cut:]
        line = rest
    if line:
        lines.append(line)
    return lines or [""]


# --- layout ---------------------------------------------------------------------------

WIDTH = 1000
PAD = 16
FONT = "DejaVu Sans, Verdana, Arial, sans-serif"
TITLE_SIZE = 16
PANEL_TITLE_SIZE = 14
TEXT_SIZE = 11
NOTE_SIZE = 11
LINE = 15
LEGEND_WIDTH = 270
CDF_HEIGHT = 230
ROW_HEIGHT = 24
INK = "#222"
GRID_INK = "#e6e6e6"


@dataclass
class _Canvas:
    parts: list[str] = field(default_factory=list)

    def text(
        self,
        x: float,
        y: float,
        content: str,
        *,
        size: float = TEXT_SIZE,
        anchor: str = "start",
        bold: bool = False,
        colour: str = INK,
        cls: str | None = None,
    ) -> None:
        attrs = f'x="{x:.1f}" y="{y:.1f}" font-size="{size:g}"'
        if anchor != "start":
            attrs += f' text-anchor="{anchor}"'
        if bold:
            attrs += ' font-weight="bold"'
        if colour != INK:
            attrs += f' fill="{colour}"'
        if cls:
            attrs += f' class="{cls}"'
        self.parts.append(f"<text {attrs}>{escape(content)}</text>")

    def line(
        self,
        x1: float,
        y1: float,
        x2: float,
        y2: float,
        colour: str,
        *,
        width: float = 1.0,
        dash: str = "",
    ) -> None:
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        self.parts.append(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
            f'stroke="{colour}" stroke-width="{width:g}"{extra}/>'
        )

    def open(self, tag: str, **attrs: str) -> None:
        rendered = "".join(f" {name.replace('_', '-')}={quoteattr(v)}" for name, v in attrs.items())
        self.parts.append(f"<{tag}{rendered}>")

    def close(self, tag: str) -> None:
        self.parts.append(f"</{tag}>")


def render_svg(report: dict[str, Any], version: str | None = None) -> str:
    """The report's plot as an SVG document."""
    return svg(figure(report, version))


def svg(fig: Figure) -> str:
    canvas = _Canvas()
    y: float = PAD + TITLE_SIZE
    canvas.text(PAD, y, fig.title, size=TITLE_SIZE, bold=True, cls="title")
    y += 14
    if not fig.panels:
        y += 30
        canvas.text(WIDTH / 2, y, "no results to plot", anchor="middle")
        y += 20
    for panel in fig.panels:
        canvas.open("g", **{"class": "panel", "data_scenario": panel.scenario})
        y = _panel(canvas, panel, y + 10)
        canvas.close("g")
    canvas.open("g", **{"class": "caption"})
    y += 8
    canvas.line(PAD, y, WIDTH - PAD, y, "#bbb")
    y += 4
    for sentence in fig.caption:
        for line in wrap(sentence, WIDTH - 2 * PAD, NOTE_SIZE):
            y += LINE
            canvas.text(PAD, y, line, size=NOTE_SIZE, colour="#333")
    canvas.close("g")
    height = round(y + PAD)
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="{FONT}" font-size="{TEXT_SIZE}">\n'
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>'
    )
    return "\n".join([head, *canvas.parts, "</svg>"]) + "\n"


def _panel(canvas: _Canvas, panel: Panel, top: float) -> float:
    """Draws ``panel`` from ``top``; returns where it ends."""
    canvas.text(PAD, top + PANEL_TITLE_SIZE, panel.title, size=PANEL_TITLE_SIZE, bold=True)
    top += PANEL_TITLE_SIZE + 8
    if panel.empty is not None:
        canvas.text(PAD, top + LINE, panel.empty, colour="#666")
        return top + LINE + 8
    if panel.y is not None:
        bottom = _cdf_panel(canvas, panel, panel.y, top)
    else:
        bottom = _row_panel(canvas, panel, top)
    return _notes(canvas, panel, bottom)


@dataclass(frozen=True, slots=True)
class _Box:
    """A plot area: its edges in px and the value axis along it."""

    axis: Axis
    left: float
    right: float
    top: float
    bottom: float

    def x(self, value: float) -> float:
        return self.left + (self.right - self.left) * self.axis.position(value)


def _x_axis(canvas: _Canvas, box: _Box) -> None:
    """Grid lines, tick labels and the axis label, then the frame (carrying the axis range
    as data attributes)."""
    axis = box.axis
    for tick in axis.ticks:
        px = box.x(tick)
        canvas.line(px, box.top, px, box.bottom, GRID_INK)
        canvas.text(px, box.bottom + 15, axis.tick_label(tick), anchor="middle", cls="tick")
    scale = " (log scale)" if axis.log else ""
    canvas.text((box.left + box.right) / 2, box.bottom + 32, axis.label + scale, anchor="middle")
    canvas.parts.append(
        f'<rect class="plot" x="{box.left:.1f}" y="{box.top:.1f}" '
        f'width="{box.right - box.left:.1f}" height="{box.bottom - box.top:.1f}" fill="none" '
        f'stroke="#888" data-x-low="{axis.low:g}" data-x-high="{axis.high:g}" '
        f'data-x-scale="{"log" if axis.log else "linear"}"/>'
    )


def _cdf_panel(canvas: _Canvas, panel: Panel, share: Axis, top: float) -> float:
    label_width = max(text_width(share.tick_label(t), TEXT_SIZE) for t in share.ticks)
    plot_top = top + LINE + 10
    box = _Box(
        panel.x,
        left=PAD + label_width + 8,
        right=WIDTH - PAD - LEGEND_WIDTH - 24,
        top=plot_top,
        bottom=plot_top + CDF_HEIGHT,
    )
    canvas.text(PAD, box.top - 12, share.label)

    def py(fraction: float) -> float:
        return box.bottom - (box.bottom - box.top) * share.position(fraction)

    for tick in share.ticks:
        canvas.line(box.left, py(tick), box.right, py(tick), GRID_INK)
        canvas.text(box.left - 6, py(tick) + 4, share.tick_label(tick), anchor="end")
    _x_axis(canvas, box)
    for curve in panel.curves:
        points = " ".join(
            f"{box.x(x):.1f},{py(f):.1f}" for x, f in curve.points if not box.axis.log or x > 0
        )
        dash = f' stroke-dasharray="{curve.dash}"' if curve.dash else ""
        canvas.parts.append(
            f'<polyline points="{points}" fill="none" stroke="{curve.colour}" '
            f'stroke-width="2"{dash}/>'
        )
    _reference_lines(canvas, panel.on_scale, box)
    legend_bottom = _legend(canvas, panel, box.right + 24, box.top)
    return max(box.bottom + 40, legend_bottom + 8)


def _reference_lines(
    canvas: _Canvas, refs: Sequence[Reference], box: _Box, *, tags_above: bool = False
) -> None:
    """Each reference across the plot, its tag at the foot inside the plot (or just above
    the plot, ``tags_above``); tags that would overlap climb a line (inside only)."""
    taken: list[list[tuple[float, float]]] = []
    for ref in refs:
        x = box.x(ref.value)
        width = text_width(ref.tag, TEXT_SIZE - 1)
        fits_right = x + 3 + width <= box.right - 2
        left, anchor = (x + 3, "start") if fits_right else (x - 3 - width, "end")
        left = max(left, box.left + 2)
        level = 0
        while level < len(taken) and any(
            left < b + 6 and a < left + width + 6 for a, b in taken[level]
        ):
            level += 1
        if level == len(taken):
            taken.append([])
        taken[level].append((left, left + width))
        ty = box.top - 4 if tags_above else box.bottom - 6 - 13 * level
        canvas.open("g", **{"class": "reference", "data_kind": ref.kind, "data_label": ref.label})
        canvas.line(x, box.top, x, box.bottom, ref.colour, width=1.5, dash=ref.dash)
        if not (tags_above and level):  # above the plot there is one line for tags
            tx = left if anchor == "start" else left + width
            canvas.text(tx, ty, ref.tag, size=TEXT_SIZE - 1, anchor=anchor, colour=ref.colour)
        canvas.close("g")


def _legend(canvas: _Canvas, panel: Panel, x: float, top: float) -> float:
    """The curves and reference lines, then the off-scale references; returns the
    bottom."""
    canvas.open("g", **{"class": "legend"})
    y = top + 4
    text_x = x + 32
    room = WIDTH - PAD - text_x
    entries: list[tuple[str, str, float, str]] = [
        (curve.colour, curve.dash, 2.0, curve.label) for curve in panel.curves
    ]
    seen = set()
    for ref in panel.on_scale:
        if ref.label not in seen:
            seen.add(ref.label)
            entries.append((ref.colour, ref.dash, 1.5, ref.label))
    for colour, dash, width, label in entries:
        lines = wrap(label, room, TEXT_SIZE)
        canvas.line(x, y + 8, x + 26, y + 8, colour, width=width, dash=dash)
        for line in lines:
            y += LINE
            canvas.text(text_x, y - 3, line)
    if panel.off_scale:
        y += 6
        for line in wrap("off scale, beyond the axis:", WIDTH - PAD - x, TEXT_SIZE):
            y += LINE
            canvas.text(x, y - 3, line, colour="#555")
        for ref in panel.off_scale:
            for i, line in enumerate(wrap(ref.label, WIDTH - PAD - x - 12, TEXT_SIZE)):
                y += LINE
                canvas.text(x + (12 if i else 0), y - 3, line, colour=ref.colour)
    canvas.close("g")
    return y


def _row_panel(canvas: _Canvas, panel: Panel, top: float) -> float:
    marks = panel.marks
    label_width = max(text_width(mark.label, TEXT_SIZE) for mark in marks)
    note_width = max(text_width(mark.note, TEXT_SIZE, bold=mark.alert) for mark in marks)
    across = [ref for ref in panel.on_scale if ref.row is None]
    plot_top = top + (6 + LINE if across else 6)
    box = _Box(
        panel.x,
        left=PAD + label_width + 10,
        right=WIDTH - PAD - note_width - 16,
        top=plot_top,
        bottom=plot_top + ROW_HEIGHT * len(marks) + 4,
    )
    _x_axis(canvas, box)
    _reference_lines(canvas, across, box, tags_above=True)
    for i, mark in enumerate(marks):
        cy = box.top + 2 + ROW_HEIGHT * i + ROW_HEIGHT / 2
        canvas.text(box.left - 8, cy + 4, mark.label, anchor="end")
        colour = ALERT_COLOUR if mark.alert else INK
        canvas.text(box.right + 12, cy + 4, mark.note, colour=colour, bold=mark.alert)
        for ref in panel.on_scale:
            if ref.row == i:
                canvas.open(
                    "g", **{"class": "reference", "data_kind": ref.kind, "data_label": ref.label}
                )
                x = box.x(ref.value)
                canvas.line(x, cy - 10, x, cy + 10, ref.colour, width=2.5)
                canvas.close("g")
        _mark(canvas, mark, box, cy)
    return _row_legend(canvas, panel, box.bottom + 40)


def _mark(canvas: _Canvas, mark: Mark, box: _Box, cy: float) -> None:
    if mark.value is None:
        return
    x = box.x(mark.value)
    if mark.high is not None and mark.high > mark.value:
        end = box.x(mark.high)
        canvas.line(x, cy, end, cy, mark.colour, width=2)
        canvas.line(end, cy - 5, end, cy + 5, mark.colour, width=2)
    fill = "white" if mark.hollow else mark.colour
    canvas.parts.append(
        f'<circle cx="{x:.1f}" cy="{cy:.1f}" r="5" fill="{fill}" stroke="{mark.colour}" '
        f'stroke-width="2"/>'
    )


def _row_legend(canvas: _Canvas, panel: Panel, y: float) -> float:
    """Reference lines of a row panel, listed under its axis."""
    seen = set()
    refs = []
    for ref in panel.references:
        if ref.label not in seen:
            seen.add(ref.label)
            refs.append(ref)
    if not refs:
        return y
    canvas.open("g", **{"class": "legend"})
    for ref in refs:
        label = ref.label if ref.on_scale else f"{ref.label} (off scale)"
        lines = wrap(label, WIDTH - 2 * PAD - 32, TEXT_SIZE)
        if ref.row is None:
            canvas.line(PAD, y + 8, PAD + 26, y + 8, ref.colour, width=1.5, dash=ref.dash)
        else:
            canvas.line(PAD + 13, y + 2, PAD + 13, y + 14, ref.colour, width=2.5)
        for line in lines:
            y += LINE
            canvas.text(PAD + 32, y - 3, line)
    canvas.close("g")
    return y + 4


def _notes(canvas: _Canvas, panel: Panel, y: float) -> float:
    if not panel.notes:
        return y
    canvas.open("g", **{"class": "notes"})
    for note in panel.notes:
        colour = ALERT_COLOUR if note.alert else "#444"
        for line in wrap(note.text, WIDTH - 2 * PAD, NOTE_SIZE, bold=note.alert):
            y += LINE
            canvas.text(PAD, y - 3, line, size=NOTE_SIZE, colour=colour, bold=note.alert)
    canvas.close("g")
    return y + 4
