"""Chaos schedules against four ``grid agent`` processes in network namespaces.

Each test builds a fresh mesh (four sites in two regions, six providers, a tenant budget;
SWIM probe 0.5 s, suspicion 1.5 s, staleCandidateTtlSeconds 8), plays one seeded schedule
of one family of faults with provider edits and budget spends throughout, heals
everything, and checks the invariants of ``invariants.py`` within 30 s of the heal. A
failure prints the seed, the schedule and the command that replays it:

    GRID_CHAOS_SEED=<seed> GRID_CHAOS_FAMILY=<family> .venv/bin/python -m pytest \\
        tests/chaos/test_chaos.py -k rerun

``--soak MINUTES`` (or ``GRID_CHAOS_SOAK_MINUTES``) plays schedules back to back and
prints the figures; ``bench/bench_chaos.py`` does the same outside pytest.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.schedule import FAMILIES, figures
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


@pytest.fixture
def chaos_bench(tmp_path: Path, netns_available: None) -> Iterator[Bench]:
    with bench(tmp_path / "mesh") as built:
        yield built


def _play(chaos_bench: Bench, family: str, seed: int) -> None:
    if FAMILIES[family] == ("mute", "deaf") and not chaos_bench.one_way:
        pytest.skip(f"one-way schedules skipped: {chaos_bench.lab.one_way_unsupported}")
    outcome = chaos_bench.play(chaos_bench.schedule(seed, family))
    print(outcome.report())
    assert outcome.ok, outcome.report()


@pytest.mark.parametrize(
    ("family", "seed"), DEFAULT_SCHEDULES, ids=[f for f, _ in DEFAULT_SCHEDULES]
)
def test_a_schedule_heals_to_one_view_with_nothing_lost(
    chaos_bench: Bench, family: str, seed: int
) -> None:
    _play(chaos_bench, family, seed)


def test_rerun(request: pytest.FixtureRequest) -> None:
    """Replays ``GRID_CHAOS_SEED`` (family ``GRID_CHAOS_FAMILY``, default mixed)."""
    seed = os.environ.get("GRID_CHAOS_SEED")
    if not seed:
        pytest.skip("replays a schedule: set GRID_CHAOS_SEED (and GRID_CHAOS_FAMILY)")
    family = os.environ.get("GRID_CHAOS_FAMILY", "mixed")
    if family not in FAMILIES:
        pytest.fail(f"GRID_CHAOS_FAMILY must be one of {', '.join(FAMILIES)}")
    _play(request.getfixturevalue("chaos_bench"), family, int(seed))


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
