"""pytest fixtures of the Kubernetes harness (registered in ``tests/conftest.py``).

* ``kmock_options`` makes kmock's own ``kmock`` fixture serve a
  :class:`~k8s.emulator.GridKubernetesEmulator` (unless a test's ``@pytest.mark.kmock(cls=...)``
  asks for another class);
* ``cluster``: that API server with built-ins and Grid's CRs served, and an official client;
* ``cluster_factory``: more independent clusters in the same test, each on its own port;
* ``control_plane``: a real etcd and kube-apiserver (see :mod:`k8s.control_plane`), one per
  test session; skipped where they are not built, a failure under ``CI=true``;
* ``control_plane_factory``: more of them in one test, each a clean cluster of its own;
* ``kube_namespace``: a namespace of the session's API server made for the test.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from .cluster import Cluster, client_for, prepare_cluster, serve_cluster
from .control_plane import ControlPlane, ControlPlaneUnavailable, programs_folder
from .emulator import GridKubernetesEmulator

ClusterFactory = Callable[[str], Awaitable[Cluster]]
ControlPlaneFactory = Callable[[str], ControlPlane]

_log = logging.getLogger(__name__)
# Namespaces cannot be deleted without a controller manager: each test gets a new name.
_namespace_numbers = itertools.count(1)


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


def _control_plane_programs() -> Path:
    """The built programs; skipped where they are not built, a failure under CI=true."""
    try:
        return programs_folder()
    except ControlPlaneUnavailable as error:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"the control plane is needed under CI=true: {error}")
        pytest.skip(f"the control plane is not built here: {error}")


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A real API server for the whole session: tests share it, so each works in
    namespaces and cluster-scoped names of its own."""
    programs = _control_plane_programs()
    with ControlPlane(programs, tmp_path_factory.mktemp("control-plane")) as plane:
        _log.info("control plane ready at %s in %.1f s", plane.url, plane.started_in_s)
        yield plane


@pytest.fixture
def control_plane_factory(tmp_path: Path) -> Iterator[ControlPlaneFactory]:
    """More API servers, each a cluster of its own, for a test that needs clean ones (one
    per cluster of a mesh): ``east = control_plane_factory("east")``. All of them stop when
    the test ends."""
    programs = _control_plane_programs()
    with contextlib.ExitStack() as stack:

        def start(name: str) -> ControlPlane:
            plane = stack.enter_context(ControlPlane(programs, tmp_path / name, name))
            _log.info("control plane %s ready at %s in %.1f s", name, plane.url, plane.started_in_s)
            return plane

        yield start


@pytest.fixture
def kube_namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> str:
    """The name of a namespace created for this test in the session's API server (left
    there afterwards: only a controller manager finishes a namespace's deletion)."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")
    name = f"t{next(_namespace_numbers)}-{slug}"[:63].rstrip("-")
    control_plane.create_namespace(name)
    return name
