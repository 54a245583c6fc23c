"""pytest fixtures of the Kubernetes harness (registered in ``tests/conftest.py``).

* ``kmock_options`` makes kmock's own ``kmock`` fixture serve a
  :class:`~k8s.emulator.GridKubernetesEmulator` (unless a test's ``@pytest.mark.kmock(cls=...)``
  asks for another class);
* ``cluster``: that API server with built-ins and Grid's CRs served, and an official client;
* ``cluster_factory``: more independent clusters in the same test, each on its own port.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio

from .cluster import Cluster, client_for, prepare_cluster, serve_cluster
from .emulator import GridKubernetesEmulator

ClusterFactory = Callable[[str], Awaitable[Cluster]]


@pytest.fixture
def kmock_options(kmock_options: dict[str, Any], request: pytest.FixtureRequest) -> dict[str, Any]:
    chosen = any("cls" in marker.kwargs for marker in request.node.iter_markers("kmock"))
    if not chosen:
        kmock_options["cls"] = GridKubernetesEmulator
    return kmock_options


@pytest_asyncio.fixture
async def cluster(kmock: Any) -> AsyncIterator[Cluster]:
    """The test's Kubernetes API (kmock's ``kmock`` fixture) with an official client."""
    if not isinstance(kmock, GridKubernetesEmulator):
        raise TypeError(f"the cluster fixture needs a GridKubernetesEmulator, got {type(kmock)}")
    prepare_cluster(kmock)
    async with client_for("cluster-a", kmock) as bound:
        yield bound


@pytest_asyncio.fixture
async def cluster_factory() -> AsyncIterator[ClusterFactory]:
    """Start more clusters: ``other = await cluster_factory("cluster-b")``. All of them stop
    when the test ends, the last started first."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(name: str) -> Cluster:
            return await stack.enter_async_context(serve_cluster(name))

        yield start
