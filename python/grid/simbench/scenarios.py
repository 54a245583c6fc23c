"""The convergence scenarios, each a function from (size, seed, profile) to one run's
figures. Every run drives ``grid._native.Simulation``: the real SWIM driver, many times
over, on a virtual clock.

A converged cluster of N members costs O(N³) to form (foca inserts each member into a
list it scans linearly, at every node), so at large N several runs share one cluster:
joins, or crashes, follow each other a probe interval apart.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

from grid._native import Simulation
from grid.simbench.profiles import NetworkModel, SwimProfile, new_simulation
from grid.simbench.progress import Progress
from grid.simbench.stats import coverage_time


@dataclass(frozen=True, slots=True)
class Context:
    """What every scenario run shares: the network, worker threads and the progress bar."""

    network: NetworkModel = field(default_factory=NetworkModel)
    threads: int | None = None
    progress: Progress = field(default_factory=lambda: Progress(None))


def form_cluster(
    size: int, seed: int, profile: SwimProfile, ctx: Context, *, label: str, loss: float = 0.0
) -> Simulation:
    """A converged cluster of ``size`` members, its clock at the end of the first probe
    interval, every node's timers staggered."""
    network = replace(ctx.network, loss=loss)
    sim = new_simulation(size, seed, profile, network, threads=ctx.threads)
    step = max(1, size // 100)
    while sim.pending_bootstrap:
        remaining = sim.bootstrap(step)
        ctx.progress.show(f"{label}: forming the cluster", size - remaining, size)
    return sim


def _run_watching(
    sim: Simulation,
    run: Callable[[float], float | None],
    deadline: float,
    *,
    label: str,
    ctx: Context,
    chunk: float,
) -> float | None:
    """Runs ``run(until)`` in chunks of virtual time up to ``deadline`` so the progress
    bar moves and Ctrl-C is honoured between chunks; returns its first non-None answer."""
    start = sim.now
    while True:
        until = min(deadline, sim.now + chunk)
        done = run(until)
        ctx.progress.show(label, sim.now - start, deadline - start)
        if done is not None or until >= deadline:
            return done


def run_for(sim: Simulation, duration: float, *, label: str, ctx: Context, chunk: float) -> None:
    """Advances the clock by ``duration`` virtual seconds with a moving progress bar."""

    def step(until: float) -> None:
        sim.run_until(until)

    _run_watching(sim, step, sim.now + duration, label=label, ctx=ctx, chunk=chunk)


@dataclass(frozen=True, slots=True)
class JoinRun:
    """One join: when the members learned of the joiner, and the joiner of the members."""

    seed: int
    #: Members once the joiner is in.
    size: int
    #: Members that had to learn of the joiner (everyone but the joiner).
    observers: int
    #: Seconds after the join, sorted, at which members learned of the joiner.
    delays: list[float]
    #: Seconds after the join, sorted, at which the joiner learned of each member.
    joiner_delays: list[float]
    #: How many times each member relays a piece of news (foca's, for this cluster size).
    max_transmissions: int

    def coverage(self, fraction: float) -> float | None:
        return coverage_time(self.delays, self.observers, fraction)

    def joiner_coverage(self, fraction: float) -> float | None:
        return coverage_time(self.joiner_delays, self.observers, fraction)


def join_runs(
    size: int, seeds: list[int], profile: SwimProfile, ctx: Context, shared: Simulation | None
) -> list[JoinRun]:
    """A fresh node joins a converged cluster of ``size - 1`` through one random seed
    member; the run ends when every member knows it (or after 60 gossip rounds). With a
    ``shared`` cluster, the runs join it one after another, a probe interval apart (news
    still being relayed about the previous joiner neither helps nor hinders the next: it
    rides in the same messages, and periodic gossip runs whenever either is pending)."""
    horizon = 60 * profile.gossip_interval + profile.probe_interval
    runs: list[JoinRun] = []
    for index, seed in enumerate(seeds):
        label = f"join N={size} {profile.name} run {index + 1}/{len(seeds)}"
        if shared is None:
            sim = form_cluster(size - 1, seed, profile, ctx, label=label)
            sim.run_until(sim.now + profile.probe_interval)
        else:
            sim = shared
            sim.run_until(sim.now + profile.probe_interval)
        rng = random.Random(seed)
        joiner = sim.add_node()
        start = sim.now
        sim.join(joiner, [rng.randrange(joiner)])
        _run_watching(
            sim,
            partial(sim.run_until_learned, joiner, "up", start),
            start + horizon,
            label=label,
            ctx=ctx,
            chunk=10 * profile.gossip_interval,
        )
        delays, observers = sim.learned_times(joiner, "up", start)
        runs.append(
            JoinRun(
                seed=seed,
                size=sim.nodes,
                observers=observers,
                delays=delays,
                joiner_delays=sim.learned_by(joiner, start),
                max_transmissions=int(sim.settings()["max_transmissions"]),
            )
        )
    return runs


@dataclass(frozen=True, slots=True)
class FailureRun:
    """One crash: how long until it was suspected, declared down, and known everywhere."""

    seed: int
    size: int
    #: Live members that had to learn of the failure.
    observers: int
    first_suspicion: float | None
    first_down: float | None
    #: Seconds after the crash, sorted, at which live members marked the node down.
    delays: list[float]
    #: Healthy members declared down during the run (should be none).
    false_positives: int

    @property
    def everywhere(self) -> float | None:
        return coverage_time(self.delays, self.observers, 1.0)


def failure_runs(
    size: int, seeds: list[int], profile: SwimProfile, ctx: Context, shared: Simulation | None
) -> list[FailureRun]:
    """A random member of a converged cluster crashes; the run ends when every live member
    has marked it down. The horizon is generous (suspicion timeout + 20 probe intervals +
    60 gossip rounds); runs that exceed it count as undetected. With a ``shared`` cluster,
    the crashes follow one another a probe interval apart."""
    horizon = profile.suspicion_timeout + 20 * profile.probe_interval + 60 * profile.gossip_interval
    runs: list[FailureRun] = []
    for index, seed in enumerate(seeds):
        label = f"failure N={size} {profile.name} run {index + 1}/{len(seeds)}"
        if shared is None:
            sim = form_cluster(size, seed, profile, ctx, label=label)
            sim.run_until(sim.now + profile.probe_interval)
        else:
            sim = shared
            sim.run_until(sim.now + profile.probe_interval)
        rng = random.Random(seed)
        victim = rng.choice([n for n in range(sim.nodes) if sim.status(n) == "running"])
        start = sim.now
        sim.crash(victim)
        _run_watching(
            sim,
            partial(sim.run_until_learned, victim, "down", start),
            start + horizon,
            label=label,
            ctx=ctx,
            chunk=5 * profile.probe_interval,
        )
        delays, observers = sim.learned_times(victim, "down", start)
        suspicions = [s[0] for s in sim.suspicions(start) if s[1] == victim]
        declarations = sim.declarations(start)
        downs = [d[0] for d in declarations if d[2] == victim]
        runs.append(
            FailureRun(
                seed=seed,
                size=sim.nodes,
                observers=observers,
                first_suspicion=min(suspicions) - start if suspicions else None,
                first_down=min(downs) - start if downs else None,
                delays=delays,
                false_positives=sum(1 for d in declarations if d[3]),
            )
        )
    return runs


#: How late the slow node of an accuracy run handles its input, in probe intervals.
SLOW_NODE_INTERVALS = 1.5


@dataclass(frozen=True, slots=True)
class AccuracyRun:
    """Wrong verdicts about healthy members over a long run with loss (and a slow node)."""

    seed: int
    size: int
    loss: float
    duration: float
    #: Extra delay on everything the slow node receives (0: no slow node).
    slow_delay: float
    #: Own down declarations of members that were in fact running.
    false_declarations: int
    #: Distinct healthy members declared down at least once.
    falsely_declared: int
    #: Of the false declarations, those the slow node made, and those about it.
    by_slow: int
    of_slow: int
    #: Suspicion episodes of healthy members (each refuted or turned into a false down).
    false_suspicions: int
    #: Suspicions refuted by their target (it raised its incarnation).
    refutations: int
    #: Direct notices suspectors sent their suspects (Lifeguard's buddy system).
    suspicion_notices: int
    #: Answers that arrived after their probe had failed (each raises local health).
    late_answers: int
    #: Messages sent per member per second.
    message_rate: float
    #: foca's pending cluster updates at the busiest node at the end: near the cluster size,
    #: news arrives faster than it can be relayed.
    backlog_max: int

    @property
    def per_member_hour(self) -> float:
        """False declarations per member per hour."""
        return self.false_declarations / self.size / (self.duration / 3600)


def accuracy_run(
    size: int,
    seed: int,
    profile: SwimProfile,
    ctx: Context,
    *,
    loss: float,
    duration: float,
    slow: bool,
) -> AccuracyRun:
    """A converged cluster runs for ``duration`` virtual seconds with independent loss on
    every message; with ``slow``, one random member handles everything it receives
    1.5 probe intervals late, as if its loop were starved of CPU. (foca takes an ack until
    the next probe tick, so a node less than one probe interval late is never suspected.)"""
    label = f"accuracy N={size} {profile.name} loss={loss:.0%}{' slow' if slow else ''}"
    sim = form_cluster(size, seed, profile, ctx, label=label, loss=loss)
    sim.run_until(sim.now + profile.probe_interval)
    slow_node = random.Random(seed).randrange(size) if slow else None
    slow_delay = SLOW_NODE_INTERVALS * profile.probe_interval if slow else 0.0
    if slow_node is not None:
        sim.set_slow(slow_node, slow_delay)
    start = sim.now
    before = sim.stats()
    run_for(sim, duration, label=label, ctx=ctx, chunk=max(10.0, duration / 100))
    false = [d for d in sim.declarations(start) if d[3]]
    suspicions = [s for s in sim.suspicions(start) if s[4]]
    stats = sim.stats()
    return AccuracyRun(
        seed=seed,
        size=size,
        loss=loss,
        duration=duration,
        slow_delay=slow_delay,
        false_declarations=len(false),
        falsely_declared=len({d[2] for d in false}),
        by_slow=sum(1 for d in false if d[1] == slow_node),
        of_slow=sum(1 for d in false if d[2] == slow_node),
        false_suspicions=len(suspicions),
        refutations=stats["refutations"] - before["refutations"],
        suspicion_notices=stats["suspicion_notices"] - before["suspicion_notices"],
        late_answers=stats["late_answers"] - before["late_answers"],
        message_rate=(stats["sent"] - before["sent"]) / size / duration,
        backlog_max=stats["updates_backlog_max"],
    )


@dataclass(frozen=True, slots=True)
class PartitionRun:
    """A split into two halves, long enough for each to declare the other down, then a
    heal: how long until the whole cluster has one view again."""

    seed: int
    size: int
    #: Seconds the halves were apart.
    split_for: float
    #: Each half had declared the whole other half down before the heal.
    split_complete: bool
    #: Seconds from the heal to one converged view (None: not within the horizon).
    converged_after: float | None


def partition_run(size: int, seed: int, profile: SwimProfile, ctx: Context) -> PartitionRun:
    """Split in two halves until each has declared the whole other half down (checked
    every probe interval, for up to the suspicion timeout plus 100 probe intervals); after
    the heal, check for one view every gossip round for up to 300 probe intervals.
    Members come back through foca's rejoin: a member that hears it was declared down
    renews its identity (next generation), and announcements to down members (every 13
    probe intervals) start it."""
    label = f"partition N={size} {profile.name}"
    sim = form_cluster(size, seed, profile, ctx, label=label)
    sim.set_recording(False)
    sim.run_until(sim.now + profile.probe_interval)
    half = size // 2
    sim.partition([list(range(half))])
    split_at = sim.now
    limit = split_at + profile.suspicion_timeout + 100 * profile.probe_interval

    def split_complete() -> bool:
        return all(
            sim.members_of(node) == (half if node < half else size - half) - 1
            for node in range(size)
        )

    complete = False
    while not complete and sim.now < limit:
        sim.run_until(sim.now + profile.probe_interval)
        ctx.progress.show(f"{label}: split", sim.now - split_at, limit - split_at)
        complete = split_complete()
    split_for = sim.now - split_at
    sim.heal()
    healed = sim.now
    horizon = 300 * profile.probe_interval
    done = _run_watching(
        sim,
        partial(_converged_by, sim, every=profile.gossip_interval),
        healed + horizon,
        label=f"{label}: healed",
        ctx=ctx,
        chunk=5 * profile.probe_interval,
    )
    return PartitionRun(
        seed=seed,
        size=size,
        split_for=split_for,
        split_complete=complete,
        converged_after=None if done is None else done - healed,
    )


def _converged_by(sim: Simulation, until: float, *, every: float) -> float | None:
    return sim.run_until_converged(until, every)


def rounds(seconds: float | None, profile: SwimProfile) -> float | None:
    """Seconds as gossip rounds of the profile."""
    return None if seconds is None else seconds / profile.gossip_interval
