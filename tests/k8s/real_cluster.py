"""A real kube-apiserver as the operator tests' cluster (the ``real`` backend).

The servers are started once per session (a start takes seconds) with Grid installed
(:mod:`k8s.grid_install`), and each test gets one emptied of what earlier tests left, so
that tests keep the fixed names they use with kmock: every Grid object is deleted (its
finalizers removed first: the operator that set them is gone) and so are the ConfigMaps,
Secrets and Events of every namespace. Namespaces stay (no controller manager would ever
finish deleting one), and so do the CRDs, the ServiceAccount and its RBAC.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import kmock
import kopf
from kubernetes import client as k8s

from .audit import AuditedControlPlane, AuditLog, answered, open_watches, served_request
from .cluster import Cluster
from .emulator import GRID_GROUP, GRID_VERSION
from .grid_install import GRID_RESOURCES, install_grid
from .rbac import ServedRequest

SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")


@dataclass(frozen=True)
class RealCluster(Cluster):
    """A real API server: HTTPS with its own CA, bearer tokens, RBAC enforced, CRD schemas
    and validation rules applied; what it served is read from its audit log."""

    backend: ClassVar[str] = "real"

    control_plane: AuditedControlPlane
    audit: AuditLog
    first_event: int
    """Audit events before this one are earlier tests'."""

    @property
    def url(self) -> str:
        return self.control_plane.url

    async def create_namespace(self, name: str) -> None:
        body = {"metadata": {"name": name}}
        try:
            await self.call(self.core.create_namespace, body)
        except k8s.ApiException as error:
            if error.status != 409:  # it exists
                raise

    async def service_account_token(self, namespace: str, name: str) -> str:
        return await asyncio.to_thread(self.control_plane.service_account_token, namespace, name)

    def configuration(self, token: str | None = None) -> k8s.Configuration:
        return k8s.Configuration(
            host=self.url,
            api_key={"authorization": token or self.control_plane.admin_token},
            api_key_prefix={"authorization": "Bearer"},
            ssl_ca_cert=str(self.control_plane.ca_file),
        )

    def connection_info(self, namespace: str, token: str | None = None) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(
            server=self.url,
            ca_path=str(self.control_plane.ca_file),
            token=token or self.control_plane.admin_token,
            default_namespace=namespace,
        )

    def write_kubeconfig(self, path: Path, token: str) -> Path:
        return self.control_plane.write_kubeconfig(path, token, "grid")

    def watch_count(self, resource: kmock.resource) -> int:
        return open_watches(self.audit.events()[self.first_event :], resource.plural or "")

    def requests(self) -> list[ServedRequest]:
        events = self.audit.events()[self.first_event :]
        return [served_request(event) for event in answered(events)]


class RealServers:
    """Real API servers with Grid installed, started when a test first asks for one and
    stopped when the session ends."""

    def __init__(self, programs: Path, work_dir: Path) -> None:
        self._programs = programs
        self._work_dir = work_dir
        self._started: list[tuple[AuditedControlPlane, AuditLog]] = []
        self._stack = contextlib.ExitStack()

    def cluster(self, index: int, name: str) -> RealCluster:
        """Server ``index`` (from 0), emptied, as cluster ``name``."""
        while len(self._started) <= index:
            number = len(self._started)
            folder = self._work_dir / f"server-{number}"
            plane = AuditedControlPlane(self._programs, folder, name=f"grid-test-{number}")
            self._stack.enter_context(plane)
            install_grid(plane, folder / "install")
            self._started.append((plane, AuditLog(plane.audit_log_path)))
        plane, audit = self._started[index]
        empty(plane.admin)
        return RealCluster(
            name=name,
            api=plane.admin,
            control_plane=plane,
            audit=audit,
            first_event=len(audit.events()),
        )

    def close(self) -> None:
        self._stack.close()


def empty(admin: k8s.ApiClient) -> None:
    """Delete every Grid object, and every ConfigMap, Secret and Event outside the system
    namespaces."""
    custom = k8s.CustomObjectsApi(admin)
    for plural in (resource.plural for resource in GRID_RESOURCES):
        listed = custom.list_cluster_custom_object(GRID_GROUP, GRID_VERSION, plural)
        for item in listed["items"]:
            name = item["metadata"]["name"]
            with _absent_is_fine():
                if item["metadata"].get("finalizers"):
                    unfinalized = {"metadata": {"finalizers": None}}
                    custom.patch_cluster_custom_object(
                        GRID_GROUP, GRID_VERSION, plural, name, unfinalized
                    )
                # Gone already if it was being deleted, once its finalizers went.
                custom.delete_cluster_custom_object(GRID_GROUP, GRID_VERSION, plural, name)
        left = custom.list_cluster_custom_object(GRID_GROUP, GRID_VERSION, plural)["items"]
        assert left == [], f"{plural} left after emptying the cluster: {left}"
    core = k8s.CoreV1Api(admin)
    for namespace in core.list_namespace().items:
        name = namespace.metadata.name
        if name in SYSTEM_NAMESPACES:
            continue
        core.delete_collection_namespaced_config_map(name)
        core.delete_collection_namespaced_secret(name)
        core.delete_collection_namespaced_event(name)


@contextlib.contextmanager
def _absent_is_fine() -> Iterator[None]:
    try:
        yield
    except k8s.ApiException as error:
        if error.status != 404:
            raise
