"""pytest fixtures of the Kubernetes harness (registered in ``tests/conftest.py``).

* ``kmock_options`` makes kmock's own ``kmock`` fixture serve a
  :class:`~k8s.emulator.GridKubernetesEmulator` (unless a test's ``@pytest.mark.kmock(cls=...)``
  asks for another class);
* ``cluster``: the test's API server with built-ins and Grid's CRs served, and an official
  client as its admin: kmock's emulator; in modules marked ``both_backends`` also a real
  API server (test ids ``[kmock]`` and ``[real]``), in modules marked ``real_server`` the
  real one alone (``[real]``), see :func:`pytest_generate_tests`;
* ``cluster_factory``: more independent clusters in the same test, of the same backend;
* ``real_servers``: the real API servers behind ``[real]`` clusters (:mod:`k8s.real_cluster`),
  started when first needed, one per session;
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

from .cluster import Cluster, EmulatedCluster, client_for, prepare_cluster, serve_cluster
from .control_plane import ControlPlane, ControlPlaneUnavailable, programs_folder
from .emulator import GridKubernetesEmulator
from .real_cluster import RealServers

ClusterFactory = Callable[[str], Awaitable[Cluster]]
ControlPlaneFactory = Callable[[str], ControlPlane]

_log = logging.getLogger(__name__)
# Namespaces cannot be deleted without a controller manager: each test gets a new name.
_namespace_numbers = itertools.count(1)
BACKENDS = ("kmock", "real")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "both_backends: the module's tests that use `cluster` run against kmock and a real "
        "API server",
    )
    config.addinivalue_line(
        "markers",
        "real_server: the module's tests that use `cluster` run against a real API server "
        "only (test id ``[real]``)",
    )
    config.addinivalue_line(
        "markers",
        "kmock_only(reason): this test needs kmock (its internals or injected faults), even "
        "in a both_backends or real_server module",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test using ``cluster`` in a ``both_backends`` module runs once per backend (the
    module's kmock run covers what a real server refuses before the operator sees it, such
    as a resource its schema would not admit), in a ``real_server`` module against the real
    API server alone (kmock would only repeat it); either way a test marked ``kmock_only``
    (whose reason is required: say what only kmock can do) runs against kmock alone."""
    if "cluster" not in metafunc.fixturenames:
        return
    both = metafunc.definition.get_closest_marker("both_backends") is not None
    real = metafunc.definition.get_closest_marker("real_server") is not None
    if not (both or real):
        return
    only = metafunc.definition.get_closest_marker("kmock_only")
    if only is not None and not (only.args or only.kwargs.get("reason")):
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: kmock_only needs a reason")
    chosen = BACKENDS[:1] if only else BACKENDS if both else BACKENDS[1:]
    metafunc.parametrize("backend", chosen, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The test's backend: ``kmock`` unless :func:`pytest_generate_tests` chose."""
    return str(getattr(request, "param", "kmock"))


@pytest.fixture
def kmock_options(kmock_options: dict[str, Any], request: pytest.FixtureRequest) -> dict[str, Any]:
    chosen = any("cls" in marker.kwargs for marker in request.node.iter_markers("kmock"))
    if not chosen:
        kmock_options["cls"] = GridKubernetesEmulator
    return kmock_options


@pytest.fixture
def cluster(backend: str, request: pytest.FixtureRequest) -> Cluster:
    """The test's Kubernetes API with an official client: kmock's emulator, or the first of
    the session's real API servers, emptied."""
    if backend == "real":
        servers: RealServers = request.getfixturevalue("real_servers")
        return servers.cluster(0, "cluster-a")
    emulated: EmulatedCluster = request.getfixturevalue("emulated_cluster")
    return emulated


@pytest_asyncio.fixture
async def emulated_cluster(kmock: Any) -> AsyncIterator[EmulatedCluster]:
    """kmock's ``kmock`` fixture with Grid's resources served, and an official client."""
    if not isinstance(kmock, GridKubernetesEmulator):
        raise TypeError(f"the cluster fixture needs a GridKubernetesEmulator, got {type(kmock)}")
    prepare_cluster(kmock)
    async with client_for("cluster-a", kmock) as bound:
        yield bound


@pytest_asyncio.fixture
async def cluster_factory(
    backend: str, request: pytest.FixtureRequest
) -> AsyncIterator[ClusterFactory]:
    """More clusters of the test's backend: ``other = await cluster_factory("cluster-b")``.
    kmock starts new emulators (stopped when the test ends, the last started first); the
    real backend hands out the session's next real API servers, emptied."""
    servers: RealServers | None = None
    if backend == "real":
        servers = request.getfixturevalue("real_servers")
    async with contextlib.AsyncExitStack() as stack:
        handed_out = itertools.count(1)  # the test's `cluster` is server 0

        async def start(name: str) -> Cluster:
            if servers is not None:
                return servers.cluster(next(handed_out), name)
            return await stack.enter_async_context(serve_cluster(name))

        yield start


@pytest.fixture(scope="session")
def real_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServers]:
    """Real API servers for the ``[real]`` clusters: their own, not ``control_plane``, since
    each test empties them."""
    servers = RealServers(_control_plane_programs(), tmp_path_factory.mktemp("real-servers"))
    try:
        yield servers
    finally:
        servers.close()


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
