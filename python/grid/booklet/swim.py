"""The SWIM chapter: recorded runs of ``grid._native.Simulation``, the real SWIM drivers on
a virtual clock, for every combination of the chapter's controls.

A run starts from a converged cluster of ``n`` nodes, lets a fresh node join through node
0, optionally crashes node 1, and records what the simulator exposes, frame by frame
(every :data:`STEP` seconds, every :data:`FINE_STEP` in the second after the join):

- every datagram the simulated network carried in the frame, from its message log: when
  it left, sender, recipient, kind (ping, ack, ping-req, indirect ping/ack, forwarded ack,
  announce, feed, gossip, sync, ...), fate (delivered, lost, undeliverable to a stopped
  node), the member a ping-req names and the membership updates it carried;
- each node's member count, and who holds whom suspect (each node's member view);
- the cluster's driver counters (failed probes, suspicion notices, refutations).

And, exact in time: every suspicion episode, refutation (who, at which incarnation, whose
suspicion it answered), down declaration, and when each node learned of the joiner and of
the crash. The page replays exactly this.
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
MESSAGE_LIMIT = 6000
"""Messages kept per run at most (the busiest run, 16 nodes at 20 % loss, sends about
3,400); the page says how many were left out if a run ever exceeds it."""
COUNTERS: tuple[str, ...] = ("probes_failed", "suspicion_notices", "refutations", "late_answers")
"""Cluster-wide driver counters, recorded per frame as increments."""
STATES: tuple[str, ...] = ("alive", "suspect", "down", "left")


def trace_key(n: int, loss: float, crash: bool) -> str:
    return f"n{n}-loss{round(loss * 100)}-{'crash' if crash else 'nocrash'}"


class _Codes:
    """Small integers for repeated names (message kinds, fates), listed in the record."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def __call__(self, name: str) -> int:
        if name not in self.names:
            self.names.append(name)
        return self.names.index(name)


def record_trace(n: int, loss: float, crash: bool, *, seed: int = SEED) -> dict[str, Any]:
    """One recorded run (see the module's description). Deterministic: the same arguments
    give the same record, down to the simulator's trace fingerprint."""
    sim = Simulation(n, seed, loss=loss, threads=1)
    sim.set_recording(True)
    start = sim.now
    joiner: int | None = None
    join_at = crash_at = None
    nodes = n + 1
    kinds, fates = _Codes(), _Codes()
    known: list[list[int]] = []
    suspected: list[list[list[int]]] = []
    messages: list[list[list[Any]]] = []
    dropped = 0
    counters: dict[str, list[int]] = {name: [] for name in COUNTERS}
    previous_stats = sim.stats()
    times = frame_times()
    # The log is emptied after each frame, so a frame holds exactly what was sent between
    # two recording points (the join and the crash happen at the start of a frame).
    sim.set_message_log(True, MESSAGE_LIMIT)
    for previous, offset in zip([0.0, *times], times, strict=False):
        if previous == JOIN_AFTER:
            joiner = sim.add_node()
            join_at = sim.now
            sim.join(joiner, [SEED_NODE])
        if crash and previous == CRASH_AFTER:
            crash_at = sim.now
            sim.crash(CRASHED_NODE)
        sim.run_until(start + offset)
        running = [node for node in range(sim.nodes) if sim.status(node) == "running"]
        known.append([sim.members_of(node) if node in running else -1 for node in range(nodes)])
        suspected.append(
            [
                [observer, member]
                for observer in running
                for member, _, state in sim.member_view(observer)
                if state == "suspect"
            ]
        )
        messages.append([_message(message, start, kinds, fates) for message in sim.messages()])
        dropped += sim.messages_dropped()
        sim.set_message_log(True, max(MESSAGE_LIMIT - sum(map(len, messages)), 0))
        stats = sim.stats()
        for name in COUNTERS:
            counters[name].append(stats[name] - previous_stats[name])
        previous_stats = stats
    assert joiner is not None and join_at is not None
    join_delays, join_observers = sim.learned_times(joiner, "up", join_at)
    suspicions = [list(entry) for entry in sim.suspicions(start)]
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
        "suspected": suspected,
        "message_kinds": kinds.names,
        "message_fates": fates.names,
        "messages": messages,
        "messages_dropped": dropped,
        "counters": counters,
        "suspicions": suspicions,
        "refutations": [
            [at, node, incarnation, _suspected_by(suspicions, at, node, incarnation)]
            for at, node, incarnation in sim.refutations(start)
        ],
        "declarations": [list(entry) for entry in sim.declarations(start)],
        "join_learned": {"delays": join_delays, "observers": join_observers},
        "join_learned_by": _learned_by(sim, joiner, "up", join_at),
        "down_learned": None,
        "down_learned_by": None,
        "trace_hash": f"{sim.trace_hash():016x}",
    }
    if crash_at is not None:
        delays, observers = sim.learned_times(CRASHED_NODE, "down", crash_at)
        record["down_learned"] = {"delays": delays, "observers": observers}
        record["down_learned_by"] = _learned_by(sim, CRASHED_NODE, "down", crash_at)
    return record


def _message(message: tuple[Any, ...], start: float, kinds: _Codes, fates: _Codes) -> list[Any]:
    """``[seconds into the run, from, to, kind, fate, about, updates]``, kind and fate as
    indices into the run's lists, ``about`` and ``updates`` left off when absent; updates
    as ``[subject, state index in STATES, incarnation]``."""
    sent_at, sender, to, kind, fate, _arrives_at, about, updates = message
    entry: list[Any] = [round(sent_at - start, 4), sender, to, kinds(kind), fates(fate)]
    if about is not None or updates:
        entry.append(about)
    if updates:
        entry.append(
            [[subject, STATES.index(state), incarnation] for subject, incarnation, state in updates]
        )
    return entry


def _suspected_by(
    suspicions: list[list[Any]], at: float, node: int, incarnation: int
) -> int | None:
    """Who raised the suspicion a refutation answers: the latest episode about ``node`` at
    a lower incarnation seen before it."""
    answered = [
        entry
        for entry in suspicions
        if entry[1] == node and entry[2] < incarnation and entry[0] <= at
    ]
    return answered[-1][3] if answered else None


def _learned_by(sim: Simulation, subject: int, change: str, since: float) -> list[list[Any]]:
    """``[seconds after since, observer]`` for each running node that learned the change
    (the nodes ``learned_times`` counts), in order."""
    wanted = {"up": ("up", "renamed"), "down": ("down", "left")}[change]
    learned = []
    for observer in range(sim.nodes):
        if observer == subject or sim.status(observer) != "running":
            continue
        first = next(
            (
                at
                for at, about, what, _, _ in sim.records(observer)
                if about == subject and what in wanted and at >= since
            ),
            None,
        )
        if first is not None:
            learned.append([round(first - since, 6), observer])
    return sorted(learned)


def frame_times() -> list[float]:
    """Seconds after the start at which frames are recorded: every :data:`STEP`, and every
    :data:`FINE_STEP` just after the join."""
    coarse = [round(k * STEP, 3) for k in range(1, round(RUN_FOR / STEP) + 1)]
    fine = [round(JOIN_AFTER + k * FINE_STEP, 3) for k in range(1, round(FINE_FOR / FINE_STEP))]
    return sorted({*coarse, *fine})


def all_traces() -> dict[str, dict[str, Any]]:
    """A recorded run for every combination of the chapter's controls."""
    return {
        trace_key(n, loss, crash): record_trace(n, loss, crash)
        for n in SIZES
        for loss in LOSSES
        for crash in (False, True)
    }
