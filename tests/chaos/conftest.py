"""Fixtures of the chaos suite: network namespaces (skipped with the reason where they
cannot be made, except under ``CI=true``, where that fails), and the ``--soak MINUTES``
option."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from chaos import netns


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaos")
    group.addoption(
        "--soak",
        type=float,
        default=float(os.environ.get("GRID_CHAOS_SOAK_MINUTES", "0") or 0),
        metavar="MINUTES",
        help="run chaos schedules back to back for MINUTES and print the figures "
        "(default: GRID_CHAOS_SOAK_MINUTES, else no soak)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The soak test may run as long as asked, and then some."""
    minutes = float(config.getoption("--soak"))
    for item in items:
        if item.name == "test_soak" and minutes > 0:
            item.add_marker(pytest.mark.timeout(minutes * 60 + 900))


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


@pytest.fixture(scope="session")
def netns_available() -> None:
    """Namespaces can be made here: skip with the reason when not, but fail under CI."""
    reason = netns.unavailable_reason()
    if reason is None:
        netns.cleanup_stale()
        return
    if _in_ci():
        pytest.fail(f"the chaos suite needs network namespaces and CI=true: {reason}")
    pytest.skip(f"chaos suite skipped: {reason}")


@pytest.fixture
def lab_factory(netns_available: None) -> Iterator[list[netns.Lab]]:
    """Labs made by a test are destroyed after it, whatever happened."""
    labs: list[netns.Lab] = []
    try:
        yield labs
    finally:
        for lab in labs:
            lab.destroy()
