"""The ``grid bench mesh`` report as text: each figure of the current design beside today's
design, then Grid's scale targets as met or MISSED."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Format = Callable[[float], str]

ROWS: tuple[tuple[str, str, Format], ...] = (
    ("CPU (share of one core)", "cpu_share", lambda v: f"{v * 100:.1f} %"),
    ("  of which the SWIM node's thread", "swim_cpu_share", lambda v: f"{v * 100:.1f} %"),
    ("resident memory, median", "rss_mb_median", lambda v: f"{v:.0f} MB"),
    ("resident memory, max", "rss_mb_max", lambda v: f"{v:.0f} MB"),
    ("gossip in", "bytes_in_per_s", lambda v: f"{v / 1000:.1f} KB/s"),
    ("gossip out", "bytes_out_per_s", lambda v: f"{v / 1000:.1f} KB/s"),
    ("  datagrams in", "packets_in_per_s", lambda v: f"{v:.0f} /s"),
    ("  datagrams out", "packets_out_per_s", lambda v: f"{v:.0f} /s"),
    ("  relay backlog, at the end", "relay_backlog", lambda v: f"{v:,.0f}"),
    ("items received", "items_received_per_s", lambda v: f"{v:.1f} /s"),
    ("items applied", "items_applied_per_s", lambda v: f"{v:.1f} /s"),
    ("apply time per item, mean", "apply_us_mean", lambda v: f"{v:.0f} µs"),
    ("renders", "renders_per_s", lambda v: f"{v:.2f} /s"),
    ("render pass, p50", "render_ms_p50", lambda v: f"{v:.1f} ms"),
    ("render pass, p99", "render_ms_p99", lambda v: f"{v:.1f} ms"),
    ("render pass CPU, p50", "render_cpu_ms_p50", lambda v: f"{v:.1f} ms"),
    ("time in render passes", "render_cpu_share", lambda v: f"{v * 100:.1f} %"),
    ("change -> item at the site, p50", "delivery_ms_p50", lambda v: f"{v:.0f} ms"),
    ("change -> item at the site, p99", "delivery_ms_p99", lambda v: f"{v:.0f} ms"),
    ("change -> overlay, p50", "latency_ms_p50", lambda v: f"{v:.0f} ms"),
    ("change -> overlay, p99", "latency_ms_p99", lambda v: f"{v:.0f} ms"),
    ("peers' CPU (the load)", "peers_cpu_share", lambda v: f"{v * 100:.0f} %"),
    ("the mesh formed (the peers) after", "formed_s", lambda v: f"{v:.1f} s"),
    ("site joined (every candidate) after", "converge_s", lambda v: f"{v:.1f} s"),
    ("restart -> every site trusted, p50", "restart_trusted_s_p50", lambda v: f"{v:.2f} s"),
    ("restart -> every site trusted, p99", "restart_trusted_s_p99", lambda v: f"{v:.2f} s"),
    ("restart -> every candidate, p50", "restart_ranked_s_p50", lambda v: f"{v:.2f} s"),
    ("restart -> every candidate, p99", "restart_ranked_s_p99", lambda v: f"{v:.2f} s"),
    (
        "restart -> bytes received by then, p50",
        "restart_bytes_in_p50",
        lambda v: f"{v / 1e6:.1f} MB",
    ),
    ("restart -> items held by then", "restart_items", lambda v: f"{v:,.0f}"),
    ("peers' CPU during the restarts", "restart_peers_cpu_share", lambda v: f"{v * 100:.0f} %"),
    ("another site joins -> caught up, p50", "others_join_caught_up_s_p50", lambda v: f"{v:.2f} s"),
    ("another site joins -> caught up, p99", "others_join_caught_up_s_p99", lambda v: f"{v:.2f} s"),
    (
        "  change -> overlay while it catches up, p50",
        "others_join_latency_ms_p50",
        lambda v: f"{v:.0f} ms",
    ),
    (
        "  change -> overlay while it catches up, p99",
        "others_join_latency_ms_p99",
        lambda v: f"{v:.0f} ms",
    ),
    (
        "  change -> overlay the rest of the time, p50",
        "others_join_steady_latency_ms_p50",
        lambda v: f"{v:.0f} ms",
    ),
    (
        "  change -> overlay the rest of the time, p99",
        "others_join_steady_latency_ms_p99",
        lambda v: f"{v:.0f} ms",
    ),
    ("  CPU while it catches up", "others_join_cpu_share", lambda v: f"{v * 100:.1f} %"),
    ("  CPU the rest of the time", "others_join_steady_cpu_share", lambda v: f"{v * 100:.1f} %"),
    (
        "    of which the SWIM node's thread, while it catches up",
        "others_join_swim_cpu_share",
        lambda v: f"{v * 100:.1f} %",
    ),
    (
        "    of which the SWIM node's thread, the rest of the time",
        "others_join_steady_swim_cpu_share",
        lambda v: f"{v * 100:.1f} %",
    ),
    (
        "  gossip in the rest of the time",
        "others_join_steady_bytes_in_per_s",
        lambda v: f"{v / 1000:.1f} KB/s",
    ),
    (
        "  gossip out the rest of the time",
        "others_join_steady_bytes_out_per_s",
        lambda v: f"{v / 1000:.1f} KB/s",
    ),
    (
        "  sent per join beyond the steady rate, p50",
        "others_join_site_bytes_out_p50",
        lambda v: f"{v / 1e6:.2f} MB",
    ),
    (
        "  peers' CPU while it catches up",
        "others_join_peers_cpu_share",
        lambda v: f"{v * 100:.0f} %",
    ),
    ("items the peers published", "peers_items_per_s", lambda v: f"{v:.1f} /s"),
)


MISSED = {
    "latency_ms_p99": "probes_missed",
    "others_join_latency_ms_p99": "others_join_probes_missed",
    "others_join_steady_latency_ms_p99": "others_join_steady_probes_missed",
}
"""A p99 with a missed change is None: its cell says how many were missed."""


def _cell(run: dict[str, Any] | None, key: str, fmt: Format) -> str:
    if run is None:
        return "-"
    value = run.get(key)
    if value is None:
        missed = run.get(MISSED.get(key, ""))
        if missed:
            return f"{missed} missed"
        return "n/a"
    return fmt(value)


def render(report: dict[str, Any]) -> str:
    plan = report["plan"]
    runs = report["runs"]
    current, baseline = runs["current"], runs["baseline"]
    lines = [
        f"grid bench mesh: {plan['sites']} sites x {plan['providers_per_site']} providers, "
        f"scrape every {plan['scrape_interval_s']:g} s, {plan['duration_s']:g} s measured "
        f"(Grid {report['grid_version']})",
        f"one real site; the other {plan['sites'] - 1} sites carried by "
        f"{plan['peer_count']} real SWIM peers, plus a probe peer; "
        f"{plan['candidates']} candidates ranked",
    ]
    if plan.get("others_join"):
        lines.append(
            f"another site (an empty store) joins, catches up and leaves {plan['others_join']} "
            "times during the measurement"
        )
    lines.append("")
    base = report["baseline"]
    title = f"today's design ({base['commit']})"
    width = max(len(row[0]) for row in ROWS)
    lines.append(f"{'':<{width}}  {'current':>14}  {title:>24}")
    for label, key, fmt in ROWS:
        lines.append(
            f"{label:<{width}}  {_cell(current, key, fmt):>14}  {_cell(baseline, key, fmt):>24}"
        )
    lines.append(
        f"{'probe changes seen':<{width}}  "
        f"{current['probes_seen']:>6} of {current['probes']:<5}  "
        + (
            f"{baseline['probes_seen']:>16} of {baseline['probes']:<5}"
            if baseline is not None
            else f"{'-':>24}"
        )
    )
    skipped = f"{'probe versions the site never got':<{width}}  "
    skipped += f"{current.get('probe_versions_skipped', 0):>14}  "
    skipped += f"{baseline.get('probe_versions_skipped', 0):>24}" if baseline else f"{'-':>24}"
    lines.append(skipped)
    if current.get("others_join_probes") is not None:
        lines.append(
            f"{'probe changes while another site caught up':<{width}}  "
            f"{current['others_join_probes_seen']:>6} of {current['others_join_probes']:<5}"
        )
        lines.append(
            f"{'joins of another site caught up':<{width}}  "
            f"{current['others_join_caught_up']:>6} of {plan['others_join']:<5}"
        )
    if baseline is None:
        lines.append(f"today's design did not run: {base['reason']}")
    lines += ["", "scale targets (100 sites x 100 providers, 15 s scrape, per site):"]
    for target in report["targets"]:
        verdict = "met" if target["met"] else "MISSED"
        value = target["value"]
        shown = "none measured" if value is None else f"{value:,.3g}"
        lines.append(f"  {target['label']} <= {target['bound']:,.3g}: {shown}  {verdict}")
    if report["targets"] and not report["targets"][0]["at_target_size"]:
        lines.append("  (this run is not at the targets' size: the verdicts are indicative)")
    return "\n".join(lines) + "\n"
