"""The state-plane scenario: sites that publish what real sites publish, on the simulator.

Every site publishes through its own driver (the real encoder, item store, relay queue,
digests and syncs): its certificate in two chunks, its gateway and metadata, one
catalogue item per provider (450 bytes) and its providers' signals in pages of 12
registers, every page written again at each scrape (15 s). The run (Rust,
``grid._native.run_state_scenario``) has four phases: sites start one after another (or,
with ``start="converged"``, every store holds every site's items from the start, and the
run waits one scrape interval); a window of steady state whose traffic is counted by
kind; catalogue changes timed until every other node took them; a node with an empty store
joining. docs/convergence.md ("The state plane") explains every figure.

Every node holds every site's items, so memory grows with sites squared times items per site: a
size whose stores would not fit :data:`MEMORY_LIMIT` is reported as skipped, with what it
would need.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

from grid._native import run_state_scenario
from grid.simbench.profiles import GRID, NetworkModel, profile
from grid.simbench.stats import spread

Row = dict[str, Any]

DEFAULT_PROVIDERS = 100
#: Names a site publishes besides one per provider: two certificate chunks, gateway,
#: metadata; and one signals page per 12 providers.
HEAD_ITEMS = 4
REGISTERS_PER_PAGE = 12
#: Resident bytes of the simulation per item copy held, measured at 1,000 sites x 5
#: providers (10.4 GB for 10 million copies: payloads, signatures, names, the stores' maps,
#: their recent versions, and every node's member list); 910 at 100 x 100 (1.03 GB).
BYTES_PER_HELD_ITEM = 1040
#: Sizes whose stores alone would need more than this are skipped.
MEMORY_LIMIT = 12 * 2**30
#: How a run begins: sites starting one after another (the fill phase timed), or every
#: store holding every site's items from the start (no fill phase).
STATE_STARTS = ("growing", "converged")
KINDS = ("swim", "broadcast", "sync-request", "sync-response", "digest", "repair", "other")


@dataclass(frozen=True, slots=True)
class StatePlan:
    """How the state-plane scenario runs at each size."""

    providers: int = DEFAULT_PROVIDERS
    window: float = 60.0
    changes: int = 20
    patience: float = 600.0
    start_rate: float = 25.0
    start: str = "growing"
    joins: int = 1


def items_per_site(providers: int) -> int:
    return HEAD_ITEMS + providers + -(-providers // REGISTERS_PER_PAGE)


def estimated_memory(sites: int, providers: int) -> int:
    """Bytes the stores of ``sites`` nodes hold when every node holds every site's items."""
    return sites * sites * items_per_site(providers) * BYTES_PER_HELD_ITEM


def state_row(
    size: int,
    seed: int,
    plan: StatePlan,
    network: NetworkModel,
    threads: int | None,
) -> Row:
    """One size's figures, or a row saying why the size was skipped."""
    needed = estimated_memory(size, plan.providers)
    if needed > MEMORY_LIMIT:
        return {
            "size": size,
            "providers": plan.providers,
            "skipped": f"its stores need about {needed / 2**30:,.0f} GiB "
            f"({size:,} nodes x {size * items_per_site(plan.providers):,} items)",
        }
    prof = profile(GRID, size)
    started = time.perf_counter()
    raw = run_state_scenario(
        size,
        plan.providers,
        seed,
        probe_interval=prof.probe_interval,
        suspicion_timeout=prof.suspicion_timeout,
        gossip_nodes=prof.gossip_nodes,
        push_pull_interval=prof.push_pull_interval,
        delay=network.delay,
        jitter=network.jitter,
        jitter_kind=network.jitter_kind,
        loss=network.loss,
        window=plan.window,
        changes=plan.changes,
        patience=plan.patience,
        start_rate=plan.start_rate,
        start=plan.start,
        joins=plan.joins,
        threads=threads or 1,
    )
    wall = time.perf_counter() - started
    return summarise(raw, wall)


def summarise(raw: dict[str, Any], wall: float) -> Row:
    """The report row of one run: traffic per site and second, the spread of changes."""
    sites: int = raw["sites"]
    window: float = raw["window"]

    def per_site(value: int) -> float:
        return value / sites / window

    traffic = raw["traffic"]
    by_kind = {
        kind: {
            "bytes_out": per_site(traffic[kind]["sent_bytes"]),
            "bytes_in": per_site(traffic[kind]["received_bytes"]),
            "messages_out": per_site(traffic[kind]["sent"]),
        }
        for kind in KINDS
    }
    delays = [d for d in raw["change_delays"] if d is not None]
    changes = len(raw["change_delays"])
    return {
        "size": sites,
        "providers": raw["providers"],
        "items": raw["items"],
        "start": raw["start"],
        "filled_after": raw["filled_after"],
        "missing_after_fill": raw["missing_after_fill"],
        "window": window,
        "per_site": by_kind,
        "bytes_out_per_site": sum(k["bytes_out"] for k in by_kind.values()),
        "bytes_in_per_site": sum(k["bytes_in"] for k in by_kind.values()),
        "messages_out_per_site": sum(k["messages_out"] for k in by_kind.values()),
        "busiest_site_bytes": raw["busiest_site_bytes"] / window,
        "changes": changes,
        "changes_converged": len(delays) / changes if changes else None,
        "change_seconds": spread(delays),
        # Each change's seconds until every other node took it, in order (None: it never
        # did within the patience): the plot's CDF.
        "change_delays": list(raw["change_delays"]),
        **_catch_ups(raw["catch_ups"]),
        "virtual_seconds": raw["ended_at"],
        "wall_seconds": wall,
        "events": raw["events"],
    }


def _catch_ups(lives: list[dict[str, Any]]) -> Row:
    """The joiner's lives summed up: the median seconds until it held 99 % and all of the
    names (None if a life did not, within the patience), their spread, the fewest names a
    life held, and the bytes each received."""
    most = [life["catch_up_99"] for life in lives]
    every = [life["catch_up"] for life in lives]

    def median(values: list[float | None]) -> float | None:
        return None if None in values else statistics.median(v for v in values if v is not None)

    return {
        "joins": len(lives),
        "catch_up_99": median(most),
        "catch_up": median(every),
        "catch_up_seconds": spread([v for v in every if v is not None]),
        "joiner_items": min(life["items"] for life in lives),
        "join_bytes_in": spread([life["bytes_in"] for life in lives]),
        # Each life as the run reported it, in order.
        "catch_ups": lives,
    }
