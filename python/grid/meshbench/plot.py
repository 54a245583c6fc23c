"""The ``grid bench mesh`` plot as PNG through matplotlib (the ``plot`` extra): a panel per
figure, the current design beside today's design, Grid's target as a red line where
there is one."""

from __future__ import annotations

import io
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

PANELS: tuple[tuple[str, str, float, float | None], ...] = (
    ("CPU, % of one core", "cpu_share", 100.0, 10.0),
    ("resident memory, MB (median)", "rss_mb_median", 1.0, 500.0),
    ("gossip in, KB/s", "bytes_in_per_s", 0.001, 200.0),
    ("gossip out, KB/s", "bytes_out_per_s", 0.001, 200.0),
    ("items applied, per s", "items_applied_per_s", 1.0, None),
    ("renders, per s", "renders_per_s", 1.0, None),
    ("render pass p50, ms", "render_ms_p50", 1.0, None),
    ("change -> overlay p99, ms", "latency_ms_p99", 1.0, 2000.0),
)
COLOURS = {"current": "#1f77b4", "baseline": "#999999"}


def render_png(report: dict[str, Any]) -> bytes:
    plan = report["plan"]
    runs = {label: run for label, run in report["runs"].items() if run is not None}
    labels = {"current": "current", "baseline": f"today ({report['baseline']['commit']})"}
    figure = Figure(figsize=(12, 6.5), layout="constrained", facecolor="white")
    FigureCanvasAgg(figure)
    figure.suptitle(
        f"grid bench mesh: one site of {plan['sites']} sites x {plan['providers_per_site']} "
        f"providers, scrape every {plan['scrape_interval_s']:g} s (Grid {report['grid_version']})",
        fontsize=12,
    )
    axes = figure.subplots(2, 4)
    for ax, (title, key, scale, target) in zip(axes.flat, PANELS, strict=True):
        names = [name for name in runs if runs[name].get(key) is not None]
        values = [runs[name][key] * scale for name in names]
        ax.bar(
            [labels[name] for name in names],
            values,
            color=[COLOURS[name] for name in names],
        )
        for position, value in enumerate(values):
            ax.annotate(f"{value:.3g}", (position, value), ha="center", va="bottom", fontsize=8)
        if target is not None:
            ax.axhline(target, color="#d62728", linestyle="--", linewidth=1, label="target")
            ax.legend(fontsize=7, loc="upper right")
        if not names:
            ax.text(0.5, 0.5, "not measured", ha="center", transform=ax.transAxes)
        ax.set_title(title, fontsize=9)
        ax.tick_params(labelsize=8)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()
