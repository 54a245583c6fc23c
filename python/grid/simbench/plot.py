"""The report's CDFs as one hand-written SVG: how the share of members that know of a join,
or of a failure, grows over time, for every size and profile. Time is on a log scale so
the fast memberlist-LAN curves and the slower Grid ones fit side by side."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any
from xml.sax.saxutils import escape

Row = dict[str, Any]

_WIDTH = 760
_PANEL = 300
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 190, 36, 44
_COLOURS = ("#1b6ca8", "#d1495b", "#2a9d8f", "#e9a03b", "#6a4c93", "#495057")
_DASHES = {"grid": "", "memberlist-lan": "6 4"}


def _panels(report: dict[str, Any]) -> list[tuple[str, list[Row]]]:
    panels = []
    if report.get("join"):
        panels.append(("Join: share of members that know the new member", report["join"]))
    if report.get("failure"):
        panels.append(
            ("Failure: share of live members that marked the crashed one down", report["failure"])
        )
    return [(title, [row for row in rows if row.get("cdf")]) for title, rows in panels]


def render_svg(report: dict[str, Any]) -> str:
    """The SVG document (a placeholder panel saying so when the report has no CDFs)."""
    panels = [(title, rows) for title, rows in _panels(report) if rows]
    height = _PANEL * max(1, len(panels))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
        f'viewBox="0 0 {_WIDTH} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{_WIDTH}" height="{height}" fill="white"/>',
    ]
    if not panels:
        parts.append(
            f'<text x="{_WIDTH / 2}" y="{height / 2}" text-anchor="middle">'
            "no join or failure results to plot</text>"
        )
    for index, (title, rows) in enumerate(panels):
        parts.extend(_panel(title, rows, index * _PANEL))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _panel(title: str, rows: Sequence[Row], top: float) -> list[str]:
    times = [t for row in rows for t, _ in row["cdf"] if t > 0]
    low = 10 ** math.floor(math.log10(min(times))) if times else 0.001
    high = 10 ** math.ceil(math.log10(max(times))) if times else 10.0
    if high <= low:
        high = low * 10
    x0, x1 = _LEFT, _WIDTH - _RIGHT
    y0, y1 = top + _PANEL - _BOTTOM, top + _TOP

    def x(t: float) -> float:
        t = min(max(t, low), high)
        return x0 + (x1 - x0) * (math.log10(t) - math.log10(low)) / (
            math.log10(high) - math.log10(low)
        )

    def y(fraction: float) -> float:
        return y0 + (y1 - y0) * fraction

    out = [
        f'<text x="{x0}" y="{top + 20}" font-size="14" font-weight="bold">{escape(title)}</text>',
        f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="none" stroke="#888"/>',
    ]
    decade = low
    while decade <= high * 1.0001:
        px = x(decade)
        out.append(f'<line x1="{px:.1f}" y1="{y0}" x2="{px:.1f}" y2="{y1}" stroke="#eee"/>')
        out.append(f'<text x="{px:.1f}" y="{y0 + 16}" text-anchor="middle">{decade:g} s</text>')
        decade *= 10
    for fraction in (0.0, 0.25, 0.5, 0.75, 1.0):
        py = y(fraction)
        out.append(f'<line x1="{x0}" y1="{py:.1f}" x2="{x1}" y2="{py:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{x0 - 6}" y="{py + 4:.1f}" text-anchor="end">{fraction:.0%}</text>')
    out.append(
        f'<text x="{(x0 + x1) / 2}" y="{y0 + 34}" text-anchor="middle">'
        "seconds after the event (log scale)</text>"
    )
    sizes = sorted({row["size"] for row in rows})
    for i, row in enumerate(rows):
        colour = _COLOURS[sizes.index(row["size"]) % len(_COLOURS)]
        dash = _DASHES.get(row["profile"], "2 2")
        points = " ".join(f"{x(t):.1f},{y(f):.1f}" for t, f in row["cdf"] if t > 0)
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(
            f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"'
            f"{dash_attr}/>"
        )
        ly = y1 + 14 + 18 * i
        out.append(
            f'<line x1="{x1 + 12}" y1="{ly}" x2="{x1 + 40}" y2="{ly}" stroke="{colour}" '
            f'stroke-width="2"{dash_attr}/>'
        )
        label = escape(f"N={row['size']:,} {row['profile']}")
        out.append(f'<text x="{x1 + 46}" y="{ly + 4}">{label}</text>')
    return out
