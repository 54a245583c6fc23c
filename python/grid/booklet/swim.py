"""The SWIM chapter: recorded runs of ``grid._native.Simulation``, the real SWIM drivers on
a virtual clock, for every combination of the chapter's controls.

A run starts from a converged cluster of ``n`` nodes, lets a fresh node join through node
0, optionally crashes node 1, and records what the simulator exposes: every suspicion
episode seen on the wire and every down declaration (exact times), when each node learned
of the joiner and of the crash (exact delays), and, sampled every :data:`STEP` seconds,
each node's member count, its messages sent, received and lost, and the cluster's
counters of failed probes, suspicion notices and refutations. The page replays exactly
this.
"""

from __future__ import annotations

from typing import Any

from grid._native import Simulation

SIZES: tuple[int, ...] = (5, 8, 12, 16)
LOSSES: tuple[float, ...] = (0.0, 0.05, 0.2)
SEED = 14
STEP = 0.5
"""Seconds of virtual time per frame."""
FINE_STEP = 0.05
FINE_FOR = 1.0
"""A join spreads in well under a second: frames are :data:`FINE_STEP` apart for this
long after it."""
JOIN_AFTER = 10.0
CRASH_AFTER = 20.0
RUN_FOR = 80.0
"""Seconds recorded after the cluster has formed (a crash takes up to about 35 s to be
declared at these sizes and losses)."""
CRASHED_NODE = 1
SEED_NODE = 0
COUNTERS: tuple[str, ...] = ("probes_failed", "suspicion_notices", "refutations", "late_answers")
"""Cluster-wide driver counters, recorded per frame as increments."""


def trace_key(n: int, loss: float, crash: bool) -> str:
    return f"n{n}-loss{round(loss * 100)}-{'crash' if crash else 'nocrash'}"


def record_trace(n: int, loss: float, crash: bool, *, seed: int = SEED) -> dict[str, Any]:
    """One recorded run (see the module's description). Deterministic: the same arguments
    give the same record, down to the simulator's trace fingerprint."""
    sim = Simulation(n, seed, loss=loss, threads=1)
    sim.set_recording(True)
    start = sim.now
    joiner: int | None = None
    join_at = crash_at = None
    nodes = n + 1
    known: list[list[int]] = []
    sent: list[list[int]] = []
    received: list[list[int]] = []
    lost: list[list[int]] = []
    counters: dict[str, list[int]] = {name: [] for name in COUNTERS}
    previous_traffic = _traffic(sim, nodes)
    previous_stats = sim.stats()
    times = frame_times()
    for previous, offset in zip([0.0, *times], times, strict=False):
        if previous == JOIN_AFTER:
            joiner = sim.add_node()
            join_at = sim.now
            sim.join(joiner, [SEED_NODE])
        if crash and previous == CRASH_AFTER:
            crash_at = sim.now
            sim.crash(CRASHED_NODE)
        sim.run_until(start + offset)
        known.append(
            [
                sim.members_of(node) if node < sim.nodes and sim.status(node) == "running" else -1
                for node in range(nodes)
            ]
        )
        traffic = _traffic(sim, nodes)
        sent.append(_delta(traffic["sent"], previous_traffic["sent"]))
        received.append(_delta(traffic["received"], previous_traffic["received"]))
        lost.append(_delta(traffic["lost"], previous_traffic["lost"]))
        previous_traffic = traffic
        stats = sim.stats()
        for name in COUNTERS:
            counters[name].append(stats[name] - previous_stats[name])
        previous_stats = stats
    assert joiner is not None and join_at is not None
    join_delays, join_observers = sim.learned_times(joiner, "up", join_at)
    record: dict[str, Any] = {
        "key": trace_key(n, loss, crash),
        "n": n,
        "nodes": nodes,
        "loss": loss,
        "seed": seed,
        "settings": sim.settings(),
        "start": start,
        "times": times,
        "joiner": joiner,
        "seed_node": SEED_NODE,
        "join_at": join_at,
        "crashed": CRASHED_NODE if crash else None,
        "crash_at": crash_at,
        "known": known,
        "sent": sent,
        "received": received,
        "lost": lost,
        "counters": counters,
        "suspicions": [list(entry) for entry in sim.suspicions(start)],
        "declarations": [list(entry) for entry in sim.declarations(start)],
        "join_learned": {"delays": join_delays, "observers": join_observers},
        "down_learned": None,
        "trace_hash": f"{sim.trace_hash():016x}",
    }
    if crash_at is not None:
        delays, observers = sim.learned_times(CRASHED_NODE, "down", crash_at)
        record["down_learned"] = {"delays": delays, "observers": observers}
    return record


def frame_times() -> list[float]:
    """Seconds after the start at which frames are recorded: every :data:`STEP`, and every
    :data:`FINE_STEP` just after the join."""
    coarse = [round(k * STEP, 3) for k in range(1, round(RUN_FOR / STEP) + 1)]
    fine = [round(JOIN_AFTER + k * FINE_STEP, 3) for k in range(1, round(FINE_FOR / FINE_STEP))]
    return sorted({*coarse, *fine})


def _traffic(sim: Simulation, nodes: int) -> dict[str, list[int]]:
    traffic = sim.traffic()
    return {
        name: traffic[name] + [0] * (nodes - len(traffic[name]))
        for name in ("sent", "received", "lost")
    }


def _delta(now: list[int], before: list[int]) -> list[int]:
    return [a - b for a, b in zip(now, before, strict=True)]


def all_traces() -> dict[str, dict[str, Any]]:
    """A recorded run for every combination of the chapter's controls."""
    return {
        trace_key(n, loss, crash): record_trace(n, loss, crash)
        for n in SIZES
        for loss in LOSSES
        for crash in (False, True)
    }
