"""The benchmark report as text tables (the JSON form is the report dict itself)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grid.simbench.runner import title

Row = dict[str, Any]


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _spread(value: dict[str, float] | None, digits: int = 2) -> str:
    """``p50/p99/max``."""
    if value is None:
        return "-"
    return "/".join(_num(value[key], digits) for key in ("p50", "p99", "max"))


def _ratio(row: Row) -> str:
    ratios = row.get("grid_vs_memberlist") or {}
    value = next(iter(ratios.values()), None)
    return "-" if value is None else f"{value:.2f}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], text_columns: int = 2) -> str:
    """Columns padded to their widest cell; the first ``text_columns`` are left-aligned,
    the figures after them right-aligned."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = []
    for cells in (header, *rows):
        parts = [
            str(cell).ljust(width) if i < text_columns else str(cell).rjust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def render(report: dict[str, Any]) -> str:
    """The whole report as text."""
    plan = report["plan"]
    network = plan["network"]
    out = [
        f"{title(report)} (grid bench convergence)",
        f"sizes {', '.join(map(str, plan['sizes']))}; seed {plan['seed']}; network "
        f"{network['delay'] * 1000:g} ms + {network['jitter_kind']} jitter "
        f"{network['jitter'] * 1000:g} ms; figures are p50/p99/max over runs; clusters of "
        f"{plan['shared_from']:,}+ members are shared by their runs",
        "profiles: grid = probe 5 s, suspicion 10 s, gossip every 1 s to 3; memberlist-lan = "
        "probe 1 s, suspicion 4*max(1,log10 N) s, gossip every 0.2 s to 3; both retransmit "
        "4*ceil(log10(N+1)) times",
    ]
    if "join" in report:
        out += ["", _join(report["join"])]
    if "failure" in report:
        out += ["", _failure(report["failure"])]
    if "accuracy" in report:
        out += ["", _accuracy(report["accuracy"])]
    if "partition" in report:
        out += ["", _partition(report["partition"])]
    if "speed" in report:
        out += ["", _speed(report["speed"])]
    if "state" in report:
        out += ["", _state(report["state"])]
    if report.get("targets"):
        out += ["", _targets(report["targets"])]
    return "\n".join(out) + "\n"


def _join(rows: Sequence[Row]) -> str:
    header = (
        "size",
        "profile",
        "runs",
        "50% s",
        "99% s",
        "100% s",
        "100% rounds",
        "all",
        "<=15 rnd",
        "bound",
        "/bound",
        "grid/ml",
        "joiner 99% s",
    )
    body = [
        (
            f"{row['size']:,}",
            row["profile"],
            str(row["runs"]),
            _spread(row["seconds"]["50%"]),
            _spread(row["seconds"]["99%"]),
            _spread(row["seconds"]["100%"]),
            _spread(row["rounds"]["100%"], 1),
            f"{row['reached_all']:.0%}",
            f"{row['within_target_rounds']:.0%}",
            _num(row["epidemic_bound_rounds"], 1),
            _num(row["rounds_vs_bound"]),
            _ratio(row),
            _spread(row["joiner_knows_99%"]),
        )
        for row in rows
    ]
    return (
        "Join dissemination: time until 50/99/100% of members know a new member\n"
        "(rounds = gossip intervals; bound = epidemic bound log_{f+1}(N) + ln(N)/f rounds "
        "for fanout f; /bound = p50 rounds to 100% over the bound; grid/ml = Grid's p50 "
        "seconds to 100% over memberlist-lan's)\n" + table(header, body)
    )


def _state(rows: Sequence[Row]) -> str:
    header = (
        "sites",
        "providers",
        "items",
        "filled s",
        "B/s out",
        "B/s in",
        "msg/s out",
        "broadcast",
        "sync",
        "repair+digest",
        "change s",
        "changes",
        "catch-up 99% s",
        "catch-up s",
    )
    body = []
    skipped = []
    for row in rows:
        if "skipped" in row:
            skipped.append(f"{row['size']:,} x {row['providers']}: skipped, {row['skipped']}")
            continue
        kinds = row["per_site"]
        repair = kinds["repair"]["bytes_out"] + kinds["digest"]["bytes_out"]
        sync = kinds["sync-request"]["bytes_out"] + kinds["sync-response"]["bytes_out"]
        converged = row["changes_converged"]
        body.append(
            (
                f"{row['size']:,}",
                str(row["providers"]),
                f"{row['items']:,}",
                "converged" if row["start"] == "converged" else _num(row["filled_after"], 0),
                f"{row['bytes_out_per_site']:,.0f}",
                f"{row['bytes_in_per_site']:,.0f}",
                _num(row["messages_out_per_site"], 1),
                f"{kinds['broadcast']['bytes_out']:,.0f}",
                f"{sync:,.0f}",
                f"{repair:,.0f}",
                _spread(row["change_seconds"]),
                "-" if converged is None else f"{converged:.0%}",
                _num(row["catch_up_99"], 1),
                _num(row["catch_up"], 1),
            )
        )
    heading = (
        "State plane: sites publishing catalogues, pages, gateway, metadata and certificates\n"
        "(bytes and messages per site and second in steady state, out by kind; change s = "
        "p50/p99/max seconds until every other node took a catalogue change; catch-up = "
        "an empty node joining, until it held 99% / all of the names, the median of its "
        "lives; converged = every store held every name from the start)"
    )
    tables = [table(header, body)] if body else []
    return "\n".join([heading, *tables, *skipped])


def _failure(rows: Sequence[Row]) -> str:
    header = (
        "size",
        "profile",
        "runs",
        "first suspicion s",
        "first down s",
        "down everywhere s",
        "detected",
        "false downs",
        "grid/ml",
    )
    body = [
        (
            f"{row['size']:,}",
            row["profile"],
            str(row["runs"]),
            _spread(row["first_suspicion"]),
            _spread(row["first_down"]),
            _spread(row["everywhere"]),
            f"{row['detected_everywhere']:.0%}",
            str(row["false_positives"]),
            _ratio(row),
        )
        for row in rows
    ]
    return (
        "Failure detection: from a crash to the first suspicion, the first down declaration, "
        "and down at every live member\n" + table(header, body)
    )


def _accuracy(rows: Sequence[Row]) -> str:
    header = (
        "size",
        "profile",
        "loss",
        "slow node",
        "minutes",
        "false downs",
        "members",
        "by slow",
        "of slow",
        "per member-hour",
        "false suspicions",
        "msg/member/s",
        "max backlog",
    )
    body = [
        (
            f"{row['size']:,}",
            row["profile"],
            f"{row['loss']:.0%}",
            "-" if not row["slow_node_delay"] else f"+{row['slow_node_delay']:g} s",
            f"{row['minutes']:g}",
            str(row["false_declarations"]),
            str(row["falsely_declared_members"]),
            str(row["false_declarations_by_slow_node"]),
            str(row["false_declarations_of_slow_node"]),
            f"{row['false_per_member_hour']:.4f}",
            str(row["false_suspicions"]),
            _num(row["messages_per_member_second"]),
            str(row["updates_backlog_max"]),
        )
        for row in rows
    ]
    return (
        "Accuracy: healthy members wrongly declared down (own declarations; members = "
        "distinct victims) and wrongly suspected; max backlog = foca's pending updates at "
        "the busiest node at the end\n" + table(header, body)
    )


def _partition(rows: Sequence[Row]) -> str:
    header = (
        "size",
        "profile",
        "runs",
        "split s",
        "split complete",
        "converged",
        "after heal s",
        "probe intervals",
        "grid/ml",
    )
    body = [
        (
            f"{row['size']:,}",
            row["profile"],
            str(row["runs"]),
            _spread(row["split_seconds"], 0),
            f"{row['split_complete']:.0%}",
            f"{row['converged']:.0%}",
            _spread(row["converged_after"], 1),
            _spread(row["converged_after_probe_intervals"], 1),
            _ratio(row),
        )
        for row in rows
    ]
    return (
        "Partition and heal: two halves split until each declared the whole other half down "
        "(split s), then the time from the heal to one view\n" + table(header, body)
    )


def _speed(rows: Sequence[Row]) -> str:
    header = (
        "size",
        "threads",
        "form s",
        "timed s",
        "syncs",
        "msg/s",
        "speed x",
        "peak GiB",
    )
    body = [
        (
            f"{row['size']:,}",
            "auto" if row["threads"] is None else str(row["threads"]),
            _num(row["bootstrap_seconds"], 1),
            _num(row["virtual_seconds"], 0),
            f"{row['syncs']:,}",
            f"{row['messages_per_virtual_second']:,.0f}",
            _num(row["speed"]),
            _num(row["peak_rss_bytes"] / 2**30),
        )
        for row in rows
    ]
    return (
        "Simulator speed (virtual seconds per wall second, grid profile): one push/pull "
        "period of a converged cluster run straight through, every node's full-state sync "
        "included\n" + table(header, body)
    )


def _targets(rows: Sequence[Row]) -> str:
    """met, MISSED (a run broke the target) or unproven (with why: run too short, too few
    samples, not run)."""
    verdicts = {True: "met", False: "MISSED", None: "unproven"}
    body = [
        (
            verdicts[row["met"]],
            row["target"],
            row["measured"],
            row.get("reason") or "",
        )
        for row in rows
    ]
    return "Targets (grid profile)\n" + table(
        ("", "target", "measured", "why unproven"), body, text_columns=4
    )
