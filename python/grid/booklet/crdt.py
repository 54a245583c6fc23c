"""The CRDT chapter: three replicas of real ``grid.crdt`` state, a menu of one-shot
operations at each, and merges delivered in any order.

Each replica holds an add-wins :class:`ORSet` of model names, a :class:`LWWRegister` (the
route a site prefers, written with a :class:`RevisionClock` stamp) and a
:class:`GCounter` of requests. Every state the menu can reach, and every operation and
merge between them, is computed here with the real types by a breadth-first search over
the joint states of the three replicas, one type at a time (a replica's merge merges each
type on its own, so their states are independent); the page looks the results up and
shows them, it never merges anything itself.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grid.crdt import Dot, GCounter, LWWRegister, ORSet, RevisionClock, Stamp

REPLICAS: tuple[str, ...] = ("A", "B", "C")
UNSET = "(unset)"
MAX_JOINT_STATES = 50_000
"""A bound on the search of one component; the menu below reaches far fewer."""


Value = Any
"""A value of one of the CRDT types (immutable)."""


@dataclass(frozen=True, slots=True)
class Operation:
    id: str
    replica: str
    label: str
    apply: Callable[[Value, str], Value]


@dataclass(frozen=True, slots=True)
class Component:
    """One CRDT of a replica: its initial value, the operations on it and how it is
    drawn. The three are independent (a replica's merge merges each), so each is explored
    on its own."""

    name: str
    initial: Callable[[], Value]
    operations: tuple[Operation, ...]
    view: Callable[[Value], dict[str, Any]]


def _set_view(models: ORSet[str]) -> dict[str, Any]:
    return {
        "elements": [
            {"element": element, "dots": sorted([dot.replica, dot.counter] for dot in dots)}
            for element, dots in sorted(models.entries())
        ],
        "context": dict(sorted(models.context.items())),
    }


def _register_view(route: LWWRegister[str]) -> dict[str, Any]:
    return {"value": route.value, "revision": route.stamp.revision, "writer": route.stamp.writer}


def _counter_view(requests: GCounter) -> dict[str, Any]:
    return {"slots": dict(sorted(requests.slots.items())), "value": requests.value}


def _add(element: str) -> Callable[[Value, str], Value]:
    def run(models: ORSet[str], replica: str) -> ORSet[str]:
        return models.add(element, Dot(replica, models.context.get(replica, 0) + 1))

    return run


def _remove(element: str) -> Callable[[Value, str], Value]:
    def run(models: ORSet[str], replica: str) -> ORSet[str]:
        return models.remove(element)

    return run


def _write(value: str, wall_seconds: float) -> Callable[[Value, str], Value]:
    """A register write stamped by the replica's revision clock, which has observed the
    revision the replica holds (as a site's clock observes what it merged)."""

    def run(route: LWWRegister[str], replica: str) -> LWWRegister[str]:
        clock = RevisionClock()
        clock.observe(route.stamp.revision)
        return route.assign(value, Stamp(clock.tick(wall_seconds), replica))

    return run


def _increment(amount: int) -> Callable[[Value, str], Value]:
    def run(requests: GCounter, replica: str) -> GCounter:
        return requests.increment(replica, amount)

    return run


COMPONENTS: tuple[Component, ...] = (
    # B removes llama: only the adds B has seen. C's concurrent add survives the merge.
    Component(
        "set",
        ORSet,
        (
            Operation("A-add-llama", "A", "add llama", _add("llama")),
            Operation("B-remove-llama", "B", "remove llama", _remove("llama")),
            Operation("B-add-qwen", "B", "add qwen", _add("qwen")),
            Operation("C-add-llama", "C", "add llama", _add("llama")),
        ),
        _set_view,
    ),
    # A and B write at the same wall-clock millisecond (the writer id breaks the tie); C's
    # clock runs 2 ms behind, so its write wins only if C has seen the others' revisions.
    Component(
        "register",
        lambda: LWWRegister(UNSET, Stamp(0, "")),
        (
            Operation("A-write", "A", "route := east (wall 1.000 s)", _write("east", 1.0)),
            Operation("B-write", "B", "route := west (wall 1.000 s)", _write("west", 1.0)),
            Operation("C-write", "C", "route := hub (wall 0.998 s)", _write("hub", 0.998)),
        ),
        _register_view,
    ),
    Component(
        "counter",
        GCounter,
        (
            Operation("A-inc", "A", "requests += 1", _increment(1)),
            Operation("B-inc", "B", "requests += 2", _increment(2)),
            Operation("C-inc", "C", "requests += 3", _increment(3)),
        ),
        _counter_view,
    ),
)


def _key(view: dict[str, Any]) -> str:
    return json.dumps(view, sort_keys=True, separators=(",", ":"))


def explore_component(component: Component) -> dict[str, Any]:
    """Every value of ``component`` the menu reaches at three replicas that start equal,
    each operation used at most once, merges delivered in any order and any number of
    times: the values (as the page draws them) and the transitions between them, as
    lookup tables keyed ``"<value>|<operation>"`` and ``"<receiver>|<sender>"``."""
    values: list[Value] = []
    views: list[dict[str, Any]] = []
    index: dict[str, int] = {}

    def id_of(value: Value) -> int:
        view = component.view(value)
        key = _key(view)
        found = index.get(key)
        if found is None:
            found = index[key] = len(values)
            values.append(value)
            views.append(view)
        return found

    start = id_of(component.initial())
    applied: dict[str, int] = {}
    merged: dict[str, int] = {}
    first = ((start,) * len(REPLICAS), frozenset[str]())
    seen = {first}
    queue = deque([first])
    while queue:
        replicas, used = queue.popleft()
        successors: list[tuple[tuple[int, ...], frozenset[str]]] = []
        for operation in component.operations:
            if operation.id in used:
                continue
            position = REPLICAS.index(operation.replica)
            key = f"{replicas[position]}|{operation.id}"
            after = applied.get(key)
            if after is None:
                before = values[replicas[position]]
                after = applied[key] = id_of(operation.apply(before, operation.replica))
            changed = (*replicas[:position], after, *replicas[position + 1 :])
            successors.append((changed, used | {operation.id}))
        for receiver in range(len(REPLICAS)):
            for sender in range(len(REPLICAS)):
                mine, theirs = replicas[receiver], replicas[sender]
                if mine == theirs:
                    continue
                key = f"{mine}|{theirs}"
                after = merged.get(key)
                if after is None:
                    after = merged[key] = id_of(values[mine].merge(values[theirs]))
                changed = (*replicas[:receiver], after, *replicas[receiver + 1 :])
                successors.append((changed, used))
        for successor in successors:
            if successor not in seen:
                if len(seen) >= MAX_JOINT_STATES:
                    raise RuntimeError(f"the CRDT chapter's {component.name} menu is too large")
                seen.add(successor)
                queue.append(successor)
    return {
        "start": start,
        "values": views,
        "apply": applied,
        "merge": merged,
        "joint_states": len(seen),
    }


def explore() -> dict[str, Any]:
    """The chapter's data: the replicas, the operation menu and each component's tables."""
    return {
        "replicas": list(REPLICAS),
        "operations": [
            {
                "id": operation.id,
                "replica": operation.replica,
                "label": operation.label,
                "component": component.name,
            }
            for component in COMPONENTS
            for operation in component.operations
        ],
        "components": {component.name: explore_component(component) for component in COMPONENTS},
    }


def replay(steps: list[tuple[str, ...]]) -> list[dict[str, dict[str, Any]]]:
    """Each replica's views after ``steps`` run directly on the CRDT types, no tables:
    ``("op", operation id)`` or ``("merge", receiver, sender)``. Tests compare the tables
    with it."""
    state = {
        (name, component.name): component.initial() for name in REPLICAS for component in COMPONENTS
    }
    owner = {
        operation.id: (component.name, operation)
        for component in COMPONENTS
        for operation in component.operations
    }
    for step in steps:
        if step[0] == "op":
            name, operation = owner[step[1]]
            place = (operation.replica, name)
            state[place] = operation.apply(state[place], operation.replica)
        else:
            _, receiver, sender = step
            for component in COMPONENTS:
                mine = state[(receiver, component.name)]
                state[(receiver, component.name)] = mine.merge(state[(sender, component.name)])
    return [
        {component.name: component.view(state[(name, component.name)]) for component in COMPONENTS}
        for name in REPLICAS
    ]
