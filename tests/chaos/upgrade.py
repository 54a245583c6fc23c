"""A rolling upgrade of the chaos mesh, for ``test_upgrade.py`` and ``bench/bench_upgrade.py``.

Four sites start on the previous release (``compat/previous.txt``, built by
``scripts/previous-release``); then, one site at a time in a seeded order, each is moved to
the current code as an operator's rollout does (SIGTERM, the agent leaves; the other release
starts on the same state directory, resources and certificates); then one upgraded site is
rolled back. Load goes on throughout: provider edits (models and cost), signals changes (a
provider's endpoint reports another queue depth) and budget spends.

Each step has two halves, and each shows that items really crossed between releases:

- **Before the restart**, on the mesh as the previous step left it: at a site of each
  release, an edit, a signals change and a spend; each must reach every site of the other
  release (its overlay, its records, its budget slots) before the site is stopped.
- **The restart**: the site's budget slots are first held elsewhere (as the chaos harness
  does before a leave), it leaves; while it is down its own provider is edited and another
  site spends; as soon as it is started again it spends and its provider's signals change.
  Then the mesh must reach one view (``invariants.py`` (a), (b), (c) together) within
  :data:`SETTLE_BOUND_S`, and what the restarted site and the others did must show at
  every site of the other release.

All along (every 0.2 s, and every overlay any site wrote): no route to a site seen as gone
((d), ``invariants.py``), and no false down (nothing in this run crashes or is cut off, so
no site may ever see another as ``down``; the restarted site leaves, seen ``left``). That
(d) was exercised is shown by the overlays the other sites rendered while they saw the
restarted site gone. Which release each agent runs is read from its memory map (the
directory its Grid extension module was loaded from).

After every step no site of this checkout has counted a message from a peer that it
authenticated but could not read (``bad_messages``; a previous release's site agent does
not report it): the previous release sends this one nothing it does not speak. The other
way round is the driver's test
``a_peer_of_the_previous_protocol_is_sent_members_and_no_view_digest``.

The figure of a step is the time from the restarted agent's start to one view.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.invariants import GONE, rendered_candidates, routing_violations
from chaos.mesh import Release, current_release
from chaos.schedule import MODEL_POOL, PRICES, percentile
from chaos.soak import Bench
from support.previous import PreviousRelease

SETTLE_BOUND_S = 30.0
"""From a restart to one view (the chaos schedules' bound from a heal)."""
EVIDENCE_BOUND_S = 30.0
"""For an item made before a restart to reach every site of the other release."""
SAMPLE_EVERY_S = 0.2
QUEUES = range(1, 17)
"""Queue depths a signals change picks from: far below the admission thresholds (64 is the
capacity), so a candidate's admission never depends on its history, and exact in binary."""


def previous_of(build: PreviousRelease) -> Release:
    """The previous release's Python and its own chaos agent script."""
    script = build.source / "tests" / "chaos" / "site_agent.py"
    if not script.is_file():
        raise FileNotFoundError(f"the previous release {build.version} has no {script}")
    return Release(
        "previous",
        f"grid {build.version} @ {build.commit[:12]}",
        build.python,
        script,
        ("-E", "-s"),
    )


# -- what a run finds ---------------------------------------------------------------------


@dataclass
class Step:
    """One step: the start, an upgrade or the rollback."""

    kind: str
    site: str | None
    releases: dict[str, str] = field(default_factory=dict)
    """Each site's release once the step is done."""
    to_view_s: float | None = None
    """From the (re)start to one view."""
    leave_status: int | None = None
    evidence: list[str] = field(default_factory=list)
    """What was seen to cross between releases (or between sites, in a one-release mesh)."""
    problems: list[str] = field(default_factory=list)
    violations: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    snapshots: dict[str, int] = field(default_factory=dict)
    """Membership snapshots checked for false downs and (d), per site that took them."""

    @property
    def ok(self) -> bool:
        return (
            self.to_view_s is not None
            and not self.problems
            and not self.violations
            and self.leave_status in (None, 0)
        )

    @property
    def title(self) -> str:
        return self.kind if self.site is None else f"{self.kind} {self.site}"


@dataclass
class UpgradeRun:
    seed: int
    releases: dict[str, str]
    """Release name -> its label."""
    steps: list[Step] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(step.ok for step in self.steps)

    @property
    def restart_times(self) -> list[float]:
        """Restart -> one view of the upgrades and the rollback."""
        return [s.to_view_s for s in self.steps if s.site is not None and s.to_view_s is not None]

    def failures(self) -> list[str]:
        found = []
        for step in self.steps:
            found += [f"{step.title}: {problem}" for problem in step.problems[:40]]
            found += [f"{step.title}: {v}" for v in sorted(step.violations)[:20]]
            if step.leave_status not in (None, 0):
                found.append(f"{step.title}: the agent left with status {step.leave_status}")
        return found

    def report(self) -> str:
        verdict = "ok" if self.ok else "FAILED"
        lines = [
            f"rolling upgrade seed={self.seed}: {verdict} ({self.seconds:.0f}s)",
            f"rerun: GRID_UPGRADE_SEED={self.seed} .venv/bin/python -m pytest "
            "tests/chaos/test_upgrade.py",
        ]
        lines += [f"  {name}: {label}" for name, label in self.releases.items()]
        names = list(self.steps[0].releases) if self.steps else []
        lines.append(
            f"  {'step':<18} " + " ".join(f"{n:<9}" for n in names) + "  (re)start -> one view"
        )
        for step in self.steps:
            took = "-" if step.to_view_s is None else f"{step.to_view_s:.2f}s"
            cells = " ".join(f"{step.releases.get(n, '?'):<9}" for n in names)
            lines.append(f"  {step.title:<18} {cells}  {took}")
        times = self.restart_times
        if times:
            lines.append(
                f"restart -> one view over {len(times)} steps: p50 {percentile(times, 0.5):.2f}s, "
                f"max {max(times):.2f}s"
            )
        for step in self.steps:
            taken = ", ".join(f"{n} {c}" for n, c in sorted(step.snapshots.items()))
            lines.append(f"{step.title}: membership snapshots checked: {taken}")
            lines += [f"  seen: {line}" for line in step.evidence]
            lines += [f"  note: {note}" for note in step.notes]
        lines += self.failures()
        return "\n".join(lines)


def figures(runs: list[UpgradeRun]) -> str:
    """Medians over runs: the start, each step by its place, and every restart."""
    lines = [f"rolling upgrades: {len(runs)} runs, {sum(not r.ok for r in runs)} failed"]
    if not runs:
        return lines[0]
    starts = [r.steps[0].to_view_s for r in runs if r.steps and r.steps[0].to_view_s is not None]
    if starts:
        lines.append(
            f"  start (all previous) -> one view: median {statistics.median(starts):.2f}s, "
            f"max {max(starts):.2f}s"
        )
    places = max(len(r.steps) for r in runs)
    for place in range(1, places):
        chosen = [r.steps[place] for r in runs if len(r.steps) > place]
        times = [s.to_view_s for s in chosen if s.to_view_s is not None]
        if times:
            lines.append(
                f"  step {place} ({chosen[0].kind}) restart -> one view: median "
                f"{statistics.median(times):.2f}s, max {max(times):.2f}s"
            )
    every = [t for r in runs for t in r.restart_times]
    if every:
        lines.append(
            f"  every restart -> one view ({len(every)}): p50 {percentile(every, 0.5):.2f}s, "
            f"p99 {percentile(every, 0.99):.2f}s, max {max(every):.2f}s"
        )
    medians = [statistics.median(r.restart_times) for r in runs if r.restart_times]
    if medians:
        lines.append(f"  median of the runs' p50: {statistics.median(medians):.2f}s")
    walls = [r.seconds for r in runs]
    lines.append(f"  run length: median {statistics.median(walls):.1f}s, max {max(walls):.1f}s")
    return "\n".join(lines)


# -- items whose arrival elsewhere is checked ---------------------------------------------


@dataclass
class Item:
    """Something one site did (an edit, a signals change, a spend) and where it must show."""

    text: str
    release: str
    """The release of the site that did it."""
    viewers: tuple[str, ...]
    missing_at: Callable[[str], str | None]
    """What is missing at a viewer (None: it shows there)."""

    def missing(self) -> list[str]:
        return [found for viewer in self.viewers if (found := self.missing_at(viewer))]


def _candidates(document: dict[str, Any] | None) -> list[dict[str, Any]]:
    if document is None:
        return []
    return list(document.get("overlay", {}).get("candidates", []))


class RollingUpgrade:
    """Plays a rolling upgrade on a :class:`Bench` whose agents run ``previous``."""

    def __init__(self, bench: Bench, previous: Release, current: Release, seed: int) -> None:
        assert bench.mesh is not None and bench.player is not None
        self.bench = bench
        self.mesh = bench.mesh
        self.player = bench.player
        self.previous = previous
        self.current = current
        self.rng = random.Random(seed)
        self.run = UpgradeRun(seed, {r.name: r.label for r in (previous, current)})
        self._log_lines = {name: len(self.mesh.overlay_log(name)) for name in self.mesh.names}
        self._gone_renders: dict[str, int] = {}
        """Overlays written while the writer saw a site gone, per site, in this step."""
        self._exits = 0
        self._next_sample = 0.0

    # -- the run --------------------------------------------------------------------------

    def play(self) -> UpgradeRun:
        started = time.monotonic()
        names = self.mesh.names
        order = self.rng.sample(names, len(names))
        back = self.rng.choice(order)
        first = Step("start", None, to_view_s=self.bench.start_to_view_s)
        providers = sum(len(site.plan.providers) for site in self.mesh.sites.values())
        first.evidence.append(
            f"{len(names)} sites on {self.previous.name}: each holds and routes to the "
            f"{providers} providers of all, {self.bench.start_to_view_s:.2f}s after the first "
            "agent started"
        )
        self._finish(first)
        moves = [(site, self.current, "upgrade") for site in order]
        moves.append((back, self.previous, "rollback"))
        for site, release, kind in moves:
            step = Step(kind, site)
            try:
                self._step(step, site, release)
            finally:
                self._finish(step)
            if not step.ok:
                break  # the next steps would start from a mesh that is not one view
        self.run.seconds = time.monotonic() - started
        return self.run

    def _finish(self, step: Step) -> None:
        """Releases (as the agents' memory maps show them) and the agents' own exits."""
        mesh = self.mesh
        self._poll(step, force=True)
        for name, site in mesh.sites.items():
            step.releases[name] = site.release.name
            loaded, wanted = mesh.loaded_grid(name), site.release.grid_package()
            if loaded != wanted:
                step.problems.append(
                    f"{name} should run {site.release.label} (Grid in {wanted}); "
                    f"its agent loaded Grid from {loaded}"
                )
        for name, site in mesh.sites.items():
            view = mesh.view(name) or {}
            undecodable = view.get("undecodable")
            # This checkout's site agent says it (a previous release's copy does not).
            says = site.release.site_agent == current_release().site_agent
            if says and view.get("generation") is not None and undecodable is None:
                step.problems.append(f"{name}'s view does not say what it could not read")
            elif undecodable:
                step.problems.append(
                    f"{name} could not read {undecodable} messages from its peers: one"
                    " release sent the other something it does not speak"
                )
        unseen = [name for name in mesh.names if not step.snapshots.get(name)]
        if unseen:
            step.problems.append(f"no membership snapshot of {', '.join(unseen)} was checked")
        exits = [problem for site in mesh.sites.values() for problem in site.exits]
        new, self._exits = exits[self._exits :], len(exits)
        step.problems += [f"agent exit: {exit}" for exit in new[:2]]
        if len(new) > 2:
            step.problems.append(f"... and {len(new) - 2} more exits of agents")
        self.run.steps.append(step)

    def _step(self, step: Step, moving: str, release: Release) -> None:
        mesh = self.mesh
        self._gone_renders.clear()
        # Before the restart, on the mesh as it is: each release's sites reach the other's.
        now = self._releases()
        items = [self._edit(self.rng.choice(group), now) for group in self._groups(now)]
        items += [self._signals(self.rng.choice(group), now) for group in self._groups(now)]
        items += [self._spend(self.rng.choice(group), now) for group in self._groups(now)]
        self._await(step, items, "before the restart")
        if step.problems:
            return
        # The restart, with load while the site is down and as it comes back; what is done
        # from here on must reach the sites of the other release as the mesh will be.
        after = self._releases(moving, release)
        across = [n for n in mesh.names if n != moving and after[n] != after[moving]]
        spender = self.rng.choice(across or [n for n in mesh.names if n != moving])
        self.player.guard(moving, step)
        items = []

        def while_down() -> None:
            items.append(self._edit(moving, after))
            items.append(self._spend(spender, after))

        step.leave_status = mesh.restart_agent(moving, release, while_down=while_down)
        restarted = time.monotonic()
        items.append(self._signals(moving, after))
        items.append(self._spend(moving, after))
        seconds, view = self.player.settle(SETTLE_BOUND_S, poll=lambda: self._poll(step))
        if seconds is None:
            step.problems.append(f"no one view within {SETTLE_BOUND_S:g}s of the restart:")
            step.problems += [f"  {problem}" for problem in view.problems]
            pending = {n: c for n in mesh.names if (c := mesh.pending_spends(n))}
            if pending:
                step.problems.append(f"  spend requests never counted: {pending}")
            return
        step.to_view_s = time.monotonic() - restarted
        self._await(step, items, "after the restart")
        if any(self.player.unreplicated.values()):
            step.problems.append(
                f"spend only {moving} knew was lost when it left: {self.player.unreplicated}"
            )
        self._poll(step, force=True)
        gone = self._gone_renders.get(moving, 0)
        if gone:
            step.evidence.append(
                f"(d): {gone} overlays rendered while their site saw {moving} gone, "
                "none routing to it"
            )
        else:
            step.problems.append(
                f"(d) not exercised: no site rendered an overlay while it saw {moving} gone"
            )

    # -- load -----------------------------------------------------------------------------

    def _releases(self, moving: str | None = None, to: Release | None = None) -> dict[str, str]:
        """Each site's release, with ``moving`` on ``to``."""
        return {
            name: to.name if name == moving and to is not None else site.release.name
            for name, site in self.mesh.sites.items()
        }

    @staticmethod
    def _groups(releases: dict[str, str]) -> list[list[str]]:
        """The sites of each release."""
        groups: dict[str, list[str]] = {}
        for name, release in releases.items():
            groups.setdefault(release, []).append(name)
        return [groups[release] for release in sorted(groups)]

    @staticmethod
    def _viewers(origin: str, releases: dict[str, str]) -> tuple[str, ...]:
        """The sites of another release than ``origin``'s (every other site when there is
        none)."""
        others = [n for n in releases if n != origin]
        across = [n for n in others if releases[n] != releases[origin]]
        return tuple(across or others)

    def _edit(self, origin: str, releases: dict[str, str]) -> Item:
        """Another model set (with a model the site offers nowhere yet) and cost for one of
        its providers: it must show in the viewers' records and overlays."""
        mesh = self.mesh
        site = mesh.sites[origin]
        plan = self.rng.choice(site.plan.providers)
        offered = {m for p in site.plan.providers for m in p.models}
        taken = {m for p in site.plan.providers if p.name != plan.name for m in p.models}
        fresh = self.rng.choice(sorted(set(MODEL_POOL) - offered))
        extra = sorted(set(MODEL_POOL) - taken - {fresh})
        models = tuple(sorted({fresh, *self.rng.sample(extra, self.rng.randint(0, 1))}))
        cost = (self.rng.choice(PRICES), self.rng.choice(PRICES))
        edited = mesh.edit_provider(origin, plan.name, models=models, cost=cost)
        want = {"models": sorted(models), "cost": list(edited.cost_micro_usd)}

        def missing_at(viewer: str) -> str | None:
            view = mesh.view(viewer)
            if view is None:
                return f"{viewer} has no view"
            record = view.get("records", {}).get(origin, {}).get(plan.name) or {}
            held = {"models": sorted(record.get("models", [])), "cost": record.get("cost")}
            if held != want:
                return f"{viewer} holds {origin}/{plan.name} as {held}, not {want}"
            routes = _candidates(mesh.overlay_document(viewer))
            if not any(c.get("site") == origin and c.get("name") == fresh for c in routes):
                return f"{viewer}'s overlay does not list {origin}/{fresh}"
            return None

        return Item(
            f"edit {origin}/{plan.name} (models {','.join(models)}, cost {'/'.join(cost)})",
            releases[origin],
            self._viewers(origin, releases),
            missing_at,
        )

    def _signals(self, origin: str, releases: dict[str, str]) -> Item:
        """Another queue depth at one of the site's provider endpoints (the site's agent
        scrapes it): its candidates' queue contribution must change in the viewers'
        overlays."""
        mesh = self.mesh
        plan = self.rng.choice(mesh.sites[origin].plan.providers)
        used = {p.queue for s in mesh.sites.values() for p in s.plan.providers}
        queue = self.rng.choice([q for q in QUEUES if q not in used])
        before = self._queue_contribution(origin, plan.models)
        mesh.edit_provider(origin, plan.name, queue=queue)
        want = self._queue_contribution(origin, plan.models)
        assert want != before, f"queue {plan.queue} -> {queue} leaves the render as it was"
        models = set(plan.models)

        def missing_at(viewer: str) -> str | None:
            found = [
                c.get("score_breakdown", {}).get("queue_depth")
                for c in _candidates(mesh.overlay_document(viewer))
                if c.get("site") == origin and c.get("name") in models
            ]
            if len(found) != len(models) or any(value != want for value in found):
                return (
                    f"{viewer}'s overlay gives {origin}/{plan.name}'s candidates queue "
                    f"contributions {found}, not {want}"
                )
            return None

        return Item(
            f"signals {origin}/{plan.name} (queue {plan.queue} -> {queue})",
            releases[origin],
            self._viewers(origin, releases),
            missing_at,
        )

    def _queue_contribution(self, origin: str, models: tuple[str, ...]) -> float:
        """The queue contribution a fresh render gives the site's candidates of ``models``
        (one value: it depends on the provider's queue only, the same at every viewer)."""
        rendered = next(iter(rendered_candidates(self.mesh).values()))
        values = {
            c["score_breakdown"]["queue_depth"]
            for c in rendered
            if c["site"] == origin and c["name"] in models
        }
        assert len(values) == 1, f"{origin}'s candidates of {models} render as {values}"
        return float(values.pop())

    def _spend(self, origin: str, releases: dict[str, str]) -> Item:
        """Spend at a site: once its agent counted it, every viewer must hold the site's
        budget slots as high as all the site ever counted."""
        mesh = self.mesh
        amount = self.rng.randint(1, 1000)
        identifier = mesh.spend(origin, amount)

        def missing_at(viewer: str) -> str | None:
            acks = mesh.acknowledged_spends()
            ack = next((a for a in acks if a["id"] == identifier), None)
            if ack is None:
                return f"{origin} has not counted spend {identifier}"
            counter = f"{ack['tenant']}|{ack['window']}"
            counted = sum(
                int(a["amount"])
                for a in acks
                if a["site"] == origin and f"{a['tenant']}|{a['window']}" == counter
            )
            view = mesh.view(viewer)
            slots = {} if view is None else view.get("slots", {}).get(counter, {})
            held = sum(value for key, value in slots.items() if key.split("#")[0] == origin)
            if held < counted:
                return f"{viewer} holds {held} of the {counted} {origin} counted in {counter}"
            return None

        return Item(
            f"spend {amount} at {origin}",
            releases[origin],
            self._viewers(origin, releases),
            missing_at,
        )

    # -- waiting and sampling -------------------------------------------------------------

    def _await(self, step: Step, items: list[Item], when: str) -> None:
        """Until every item shows at each of its viewers (the evidence), sampling."""
        deadline = time.monotonic() + EVIDENCE_BOUND_S
        while True:
            self._poll(step)
            self.mesh.check_processes()
            missing = [f"{item.text}: {m}" for item in items for m in item.missing()]
            if not missing:
                break
            if time.monotonic() > deadline:
                step.problems.append(
                    f"{when}, not within {EVIDENCE_BOUND_S:g}s: " + "; ".join(missing[:8])
                )
                return
            time.sleep(0.1)
        releases = self._releases()
        for item in items:
            seen = sorted({releases[v] for v in item.viewers})
            step.evidence.append(
                f"{when}: {item.text} on {item.release} -> {','.join(item.viewers)} "
                f"on {'/'.join(seen)}"
            )

    def _poll(self, step: Step, force: bool = False) -> None:
        """(d) and false downs on every site's latest refresh and on every overlay written
        since the last poll; counts the overlays written while their site saw another
        gone."""
        now = time.monotonic()
        if not force and now < self._next_sample:
            return
        self._next_sample = now + SAMPLE_EVERY_S
        mesh = self.mesh
        self.player.sample(step)
        for name in mesh.names:
            view = mesh.view(name)
            if view is not None:
                for members in (view.get("members"), (view.get("refreshed") or {}).get("members")):
                    if members:
                        step.snapshots[name] = step.snapshots.get(name, 0) + 1
                        self._false_downs(step, name, members, "in its view")
            lines = mesh.overlay_log(name)
            for line in lines[self._log_lines.get(name, 0) :]:
                members = line.get("members", {})
                step.snapshots[name] = step.snapshots.get(name, 0) + 1
                at = f"in the overlay it wrote at {line.get('at', 0):.2f}"
                self._false_downs(step, name, members, at)
                step.violations |= {
                    f"{v} ({at})" for v in routing_violations(name, members, line["candidates"])
                }
                for site, member in members.items():
                    if site != name and member.get("state") in GONE:
                        self._gone_renders[site] = self._gone_renders.get(site, 0) + 1
            self._log_lines[name] = len(lines)

    @staticmethod
    def _false_downs(step: Step, viewer: str, members: dict[str, Any], where: str) -> None:
        """Nothing in a rolling upgrade crashes or is cut off: a site seen down is a false
        down."""
        for site, member in members.items():
            if member.get("state") == "down":
                step.violations.add(f"false down: {viewer} saw {site} down {where}")


def rolling_upgrade(
    root: Path, previous: Release, *, seed: int, current: Release | None = None
) -> UpgradeRun:
    """A fresh mesh on ``previous`` in ``root``, upgraded site by site to ``current``
    (default: this checkout), then one site rolled back."""
    built = Bench(root, release=previous)
    try:
        return RollingUpgrade(built, previous, current or current_release(), seed).play()
    finally:
        built.close()
