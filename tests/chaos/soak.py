"""Running chaos schedules: one mesh in its namespaces (:class:`Bench`), one schedule
(:meth:`Bench.play`) or many back to back (:func:`soak`), for the tests and for
``bench/bench_chaos.py``."""

from __future__ import annotations

import contextlib
import random
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from chaos import netns
from chaos.mesh import ChaosMesh, MeshSettings, Release, default_plans
from chaos.schedule import FAMILIES, ONE_WAY, Outcome, Player, Schedule, generate, provider_names

START_BOUND_S = 60.0
"""How long a fresh mesh may take to reach one view."""
SOAK_ORDER = ("partitions", "one-way", "pauses", "restarts", "mixed")


class Bench:
    """A lab and a mesh on it, converged; :meth:`close` removes everything. Every agent
    runs ``release`` (default: this checkout)."""

    def __init__(
        self, root: Path, settings: MeshSettings | None = None, release: Release | None = None
    ) -> None:
        self.root = root
        names = [plan.name for plan in default_plans()]
        self.lab = netns.Lab(names)
        self.mesh: ChaosMesh | None = None
        self.player: Player | None = None
        self.start_to_view_s = 0.0
        """From the first agent's start to one view."""
        try:
            self.lab.create()
            self.mesh = ChaosMesh(root, self.lab, settings=settings, release=release)
            self.mesh.prepare()
            self.mesh.start()
            self.player = Player(self.mesh)
            seconds, view = self.player.settle(START_BOUND_S)
            if seconds is None:
                logs = "\n".join(
                    f"--- {site.name}\n{site.log_tail(20)}" for site in self.mesh.sites.values()
                )
                raise AssertionError(
                    f"a fresh mesh reached no one view within {START_BOUND_S:g}s:\n"
                    + "\n".join(view.problems[:30])
                    + f"\n{logs}"
                )
            self.start_to_view_s = time.monotonic() - self.mesh.started_at
        except BaseException:
            self.close()
            raise

    @property
    def one_way(self) -> bool:
        return self.lab.one_way_unsupported is None

    def schedule(self, seed: int, family: str, faults: int | None = None) -> Schedule:
        assert self.mesh is not None
        return generate(
            seed,
            family,
            provider_names(self.mesh),
            ttl=self.mesh.settings.stale_ttl_seconds,
            faults=faults,
            one_way=self.one_way,
        )

    def play(self, schedule: Schedule) -> Outcome:
        assert self.player is not None
        return self.player.play(schedule)

    def close(self) -> None:
        if self.mesh is not None:
            self.mesh.stop()
        self.lab.destroy()


@contextlib.contextmanager
def bench(
    root: Path, settings: MeshSettings | None = None, release: Release | None = None
) -> Iterator[Bench]:
    built = Bench(root, settings, release)
    try:
        yield built
    finally:
        built.close()


def soak(
    root: Path,
    minutes: float,
    *,
    seed: int | None = None,
    families: tuple[str, ...] = SOAK_ORDER,
    report: Callable[[str], None] = print,
) -> list[Outcome]:
    """Schedules back to back for ``minutes`` (at least one), cycling through
    ``families``; a mesh that failed to converge is replaced by a fresh one before the
    next schedule. Each outcome is reported as it comes."""
    base = seed if seed is not None else random.SystemRandom().randrange(1, 10**9)
    report(f"soak: {minutes:g} minutes, seeds from {base}, families {', '.join(families)}")
    deadline = time.monotonic() + minutes * 60
    outcomes: list[Outcome] = []
    generation = 0
    current: Bench | None = None
    try:
        for index in range(sys.maxsize):
            if outcomes and time.monotonic() >= deadline:
                break
            if current is None:
                generation += 1
                directory = root / f"mesh-{generation}"
                shutil.rmtree(directory, ignore_errors=True)
                current = Bench(directory)
            family = families[index % len(families)]
            if family not in FAMILIES or (not current.one_way and FAMILIES[family] == ONE_WAY):
                continue
            outcome = current.play(current.schedule(base + index, family))
            outcomes.append(outcome)
            verdict = "ok" if outcome.ok else "FAILED"
            took = "-" if outcome.heal_to_view_s is None else f"{outcome.heal_to_view_s:.2f}s"
            report(
                f"[{len(outcomes)}] seed={base + index} {family}: {verdict}, heal->view {took}, "
                f"records lost {outcome.records_lost}, spend lost {outcome.spend_lost}, "
                f"{outcome.spends} spends, {outcome.edits} edits, {outcome.seconds:.0f}s"
            )
            if not outcome.ok:
                report(outcome.report())
                current.close()
                current = None
    finally:
        if current is not None:
            current.close()
    return outcomes
