"""``grid demo`` and the in-process meshes it is built from (also used by the end to end
tests and the propagation benchmark): real SWIM over UDP, real TLS, real HTTP, all on
127.0.0.1. The files a mesh's sites run from are written by :mod:`grid.demo.builder`, for
these meshes as for ``grid bench mesh`` and the chaos suite's."""

from grid.demo.endpoints import DemoProvider
from grid.demo.mesh import LocalMesh, MeshSettings, ProviderPlan, SitePlan
from grid.demo.run import DemoReport, run_demo

__all__ = [
    "DemoProvider",
    "DemoReport",
    "LocalMesh",
    "MeshSettings",
    "ProviderPlan",
    "SitePlan",
    "run_demo",
]
