"""grid._native.Simulation: many real SWIM drivers on one virtual clock."""

from __future__ import annotations

import pytest

from grid._native import Simulation
from grid.errors import ConfigError, SimulationError

FAST = {"probe_interval": 1.0, "suspicion_timeout": 3.0, "push_pull_interval": 10.0}


def eventful(seed: int, threads: int = 1) -> Simulation:
    """Loss, a crash, a restart, a slow node and a partition with its heal. Every window
    with more than one node is shared among the threads."""
    sim = Simulation(30, seed, loss=0.05, threads=threads, parallel_work=0, **FAST)
    t0 = sim.now
    sim.run_until(t0 + 5)
    sim.crash(3)
    sim.set_slow(8, 0.4)
    sim.run_until(t0 + 15)
    sim.restart(3, [0])
    sim.partition([list(range(15))])
    sim.run_until(t0 + 25)
    sim.heal()
    sim.run_until(t0 + 35)
    return sim


def test_the_same_seed_gives_the_same_trace() -> None:
    first, second = eventful(5), eventful(5)
    assert first.trace_hash() == second.trace_hash()
    assert first.declarations() == second.declarations()
    assert first.suspicions() == second.suspicions()
    assert first.traffic() == second.traffic()


def test_another_seed_gives_another_trace() -> None:
    assert eventful(5).trace_hash() != eventful(6).trace_hash()


def test_threads_do_not_change_the_trace() -> None:
    alone, shared = eventful(9, threads=1), eventful(9, threads=2)
    assert shared.stats()["parallel_windows"] > 1000
    assert alone.stats()["parallel_windows"] == 0
    assert alone.trace_hash() == shared.trace_hash()


def test_a_converged_cluster_starts_quiet() -> None:
    sim = Simulation(25, 1, **FAST)
    assert sim.pending_bootstrap == 25
    assert sim.bootstrap(10) == 15
    assert sim.now == pytest.approx(1.0)  # the rest is handed out first
    assert sim.pending_bootstrap == 0
    assert sim.is_converged()
    sim.run_until(30.0)
    stats = sim.stats()
    assert stats["bootstrap_sends"] == 0
    assert stats["suspicions"] == 0
    assert all(count == 0 for key, count in stats.items() if key.startswith("foca_error_"))
    assert stats["sent"] == stats["received"] + stats["in_flight"]
    traffic = sim.traffic()
    assert sum(traffic["sent"]) == stats["sent"]
    # Bytes are counted framed: 33 bytes of frame plus at least our kind byte each.
    assert all(b >= 34 * n for b, n in zip(traffic["sent_bytes"], traffic["sent"], strict=True))
    assert sim.settings()["gossip_interval"] == pytest.approx(0.2)


def test_a_join_reaches_everyone() -> None:
    sim = Simulation(50, 2, **FAST)
    joiner = sim.add_node()
    t0 = sim.now
    sim.join(joiner, [7])
    done = sim.run_until_learned(joiner, "up", t0, t0 + 30)
    assert done is not None
    delays, observers = sim.learned_times(joiner, "up", t0)
    assert observers == 50
    assert len(delays) == 50
    assert delays == sorted(delays)
    assert done == pytest.approx(t0 + delays[-1])
    # The joiner learns the whole cluster from its seed's state in about a round trip.
    known = sim.learned_by(joiner, t0)
    assert len(known) == 50
    assert known[-1] < 1.0


def test_a_crash_is_detected_by_every_survivor() -> None:
    sim = Simulation(40, 3, **FAST)
    t0 = sim.now
    sim.crash(11)
    done = sim.run_until_learned(11, "down", t0, t0 + 80)
    assert done is not None
    delays, observers = sim.learned_times(11, "down", t0)
    assert len(delays) == observers == 39
    suspected = [s for s in sim.suspicions(t0) if s[1] == 11]
    assert suspected
    first_at, _, _, by, alive = suspected[0]
    assert not alive
    assert by != 11
    assert t0 < first_at < done
    declarations = sim.declarations(t0)
    assert declarations
    assert all(target == 11 and not false for _, _, target, false in declarations)
    assert sim.status(11) == "crashed"
    assert sim.generation(11) is None


def test_the_cluster_converges_after_a_partition_heals() -> None:
    sim = Simulation(24, 4, **FAST)
    t0 = sim.now
    sim.partition([list(range(12))])
    sim.run_until(t0 + 20)
    assert sim.members_of(0) == 11
    assert not sim.is_converged()
    assert sim.stats()["cut"] > 0
    sim.heal()
    healed = sim.now
    done = sim.run_until_converged(healed + 300, every=0.2)
    assert done is not None
    assert done > healed
    assert sim.is_converged()


def test_restart_and_leave() -> None:
    sim = Simulation(15, 5, **FAST)
    t0 = sim.now
    sim.leave(2)
    assert sim.status(2) == "left"
    sim.run_until(t0 + 3)
    delays, observers = sim.learned_times(2, "down", t0)
    assert len(delays) == observers == 14
    back = sim.now
    sim.restart(2, [0])
    assert sim.status(2) == "running"
    assert sim.run_until_learned(2, "up", back, back + 30) is not None
    assert sim.declarations() == []


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"loss": 1.5}, "loss"),
        ({"loss": float("nan")}, "loss"),
        ({"probe_interval": 0.0}, "probe_interval"),
        ({"delay": -1.0}, "delay"),
        ({"jitter_kind": "gauss"}, "jitter_kind"),
        ({"gossip_nodes": 0}, "gossipNodes"),
        ({"threads": 0}, "threads"),
    ],
)
def test_bad_settings_are_named(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(SimulationError, match=fragment):
        Simulation(5, **kwargs)  # type: ignore[arg-type]


def test_bad_steps_raise_and_change_nothing() -> None:
    sim = Simulation(6, 6, **FAST)
    now = sim.now
    before = sim.trace_hash()
    with pytest.raises(SimulationError, match="no node 9"):
        sim.crash(9)
    with pytest.raises(SimulationError, match="no node 9"):
        sim.join(0, [9])
    with pytest.raises(SimulationError, match="still running"):
        sim.restart(1, [0])
    with pytest.raises(SimulationError, match="two groups"):
        sim.partition([[0, 1], [1, 2]])
    with pytest.raises(SimulationError, match="link loss"):
        sim.set_link_loss(0, 1, 2.0)
    with pytest.raises(SimulationError, match="delay"):
        sim.set_slow(0, -0.5)
    with pytest.raises(SimulationError, match="change"):
        sim.run_until_learned(0, "sideways", now, now + 1)
    with pytest.raises(SimulationError, match="already at"):
        sim.run_until(now - 0.5)
    with pytest.raises(SimulationError, match="t must be"):
        sim.run_until(-1.0)
    with pytest.raises(SimulationError, match="jitter_kind"):
        sim.set_network(jitter_kind="pareto")
    assert isinstance(SimulationError("x"), ConfigError)
    assert sim.trace_hash() == before
    assert sim.is_converged()
