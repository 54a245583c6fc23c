"""What a convergence figure is made of, whatever draws it: panels of curves or rows, value
axes fitted to the data, labelled reference lines, notes, and the palette; and how a
report's row is named and coloured. Pure. :mod:`grid.simbench.figure` builds a
:class:`Figure` from a report; ``grid.simbench.plot`` and ``grid.simbench.plot_png`` draw
it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Row = dict[str, Any]
"""One row of a scenario's results in a ``grid bench convergence`` report."""

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
        return f"{number(value)}{self.unit}"


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


def number(value: float) -> str:
    """A figure for a label: thousands separated, at most 3 significant digits past 10."""
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.0f}" if float(value).is_integer() or abs(value) >= 100 else f"{value:.1f}"
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return text or "0"


def cdf_basis(curves: Sequence[Curve]) -> list[float]:
    """Where each curve first reaches 10 % and where it ends: a CDF axis goes logarithmic
    only when these span decades."""
    basis = []
    for curve in curves:
        if curve.points:
            basis.append(next((x for x, f in curve.points if f >= 0.1), curve.points[-1][0]))
            basis.append(curve.points[-1][0])
    return basis


def colour_of(colours: dict[int, str], row: Row) -> str:
    """The colour of ``row``'s cluster size (see :data:`SIZE_COLOURS`)."""
    return colours.get(int(row["size"]), SIZE_COLOURS[-1])


def row_label(row: Row) -> str:
    """How a row is named in a legend: its size, and its profile when it has one."""
    return f"N={row['size']:,} {row['profile']}" if "profile" in row else f"N={row['size']:,}"
