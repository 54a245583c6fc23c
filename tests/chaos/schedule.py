"""Seeded chaos schedules and the harness that plays them against a :class:`ChaosMesh`.

A schedule is a list of **faults**, each with a start and a length, and **actions** at
points in time:

- ``partition``: the sites split in two groups (symmetric);
- ``mute`` / ``deaf``: one-way loss, every frame from (or to) one or two sites dropped;
- ``pause``: SIGSTOP, then SIGCONT;
- ``wedge``: the agent's event loop blocked while its SWIM thread runs on (it answers
  probes, so peers see it alive, but it writes nothing);
- ``crash``: SIGKILL, then a restart;
- ``leave``: SIGTERM (the agent leaves the mesh), then a restart;
- ``spend`` (action): a site counts some of the tenant's spend;
- ``edit`` (action): a site's provider gets other models or another cost in its resource
  directory (the agent reloads it).

Faults are *short* (1.5-4 s) or *long* (longer than the network's stale-candidate TTL by 3 to
7 s). They may overlap, except that two network faults never do, and a site is under at
most one process fault at a time; at most two sites are under one at once. Spends happen
at sites whose process runs; edits anywhere (a crashed or paused site applies them when it
is back). The same seed gives the same schedule.

Playing it: faults start at their time (a little later if the harness had to wait), and
end their length after they actually started. Before a crash or a leave, the harness waits
(up to 5 s) until every budget slot the victim knows is held at least as high by another
living process (running or paused), so that spend is not lost with the process; what is
still missing then is counted as *unreplicated* and taken off the expected total (it was
never anywhere else). All along, every view and every overlay written is checked for (d).
Then everything is healed, and (a), (b) and (c) must hold together within the bound.
"""

from __future__ import annotations

import heapq
import itertools
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from chaos.invariants import OneView, check_one_view, routing_violations
from chaos.mesh import ChaosMesh
from grid.engine.pacing import MAX_RENDER_SPACING
from grid.membership import SwimConfig

NETWORK_FAULTS = ("partition", "mute", "deaf")
PROCESS_FAULTS = ("pause", "wedge", "crash", "leave")
ONE_WAY = ("mute", "deaf")
FAMILIES: dict[str, tuple[str, ...]] = {
    "partitions": ("partition",),
    "one-way": ONE_WAY,
    "pauses": ("pause", "wedge"),
    "restarts": ("crash", "leave"),
    "mixed": NETWORK_FAULTS + PROCESS_FAULTS,
}
MODEL_POOL = (
    "llama-3.1-8b",
    "llama-3.1-70b",
    "qwen-2.5-7b",
    "qwen-2.5-72b",
    "mistral-7b",
    "phi-3-mini",
    "gemma-2-9b",
)
PRICES = ("0.05", "0.10", "0.15", "0.20", "0.30", "0.60", "1.25")
GUARD_S = 5.0
"""How long the harness waits for a victim's budget slots to be held elsewhere."""
SAMPLE_EVERY_S = 0.2
WEDGE_SLACK_S = 2.0
"""(e): a wedged site's candidates must be gone from every overlay this long after the TTL
has passed since the wedge began (the engine re-ranks when a candidate crosses the TTL; a
refresh comes at least every second)."""
PACED_RENDER_S = MAX_RENDER_SPACING.total_seconds() + 0.5
"""The longest a paced render may follow the refresh that took its change in (the engine's
bound, and a refresh's lateness)."""


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    at: float
    duration: float
    sites: tuple[str, ...] = ()
    """The sites it hits (for a partition: the first group)."""
    groups: tuple[tuple[str, ...], ...] = ()
    long: bool = False

    def describe(self) -> str:
        length = f"{self.duration:.1f}s {'(long)' if self.long else '(short)'}"
        if self.kind == "partition":
            split = " | ".join(",".join(group) for group in self.groups)
            return f"+{self.at:6.2f}s partition {split} for {length}"
        verb = {"crash": "down", "leave": "gone"}.get(self.kind, "for")
        return f"+{self.at:6.2f}s {self.kind} {','.join(self.sites)} {verb} {length}"


@dataclass(frozen=True, slots=True)
class Action:
    kind: str
    at: float
    site: str
    amount: int = 0
    provider: str = ""
    models: tuple[str, ...] = ()
    cost: tuple[str, str] = ("", "")

    def describe(self) -> str:
        if self.kind == "spend":
            return f"+{self.at:6.2f}s spend {self.amount} at {self.site}"
        change = f"models {','.join(self.models)}" if self.models else f"cost {'/'.join(self.cost)}"
        return f"+{self.at:6.2f}s edit {self.site}/{self.provider}: {change}"


@dataclass(frozen=True, slots=True)
class Schedule:
    seed: int
    family: str
    faults: tuple[Fault, ...]
    actions: tuple[Action, ...]

    @property
    def span(self) -> float:
        return max((f.at + f.duration for f in self.faults), default=0.0)

    def describe(self) -> str:
        lines = [f"schedule seed={self.seed} family={self.family} span={self.span:.1f}s"]
        entries = sorted(
            [(f.at, 0, f.describe()) for f in self.faults]
            + [(a.at, 1, a.describe()) for a in self.actions]
        )
        lines += [f"  {text}" for _, _, text in entries]
        return "\n".join(lines)

    def rerun_command(self) -> str:
        return (
            f"GRID_CHAOS_SEED={self.seed} GRID_CHAOS_FAMILY={self.family} "
            ".venv/bin/python -m pytest tests/chaos/test_chaos.py -k rerun"
        )


def generate(
    seed: int,
    family: str,
    sites: dict[str, tuple[str, ...]],
    *,
    ttl: float,
    faults: int | None = None,
    one_way: bool = True,
) -> Schedule:
    """A schedule of ``family``'s faults over ``sites`` (site -> its provider names).
    Without ``one_way`` (the kernel cannot drop frames), mute and deaf faults are left out
    of the mixed family; the one-way family needs them."""
    rng = random.Random(seed)
    names = sorted(sites)
    kinds = [k for k in FAMILIES[family] if one_way or k not in ONE_WAY]
    if not kinds:
        raise ValueError(f"family {family} needs one-way loss, which this network cannot make")
    count = faults if faults is not None else rng.randint(3, 4)
    # Every kind of the family comes once before any comes twice; lengths alternate from a
    # random first one, so short and long faults both appear.
    order = rng.sample(kinds, len(kinds))
    first_long = rng.random() < 0.5
    network_free = 0.0
    site_free = dict.fromkeys(names, 0.0)
    planned: list[Fault] = []
    t = 0.5
    for index in range(count):
        kind = order[index % len(order)] if index < len(order) else rng.choice(kinds)
        long = (index % 2 == 0) == first_long
        if kind == "crash" and not long:
            duration = rng.uniform(0.3, 2.0)
        elif long:
            duration = rng.uniform(ttl + 3.0, ttl + 7.0)
        else:
            duration = rng.uniform(1.5, 4.0)
        if kind in NETWORK_FAULTS:
            start = max(t, network_free)
            if kind == "partition":
                shuffled = rng.sample(names, len(names))
                cut = rng.choice([1, 2, 2, 3])
                groups = (tuple(sorted(shuffled[:cut])), tuple(sorted(shuffled[cut:])))
                fault = Fault(kind, start, duration, groups[0], groups, long)
            else:
                victims = tuple(sorted(rng.sample(names, rng.choice([1, 1, 2]))))
                fault = Fault(kind, start, duration, victims, (), long)
            network_free = start + duration + 0.5
        else:
            busy_now = {s for s in names if site_free[s] > t}
            free = [s for s in names if s not in busy_now]
            if len(busy_now) >= 2 or not free:
                t = min(site_free[s] for s in busy_now)
                free = [s for s in names if site_free[s] <= t]
            start = t
            victim = rng.choice(free)
            fault = Fault(kind, start, duration, (victim,), (), long)
            site_free[victim] = start + duration + 0.5
        planned.append(fault)
        overlap = rng.random() < 0.35
        t = start + (duration * rng.uniform(0.3, 0.8) if overlap else duration + rng.uniform(1, 3))
    span = max(f.at + f.duration for f in planned)
    return Schedule(seed, family, tuple(planned), tuple(_actions(rng, planned, sites, span)))


def _down_at(faults: list[Fault], site: str, moment: float) -> bool:
    """Whether ``site``'s agent is paused, crashed or gone at ``moment`` (with a margin)."""
    return any(
        f.kind in PROCESS_FAULTS
        and site in f.sites
        and f.at - 0.5 <= moment <= f.at + f.duration + 1
        for f in faults
    )


def _actions(
    rng: random.Random, faults: list[Fault], sites: dict[str, tuple[str, ...]], span: float
) -> list[Action]:
    names = sorted(sites)
    actions: list[Action] = []
    moment = rng.uniform(0.2, 1.0)
    while moment < span:
        up = [s for s in names if not _down_at(faults, s, moment)]
        if up:
            actions.append(Action("spend", moment, rng.choice(up), amount=rng.randint(1, 1000)))
        moment += rng.uniform(0.7, 2.0)
    moment = rng.uniform(0.5, 3.0)
    while moment < span:
        site = rng.choice(names)
        provider = rng.choice(sites[site])
        if rng.random() < 0.5:
            models = tuple(sorted(rng.sample(MODEL_POOL, rng.randint(1, 3))))
            actions.append(Action("edit", moment, site, provider=provider, models=models))
        else:
            cost = (rng.choice(PRICES), rng.choice(PRICES))
            actions.append(Action("edit", moment, site, provider=provider, cost=cost))
        moment += rng.uniform(2.5, 6.0)
    return actions


# -- playing a schedule -----------------------------------------------------------------


class Findings(Protocol):
    """Where the harness's checks put what they find (an :class:`Outcome`, or a step of
    another run of the same mesh)."""

    violations: set[str]
    notes: list[str]


@dataclass
class Outcome:
    schedule: Schedule
    heal_to_view_s: float | None = None
    bound_s: float = 0.0
    final: OneView | None = None
    violations: set[str] = field(default_factory=set)
    """(d) routes to sites seen as gone, (e) routes to a wedged site past the TTL."""
    unreplicated: int = 0
    """Spend known only to a process that was then killed (not expected anywhere)."""
    exits: list[str] = field(default_factory=list)
    """Agents that exited by themselves."""
    leave_codes: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    spends: int = 0
    edits: int = 0
    seconds: float = 0.0

    @property
    def converged(self) -> bool:
        return self.heal_to_view_s is not None

    @property
    def ok(self) -> bool:
        bad_leave = [code for code in self.leave_codes if code != 0]
        return self.converged and not self.violations and not self.exits and not bad_leave

    @property
    def records_lost(self) -> int:
        return 0 if self.final is None else self.final.records_missing

    @property
    def spend_lost(self) -> int:
        return 0 if self.final is None else self.final.spend_missing

    def failures(self) -> list[str]:
        found = []
        if not self.converged:
            problems = [] if self.final is None else self.final.problems
            found += [f"no one view within {self.bound_s:g}s of the heal:"]
            found += [f"  {problem}" for problem in problems[:40]]
            if len(problems) > 40:
                found.append(f"  ... and {len(problems) - 40} more")
        found += sorted(self.violations)[:20]
        found += [f"agent exit: {exit}" for exit in self.exits]
        found += [f"a leaving agent exited with status {c}" for c in self.leave_codes if c != 0]
        return found

    def report(self) -> str:
        lines = [
            f"chaos schedule seed={self.schedule.seed} family={self.schedule.family}: "
            + ("ok" if self.ok else "FAILED"),
            f"rerun: {self.schedule.rerun_command()}",
            self.schedule.describe(),
        ]
        if self.heal_to_view_s is not None:
            lines.append(f"heal -> one view: {self.heal_to_view_s:.2f}s (bound {self.bound_s:g}s)")
        lines += self.failures()
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)


class Player:
    """Plays schedules on one mesh (healed and converged between them)."""

    def __init__(self, mesh: ChaosMesh, *, bound_s: float = 30.0) -> None:
        self.mesh = mesh
        self.bound_s = bound_s
        self.unreplicated: dict[str, int] = {}
        """Spend lost with killed processes since the mesh started, per counter."""
        self._seen_log_lines: dict[str, int] = {}
        self._unrendered: dict[tuple[int, str], float] = {}
        """(d) findings of refreshes that may have put a render off: when first seen."""

    @property
    def swim(self) -> SwimConfig:
        settings = self.mesh.settings
        return SwimConfig(settings.probe_interval_s, settings.suspicion_timeout_s)

    def expected_budgets(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for ack in self.mesh.acknowledged_spends():
            counter = f"{ack['tenant']}|{ack['window']}"
            totals[counter] = totals.get(counter, 0) + int(ack["amount"])
        for counter, lost in self.unreplicated.items():
            totals[counter] = totals.get(counter, 0) - lost
        return totals

    def settle(
        self, timeout: float, poll: Callable[[], None] | None = None
    ) -> tuple[float | None, OneView]:
        """Wait for every inbox to empty, then for (a), (b) and (c) to hold together;
        (seconds, last check), seconds None when the bound passed. ``poll`` runs before
        each check (to sample what must hold all along)."""
        started = time.monotonic()
        outcome = OneView()
        while time.monotonic() - started < timeout:
            if poll is not None:
                poll()
            self.mesh.check_processes()
            if all(self.mesh.pending_spends(name) == 0 for name in self.mesh.names):
                outcome = check_one_view(self.mesh, self.expected_budgets())
                if outcome.holds:
                    return time.monotonic() - started, outcome
            time.sleep(0.25)
        return None, outcome

    # -- the run --------------------------------------------------------------------------

    def play(self, schedule: Schedule) -> Outcome:
        mesh = self.mesh
        outcome = Outcome(schedule, bound_s=self.bound_s)
        started_wall = time.time()
        started = time.monotonic()
        unreplicated_before = sum(self.unreplicated.values())
        serial = itertools.count()
        queue: list[tuple[float, int, Callable[[], None]]] = []
        busy: dict[str, Fault] = {}

        def at(moment: float, step: Callable[[], None]) -> None:
            heapq.heappush(queue, (moment, next(serial), step))

        def start_fault(fault: Fault) -> None:
            key = "network" if fault.kind in NETWORK_FAULTS else fault.sites[0]
            if key in busy:  # the previous fault there ran late: start after it
                at(time.monotonic() - started + 0.2, lambda: start_fault(fault))
                return
            busy[key] = fault
            self._begin(fault, outcome)
            ends = time.monotonic() - started + fault.duration

            def end() -> None:
                self._end(fault, outcome)
                del busy[key]

            at(ends, end)

        for fault in schedule.faults:
            at(fault.at, lambda fault=fault: start_fault(fault))  # type: ignore[misc]
        for action in schedule.actions:
            at(action.at, lambda action=action: self._act(action, outcome))  # type: ignore[misc]
        next_sample = 0.0
        while queue:
            moment, _, step = queue[0]
            now = time.monotonic() - started
            if now >= moment:
                heapq.heappop(queue)
                step()
                continue
            if now >= next_sample:
                self.sample(outcome)
                outcome.exits += mesh.check_processes()
                next_sample = now + SAMPLE_EVERY_S
            time.sleep(max(0.0, min(moment, next_sample) - (time.monotonic() - started)))
        # Heal whatever is left (nothing, when every fault ended), and wait for one view.
        mesh.lab.heal()
        for site in mesh.sites.values():
            if site.paused:
                mesh.resume(site.name)
            if not site.running:
                mesh.start_agent(site.name)
        seconds, final = self.settle(self.bound_s)
        outcome.heal_to_view_s, outcome.final = seconds, final
        self.sample(outcome)
        self._check_overlay_logs(started_wall, outcome)
        outcome.unreplicated = sum(self.unreplicated.values()) - unreplicated_before
        outcome.seconds = time.monotonic() - started
        return outcome

    def _begin(self, fault: Fault, outcome: Outcome) -> None:
        mesh, lab = self.mesh, self.mesh.lab
        if fault.kind == "partition":
            lab.partition(fault.groups)
        elif fault.kind == "mute":
            for site in fault.sites:
                lab.mute(site)
        elif fault.kind == "deaf":
            for site in fault.sites:
                lab.deafen(site)
        elif fault.kind == "pause":
            mesh.pause(fault.sites[0])
        elif fault.kind == "wedge":
            mesh.wedge(fault.sites[0], fault.duration)
        elif fault.kind in ("crash", "leave"):
            victim = fault.sites[0]
            self.guard(victim, outcome)
            if fault.kind == "crash":
                mesh.crash(victim)
            else:
                outcome.leave_codes.append(mesh.leave(victim))

    def _end(self, fault: Fault, outcome: Outcome) -> None:
        mesh, lab = self.mesh, self.mesh.lab
        if fault.kind == "partition":
            lab.partition([mesh.names])
        elif fault.kind == "mute":
            for site in fault.sites:
                lab.unmute(site)
        elif fault.kind == "deaf":
            for site in fault.sites:
                lab.undeafen(site)
        elif fault.kind == "pause":
            mesh.resume(fault.sites[0])
        elif fault.kind in ("crash", "leave"):
            mesh.start_agent(fault.sites[0])
        # A wedge ends by itself (the agent sleeps for its length).

    def _act(self, action: Action, outcome: Outcome) -> None:
        mesh = self.mesh
        if action.kind == "edit":
            changes: dict[str, Any] = {"models": action.models} if action.models else {}
            if not action.models:
                changes["cost"] = action.cost
            mesh.edit_provider(action.site, action.provider, **changes)
            outcome.edits += 1
            return
        # A site still down because a fault ran late: the next one up, in name order.
        names = sorted(mesh.names)
        order = names[names.index(action.site) :] + names[: names.index(action.site)]
        site = next((n for n in order if mesh.sites[n].running and not mesh.sites[n].paused), None)
        if site is None:
            outcome.notes.append(f"spend at {action.at:.2f}s skipped: no agent running")
            return
        mesh.spend(site, action.amount)
        outcome.spends += 1

    def guard(self, victim: str, outcome: Findings) -> None:
        """Before killing ``victim``: wait until another living process holds every budget
        slot it knows as high as it does; count what is still missing."""
        mesh = self.mesh
        deadline = time.monotonic() + GUARD_S
        while mesh.pending_spends(victim) and time.monotonic() < deadline:
            time.sleep(0.05)
        asked = time.time()
        deficits: dict[str, int] = {}
        while time.monotonic() < deadline:
            own = mesh.view(victim)
            if own is None or own["at"] <= asked:
                time.sleep(0.05)
                continue
            deficits = self._deficits(victim, own)
            if not deficits:
                return
            time.sleep(0.05)
        for counter, missing in deficits.items():
            self.unreplicated[counter] = self.unreplicated.get(counter, 0) + missing
            outcome.notes.append(
                f"{victim} was killed holding {missing} of {counter} that no other process had"
            )

    def _deficits(self, victim: str, own: dict[str, Any]) -> dict[str, int]:
        others = [
            view
            for name in self.mesh.names
            if name != victim and (view := self.mesh.view(name)) is not None
        ]
        deficits: dict[str, int] = {}
        for counter, slots in own.get("slots", {}).items():
            for slot, value in slots.items():
                best = max(
                    (v.get("slots", {}).get(counter, {}).get(slot, 0) for v in others), default=0
                )
                if best < value:
                    deficits[counter] = deficits.get(counter, 0) + value - best
        return deficits

    def sample(self, outcome: Findings) -> None:
        """(d) and (e) on each site's latest refresh: the members it rendered from and the
        overlay it rendered. A refresh that put a render off (paced) has taken in a change
        its overlay does not show yet: its (d) findings wait for that render, which the
        overlay log judges. A site agent that does not say so (an older release's) is held
        to the pacing's bound instead: a finding counts when a refresh later than
        :data:`PACED_RENDER_S` after the first that showed it still shows it."""
        ttl = self.mesh.settings.stale_ttl_seconds
        wedges = {name: self.mesh.wedges(name) for name in self.mesh.names}
        for name in self.mesh.names:
            view = self.mesh.view(name)
            refreshed = None if view is None else view.get("refreshed")
            if not refreshed or refreshed.get("candidates") is None:
                continue
            assert view is not None
            found = routing_violations(name, refreshed["members"], refreshed["candidates"])
            if "render_due" in refreshed:
                if refreshed["render_due"] is None:
                    outcome.violations |= found
            else:
                for violation in found:
                    first = self._unrendered.setdefault((view["pid"], violation), refreshed["at"])
                    if refreshed["at"] - first > PACED_RENDER_S:
                        outcome.violations.add(
                            f"{violation} (not rendered within {PACED_RENDER_S:g}s)"
                        )
            routed = {site for site, _, _ in refreshed["candidates"]}
            for wedged, entries in wedges.items():
                if wedged == name or wedged not in routed:
                    continue
                for wedge in entries:
                    since = refreshed["at"] - wedge["start"]
                    if ttl + WEDGE_SLACK_S < since < wedge["seconds"]:
                        outcome.violations.add(
                            f"(e) {name} still routed to {wedged} {since:.1f}s into its "
                            f"{wedge['seconds']:.1f}s wedge (TTL {ttl}s)"
                        )

    def _check_overlay_logs(self, since: float, outcome: Outcome) -> None:
        for name in self.mesh.names:
            lines = self.mesh.overlay_log(name)
            for line in lines[self._seen_log_lines.get(name, 0) :]:
                violations = routing_violations(name, line.get("members", {}), line["candidates"])
                outcome.violations |= {
                    f"{v} (overlay written at {line['at']:.2f})" for v in violations
                }
            self._seen_log_lines[name] = len(lines)


def provider_names(mesh: ChaosMesh) -> dict[str, tuple[str, ...]]:
    return {site.name: tuple(p.name for p in site.plan.providers) for site in mesh.sites.values()}


# -- figures ------------------------------------------------------------------------------


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))
    return ordered[index]


def figures(outcomes: list[Outcome], bound: float) -> str:
    """A table of the soak's figures, per family and in all."""
    lines = [
        f"SWIM detection bound (N=4, P=0.5 s, S=1.5 s): {bound:.2f}s",
        f"{'family':<11} {'runs':>4} {'failed':>6} {'heal->view p50':>15} {'p99':>7} "
        f"{'max':>7} {'p99/bound':>9} {'records lost':>12} {'spend lost':>10} "
        f"{'(d)/(e) routes':>14} {'unreplicated':>12}",
    ]
    groups = {family: [o for o in outcomes if o.schedule.family == family] for family in FAMILIES}
    groups["all"] = outcomes
    for family, chosen in groups.items():
        if not chosen:
            continue
        times = [o.heal_to_view_s for o in chosen if o.heal_to_view_s is not None]
        p50, p99 = percentile(times, 0.5), percentile(times, 0.99)
        lines.append(
            f"{family:<11} {len(chosen):>4} {sum(not o.ok for o in chosen):>6} "
            f"{p50:>14.2f}s {p99:>6.2f}s {max(times, default=float('nan')):>6.2f}s "
            f"{p99 / bound:>9.2f} {sum(o.records_lost for o in chosen):>12} "
            f"{sum(o.spend_lost for o in chosen):>10} "
            f"{sum(len(o.violations) for o in chosen):>14} "
            f"{sum(o.unreplicated for o in chosen):>12}"
        )
    if outcomes:
        faults = Counter(
            f"{f.kind} {'long' if f.long else 'short'}" for o in outcomes for f in o.schedule.faults
        )
        lines.append("faults: " + ", ".join(f"{k} {n}" for k, n in sorted(faults.items())))
        lines.append(
            f"spends {sum(o.spends for o in outcomes)}, edits {sum(o.edits for o in outcomes)}, "
            f"mean schedule length {statistics.mean(o.seconds for o in outcomes):.1f}s"
        )
    return "\n".join(lines)
