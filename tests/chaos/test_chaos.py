"""Chaos schedules against four ``grid agent`` processes in network namespaces.

The tests play their schedules on one mesh (four sites in two regions, six providers, a
tenant budget; SWIM probe 0.5 s, suspicion 1.5 s, staleCandidateTtlSeconds 8), back to
back as a soak does: each plays one seeded schedule of one family of faults with provider
edits and budget spends throughout, heals everything, and checks the invariants of
``invariants.py`` within 30 s of the heal. After a failed schedule the next test builds a
fresh mesh. A failure prints the seed, the schedule, the schedules the mesh played before
and the command that replays it on a fresh mesh:

    GRID_CHAOS_SEED=<seed> GRID_CHAOS_FAMILY=<family> .venv/bin/python -m pytest \\
        tests/chaos/test_chaos.py -k rerun

``--soak MINUTES`` (or ``GRID_CHAOS_SOAK_MINUTES``) plays schedules back to back and
prints the figures; ``bench/bench_chaos.py`` does the same outside pytest.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from chaos.schedule import FAMILIES, Outcome, figures
from chaos.soak import Bench, bench, soak
from grid.membership import SwimConfig

pytestmark = pytest.mark.slow

DEFAULT_SCHEDULES = (
    ("partitions", 2001),
    ("one-way", 2002),
    ("pauses", 2003),
    ("restarts", 2004),
    ("mixed", 2005),
)


class SharedMesh:
    """The module's mesh, built when a test first needs it: a new one costs about 10 s
    (namespaces, twelve processes, one view), and a schedule leaves the mesh healed and
    converged, as a soak's next schedule finds it. A mesh whose schedule failed is closed,
    so that no failure is carried into the next test."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.built = 0
        self.current: Bench | None = None
        self.played: list[str] = []
        """The schedules the current mesh played, for a failure's report."""

    def bench(self) -> Bench:
        if self.current is None:
            self.built += 1
            self.current = Bench(self.root / f"mesh-{self.built}")
            self.played = []
        return self.current

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None


@pytest.fixture(scope="module")
def shared_mesh(
    tmp_path_factory: pytest.TempPathFactory, netns_available: None
) -> Iterator[SharedMesh]:
    shared = SharedMesh(tmp_path_factory.mktemp("chaos"))
    try:
        yield shared
    finally:
        shared.close()


@pytest.fixture
def chaos_bench(tmp_path: Path, netns_available: None) -> Iterator[Bench]:
    """A fresh mesh of the test's own (a replay)."""
    with bench(tmp_path / "mesh") as built:
        yield built


def _skip_without_one_way(chaos_bench: Bench, family: str) -> None:
    if FAMILIES[family] == ("mute", "deaf") and not chaos_bench.one_way:
        pytest.skip(f"one-way schedules skipped: {chaos_bench.lab.one_way_unsupported}")


def _play(chaos_bench: Bench, family: str, seed: int, before: Sequence[str] = ()) -> Outcome:
    """Play one schedule and print its report; ``before``: what the mesh played until now
    (a replay on a fresh mesh may not find a failure that needs them)."""
    outcome = chaos_bench.play(chaos_bench.schedule(seed, family))
    if before:
        outcome.notes.append(f"played before on this mesh: {', '.join(before)}")
    print(outcome.report())
    return outcome


@pytest.mark.parametrize(
    ("family", "seed"), DEFAULT_SCHEDULES, ids=[f for f, _ in DEFAULT_SCHEDULES]
)
def test_a_schedule_heals_to_one_view_with_nothing_lost(
    shared_mesh: SharedMesh, family: str, seed: int
) -> None:
    chaos_bench = shared_mesh.bench()
    _skip_without_one_way(chaos_bench, family)
    outcome = None
    try:
        outcome = _play(chaos_bench, family, seed, shared_mesh.played)
    finally:
        if outcome is not None and outcome.ok:
            shared_mesh.played.append(f"{family} (seed {seed})")
        else:
            shared_mesh.close()  # failed or raised: the next test builds its own
    assert outcome.ok, outcome.report()


def test_rerun(request: pytest.FixtureRequest) -> None:
    """Replays ``GRID_CHAOS_SEED`` (family ``GRID_CHAOS_FAMILY``, default mixed) on a fresh
    mesh."""
    seed = os.environ.get("GRID_CHAOS_SEED")
    if not seed:
        pytest.skip("replays a schedule: set GRID_CHAOS_SEED (and GRID_CHAOS_FAMILY)")
    family = os.environ.get("GRID_CHAOS_FAMILY", "mixed")
    if family not in FAMILIES:
        pytest.fail(f"GRID_CHAOS_FAMILY must be one of {', '.join(FAMILIES)}")
    chaos_bench: Bench = request.getfixturevalue("chaos_bench")
    _skip_without_one_way(chaos_bench, family)
    outcome = _play(chaos_bench, family, int(seed))
    assert outcome.ok, outcome.report()


def test_soak(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Schedules back to back for ``--soak`` minutes; prints the figures."""
    minutes = float(request.config.getoption("--soak"))
    if minutes <= 0:
        pytest.skip("runs with --soak MINUTES (or GRID_CHAOS_SOAK_MINUTES)")
    request.getfixturevalue("netns_available")
    seed = os.environ.get("GRID_CHAOS_SEED")

    def report(line: str) -> None:
        with capsys.disabled():
            print(line, flush=True)

    outcomes = soak(tmp_path, minutes, seed=int(seed) if seed else None, report=report)
    bound = SwimConfig(0.5, 1.5).detection_bound(4)
    report(figures(outcomes, bound))
    failed = [o for o in outcomes if not o.ok]
    assert not failed, "\n\n".join(o.report() for o in failed)
