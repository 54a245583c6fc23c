"""Shared pytest configuration.

The Kubernetes harness (an emulated API server, real ones, clients and kopf runners) lives
in the ``tests/k8s`` package; its fixtures are registered here for every test module.
"""

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import settings

from support.agents import AgentMeshes
from support.previous import PreviousRelease, PreviousReleaseUnavailable
from support.previous import previous_release as build_previous_release
from support.servers import ProviderEndpoint

pytest_plugins = ["k8s.fixtures"]

# Property tests check behaviour, not speed (benchmarks in bench/ measure that): a busy CI
# machine must not fail an example for taking longer than hypothesis' default 200 ms.
settings.register_profile("grid", deadline=None)
settings.load_profile("grid")


ON_REQUEST = ("praxis", "scale")
"""Markers of tests that run only when asked for by marker (``-m praxis``, ``-m scale``) and
are deselected, not skipped, otherwise: ``praxis`` tests need a gateway binary built from
another project, ``scale`` tests run meshes of 100 sites for many minutes."""


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    asked = config.getoption("-m") or ""
    left_out = [marker for marker in ON_REQUEST if marker not in asked]
    chosen = [item for item in items if not any(item.get_closest_marker(m) for m in left_out)]
    if len(chosen) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in chosen])
        items[:] = chosen


@pytest.fixture
async def endpoint() -> AsyncIterator[ProviderEndpoint]:
    """A provider's endpoint on loopback (health, metrics, models) for the test; a module
    that needs it serving something first defines its own."""
    async with ProviderEndpoint() as server:
        yield server


@pytest.fixture(scope="session")
def previous_release() -> PreviousRelease:
    """The build of the release ``compat/previous.txt`` names (made once per machine):
    skipped with the reason where it cannot be built, but a failure under ``CI=true``."""
    try:
        return build_previous_release()
    except PreviousReleaseUnavailable as error:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"the previous release is needed under CI=true: {error}")
        pytest.skip(f"the previous release is not built here: {error}")


@pytest.fixture
async def agent_mesh(tmp_path: Path) -> AsyncIterator[AgentMeshes]:
    """Builds the test's mesh of agents (``await agent_mesh(sites, settings)``); whatever of
    it still runs after the test, in this process or as ``grid agent`` processes, is
    stopped."""
    meshes = AgentMeshes(tmp_path)
    try:
        yield meshes
    finally:
        await meshes.close()
