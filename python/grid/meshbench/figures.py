"""The figures of one ``grid bench mesh`` run: what the measured site's counters, the peers'
reports and the probe's changes say, as rates, shares and percentiles."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable
from typing import Any

MISSED_AFTER_S = 5.0
"""A probe change not in the overlay this long before the run ends counts as missed."""


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)]


def probe_latencies(
    probes: list[dict[str, Any]], seen: list[tuple[float, float]], end: float
) -> tuple[list[float], int]:
    """Seconds from each probe change handed to SWIM at the peer to the first overlay file
    holding it, and how many were never seen (only changes older than
    :data:`MISSED_AFTER_S` at the end count as missed). A busy queue scores lower, so a
    change is in once the probe's queue score moved the right way."""
    latencies: list[float] = []
    missed = 0
    if not seen:
        return [], sum(1 for p in probes if end - p["t"] > MISSED_AFTER_S)
    scores = [score for _, score in seen]
    high, low = max(scores), min(scores)
    middle = (high + low) / 2
    for probe in probes:
        busy = probe["queue"] > 0
        found = next(
            (
                t
                for t, score in seen
                if t >= probe["t"] and (score < middle if busy else score > middle)
            ),
            None,
        )
        if found is not None:
            latencies.append(found - probe["t"])
        elif end - probe["t"] > MISSED_AFTER_S:
            missed += 1
    return latencies, missed


def delivery_latencies(
    probes: list[dict[str, Any]], received: list[tuple[float, str, int]]
) -> list[float]:
    """Seconds from each probe change handed to SWIM at the peer to the first item that
    carries it reaching the measured site's engine: the same key as an item the change was
    published in, at its version or a later one (which carries the change on, unless a
    later change replaced it). The gossip part of the change -> overlay latency (the rest is
    waiting for the site's loop, and the render). A change published in no item has no
    delivery."""
    latencies = []
    for probe in probes:
        carriers = dict(probe.get("items", ()))
        found = next(
            (
                t
                for t, key, version in received
                if t >= probe["t"] and version >= carriers.get(key, math.inf)
            ),
            None,
        )
        if found is not None:
            latencies.append(found - probe["t"])
    return latencies


def versions_skipped(probes: list[dict[str, Any]], received: list[tuple[float, str, int]]) -> int:
    """Probe changes whose own item version never reached the measured site while a later
    version of that item did: gossip missed the site, and the next change came first (the
    skipped change then counts in change -> overlay until the overlay next moves its way)."""
    taken = {(key, version) for _, key, version in received}
    latest: dict[str, int] = {}
    for _, key, version in received:
        latest[key] = max(version, latest.get(key, 0))
    skipped = 0
    for probe in probes:
        carriers = [(key, version) for key, version in probe.get("items", ())]
        if carriers and not any(carrier in taken for carrier in carriers):
            skipped += any(latest.get(key, 0) > version for key, version in carriers)
    return skipped


def figures(
    result: dict[str, Any], peer_lines: list[dict[str, Any]], converge_s: float | None
) -> dict[str, Any]:
    first, last = result["first"], result["last"]
    window = last["t"] - first["t"]
    received = last["received"] - first["received"]
    applied = last["applied"] - first["applied"]
    receive_s = last["receive_s"] - first["receive_s"]
    render_s = result["render_s"]
    render_cpu = result.get("render_cpu_s", [])
    probes = [
        line
        for line in peer_lines
        if line["event"] == "probe" and first["t"] <= line["t"] <= last["t"]
    ]
    latencies, missed = probe_latencies(probes, [tuple(s) for s in result["probe_seen"]], last["t"])
    received_items = [(t, key, version) for t, key, version in result.get("probe_received", [])]
    deliveries = delivery_latencies(probes, received_items)
    load = [line for line in peer_lines if line["event"] == "peers"]
    in_window = [line for line in load if first["t"] <= line["t"] <= last["t"]]
    peers_cpu = peers_rate = None
    if len(in_window) >= 2:
        span = in_window[-1]["t"] - in_window[0]["t"]
        peers_cpu = (in_window[-1]["cpu_s"] - in_window[0]["cpu_s"]) / span
        peers_rate = (in_window[-1]["published"] - in_window[0]["published"]) / span
    rss = [value / 1e6 for value in result["rss_bytes"]]
    return {
        "window_s": window,
        "converge_s": converge_s,
        "candidates": result["candidates"],
        "cpu_share": (last["cpu_s"] - first["cpu_s"]) / window,
        "swim_cpu_share": (last.get("swim_cpu_s", 0.0) - first.get("swim_cpu_s", 0.0)) / window,
        "rss_mb_median": statistics.median(rss),
        "rss_mb_max": max(rss),
        "bytes_in_per_s": (last["bytes_in"] - first["bytes_in"]) / window,
        "bytes_out_per_s": (last["bytes_out"] - first["bytes_out"]) / window,
        "packets_in_per_s": (last.get("packets_in", 0) - first.get("packets_in", 0)) / window,
        "packets_out_per_s": (last.get("packets_out", 0) - first.get("packets_out", 0)) / window,
        # Sealed message bytes (before encryption) per second by direction and kind, for a
        # design that counts them.
        "message_bytes_per_s": {
            name.removeprefix("message_bytes_"): (count - first["message_bytes"][name]) / window
            for name, count in last.get("message_bytes", {}).items()
            if count > first["message_bytes"].get(name, 0)
        },
        # Messages (one a datagram) per second by direction and kind, likewise.
        "messages_per_s": {
            name.removeprefix("messages_"): (count - first["messages"].get(name, 0)) / window
            for name, count in last.get("messages", {}).items()
            if count > first["messages"].get(name, 0)
        },
        "relay_backlog": last.get("backlog"),
        "items_received_per_s": received / window,
        "items_applied_per_s": applied / window,
        "apply_us_mean": receive_s / received * 1e6 if received else None,
        "refreshes": last["refreshes"] - first["refreshes"],
        "renders": len(render_s),
        "renders_per_s": len(render_s) / window,
        "render_ms_p50": statistics.median(render_s) * 1000 if render_s else None,
        "render_ms_p99": _percentile(render_s, 0.99) * 1000 if render_s else None,
        "render_cpu_share": sum(render_s) / window,
        "render_cpu_ms_p50": statistics.median(render_cpu) * 1000 if render_cpu else None,
        "delivery_ms_p50": statistics.median(deliveries) * 1000 if deliveries else None,
        "delivery_ms_p99": _percentile(deliveries, 0.99) * 1000 if deliveries else None,
        "latency_ms_p50": statistics.median(latencies) * 1000 if latencies else None,
        "latency_ms_p99": (
            None if not latencies or missed else _percentile(latencies, 0.99) * 1000
        ),
        "probes": len(probes),
        "probes_seen": len(latencies),
        "probes_missed": missed,
        "probe_versions_skipped": versions_skipped(probes, received_items),
        "latencies_ms": [round(latency * 1000, 1) for latency in latencies],
        "deliveries_ms": [round(delivery * 1000, 1) for delivery in deliveries],
        "peers_cpu_share": peers_cpu,
        "peers_items_per_s": peers_rate,
    }


def joins(
    formed_s: float | None,
    restarts: list[dict[str, float]],
    peers_cpu_share: float | None,
) -> dict[str, Any]:
    """How long the mesh (the peers) took to form before the site joined it, and the
    measured site's restarts: p50 and p99 of the seconds until it trusted every site and
    until it ranked every candidate, and of the bytes it received until then (the items it
    held then say what they brought); and ``peers_cpu_share``, the peers' CPU while the
    restarts took the mesh's state from them."""
    figures: dict[str, Any] = {
        "formed_s": formed_s,
        "restarts": restarts,
        "restart_peers_cpu_share": peers_cpu_share,
    }
    held = [restart["items"] for restart in restarts if "items" in restart]
    figures["restart_items"] = statistics.median(held) if held else None
    for what in ("trusted_s", "ranked_s", "bytes_in"):
        values = [restart[what] for restart in restarts if what in restart]
        figures[f"restart_{what}_p50"] = statistics.median(values) if values else None
        figures[f"restart_{what}_p99"] = _percentile(values, 0.99) if values else None
    return figures


_Span = tuple[float, float, float, float, float, float]
"""An interval between two of the site's samples: start, end, CPU seconds, bytes out, bytes
in, the SWIM thread's CPU seconds."""


def _p50_p99(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.median(values), _percentile(values, 0.99)


def others_joins(
    result: dict[str, Any], probe_lines: list[dict[str, Any]], peers_cpu_share: float | None
) -> dict[str, Any]:
    """Another site joining again and again during the measurement (``--others-join``):
    the joiner's catch-up (from its node's start until its node said ``caught_up``), p50
    and p99; the measured site's change -> overlay latency over the probe changes handed
    while a joiner was catching up and over the rest of the window; the site's CPU over
    its samples that overlap a catch-up and over the rest (and the SWIM thread's share of
    each); the bytes it sent over each catch-up beyond its rate in the rest of the window,
    and its gossip rates in the rest of the window (those of the whole window include
    serving the joiners); and the peers' CPU (the load's process) while the joiner caught
    up. A join still catching up at the end of the window counts to the end. Without joins,
    every figure is None (or an empty list)."""
    first, last = result["first"], result["last"]
    end = last["t"]
    lives = sorted(
        (line for line in probe_lines if line["event"] == "joiner"), key=lambda j: j["serial"]
    )
    windows = [
        (life["t"], life["caught_up_t"] if life["caught_up_t"] is not None else end)
        for life in lives
    ]

    def catching_up(moment: float) -> bool:
        return any(start <= moment <= caught for start, caught in windows)

    probes = [
        line for line in probe_lines if line["event"] == "probe" and first["t"] <= line["t"] <= end
    ]
    during = [probe for probe in probes if catching_up(probe["t"])]
    rest = [probe for probe in probes if not catching_up(probe["t"])]
    seen = [(t, score) for t, score in result.get("probe_seen", [])]
    latencies, missed = probe_latencies(during, seen, end)
    steady, steady_missed = probe_latencies(rest, seen, end)
    # The site's samples: each interval between two is in a catch-up if it overlaps one.
    samples = result.get("samples", [])
    spans: list[_Span] = [
        (a[0], b[0], b[1] - a[1], b[2] - a[2], b[3] - a[3], b[4] - a[4])
        for a, b in itertools.pairwise(samples)
    ]

    def overlapping(start: float, caught: float) -> list[_Span]:
        return [span for span in spans if span[0] < caught and span[1] > start]

    def seconds(chosen: Iterable[_Span]) -> float:
        return sum(span[1] - span[0] for span in chosen)

    joined = {span for window in windows for span in overlapping(*window)}
    outside = [span for span in spans if span not in joined]
    joined_s, outside_s = seconds(joined), seconds(outside)

    def share(chosen: Iterable[_Span], column: int, over: float) -> float | None:
        return sum(span[column] for span in chosen) / over if over else None

    steady_out = share(outside, 3, outside_s)
    steady_in = share(outside, 4, outside_s)
    sent: list[float] = []
    for window in windows:
        mine = overlapping(*window)
        if mine and steady_out is not None:
            sent.append(sum(span[3] for span in mine) - steady_out * seconds(mine))
    caught_up = [life["caught_up_s"] for life in lives if life["caught_up_s"] is not None]
    figures: dict[str, Any] = {
        "others_joins": [
            {
                "caught_up_s": life["caught_up_s"],
                "items": life["items"],
                "bytes_in": life["bytes_in"],
                "probes": sum(start <= probe["t"] <= caught for probe in probes),
                "site_bytes_out": sent[index] if index < len(sent) else None,
            }
            for index, (life, (start, caught)) in enumerate(zip(lives, windows, strict=True))
        ],
        "others_join_caught_up": len(caught_up),
        "others_join_items": statistics.median([life["items"] for life in lives])
        if lives
        else None,
        "others_join_probes": len(during),
        "others_join_probes_seen": len(latencies),
        "others_join_probes_missed": missed,
        "others_join_latencies_ms": [round(latency * 1000, 1) for latency in latencies],
        "others_join_steady_probes": len(rest),
        "others_join_steady_probes_seen": len(steady),
        "others_join_steady_probes_missed": steady_missed,
        "others_join_cpu_share": share(joined, 2, joined_s),
        "others_join_steady_cpu_share": share(outside, 2, outside_s),
        # Of which the SWIM node's thread: answering the joiner's walks, beside its steady
        # gossip. The rest is the engine's (the joiner's member, items and departure).
        "others_join_swim_cpu_share": share(joined, 5, joined_s),
        "others_join_steady_swim_cpu_share": share(outside, 5, outside_s),
        "others_join_steady_bytes_out_per_s": steady_out,
        "others_join_steady_bytes_in_per_s": steady_in,
        "others_join_peers_cpu_share": peers_cpu_share,
        # Items of the joiner's site the measured site took in, over every join: it was a
        # site of the mesh to it, not only a member.
        "others_join_items_taken": result.get("joiner_items_taken"),
    }
    for name, values in (
        ("others_join_caught_up_s", caught_up),
        ("others_join_bytes_in", [life["bytes_in"] for life in lives]),
        ("others_join_site_bytes_out", sent),
    ):
        figures[f"{name}_p50"], figures[f"{name}_p99"] = _p50_p99(values)
    for name, values, misses in (
        ("others_join_latency_ms", latencies, missed),
        ("others_join_steady_latency_ms", steady, steady_missed),
    ):
        p50, p99 = _p50_p99([latency * 1000 for latency in values])
        figures[f"{name}_p50"] = p50
        figures[f"{name}_p99"] = None if misses else p99
    if not lives:  # no --others-join: nothing to tell apart
        return {key: [] if isinstance(value, list) else None for key, value in figures.items()}
    return figures
