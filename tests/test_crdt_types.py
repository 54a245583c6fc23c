"""The CRDT building blocks: LWW registers, OR-Sets, G-Counters and the revision clock.

Lattice laws (commutativity, associativity, idempotence, inflation) are checked on states
reached by random histories of several replicas, and each type against an oracle that
knows nothing of its implementation.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grid.crdt import GCounter, LWWRegister, ORSet, RevisionClock, Stamp
from grid.crdt.codec import MAX_SAFE_INT, value_bytes
from grid.crdt.gcounter import MAX_SLOTS
from grid.crdt.orset import Dot
from grid.errors import CrdtLimitError, CrdtValueError

REPLICAS = ("a", "b", "c", "d", "e")

# ---------------------------------------------------------------------------------------
# LWW registers

stamps = st.builds(Stamp, st.integers(1, 20), st.sampled_from(REPLICAS))
registers = st.builds(LWWRegister, st.one_of(st.integers(0, 5), st.text("xyz", max_size=2)), stamps)


@given(registers, registers)
def test_lww_merge_commutes(x: LWWRegister[int | str], y: LWWRegister[int | str]) -> None:
    assert x.merge(y) == y.merge(x)


@given(registers, registers, registers)
def test_lww_merge_associates(
    x: LWWRegister[int | str], y: LWWRegister[int | str], z: LWWRegister[int | str]
) -> None:
    assert x.merge(y).merge(z) == x.merge(y.merge(z))


@given(registers, registers)
def test_lww_merge_is_idempotent_and_inflationary(
    x: LWWRegister[int | str], y: LWWRegister[int | str]
) -> None:
    assert x.merge(x) == x
    joined = x.merge(y)
    assert joined.merge(x) == joined
    assert joined.stamp >= x.stamp


@given(st.lists(registers, min_size=1, max_size=8), st.randoms())
def test_lww_picks_the_maximal_stamp_in_any_order(
    writes: list[LWWRegister[int | str]], rnd: random.Random
) -> None:
    expected = max(writes, key=lambda reg: (reg.stamp, value_bytes(reg.value)))
    rnd.shuffle(writes)
    merged = writes[0]
    for write in writes[1:]:
        merged = merged.merge(write)
    assert merged == expected


def test_lww_ties_break_by_writer_then_by_value() -> None:
    low = LWWRegister("x", Stamp(5, "site-a"))
    high = LWWRegister("y", Stamp(5, "site-b"))
    assert low.merge(high) == high.merge(low) == high
    same_stamp = LWWRegister("z", Stamp(5, "site-b"))
    assert high.merge(same_stamp) == same_stamp.merge(high) == same_stamp


def test_lww_assign_needs_a_later_stamp() -> None:
    register = LWWRegister(1, Stamp(5, "a"))
    assert register.assign(2, Stamp(6, "a")).value == 2
    with pytest.raises(CrdtValueError):
        register.assign(2, Stamp(5, "a"))


# ---------------------------------------------------------------------------------------
# OR-Sets: replicas run random histories; an oracle tracks causal histories of events


@dataclass
class _Replica:
    state: ORSet[str] = field(default_factory=ORSet)
    counter: int = 0
    history: set[int] = field(default_factory=set)


@dataclass
class _Event:
    element: str
    is_add: bool
    observed: frozenset[int] = frozenset()


@dataclass
class _ORSetRun:
    """Replicas of one OR-Set and an implementation-free oracle of add-wins semantics: an
    element is present iff its history holds an add that no remove in it observed."""

    replicas: dict[str, _Replica]
    events: list[_Event] = field(default_factory=list)
    visited: list[ORSet[str]] = field(default_factory=list)

    def add(self, name: str, element: str) -> None:
        replica = self.replicas[name]
        replica.counter += 1
        before = replica.state
        replica.state = before.add(element, Dot(name, replica.counter))
        self._record(replica, _Event(element, True), before)

    def remove(self, name: str, element: str) -> None:
        replica = self.replicas[name]
        observed = frozenset(
            index
            for index in replica.history
            if self.events[index].is_add and self.events[index].element == element
        )
        before = replica.state
        replica.state = before.remove(element)
        self._record(replica, _Event(element, False, observed), before)

    def sync(self, source: str, target: str) -> None:
        sender, receiver = self.replicas[source], self.replicas[target]
        receiver.state = receiver.state.merge(sender.state)
        receiver.history |= sender.history
        self.visited.append(receiver.state)

    def _record(self, replica: _Replica, event: _Event, before: ORSet[str]) -> None:
        self.events.append(event)
        replica.history.add(len(self.events) - 1)
        # Every update is an inflation: the old state is below the new one.
        assert before.merge(replica.state) == replica.state
        self.visited.append(replica.state)

    def expected(self, history: set[int]) -> set[str]:
        cancelled = set().union(*(self.events[i].observed for i in history))
        return {
            self.events[i].element for i in history if self.events[i].is_add and i not in cancelled
        }


orset_ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "add", "remove", "sync"]),
        st.integers(0, 4),
        st.integers(0, 4),
        st.sampled_from(["m1", "m2", "m3", "m4"]),
    ),
    max_size=60,
)


def _run_orset(replica_count: int, ops: list[tuple[str, int, int, str]]) -> _ORSetRun:
    run = _ORSetRun({name: _Replica() for name in REPLICAS[:replica_count]})
    names = list(run.replicas)
    for op, first, second, element in ops:
        source, target = names[first % replica_count], names[second % replica_count]
        if op == "add":
            run.add(source, element)
        elif op == "remove":
            run.remove(source, element)
        else:
            run.sync(source, target)
        for replica in run.replicas.values():
            assert replica.state.elements == run.expected(replica.history)
    return run


@given(st.integers(2, 5), orset_ops)
def test_orset_matches_the_add_wins_oracle_at_every_step(
    replica_count: int, ops: list[tuple[str, int, int, str]]
) -> None:
    run = _run_orset(replica_count, ops)
    everything: ORSet[str] = ORSet()
    history: set[int] = set()
    for replica in run.replicas.values():
        everything = everything.merge(replica.state)
        history |= replica.history
    assert everything.elements == run.expected(history)


@settings(max_examples=60)
@given(st.integers(2, 5), orset_ops, st.data())
def test_orset_merge_is_a_join(
    replica_count: int, ops: list[tuple[str, int, int, str]], data: st.DataObject
) -> None:
    run = _run_orset(replica_count, ops)
    states = run.visited or [ORSet()]
    x, y, z = (data.draw(st.sampled_from(states)) for _ in range(3))
    assert x.merge(y) == y.merge(x)
    assert x.merge(y).merge(z) == x.merge(y.merge(z))
    assert x.merge(x) == x
    assert x.merge(x.merge(y)) == x.merge(y)


def test_orset_concurrent_add_survives_a_stale_remove() -> None:
    base = ORSet[str]().add("gpt-4o", Dot("a", 1))
    removed_at_b = base.remove("gpt-4o")
    re_added_at_a = base.add("gpt-4o", Dot("a", 2))
    assert "gpt-4o" in removed_at_b.merge(re_added_at_a)
    assert "gpt-4o" in re_added_at_a.merge(removed_at_b)
    # A remove that has seen the re-add wins over it.
    assert "gpt-4o" not in re_added_at_a.merge(removed_at_b).remove("gpt-4o").merge(base)


def test_orset_refuses_stale_dots_and_inconsistent_states() -> None:
    state = ORSet[str]().add("x", Dot("a", 5))
    with pytest.raises(CrdtValueError):
        state.add("y", Dot("a", 5))
    with pytest.raises(CrdtValueError):
        state.update(adds=["y"])
    with pytest.raises(CrdtValueError):
        ORSet({"x": [Dot("a", 6)]}, {"a": 5})
    with pytest.raises(CrdtValueError):
        ORSet({"x": []}, {"a": 5})
    with pytest.raises(CrdtValueError):
        ORSet({}, {"a": 0})


def test_orset_one_dot_may_tag_a_whole_write() -> None:
    written = ORSet[str]().update(adds=["x", "y"], dot=Dot("a", 1))
    without_x = written.remove("x")
    assert written.merge(without_x).elements == {"y"}
    assert without_x.merge(written).elements == {"y"}


@pytest.mark.parametrize("replica_count", [1, 3])
def test_orset_metadata_stays_bounded_under_100k_operations(replica_count: int) -> None:
    rnd = random.Random(7)
    universe = [f"model-{i}" for i in range(20)]
    names = REPLICAS[:replica_count]
    states: dict[str, ORSet[str]] = dict.fromkeys(names, ORSet[str]())
    counters = dict.fromkeys(names, 0)
    peak = 0
    for step in range(100_000):
        name = names[step % replica_count]
        element = rnd.choice(universe)
        if rnd.random() < 0.5:
            counters[name] += 1
            states[name] = states[name].add(element, Dot(name, counters[name]))
        else:
            states[name] = states[name].remove(element)
        if replica_count > 1 and step % 50 == 0:
            other = rnd.choice(names)
            states[name] = states[name].merge(states[other])
        peak = max(peak, states[name].metadata_size())
    # At most one dot per live element per replica, plus one context entry per replica:
    # nothing is left behind by the 50,000 removes.
    bound = len(universe) * replica_count + replica_count
    assert peak <= bound
    merged: ORSet[str] = ORSet()
    for state in states.values():
        merged = merged.merge(state)
    assert merged.metadata_size() <= bound


# ---------------------------------------------------------------------------------------
# G-Counters


counter_ops = st.lists(
    st.tuples(
        st.sampled_from(["inc", "inc", "sync", "dup"]),
        st.integers(0, 4),
        st.integers(0, 4),
        st.integers(0, 1_000_000),
    ),
    max_size=60,
)


@given(st.integers(2, 5), counter_ops, st.data())
def test_gcounter_counts_every_increment_once(
    replica_count: int, ops: list[tuple[str, int, int, int]], data: st.DataObject
) -> None:
    names = REPLICAS[:replica_count]
    states = dict.fromkeys(names, GCounter())
    issued = 0
    visited = [GCounter()]
    for op, first, second, amount in ops:
        source, target = names[first % replica_count], names[second % replica_count]
        if op == "inc":
            before = states[source]
            states[source] = before.increment(source, amount)
            assert before.merge(states[source]) == states[source]  # inflation
            issued += amount
        else:
            # "dup" delivers the same state twice: no double counting.
            times = 2 if op == "dup" else 1
            for _ in range(times):
                states[target] = states[target].merge(states[source])
        visited.append(states[target])
        assert all(state.value <= issued for state in states.values())  # a lower bound
    merged = GCounter()
    for state in data.draw(st.permutations(list(states.values()))):
        merged = merged.merge(state).merge(state)
    assert merged.value == issued
    x, y, z = (data.draw(st.sampled_from(visited)) for _ in range(3))
    assert x.merge(y) == y.merge(x)
    assert x.merge(y).merge(z) == x.merge(y.merge(z))
    assert x.merge(x) == x


def test_gcounter_bounds_and_refusals() -> None:
    full = GCounter({f"s{i}": 1 for i in range(MAX_SLOTS)})
    assert full.value == MAX_SLOTS
    with pytest.raises(CrdtLimitError):
        full.increment("one-more", 1)
    with pytest.raises(CrdtLimitError):
        full.merge(GCounter({"one-more": 1}))
    assert full.increment("s0", 1).slot("s0") == 2
    assert full.slots["s1"] == 1 and full.slot("unknown") == 0
    with pytest.raises(CrdtValueError):
        GCounter().increment("a", -1)
    with pytest.raises(CrdtValueError):
        GCounter().increment("a", True)
    with pytest.raises(CrdtValueError):
        GCounter({"a": 1.5})  # type: ignore[dict-item]
    with pytest.raises(CrdtLimitError):
        GCounter({"a": MAX_SAFE_INT}).increment("a", 1)
    assert GCounter({"a": 0}) == GCounter()


# ---------------------------------------------------------------------------------------
# The revision clock


@given(st.lists(st.floats(0, 2e9, allow_nan=False), min_size=1, max_size=30))
def test_revisions_rise_whatever_the_wall_clock_does(times: list[float]) -> None:
    clock = RevisionClock()
    revisions = [clock.tick(now) for now in times]
    assert all(a < b for a, b in itertools.pairwise(revisions))
    assert all(rev >= int(now * 1000) for rev, now in zip(revisions, times, strict=True))


def test_a_restarted_clock_continues_above_observed_revisions() -> None:
    clock = RevisionClock()
    clock.observe(5_000_000)
    assert clock.tick(10.0) == 5_000_001  # the wall clock (10 s) went back: keep rising
    assert clock.tick(6_000.0) == 6_000_000


@pytest.mark.parametrize("now", [float("nan"), float("inf"), -1.0, True, "1"])
def test_the_clock_refuses_nonsense_times(now: object) -> None:
    with pytest.raises(CrdtValueError):
        RevisionClock().tick(now)  # type: ignore[arg-type]
